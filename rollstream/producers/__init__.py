"""What writes into Kafka from outside the stream.

The capture publisher, the rollout node, task submission, and synthetic sessions for smoke tests
and benchmarks.
"""
