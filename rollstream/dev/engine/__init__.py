"""A real inference engine for tests and GPU-less runs: vLLM installed, tiny models, a plan.

``install`` puts a pinned vLLM in a venv of its own under the cache; ``templates`` fetches the
chat templates as their models publish them; ``tiny_model`` makes small random-weight models on
a family's real vocabulary; ``plan`` is the logits processor that plays a scenario inside vLLM;
``serve`` runs the server.
"""
