"""Which optional extra a command needs, and the one-line error when it is not installed.

``pip install rollstream`` installs what a trainer's client needs; the services and the
development tools need extras. A command whose implementation imports a package of a missing
extra fails with ``ModuleNotFoundError``; :func:`missing_extra_message` turns that into one line
naming the extra to install. The mapping lives here only, and mirrors pyproject.toml.
"""

from __future__ import annotations

import importlib.util

import click

_MODELS = ("jinja2", "tokenizers", "transformers", "renderers", "openai_harmony", "tiktoken")

#: Each extra and the top-level import names it adds to the base install. Ordered from small
#: to large: a module is blamed on the first extra holding it when its command names none.
EXTRA_MODULES: dict[str, frozenset[str]] = {
    "models": frozenset(_MODELS),
    "export": frozenset({"pyarrow"}),
    "consumers": frozenset(_MODELS),
    "console": frozenset({*_MODELS, "aiohttp", "pyarrow"}),
    "producers": frozenset({*_MODELS, "aiohttp", "yaml"}),
    "interceptor": frozenset({*_MODELS, "mitmproxy", "aiohttp", "yaml"}),
    "dev": frozenset({*_MODELS, "mitmproxy", "aiohttp", "yaml", "pyarrow", "matplotlib"}),
}

_DEV_TOOLS = (
    "stack",
    "up",
    "down",
    "status",
    "kafka",
    "demo",
    "smoke",
    "bench",
    "backend",
    "example-trainer",
    "ablate",
    "report",
)

#: The extra each top-level command (or group) is documented to need; absent: the base install.
COMMAND_EXTRAS: dict[str, str] = {
    "interceptor": "interceptor",
    "console": "console",
    "node": "producers",
    "run": "producers",
    "harness": "producers",
    "reconstruct": "consumers",
    "score": "consumers",
    "replay": "consumers",
    "check": "consumers",
    "export": "export",
    "models": "models",
    **dict.fromkeys(_DEV_TOOLS, "dev"),
}


def extra_for(command: str, module: str) -> str | None:
    """The extra that provides ``module`` to top-level ``command``; None if no extra does.

    The command's own extra when it holds the module (so a development tool asks for ``dev``
    once, not for one extra after another), else the smallest extra holding it.
    """
    top = module.partition(".")[0]
    own = COMMAND_EXTRAS.get(command)
    if own is not None and top in EXTRA_MODULES[own]:
        return own
    return next((extra for extra, names in EXTRA_MODULES.items() if top in names), None)


def require_extra(extra: str) -> None:
    """Raise ``ModuleNotFoundError`` for the first package of ``extra`` that is not installed.

    For services that import some of those packages only when a record needs them: they then
    fail at start with the one-line message, not later in the middle of a consumer group.
    """
    for name in sorted(EXTRA_MODULES[extra]):
        if importlib.util.find_spec(name) is None:  # looks, does not import
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)


def missing_extra_message(command_path: str, module: str) -> str | None:
    """The line to print when ``command_path`` (``rollstream x y``) cannot import ``module``.

    None when no extra provides the module: then it is a broken install or a bug, and the
    traceback says more than we could.
    """
    words = command_path.split()
    extra = extra_for(words[1] if len(words) > 1 else "", module)
    if extra is None:
        return None
    top = module.partition(".")[0]
    return (
        f"{command_path} needs the '{extra}' extra: pip install 'rollstream[{extra}]' "
        f"(missing: {top})"
    )


def unavailable_command(name: str, module: str) -> click.Command | None:
    """A stand-in for top-level command ``name`` whose module cannot import ``module``.

    It keeps ``rollstream --help`` whole on a smaller install, names the extra in its help
    line, and takes any arguments (``--help`` included) so that every use prints the one-line
    error. None when no extra provides ``module`` (see :func:`missing_extra_message`).
    """
    message = missing_extra_message(f"rollstream {name}", module)
    if message is None:
        return None

    def fail(args: tuple[str, ...]) -> None:
        raise click.ClickException(message)

    return click.Command(
        name,
        callback=fail,
        params=[click.Argument(["args"], nargs=-1, type=click.UNPROCESSED)],
        help=message,
        short_help=f"(not installed: pip install 'rollstream[{extra_for(name, module)}]')",
        add_help_option=False,
        context_settings={"ignore_unknown_options": True},
    )
