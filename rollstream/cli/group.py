"""The click group of every ``rollstream`` command group: errors as one line, help in sections."""

from __future__ import annotations

import copy
import inspect
from typing import Any

import click
from pydantic import ValidationError

from rollstream.cli.extras import missing_extra_message
from rollstream.errors import RollstreamError


class Group(click.Group):
    """A click group that prints our errors as one line with exit code 1, not a traceback.

    A ``ModuleNotFoundError`` for a package of an optional extra becomes a line naming the
    extra. Each group of the CLI uses this class: the innermost group running the failing
    command is the one that knows its whole path (``rollstream stack up``).

    :meth:`section` lists commands under a heading in ``--help``; commands in no section are
    listed last under "Other commands", so none can go missing from the help.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sections: list[tuple[str, list[str]]] = []

    def section(self, title: str, *commands: click.Command) -> None:
        """Add ``commands`` (under their own names), listed under ``title`` in ``--help``."""
        for command in commands:
            self.add_command(command)
        self.sections.append((title, [c.name for c in commands if c.name is not None]))

    def list_commands(self, ctx: click.Context) -> list[str]:
        """The commands in the order they were added: the order a reader needs them in."""
        return list(self.commands)

    def invoke(self, ctx: click.Context) -> Any:
        """Run the command, turning expected errors into a one-line message and exit code 1."""
        try:
            return super().invoke(ctx)
        except (RollstreamError, ValidationError) as exc:
            raise click.ClickException(str(exc)) from exc
        except ModuleNotFoundError as exc:
            path = " ".join(filter(None, [ctx.command_path, ctx.invoked_subcommand]))
            message = missing_extra_message(path, exc.name or "")
            if message is None:
                raise
            raise click.ClickException(message) from exc

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The commands under their section headings, in one column layout across sections."""
        if not self.sections:
            super().format_commands(ctx, formatter)
            return
        visible = {
            name: command
            for name in self.list_commands(ctx)
            if (command := self.get_command(ctx, name)) is not None and not command.hidden
        }
        listed = {name for _, names in self.sections for name in names}
        groups = [*self.sections, ("Other commands", [n for n in visible if n not in listed])]
        width = max(map(len, visible), default=0)
        limit = formatter.width - 6 - width  # as click.Group does for its one list
        for title, names in groups:
            rows = [
                (name.ljust(width), visible[name].get_short_help_str(limit))
                for name in names
                if name in visible
            ]
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)


def alias(command: click.Command, name: str, of: str) -> click.Command:
    """``command`` under another ``name``, hidden from ``--help``: an old spelling kept working.

    A shallow copy shares the callback and the options, so both names run the same code with
    the same flags; only the name, the visibility and the first line of help differ.
    """
    copied = copy.copy(command)
    copied.name = name
    copied.hidden = True
    original = inspect.cleandoc(command.help or "")
    copied.help = f"Same as `rollstream {of}` (kept as an alias).\n\n{original}".strip()
    copied.short_help = None
    return copied
