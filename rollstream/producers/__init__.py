"""What writes into Kafka from outside the stream: the capture publisher, the rollout node, task
submission, and synthetic sessions for smoke tests and benchmarks."""
