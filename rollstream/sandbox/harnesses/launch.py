"""What a harness preset says: the run it is about, and the launch it makes of it.

A preset (rollstream.sandbox.harnesses.presets) is pure: given where the interceptor listens,
the session id, the model and the instruction, it says which command to run, with which
environment and which config files in the session's HOME. Running it is ``runner``'s job.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from rollstream.schemas import ApiKind

#: The environment variable every preset passes the session id in (also the API key).
SESSION_ENV = "ROLLSTREAM_SESSION"
BASE_URL_ENV = "ROLLSTREAM_BASE_URL"
MODEL_ENV = "ROLLSTREAM_MODEL"


@dataclass(frozen=True)
class HarnessContext:
    """What one harness run is about."""

    base_url: str  # the interceptor's root URL, without /v1
    session: str
    model: str
    instruction: str
    #: Per-task parameters of presets that need them (``command``, ``python``), e.g. from the
    #: task's ``harness.*`` metadata; the npm harnesses ignore them.
    options: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class HarnessLaunch:
    """A command line, its extra environment, and files to write relative to HOME."""

    argv: list[str]
    env: dict[str, str]
    home_files: dict[str, str] = field(default_factory=dict)


class Preset(Protocol):
    """One harness: its name, the API it speaks and how it is launched."""

    name: str
    api: ApiKind

    def launch(self, ctx: HarnessContext, executable: Path) -> HarnessLaunch:
        """The launch of one run."""
        ...


def preset_env(ctx: HarnessContext, **extra: str) -> dict[str, str]:
    """The variables every preset passes (session, base URL) and its own ``extra``."""
    return {SESSION_ENV: ctx.session, BASE_URL_ENV: ctx.base_url, **extra}
