"""Consumers: what reads the log, each in its own consumer group, at its own pace.

- ``reconstruct``: a session's CallRecords into one token-faithful trajectory; replay.
- ``score``: a trajectory into a Scored record (evaluators, a fresh workspace for commands).
- ``trainer``: the trainer client (GRPO groups from the scored topic, staleness, commits).
- ``export``: scored records or trajectories to JSONL or Parquet.
"""
