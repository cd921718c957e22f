"""Processing: the stateless consumers between the events and the trainers.

- ``reconstruct``: a session's CallRecords into one token-faithful trajectory.
- ``score``: a trajectory into a Scored record (evaluators, a fresh workspace for commands).
"""
