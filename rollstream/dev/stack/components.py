"""What the local stack runs: each service's command line, environment and health check."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from rollstream.dev.backend.settings import BackendSettings
from rollstream.dev.backend.tokenizer import default_tokenizer_dir
from rollstream.dev.stack.settings import StackSettings
from rollstream.errors import ConfigurationError
from rollstream.host import free_port
from rollstream.models.families import FAMILIES, GENERIC, known_families


def ref(name: str) -> str:
    """A stand-in for the URL a service announces once it listens (``${name}``).

    A service asked for port 0 binds it itself and announces the URL it got
    (rollstream.lifecycle.announce); the stack puts it in place of this in what it starts next.
    """
    return "${" + name + "}"


def resolve(text: str, urls: Mapping[str, str]) -> str:
    """``text`` with the stand-ins of the announced ``urls`` replaced."""
    for name, url in urls.items():
        text = text.replace(ref(name), url)
    return text


def _url(host: str, port: int, name: str) -> str:
    """The service's URL when its port is set; the stand-in for what it announces when it is 0."""
    return f"http://{host}:{port}" if port else ref(name)


@dataclass(frozen=True)
class Component:
    """One service: how to start it and how to tell it is ready.

    ``health`` is an HTTP URL answering 200 when ready, or None when readiness is ``marker``
    appearing in its log (the consumers, which have no HTTP port). ``listens`` names the URLs
    the service announces once listening; argv, health and URLs may hold stand-ins (:func:`ref`)
    for those of the services started before it.
    """

    name: str
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    health: str | None = None
    marker: str | None = None
    endpoint: str | None = None  # what `up` prints for users
    url: str | None = None  # its base URL, for programs (the demo, `rollstream run`)
    listens: tuple[str, ...] = ()
    #: How long it may take to become healthy, when longer than the stack's start_timeout_s.
    start_timeout_s: float | None = None

    def resolved(self, urls: Mapping[str, str]) -> Component:
        """The component with the announced ``urls`` in place of their stand-ins."""

        def sub(text: str | None) -> str | None:
            return None if text is None else resolve(text, urls)

        return replace(
            self,
            argv=[resolve(a, urls) for a in self.argv],
            health=sub(self.health),
            endpoint=sub(self.endpoint),
            url=sub(self.url),
        )


def _rollstream(*args: str) -> list[str]:
    return [sys.executable, "-m", "rollstream", *args]


def vllm_argv(model: str, served_name: str, host: str, port: int, tool_parser: str) -> list[str]:
    """``vllm serve`` with what capture needs: tool calls parsed server-side, under our name.

    The context length is the model's own (vLLM reads it from the model's config).
    """
    executable = shutil.which("vllm")
    if executable is None:
        raise ConfigurationError(
            "--vllm needs vLLM installed (`pip install vllm`, on a GPU machine); or point "
            "--upstream at a running server"
        )
    return [
        executable,
        "serve",
        model,
        "--host",
        host,
        "--port",
        str(port),
        "--enable-auto-tool-choice",
        "--tool-call-parser",
        tool_parser,
        "--served-model-name",
        served_name,
    ]


@dataclass(frozen=True)
class Served:
    """The model the stack serves.

    ``family``: None is generic; ``tokenizer``: the folder the reference backend serves (None:
    its default, the shipped toy tokenizer).
    """

    family: str | None
    tokenizer: Path | None


def served_model(settings: StackSettings) -> Served:
    """The family (``--family``, else ROLLSTREAM_BACKEND_FAMILY) and the backend's folder.

    When the stack starts the reference backend, the folder is ROLLSTREAM_BACKEND_TOKENIZER if
    set, else a named family's vocabulary (built into the cache the first time); the
    interceptor gets the same folder, so both sides tokenize alike.
    """
    # What the backend would read from the environment it inherits.
    backend = BackendSettings()
    family = settings.family or backend.family
    if family is not None and family not in known_families():
        raise ConfigurationError(
            f"unknown model family {family!r}; known: {', '.join(known_families())}"
        )
    if settings.upstream is not None or settings.vllm is not None or settings.engine == "vllm":
        return Served(family, None)  # no reference backend: nothing to build
    folder = backend.tokenizer
    if folder is None and family is not None and family != GENERIC:
        from rollstream.models.vocabularies import vocabulary_dir

        folder = vocabulary_dir(FAMILIES[family].vocabulary)
    return Served(family, folder)


