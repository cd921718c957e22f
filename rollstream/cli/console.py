"""``rollstream console``: the live web console of a run (and ``console build``, its front end)."""

from __future__ import annotations

from datetime import datetime

import click

from rollstream.cli.options import settings_options, since_option
from rollstream.consumers.console.settings import ConsoleSettings
from rollstream.lifecycle import StopSignal, run_service
from rollstream.settings import KafkaSettings


@click.group(
    name="console",
    invoke_without_command=True,
    short_help="A live web console of the run: fleet, groups, trajectories.",
)
@since_option
@settings_options(ConsoleSettings, "settings")
@settings_options(KafkaSettings, "kafka")
@click.pass_context
def console(
    ctx: click.Context, since: datetime | None, settings: ConsoleSettings, kafka: KafkaSettings
) -> None:
    """Serve the console: the fleet live, sessions, GRPO groups and rewards, any trajectory.

    Reads the run's topics from the beginning (or --since) without a consumer group, and
    follows them. Without --interceptors it shows the interceptor of the stack that `rollstream
    stack up` started, if there is one. Prints the URL to open; its token (given or generated)
    rides in the URL's fragment, which the browser keeps to itself. Read-only unless
    --control-token is given; whoever opens the console with that token may pause and resume
    capture, replay and export.
    """
    if ctx.invoked_subcommand is not None:
        return
    from rollstream.consumers.console import Console
    from rollstream.dev.backend.tokenizer import default_tokenizer_dir
    from rollstream.models.tokenizer import ChatTokenizer

    tokenizer = ChatTokenizer(settings.tokenizer or default_tokenizer_dir())
    settings = _with_stack_interceptor(settings)

    async def main(stop: StopSignal) -> None:
        async with Console(settings, kafka, tokenizer, since=since) as served:
            click.echo(f"console: {served.url}", err=True)
            await stop.event.wait()

    run_service(main)


@console.command(name="build")
def build() -> None:
    """Build the front end (npm ci and esbuild in the package's web/ folder; needs npm)."""
    from rollstream.consumers.console.build import build_front_end

    for line in build_front_end():
        click.echo(line)


def _with_stack_interceptor(settings: ConsoleSettings) -> ConsoleSettings:
    """``settings``, with the local stack's interceptor (and its token) when none is given."""
    if settings.interceptors:
        return settings
    from rollstream.dev.stack.processes import StackState, state_path
    from rollstream.dev.stack.tokens import StackTokens
    from rollstream.settings import StatePaths

    state_dir = StatePaths().state_dir
    state = StackState.load(state_path(state_dir))
    admin = state.admin_url() if state is not None else None
    if admin is None:
        return settings
    token = settings.admin_token or StackTokens.kept(state_dir).interceptor
    return settings.model_copy(update={"interceptors": (admin,), "admin_token": token})
