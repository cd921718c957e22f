"""From a finished call to a record handed to the publisher: built, made to fit, counted.

Every LLM call ends in exactly one record, whatever goes wrong on the way:

- a record over the per-record budget (``RECORD_BUDGET_BYTES``: no broker would take it, and
  the publisher would refuse it) leaves out its bulkiest parts, largest first, until it fits;
  each part left out is named in ``left_out`` with its size and SHA-256;
- a record that cannot be built at all is replaced by a reduced one (who, when, how it ended,
  and ``left_out`` naming every part with the error);
- only what the published record holds becomes a delta base for the session's later calls
  (``SessionLedger.commit`` after the hand-over): a part that never reaches Kafka is never
  named as a base, so no later call loses its prompt or request.

Each of these is logged and counted (``rollstream_records_*`` on the admin port's /metrics).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from dataclasses import dataclass

from rollstream.interceptor.recording import CallState, build_record, reduced_record
from rollstream.interceptor.sessions import LedgerUpdate, SessionLedger
from rollstream.schemas import (
    RECORD_BUDGET_BYTES,
    AvroSerializer,
    CallRecord,
    check_record_size,
    record_size,
)
from rollstream.schemas.calls import LeftOut

log = logging.getLogger(__name__)

#: Hands a record (key: its session id, value: its Avro bytes) to the publisher.
Publish = Callable[[bytes, bytes], None]

TOO_LARGE = "record_too_large"
NOT_BUILT = "record_not_built"

# What leaving a part out empties in the record, and which delta base the ledger then drops.
_EMPTIED: dict[str, dict[str, None]] = {
    "harness_request": {"harness_request": None, "harness_request_base": None},
    "upstream_request": {"upstream_request": None, "upstream_request_base": None},
    "response": {"response": None},
    "tokens": {"prompt": None, "completion_token_ids": None, "completion_logprobs": None},
}
_LEDGER_PART = {"harness_request": "harness", "upstream_request": "upstream", "tokens": "tokens"}


@dataclass
class RecorderCounts:
    """What the recorder did, for /metrics."""

    recorded: int = 0  # records handed to the publisher, flagged ones included
    failed: int = 0  # of which calls that failed (status error or cancelled)
    too_large: int = 0  # recorded with parts left out to fit the budget
    not_built: int = 0  # recorded in the reduced form: the whole record could not be built
    lost: int = 0  # not recorded at all (not even reduced): logged each


class CallRecorder:
    """Builds each call's record, fits it to the record budget, publishes it, commits the ledger."""

    def __init__(
        self,
        ledger: SessionLedger,
        publish: Publish,
        serializer: AvroSerializer | None = None,
        budget: int = RECORD_BUDGET_BYTES,
    ) -> None:
        self.ledger = ledger
        self.publish = publish
        self.serializer = serializer or AvroSerializer()
        self.budget = budget
        self.counts = RecorderCounts()

    def record(self, state: CallState, model: str, policy_version: int) -> CallRecord | None:
        """Record one finished call; the record handed to the publisher (None: lost, logged)."""
        key = state.session.encode()
        try:
            record, update = build_record(state, self.ledger, model, policy_version)
            value = self.serializer.encode(record)
            if record_size(key, value) > self.budget:
                record, value = self._fit(key, value, record, update)
        except Exception as exc:
            log.exception("cannot build the record of call %s; recording it reduced", state.call_id)
            self.counts.not_built += 1
            built = self._reduced(key, state, model, policy_version, exc)
            if built is None:
                return None
            record, value, update = built
        try:
            self.publish(key, value)
        except Exception:
            log.exception("the record of call %s could not be handed over: lost", state.call_id)
            self.counts.lost += 1
            return None
        self.ledger.commit(update)  # only now may later calls name it as their base
        self.counts.recorded += 1
        self.counts.failed += record.error is not None
        return record

    def _fit(
        self, key: bytes, value: bytes, record: CallRecord, update: LedgerUpdate
    ) -> tuple[CallRecord, bytes]:
        """The record with its largest parts left out until it fits; raises if it never does."""
        whole = record_size(key, value)
        left_out: list[LeftOut] = []
        for part, data in sorted(_parts(record).items(), key=lambda p: -len(p[1])):
            digest = hashlib.sha256(data).hexdigest()
            left_out.append(LeftOut(part=part, reason=TOO_LARGE, size=len(data), sha256=digest))
            record = record.model_copy(update=_EMPTIED[part] | {"left_out": list(left_out)})
            if part in _LEDGER_PART:
                update.leave_out(_LEDGER_PART[part])
            value = self.serializer.encode(record)
            if record_size(key, value) <= self.budget:
                break
        else:
            check_record_size(key, value, f"the record of {record.call_id}", self.budget)
        self.counts.too_large += 1
        log.warning(
            "the record of call %s (session %s) is %d bytes, over the %d-byte budget: "
            "recorded without %s",
            record.call_id,
            record.session_id,
            whole,
            self.budget,
            ", ".join(f"{p.part} ({p.size} bytes)" for p in left_out),
        )
        return record, value

    def _reduced(
        self, key: bytes, state: CallState, model: str, policy_version: int, exc: Exception
    ) -> tuple[CallRecord, bytes, LedgerUpdate] | None:
        """The reduced record of a call whose record could not be built; None if even that fails."""
        reason = f"{NOT_BUILT}: {type(exc).__name__}: {exc}"
        try:
            record, update = reduced_record(state, self.ledger, model, policy_version, reason)
            value = self.serializer.encode(record)
            check_record_size(key, value, f"the reduced record of {state.call_id}", self.budget)
        except Exception:
            log.exception("call %s (session %s) left no record: lost", state.call_id, state.session)
            self.counts.lost += 1
            return None
        return record, value, update


def _parts(record: CallRecord) -> dict[str, bytes]:
    """The parts of a record that may be left out, as the bytes they take."""
    parts = {
        name: blob
        for name, blob in (
            ("harness_request", record.harness_request),
            ("upstream_request", record.upstream_request),
            ("response", record.response),
        )
        if blob is not None
    }
    tokens = [
        packed.data
        for packed in (
            record.prompt.suffix if record.prompt is not None else None,
            record.completion_token_ids,
            record.completion_logprobs,
        )
        if packed is not None
    ]
    if tokens:
        parts["tokens"] = b"".join(tokens)
    return parts
