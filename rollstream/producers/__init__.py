"""Producers: what writes work and sessions into Kafka besides the interceptor's calls.

- ``publisher``: the capture publisher the interceptor and the node write through; acks, a
  disk spool while the broker is away, nothing lost on a stop.
- ``node``: the rollout node; tasks in (and task submission), harness sessions out
  (SessionStarted/SessionEnded). It reaches the interceptor over HTTP only.
"""
