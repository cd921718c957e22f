"""A session's fidelity figures (threads, segments, the serve gap) from its records."""

from __future__ import annotations

from rollstream.consumers.reconstruct.fidelity import count_threads, fidelity_row
from rollstream.models.tokenizer import ChatTokenizer
from rollstream.schemas import CallRecord, CallStatus
from tests.consumers.reconstruct.test_retokenize import record


def _sent(r: CallRecord) -> CallRecord:
    return r.model_copy(update={"upstream_request": r.harness_request})


def test_a_failed_call_without_an_answer_is_counted_not_a_crash(tokenizer: ChatTokenizer) -> None:
    answered = _sent(record(tokenizer, call_id="c-1", seq=0))
    failed = _sent(record(tokenizer, call_id="c-2", seq=1)).model_copy(
        update={"response": None, "status": CallStatus.ERROR}
    )
    refused = record(tokenizer, call_id="c-3", seq=2).model_copy(
        update={"response": None, "status": CallStatus.ERROR}
    )  # never sent upstream: no thread
    # The failed call repeats the first call's conversation: a thread of its own, not a crash.
    assert count_threads([answered, failed, refused]) == 2
    row = fidelity_row("generic", "pi", "ordinary", [answered, failed, refused])
    assert (row.calls, row.threads, row.violations) == (3, 2, 0)
