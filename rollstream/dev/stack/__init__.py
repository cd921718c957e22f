"""The local stack as plain processes: ``rollstream up``, ``status`` and ``down``.

The same services as the Compose file (broker, reference backend or vLLM, interceptor,
reconstructor, scorer, rollout node), started detached from one state directory, with their
logs and a record of what runs in ``<state_dir>/stack``.
"""
