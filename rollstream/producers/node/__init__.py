"""The rollout node: tasks in, harness sessions out, runtimes pre-warmed.

- ``settings``: ``NodeSettings`` (``ROLLSTREAM_NODE_*``).
- ``workspace``: a task's files materialized in a directory, a git baseline, the diff after.
- ``runtime``: where a session runs (``LocalRuntime``; ``DockerRuntime``, a container per session).
- ``session``: one sample of a task through init, run, post-run and teardown, emitting
  SessionStarted and SessionEnded.
- ``pool``: ``NodeScheduler``, the stages with their own worker pools and pre-warming.
- ``history``: bounded summaries of ended sessions (what the API shows once they are gone).
- ``progress``: a task partition's commit point and the samples finished past it.
- ``intake``: ``TaskIntake``, the consumer group member: tasks in, commits, clean hand-overs
  of partitions on a rebalance or a stop, backpressure.

Kafka (``intake``) and the HTTP API sit on top: they hand tasks to the scheduler and give it
``emit`` (the publisher) and ``calls_of`` (the interceptor's call count per session).
"""
