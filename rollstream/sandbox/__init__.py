"""Where policy code runs: a session's workspace, its runtime (process or container), harnesses.

The rollout node runs harness sessions here and the scorer runs its commands here; neither
imports the other.
"""
