"""Command-line options generated from a settings class, so each setting has one definition.

Every field becomes ``--field-name``; its help names the environment variable, and a value given
on the command line overrides the environment.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar, get_args

import click
from pydantic import SecretStr, ValidationError
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined
from pydantic_settings import BaseSettings

F = TypeVar("F", bound=Callable[..., Any])


def env_name(cls: type[BaseSettings], field: str) -> str:
    """The environment variable that sets ``field`` of ``cls``."""
    return f"{cls.model_config.get('env_prefix', '')}{field}".upper()


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


def _aware(ctx: click.Context, param: click.Parameter, value: datetime | None) -> datetime | None:
    return value.replace(tzinfo=UTC) if value is not None and value.tzinfo is None else value


def since_option(func: click.decorators.FC) -> click.decorators.FC:
    """``--since TIME``: the command gets an aware datetime (UTC when none is given), or None."""
    return click.option(
        "--since",
        type=click.DateTime(["%Y-%m-%d", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M:%S%z"]),
        default=None,
        callback=_aware,
        help="Start at records written at or after this time (UTC if no offset given).",
    )(func)
