"""Control events: what trainers tell the capture side (the policy version to stamp)."""

from __future__ import annotations

from pydantic import AwareDatetime, Field

from rollstream.schemas.base import AvroRecord

#: The interceptor's admin route registering a session (PUT, with its context mode) and
#: forgetting it (DELETE): what the node calls, over HTTP only.
SESSION_PATH = "/sessions/{session}"

#: The interceptor's admin routes for whoever calls them: a pool asks its workers, the node
#: registers sessions, the console pauses and resumes capture.
HEALTH_PATH = "/health"
METRICS_PATH = "/metrics"
PAUSE_PATH = "/admin/pause"
RESUME_PATH = "/admin/resume"
POLICY_VERSION_PATH = "/admin/policy-version"

#: The key PolicyVersion records are written under; the control topic is compacted on it.
POLICY_VERSION_KEY = b"policy_version"


class PolicyVersion(AvroRecord):
    """The policy version the interceptor and the nodes stamp into new records."""

    avro_name = "rollstream.PolicyVersion"

    version: int = Field(ge=0)
    published_at: AwareDatetime
    publisher: str = ""
    metadata: dict[str, str] = Field(default_factory=dict)
