"""The reference backend's HTTP server (aiohttp): vLLM's OpenAI-compatible subset."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from aiohttp import web
from pydantic import ValidationError

from rollstream.dev.backend import openai_api as api
from rollstream.dev.backend.chat_output import (
    chat_message,
    end_failed_stream,
    reasoning_tokens,
    send,
    sse_response,
    stream_chat,
)
from rollstream.dev.backend.engine import Latency, Outcome, Step, generate
from rollstream.dev.backend.openai_api import ApiError, ChatRequest, CompletionRequest
from rollstream.dev.backend.policies import make_policy
from rollstream.dev.backend.policies.base import (
    GenerationFailed,
    GenerationRequest,
    Policy,
    PolicyError,
    Sample,
)
from rollstream.dev.backend.settings import BackendSettings
from rollstream.dev.backend.tokenizer import default_tokenizer_dir
from rollstream.dev.backend.weights_api import WeightsApi
from rollstream.http_auth import bearer_middleware
from rollstream.models.families import GENERIC, load_family
from rollstream.models.family import Family
from rollstream.models.template_family import TemplateFamily
from rollstream.models.tokenizer import ChatTokenizer

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _error(exc: ApiError) -> web.Response:
    return web.json_response(exc.body(), status=exc.status)


@web.middleware
async def _errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every failure becomes an OpenAI-format error; the server stays up."""
    try:
        return await handler(request)
    except ApiError as exc:
        return _error(exc)
    except GenerationFailed as exc:  # an answer not streamed: vLLM's 500
        return _error(ApiError(500, str(exc)))
    except web.HTTPException as exc:
        return _error(ApiError(exc.status, exc.reason or "error"))
    except Exception:
        log.exception("unhandled error serving %s", request.path)
        return _error(ApiError(500, "internal server error"))


