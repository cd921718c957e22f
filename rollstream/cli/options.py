"""Command-line options generated from a settings class, so each setting has one definition.

Every field becomes ``--field-name``; its help names the environment variable, and a value given
on the command line overrides the environment.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar, get_args

import click
from pydantic import SecretStr, ValidationError
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined
from pydantic_settings import BaseSettings

from rollstream.settings import env_name

F = TypeVar("F", bound=Callable[..., Any])


def _is_bool(info: FieldInfo) -> bool:
    return info.annotation is bool


def _click_type(info: FieldInfo) -> Any:
    args = set(get_args(info.annotation)) or {info.annotation}
    if args & {int}:
        return int
    if args & {float}:
        return float
    if args & {Path}:
        return click.Path(path_type=Path)
    return str


def _help(cls: type[BaseSettings], name: str, info: FieldInfo) -> str:
    text = info.description or ""
    default = info.default
    if default is not PydanticUndefined and default is not None and info.default_factory is None:
        text += f" Default: {default}."
    return f"{text} [env: {env_name(cls, name)}]"


def settings_options(cls: type[BaseSettings], param: str) -> Callable[[F], F]:
    """Add one option per field of ``cls``; the command gets the built settings as ``param``."""

    def decorate(func: F) -> F:
        keys = {name: f"{param}__{name}" for name in cls.model_fields}

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            given = {
                name: kwargs.pop(key) for name, key in keys.items() if kwargs.get(key) is not None
            }
            for key in keys.values():
                kwargs.pop(key, None)
            try:
                kwargs[param] = cls(**given)
            except ValidationError as exc:
                raise click.UsageError(_validation_message(cls, exc)) from exc
            return func(*args, **kwargs)

        command: Any = wrapper
        for name, info in reversed(list(cls.model_fields.items())):
            flag = name.replace("_", "-")
            if _is_bool(info):
                decls = [f"--{flag}/--no-{flag}", keys[name]]
                command = click.option(*decls, default=None, help=_help(cls, name, info))(command)
            else:
                command = click.option(
                    f"--{flag}",
                    keys[name],
                    type=_click_type(info),
                    default=None,
                    help=_help(cls, name, info),
                    hide_input=info.annotation in (SecretStr, SecretStr | None),
                )(command)
        return command  # type: ignore[no-any-return]

    return decorate


def _validation_message(cls: type[BaseSettings], exc: ValidationError) -> str:
    parts = []
    for error in exc.errors():
        loc = ".".join(str(x) for x in error["loc"])
        where = f"--{loc.replace('_', '-')} / {env_name(cls, loc)}" if loc else cls.__name__
        parts.append(f"{where}: {error['msg']}")
    return "; ".join(parts)


_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_RELATIVE = re.compile(r"(?:\d+(?:\.\d+)?[smhdw])+")
_RELATIVE_PART = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")


def parse_since(text: str, now: datetime | None = None) -> datetime:
    """An aware datetime from an ISO time (UTC if it has no offset) or an age such as ``2h30m``.

    Ages count back from ``now`` (default: the current time) in s, m, h, d or w; raises
    ValueError for anything else.
    """
    text = text.strip()
    if _RELATIVE.fullmatch(text):
        seconds = sum(float(n) * _UNIT_SECONDS[unit] for n, unit in _RELATIVE_PART.findall(text))
        return (now or datetime.now(UTC)) - timedelta(seconds=seconds)
    value = datetime.fromisoformat(text)
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value


class _Since(click.ParamType[datetime, Any]):
    name = "TIME"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> datetime:
        if isinstance(value, datetime):
            return value.replace(tzinfo=UTC) if value.tzinfo is None else value
        try:
            return parse_since(str(value))
        except ValueError:
            self.fail(f"{value!r} is neither an ISO time nor an age like 30m, 2h, 1d", param, ctx)


def since_option(func: click.decorators.FC) -> click.decorators.FC:
    """``--since TIME``: the command gets an aware datetime (UTC when none is given), or None."""
    return click.option(
        "--since",
        type=_Since(),
        default=None,
        help="Start at records written at or after this time: ISO (UTC if no offset given) "
        "or an age such as 30m, 2h, 1d.",
    )(func)
