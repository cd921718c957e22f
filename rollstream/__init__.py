"""rollstream: token-faithful RL rollouts from any agent harness, streamed through Apache Kafka."""

__version__ = "0.1.0"
