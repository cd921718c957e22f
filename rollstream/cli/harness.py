"""``rollstream harness install|list|run``: the real coding harnesses, pinned, from npm and PyPI."""

from __future__ import annotations

import asyncio
import tempfile
import uuid
from pathlib import Path

import click

from rollstream.cli.group import Group
from rollstream.cli.options import settings_options
from rollstream.sandbox.harnesses.executables import resolve_executable
from rollstream.sandbox.harnesses.install import (
    PACKAGES,
    UNAVAILABLE,
    install,
    install_dir,
    installed,
)
from rollstream.sandbox.harnesses.launch import HarnessContext
from rollstream.sandbox.harnesses.presets import PRESETS, preset
from rollstream.sandbox.harnesses.python_install import (
    PYTHON_PACKAGES,
    install_python,
    python_executable,
)
from rollstream.sandbox.harnesses.runner import run_harness
from rollstream.sandbox.netns import Wall, wall_problem, walled_url
from rollstream.settings import StatePaths


@click.group(cls=Group, short_help="Install and run the real coding harnesses.")
def harness() -> None:
    """Install and run the real coding harnesses, from npm and PyPI."""


@harness.command(name="install")
@click.option(
    "--only",
    type=click.Choice(["npm", "python"]),
    default=None,
    help="Only the npm harnesses (one install, about 1.4 GB), or only the Python ones (a venv "
    "each, about 700 MB). Default: both.",
)
@settings_options(StatePaths, "paths")
def install_command(paths: StatePaths, only: str | None) -> None:
    """Install the pinned harness versions into the cache, once: npm's, then PyPI's."""
    if only in (None, "npm"):
        if installed(paths.cache_dir) is None:
            click.echo(
                f"installing {len(PACKAGES)} harnesses with npm (about 1.4 GB) ...", err=True
            )
        click.echo(f"npm harnesses in {install(paths.cache_dir)}")
    if only in (None, "python"):
        for name in PYTHON_PACKAGES:
            if python_executable(name, paths.cache_dir) is None:
                click.echo(f"installing {name} in a venv of its own (a few minutes) ...", err=True)
            click.echo(f"{name}: {install_python(name, paths.cache_dir)}")


@harness.command(name="list")
@settings_options(StatePaths, "paths")
def list_command(paths: StatePaths) -> None:
    """The harnesses, their pinned packages, the API each speaks, and whether installed."""
    bin_dir = installed(paths.cache_dir)
    for name, (spec, exe) in PACKAGES.items():
        state = "installed" if bin_dir is not None and (bin_dir / exe).exists() else "missing"
        click.echo(f"{name:14} {spec:50} {PRESETS[name].api.value:18} {state}")
    for name, (pins, _) in PYTHON_PACKAGES.items():
        state = "installed" if python_executable(name, paths.cache_dir) else "missing"
        click.echo(f"{name:14} {' '.join(pins):50} {PRESETS[name].api.value:18} {state}")
    for name, why in UNAVAILABLE.items():
        click.echo(f"{name:14} not available: {why}")
    if bin_dir is None:
        click.echo(
            f"(npm's not installed; `rollstream harness install` puts them in "
            f"{install_dir(paths.cache_dir)})"
        )


@harness.command(name="run")
@click.argument("name", type=click.Choice(list(PRESETS)))
@click.argument("instruction")
@click.option(
    "--base-url",
    default="http://127.0.0.1:8100",
    show_default=True,
    help="The interceptor's root URL (without /v1).",
)
@click.option("--session", default=None, help="Session id (the API key). Default: a new one.")
@click.option(
    "--admin",
    default=None,
    help="The interceptor's admin URL: the session is registered there first (with "
    "ROLLSTREAM_INTERCEPTOR_ADMIN_TOKEN) and forgotten after, as the node does, so that a strict "
    "interceptor serves it and any records it under this id. Without it, a key nobody "
    "registered is recorded as its keyed hash.",
)
@click.option(
    "--model", default="rollstream-tiny", show_default=True, help="Model name to ask for."
)
@click.option(
    "--workdir",
    type=click.Path(path_type=Path),
    default=None,
    help="Working directory. Default: a new temporary one.",
)
@click.option("--timeout", type=float, default=600, show_default=True, help="Seconds.")
@click.option(
    "--isolation",
    type=click.Choice(["namespace", "none"]),
    default="namespace",
    show_default=True,
    help="namespace: the harness runs in network namespaces of its own, reaching only "
    "--base-url (relayed to 127.0.0.1 at its port), as the node runs it; none: the host's "
    "network.",
)
@click.option(
    "--option",
    "options",
    multiple=True,
    metavar="KEY=VALUE",
    help="Preset option, e.g. command='my-agent {instruction}' or function=pkg.mod:run.",
)
@settings_options(StatePaths, "paths")
def run_command(
    name: str,
    instruction: str,
    base_url: str,
    session: str | None,
    admin: str | None,
    model: str,
    workdir: Path | None,
    timeout: float,
    isolation: str,
    options: tuple[str, ...],
    paths: StatePaths,
) -> None:
    """Run harness NAME headless on INSTRUCTION through the interceptor at --base-url."""
    pairs = [option.partition("=") for option in options]
    if any(not sep or not key for key, sep, _ in pairs):
        raise click.BadParameter("options are KEY=VALUE", param_hint="--option")
    session = session or f"{name}-{uuid.uuid4().hex[:12]}"
    base_url = base_url.rstrip("/")
    wall = None
    if isolation == "namespace":
        if (problem := wall_problem()) is not None:
            raise click.UsageError(f"{problem}; run with --isolation none")
        base_url, reach = walled_url(base_url)
        wall = Wall(reach)
    ctx = HarnessContext(base_url, session, model, instruction, {k: v for k, _, v in pairs})
    launch = preset(name).launch(ctx, resolve_executable(name, paths.cache_dir))
    root = Path(tempfile.mkdtemp(prefix=f"rollstream-{name}-"))
    work = workdir or root / "work"
    if admin is not None:
        asyncio.run(_registration(admin, "PUT", session))
    try:
        result = asyncio.run(run_harness(launch, root / "home", work, root / "logs", timeout, wall))
    finally:
        if admin is not None:
            asyncio.run(_registration(admin, "DELETE", session))
    click.echo(result.stdout_tail.rstrip())
    status = "timed out" if result.timed_out else f"exit {result.exit_code}"
    click.echo(
        f"session {session}: {status} in {result.duration_s:.1f}s; workdir {work}, "
        f"logs {root / 'logs'}",
        err=True,
    )
    if result.exit_code != 0:
        raise SystemExit(1)


async def _registration(admin: str, method: str, session: str) -> None:
    """Register (PUT) or forget (DELETE) ``session`` on the interceptor's admin port."""
    import os

    import aiohttp
    from pydantic import SecretStr

    from rollstream.http_auth import auth_headers

    token = os.environ.get("ROLLSTREAM_INTERCEPTOR_ADMIN_TOKEN")
    headers = auth_headers(SecretStr(token) if token else None)
    url = f"{admin.rstrip('/')}/sessions/{session}"
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http,
            http.request(method, url, headers=headers) as reply,
        ):
            if reply.status != 200:
                raise click.ClickException(f"{method} {url}: {reply.status} {await reply.text()}")
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise click.ClickException(f"{method} {url}: {exc}") from None
