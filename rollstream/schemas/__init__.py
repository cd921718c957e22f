"""The data contract: Avro schemas, the models mirroring them, the serializer and the topics.

Everything else in rollstream imports this package; it imports no other part of rollstream.
"""

from rollstream.schemas.base import AvroRecord, utcnow
from rollstream.schemas.blobs import compress_json, decompress_json
from rollstream.schemas.calls import (
    ApiKind,
    Caller,
    CallError,
    CallRecord,
    CallStatus,
    CallTimings,
    ContextInfo,
    ContextMode,
    PromptTokens,
)
from rollstream.schemas.control import POLICY_VERSION_KEY, PolicyVersion
from rollstream.schemas.deadletter import DeadLetter
from rollstream.schemas.packed import Logprobs, LossMask, TokenIds
from rollstream.schemas.prompts import encode_prompt, resolve_prompt
from rollstream.schemas.registry import RECORD_MODELS, KnownSchema, SchemaRegistry, fingerprint
from rollstream.schemas.serializer import AvroSerializer, DecodedDatum, fingerprint_of
from rollstream.schemas.sessions import Artifact, SessionEnded, SessionStarted, SessionStatus
from rollstream.schemas.tasks import EvaluatorSpec, Task, Workspace, WorkspaceKind
from rollstream.schemas.topics import (
    RECORD_BUDGET_BYTES,
    Topic,
    TopicNames,
    TopicSpec,
    check_record_size,
    record_size,
    topic_specs,
)
from rollstream.schemas.trajectories import (
    Compaction,
    Scored,
    Segment,
    Trajectory,
    TrajectoryStats,
    TrajectoryStatus,
)

__all__ = [
    "POLICY_VERSION_KEY",
    "RECORD_BUDGET_BYTES",
    "RECORD_MODELS",
    "ApiKind",
    "Artifact",
    "AvroRecord",
    "AvroSerializer",
    "CallError",
    "CallRecord",
    "CallStatus",
    "CallTimings",
    "Caller",
    "Compaction",
    "ContextInfo",
    "ContextMode",
    "DeadLetter",
    "DecodedDatum",
    "EvaluatorSpec",
    "KnownSchema",
    "Logprobs",
    "LossMask",
    "PolicyVersion",
    "PromptTokens",
    "SchemaRegistry",
    "Scored",
    "Segment",
    "SessionEnded",
    "SessionStarted",
    "SessionStatus",
    "Task",
    "TokenIds",
    "Topic",
    "TopicNames",
    "TopicSpec",
    "Trajectory",
    "TrajectoryStats",
    "TrajectoryStatus",
    "Workspace",
    "WorkspaceKind",
    "check_record_size",
    "compress_json",
    "decompress_json",
    "encode_prompt",
    "fingerprint",
    "fingerprint_of",
    "record_size",
    "resolve_prompt",
    "topic_specs",
    "utcnow",
]