def _session(request: web.Request) -> str | None:
    # Behind the interceptor the harness's key is gone; the session's hash tells them apart.
    affinity = request.headers.get("x-rollstream-session-hash")
    if affinity:
        return affinity
    auth = request.headers.get("Authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip() or None
    return request.headers.get("x-api-key")


async def _json(request: web.Request) -> dict[str, Any]:
    try:
        body = await request.json(loads=json.loads)
    except (ValueError, UnicodeDecodeError) as exc:
        # vLLM's (FastAPI's) validation error names the body.
        raise ApiError(400, f"malformed JSON body: {exc}", "Bad Request", "body") from exc
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    return body


def _validate[R: api._Request](model: type[R], body: dict[str, Any]) -> R:
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        param = ".".join(str(p) for p in first["loc"]) or None
        raise ApiError(400, f"invalid request: {param}: {first['msg']}", param=param) from exc


def served_family(settings: BackendSettings) -> Family:
    """The family the settings name, on their tokenizer folder.

    Without a folder: a named family's vocabulary from the cache, or (generic) the shipped toy
    tokenizer. An unknown name is a ConfigurationError listing the known ones.
    """
    folder = settings.tokenizer
    if folder is None and settings.family in (None, GENERIC):
        folder = default_tokenizer_dir()
    return load_family(settings.family, folder, stand_in=True)


class Backend:
    """The served model: its family (tokenizer, renderer, parsers), policy, latency, handlers.

    ``family`` or ``tokenizer`` (served as the generic family: its own template) replace the
    one the settings name.
    """

    def __init__(
        self,
        settings: BackendSettings,
        tokenizer: ChatTokenizer | None = None,
        policy: Policy | None = None,
        family: Family | None = None,
    ) -> None:
        self.settings = settings
        if family is None:
            family = TemplateFamily(tokenizer) if tokenizer else served_family(settings)
        self.family = family
        self.tokenizer = family.tokenizer
        self.policy = policy or make_policy(settings, self.tokenizer, family)
        self.latency = Latency(settings.ttft_ms, settings.prefill_us_per_token, settings.tpot_ms)

    def app(self) -> web.Application:
        """The aiohttp application; its /admin/ routes behind the settings' admin token."""
        guard = bearer_middleware(self.settings.admin_token, guarded_prefix="/admin/")
        app = web.Application(middlewares=[guard, _errors], client_max_size=64 * 1024 * 1024)
        app.router.add_get("/health", self.health)
        app.router.add_get("/v1/models", self.models)
        app.router.add_post("/tokenize", self.tokenize)
        app.router.add_post("/detokenize", self.detokenize)
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_post("/v1/completions", self.completions)
        WeightsApi(lambda: self.policy).add_routes(app)
        return app

    # -- small endpoints -------------------------------------------------------------------

    async def health(self, request: web.Request) -> web.Response:
        """Liveness."""
        return web.Response(status=200)

    async def models(self, request: web.Request) -> web.Response:
        """The one served model."""
        return web.json_response(
            {
                "object": "list",
                "data": [
                    {
                        "id": self.settings.model,
                        "object": "model",
                        "created": api.now(),
                        "owned_by": "rollstream",
                        "root": self.settings.model,
                        "parent": None,
                        "max_model_len": self.settings.max_model_len,
                        "permission": [api.model_permission()],
                    }
                ],
            }
        )

    async def tokenize(self, request: web.Request) -> web.Response:
        """Token ids of a prompt, or of a conversation rendered with the chat template."""
        body = await _json(request)
        if "messages" in body:
            ids = self._render(
                body["messages"], body.get("tools"), body.get("add_generation_prompt", True)
            )
        elif isinstance(body.get("prompt"), str):
            ids = self.tokenizer.encode(body["prompt"])
        else:
            raise ApiError(400, "tokenize needs 'prompt' (a string) or 'messages'")
        return web.json_response(
            {
                "count": len(ids),
                "max_model_len": self.settings.max_model_len,
                "tokens": ids,
                "token_strs": None,
            }
        )

    async def detokenize(self, request: web.Request) -> web.Response:
        """Text of token ids."""
        body = await _json(request)
        tokens = body.get("tokens")
        if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
            raise ApiError(400, "detokenize needs 'tokens', a list of token ids")
        return web.json_response({"prompt": self.tokenizer.decode(tokens, False)})

    # -- shared checks ---------------------------------------------------------------------

    def _check_model(self, name: str) -> None:
        if name != self.settings.model:
            raise ApiError(
                404,
                f"The model `{name}` does not exist. Valid aliases: {self.settings.model}.",
                param="model",
            )

    def _render(self, messages: Any, tools: Any, add_generation_prompt: bool) -> list[int]:
        try:
            return self.family.render_ids(messages, tools, add_generation_prompt)
        except Exception as exc:  # jinja and renderers raise many kinds for malformed input
            raise ApiError(400, f"cannot render the conversation: {exc}", param="messages") from exc

    def _budget(self, prompt_len: int, requested: int | None) -> int:
        """The completion's length limit, as vLLM (0.32) decides it, with its errors.

        A limit above the context is refused; a prompt over the context is refused; any other
        limit is lowered to what the prompt leaves (or is that, when none was asked).
        """
        limit = self.settings.max_model_len
        if requested is not None and requested > limit:
            raise ApiError(
                400,
                f"max_tokens={requested} cannot be greater than max_model_len={limit}. "
                "Please request fewer output tokens.",
                param="max_tokens",
                value=requested,
            )
        if prompt_len >= limit:
            # vLLM tokenizes at most one token past the context, so it counts "at least" that.
            counted = f"at least {limit + 1}" if prompt_len > limit else str(prompt_len)
            raise ApiError(
                400,
                f"This model's maximum context length is {limit} tokens. However, your prompt "
                f"contains {counted} input tokens, which exceeds this limit even without "
                "any output tokens. Please reduce the length of the input prompt.",
                param="input_tokens",
                value=min(prompt_len, limit + 1),
            )
        return min(requested if requested is not None else limit, limit - prompt_len)

    def _start(self, request: GenerationRequest) -> Any:
        try:
            return self.policy.start(request)
        except PolicyError as exc:
            raise ApiError(400, str(exc)) from exc

    # -- chat completions ------------------------------------------------------------------

    async def chat(self, request: web.Request) -> web.StreamResponse:
        """``POST /v1/chat/completions``."""
        req = _validate(ChatRequest, await _json(request))
        self._check_model(req.model)
        if req.n != 1:
            raise ApiError(400, "only n=1 is supported", param="n")
        prompt_ids = self._render(req.messages, req.tools, req.add_generation_prompt)
        gen_request = GenerationRequest(
            prompt_ids=prompt_ids,
            max_tokens=self._budget(len(prompt_ids), req.max_completion_tokens or req.max_tokens),
            messages=req.messages,
            tools=req.tools,
            session=_session(request),
            seed=req.seed,
            temperature=req.temperature,
            top_logprobs=req.top_logprobs if req.logprobs else 0,
            ignore_eos=req.ignore_eos,
        )
        generation = self._start(gen_request)
        outcome = Outcome()
        steps = self._generate(generation, gen_request, req.stop_strings, outcome)
        header = api.Header.new("chatcmpl", self.settings.model)
        if req.stream:
            return await stream_chat(
                request,
                header,
                self.family,
                req,
                gen_request,
                steps,
                outcome,
                lambda sample: self._chat_logprob(sample, req),
            )
        samples = [step.sample async for step in steps if step.sample is not None]
        message, finish = chat_message(self.family, req, prompt_ids, outcome)
        logprobs = [self._chat_logprob(s, req) for s in samples] if req.logprobs else None
        return web.json_response(
            api.chat_response(
                header,
                message=message,
                finish_reason=finish,
                stop_reason=outcome.stop_reason,
                logprobs=logprobs,
                prompt_ids=prompt_ids,
                token_ids=outcome.token_ids,
                return_token_ids=req.return_token_ids,
                reasoning_tokens=reasoning_tokens(self.family, outcome.token_ids),
            )
        )

    def _generate(
        self, generation: Any, gen_request: GenerationRequest, stop: list[str], outcome: Outcome
    ) -> AsyncIterator[Step]:
        stops = self.family.stop_ids
        return generate(self.tokenizer, generation, gen_request, self.latency, stop, outcome, stops)

    def _chat_logprob(self, sample: Sample, req: ChatRequest) -> dict[str, Any]:
        return api.chat_logprob_entry(self.tokenizer, sample, req.return_tokens_as_token_ids)

    # -- completions -----------------------------------------------------------------------

    async def completions(self, request: web.Request) -> web.StreamResponse:
        """``POST /v1/completions`` with a prompt as text or token ids."""
        req = _validate(CompletionRequest, await _json(request))
        self._check_model(req.model)
        if req.n != 1:
            raise ApiError(400, "only n=1 is supported", param="n")
        if isinstance(req.prompt, str):
            prompt_ids = self.tokenizer.encode(req.prompt)
        else:
            prompt_ids = list(req.prompt)
            bad = [t for t in prompt_ids if not 0 <= t < self.tokenizer.vocab_size]
            if bad:
                raise ApiError(400, f"token ids out of the vocabulary: {bad[:5]}", param="prompt")
        gen_request = GenerationRequest(
            prompt_ids=prompt_ids,
            max_tokens=self._budget(len(prompt_ids), req.max_tokens),
            session=_session(request),
            seed=req.seed,
            temperature=req.temperature,
            top_logprobs=req.logprobs or 0,
            ignore_eos=req.ignore_eos,
        )
        generation = self._start(gen_request)
        outcome = Outcome()
        steps = self._generate(generation, gen_request, req.stop_strings, outcome)
        header = api.Header.new("cmpl", self.settings.model)
        with_logprobs = req.logprobs is not None
        as_ids = req.return_tokens_as_token_ids
        if not req.stream:
            samples = [step.sample async for step in steps if step.sample is not None]
            choice = api.completion_choice(
                text=outcome.text,
                logprobs=api.completion_logprobs(self.tokenizer, samples, as_ids, 0)
                if with_logprobs
                else None,
                finish_reason=outcome.finish_reason,
                stop_reason=outcome.stop_reason,
                prompt_ids=prompt_ids if req.return_token_ids else None,
                token_ids=outcome.token_ids if req.return_token_ids else None,
            )
            body = api.completion_body(
                header, choice, api.usage(len(prompt_ids), len(outcome.token_ids))
            )
            return web.json_response(body)
        response = await sse_response(request)
        first, offset = True, 0
        try:
            async for step in steps:
                samples = [step.sample] if step.sample else []
                choice = api.completion_choice(
                    text=step.text,
                    logprobs=api.completion_logprobs(self.tokenizer, samples, as_ids, offset)
                    if with_logprobs
                    else None,
                    finish_reason=None,
                    stop_reason=None,
                    prompt_ids=prompt_ids if req.return_token_ids and first else None,
                    token_ids=[s.token_id for s in samples] if req.return_token_ids else None,
                )
                offset += len(step.text)
                first = False
                await send(response, api.completion_body(header, choice, None, chunk=True))
        except GenerationFailed as exc:
            return await end_failed_stream(response, exc)
        closing = api.completion_choice(
            text="",
            logprobs=None,
            finish_reason=outcome.finish_reason,
            stop_reason=outcome.stop_reason,
            prompt_ids=prompt_ids if req.return_token_ids and first else None,
            token_ids=[] if req.return_token_ids else None,
        )
        await send(response, api.completion_body(header, closing, None, chunk=True))
        if req.include_usage:
            await send(
                response,
                api.usage_chunk(
                    header,
                    "text_completion",
                    len(prompt_ids),
                    len(outcome.token_ids),
                ),
            )
        await response.write(b"data: [DONE]\n\n")
        return response
