"""``rollstream docker start|stop|status|images``: a private Docker daemon and its local images."""

from __future__ import annotations

import json
import sys

import click

from rollstream.cli.group import Group
from rollstream.cli.options import settings_options
from rollstream.dev.containers import DockerEngine, DockerSettings, base_image, busybox_image
from rollstream.dev.containers.images import local_images
from rollstream.settings import StatePaths


@click.group(cls=Group, short_help="A private Docker daemon (host networking) and local images.")
def docker() -> None:
    """Run a private Docker daemon on a directory of its own, and build the local images.

    The daemon leaves the machine's networking alone (no iptables rules, no bridge):
    containers use `--network host`. No registry is needed: the images are built from
    Debian's packages (debootstrap) and a static busybox, cached by content.
    """


def _docker_command(func: click.decorators.FC) -> click.decorators.FC:
    func = settings_options(DockerSettings, "settings")(func)
    return settings_options(StatePaths, "paths")(func)


@docker.command()
@_docker_command
def start(settings: DockerSettings, paths: StatePaths) -> None:
    """Start the daemon (or find the one running on its directory) and wait for its API."""
    info = DockerEngine(settings, paths).start()
    if info.reused:
        click.echo(f"already running: pid {info.pid}, Docker {info.version}, {info.docker_host}")
    else:
        click.echo(
            f"Docker {info.version} ready in {info.startup_seconds:.1f}s: pid {info.pid}, "
            f"{info.docker_host}, state in {info.dir}"
        )
    click.echo(f"export DOCKER_HOST={info.docker_host}")


@docker.command()
@_docker_command
def stop(settings: DockerSettings, paths: StatePaths) -> None:
    """Stop the daemon: its containers killed, then SIGTERM (SIGKILL after the timeout)."""
    click.echo("stopped" if DockerEngine(settings, paths).stop() else "not running")


@docker.command()
@click.option("--json", "as_json", is_flag=True, help="Print the daemon's record as JSON.")
@_docker_command
def status(settings: DockerSettings, paths: StatePaths, as_json: bool) -> None:
    """Show whether the daemon runs and answers; exit code 1 if not."""
    engine = DockerEngine(settings, paths)
    info = engine.current()
    if info is None:
        pid = engine.running()
        if as_json:
            click.echo(json.dumps({"running": pid is not None, "healthy": False, "pid": pid}))
        elif pid is None:
            click.echo(f"not running ({engine.dir})")
        else:
            click.echo(f"pid {pid} runs but does not answer on {engine.docker_host}")
        sys.exit(1)
    if as_json:
        click.echo(json.dumps({"running": True, "healthy": True, **json.loads(info.to_json())}))
    else:
        click.echo(f"running: pid {info.pid}, Docker {info.version}, {info.docker_host}")
        click.echo(f"export DOCKER_HOST={info.docker_host}")


@docker.command()
@click.option("--build/--no-build", default=True, help="Build the missing images (default).")
@click.option("--rebuild", is_flag=True, help="Bootstrap the base image again (a new snapshot).")
@_docker_command
def images(settings: DockerSettings, paths: StatePaths, build: bool, rebuild: bool) -> None:
    """Build the base image (Debian, cached) and the busybox image if missing; list them.

    The first build of the base takes about a minute (debootstrap) and keeps its root under
    the cache; a new daemon imports it from there in seconds.
    """
    engine = DockerEngine(settings, paths)
    if not engine.healthy():
        raise click.ClickException(f"no daemon answers on {engine.docker_host}: run `start` first")
    if build:
        for result in (base_image(engine, settings, paths, rebuild=rebuild), busybox_image(engine)):
            how = (
                "bootstrapped and imported"
                if result.bootstrapped
                else ("imported" if result.imported else "present already")
            )
            click.echo(f"{result.tag}: {how} in {result.seconds:.1f}s")
    for tag, size in local_images(engine):
        click.echo(f"{tag:<40} {size / 1e6:8.1f} MB")
