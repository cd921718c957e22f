"""The backend's weight endpoints: a trainer reads the tiny policy's weights and loads new ones.

``GET /admin/weights`` serves them as an ``.npz`` archive, ``POST /admin/weights`` loads one;
both answer 409 in OpenAI's error format for policies without numpy weights (scripted, hf).
"""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web

from rollstream.dev.backend.openai_api import ApiError
from rollstream.dev.backend.policies.base import Policy
from rollstream.dev.backend.policies.tiny import TinyPolicy
from rollstream.dev.backend.policies.tiny_train import (
    weights_digest,
    weights_from_bytes,
    weights_to_bytes,
)
from rollstream.errors import SerializationError


class WeightsApi:
    """Handlers over whichever policy the backend serves."""

    def __init__(self, policy: Callable[[], Policy]) -> None:
        self._policy = policy

    def add_routes(self, app: web.Application) -> None:
        """Register the two endpoints on ``app``."""
        app.router.add_get("/admin/weights", self.get_weights)
        app.router.add_post("/admin/weights", self.load_weights)

    def _tiny(self) -> TinyPolicy:
        policy = self._policy()
        if isinstance(policy, TinyPolicy):
            return policy
        scorer = getattr(policy, "scorer", None)  # scripted tokens with tiny logprobs
        if isinstance(scorer, TinyPolicy):
            return scorer
        raise ApiError(
            409,
            f"the {policy.name} policy has no weights to read or load; serve tiny (or "
            "scripted with --scripted-logprobs tiny)",
        )

    async def get_weights(self, request: web.Request) -> web.Response:
        """The weights as ``.npz``; digest, end-of-turn id and stop mixture in headers."""
        policy = self._tiny()
        return web.Response(
            body=weights_to_bytes(policy.weights),
            content_type="application/octet-stream",
            headers={
                "x-weights-digest": weights_digest(policy.weights),
                # What a trainer needs to recompute the sampler's logprobs exactly.
                "x-tiny-eos": str(policy.eos),
                "x-tiny-stop-probability": repr(policy.stop_probability),
            },
        )

    async def load_weights(self, request: web.Request) -> web.Response:
        """Load new weights (an ``.npz`` body of the same shapes).

        Generations in progress continue with the new weights from their next token; a trainer
        pauses the interceptor first so that none is (weight sync as a deployment does it).
        """
        policy = self._tiny()
        try:
            weights = weights_from_bytes(await request.read(), like=policy.weights)
        except SerializationError as exc:
            raise ApiError(400, str(exc)) from exc
        policy.weights = weights
        return web.json_response({"loaded": True, "digest": weights_digest(weights)})