def _context_options(settings: StackSettings, served: Served) -> list[str]:
    """The interceptor's exact-context options: the mode, the served family and tokenizer.

    The tokenizer goes whenever the stack knows it, so that tasks may choose exact context
    for their sessions (metadata ``context``) under the default ordinary mode.
    """
    options: list[str] = []
    if served.family is not None:
        options += ["--family", served.family]
    if settings.upstream is None and settings.vllm is None and settings.engine == "reference":
        options += ["--tokenizer", str(served.tokenizer or default_tokenizer_dir())]
    elif settings.vllm is not None and Path(settings.vllm).expanduser().is_dir():
        options += ["--tokenizer", str(Path(settings.vllm).expanduser())]
    # Otherwise ROLLSTREAM_INTERCEPTOR_TOKENIZER (inherited) names it, the family's vocabulary
    # is used, or calls asking for exact context fall back and their records say so.
    if settings.context == "ordinary":
        return options
    if settings.vllm is not None and settings.tool_parser != "hermes" and served.family is None:
        # Without a family the interceptor parses completions' tool calls as hermes does;
        # another parser's format would reach the harness as text.
        raise ConfigurationError(
            f"--context exact without --family parses tool calls as vLLM's hermes parser; the"
            f" stack serves with --tool-parser {settings.tool_parser}: use hermes, name the"
            " model's --family, or --context ordinary"
        )
    return [*options, "--context", settings.context]


def _engine(settings: StackSettings, served: Served) -> Component:
    """A real vLLM serving the family's tiny model (``rollstream engine serve``)."""
    from rollstream.dev.engine.families import ENGINE_FAMILIES

    if served.family not in ENGINE_FAMILIES:
        raise ConfigurationError(
            f"--engine vllm serves a family's tiny model: name one with --family "
            f"({', '.join(ENGINE_FAMILIES)})"
        )
    host, port = settings.host, settings.backend_port
    upstream = _url(host, port, "engine")
    argv = _rollstream("engine", "serve", "--family", served.family, "--host", host)
    argv += ["--port", str(port), "--served-name", settings.model]
    return Component(
        "engine",
        argv,
        health=f"{upstream}/health",
        endpoint=f"{upstream}/v1 (vLLM)",
        url=upstream,
        listens=("engine",),
        # Up to 3 minutes on a busy 2-core machine (torch and vLLM imported twice).
        start_timeout_s=max(settings.start_timeout_s, 600.0),
    )


def _backend_options(served: Served) -> list[str]:
    """The reference backend's family and folder, as the interceptor gets them."""
    options = ["--family", served.family] if served.family is not None else []
    if served.tokenizer is not None:
        options += ["--tokenizer", str(served.tokenizer)]
    return options


def plan(settings: StackSettings) -> list[Component]:
    """The services in start order (``down`` stops them in reverse)."""
    host = settings.host
    components: list[Component] = []
    served = served_model(settings)
    upstream = settings.upstream
    if upstream is None:
        port = settings.backend_port
        if settings.engine == "vllm":
            components.append(_engine(settings, served))
            upstream = _url(host, port, "engine")
        elif settings.vllm is not None:
            # vLLM does not announce where it listens: it gets a port picked for it.
            port = port or free_port(host)
            upstream = f"http://{host}:{port}"
            argv = vllm_argv(settings.vllm, settings.model, host, port, settings.tool_parser)
            components.append(Component("vllm", argv, health=f"{upstream}/health", url=upstream))
        else:
            upstream = _url(host, port, "backend")
            argv = _rollstream(
                "backend",
                "--host",
                host,
                "--port",
                str(port),
                "--policy",
                settings.policy,
                "--model",
                settings.model,
                "--max-model-len",
                str(settings.max_model_len),
                "--scripted-logprobs",
                settings.scripted_logprobs,
                *_backend_options(served),
            )
            components.append(
                Component(
                    "backend",
                    argv,
                    health=f"{upstream}/health",
                    endpoint=f"{upstream}/v1",
                    url=upstream,
                    listens=("backend",),
                )
            )
    proxy_port = settings.interceptor_port
    admin_port = settings.admin_port
    interceptor = _url(host, proxy_port, "interceptor")
    admin = _url(host, admin_port, "admin")
    components.append(
        Component(
            "interceptor",
            _rollstream(
                "interceptor",
                "--upstream",
                upstream,
                "--host",
                host,
                "--port",
                str(proxy_port),
                "--admin-port",
                str(admin_port),
                # Whatever model a harness names (Claude Code's side calls name another), the
                # one served policy answers.
                "--upstream-model",
                settings.model,
                "--workers",
                str(settings.workers),
                "--strict-sessions" if settings.strict_sessions else "--no-strict-sessions",
                *_context_options(settings, served),
            ),
            health=f"{admin}/health",
            endpoint=f"{interceptor}/v1 (admin {admin}"
            + (f", {settings.workers} workers)" if settings.workers > 1 else ")"),
            url=interceptor,
            listens=("interceptor", "admin"),
        )
    )
    components.append(
        Component(
            "reconstructor",
            _rollstream("reconstruct", "--strategy", settings.strategy),
            marker="reconstructing",
        )
    )
    components.append(Component("scorer", _rollstream("score"), marker="scoring"))
    if settings.node:
        node_port = settings.node_port
        node = _url(host, node_port, "node")
        components.append(
            Component(
                "node",
                _rollstream(
                    "node",
                    "--host",
                    host,
                    "--port",
                    str(node_port),
                    "--base-url",
                    interceptor,
                    "--interceptor-admin",
                    admin,
                    "--model",
                    settings.model,
                ),
                health=f"{node}/health",
                endpoint=f"{node} (POST /tasks; `rollstream run --task FILE`)",
                url=node,
                listens=("node",),
            )
        )
    return components
