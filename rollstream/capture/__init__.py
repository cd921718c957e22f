"""Capture: what writes the sessions into Kafka.

- ``interceptor``: the mitmproxy addon between harness and inference server; every LLM call
  becomes a CallRecord with its token ids and logprobs.
- ``node``: the rollout node; tasks in, harness sessions out (SessionStarted/SessionEnded).
- ``publisher``: the capture publisher both use; acks, a disk spool while the broker is away,
  nothing lost on a stop.
"""
