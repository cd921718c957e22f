"""The scorer: a consumer group over the trajectories topic that emits each Scored record once.

``settings`` holds its configuration, ``evaluators`` the ways of computing a reward (and the
registry naming them), ``service`` the exactly-once consume-evaluate-produce loop.
"""
