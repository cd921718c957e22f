"""A hand-written fake of the few docker SDK calls ``DockerRuntime`` makes (no engine needed)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

Chunk = tuple[bytes | None, bytes | None]


@dataclass
class FakeContainer:
    """A container made by ``containers.run``: what it was made with, whether killed/removed."""

    id: str
    image: str
    command: list[str]
    kwargs: dict[str, Any]
    killed: threading.Event = field(default_factory=threading.Event)
    removed: bool = False
    #: What ``reload`` raises (the engine gone), if anything.
    broken: Exception | None = None

    def reload(self) -> None:
        if self.broken is not None:
            raise self.broken

    def kill(self) -> None:
        self.killed.set()

    def remove(self, force: bool = False) -> None:
        assert force, "the runtime removes its containers forcibly"
        self.removed = True


@dataclass
class FakeExec:
    """One ``exec_create``: its container, command and options."""

    container_id: str
    cmd: list[str]
    kwargs: dict[str, Any]


class FakeContainers:
    def __init__(self) -> None:
        self.made: list[FakeContainer] = []
        self._lock = threading.Lock()

    def run(self, image: str, command: list[str], **kwargs: Any) -> FakeContainer:
        with self._lock:
            container = FakeContainer(f"c{len(self.made)}", image, command, kwargs)
            self.made.append(container)
        return container


class FakeApi:
    """Execs answer with ``output`` and ``exit_code``; ``hang`` blocks until the container dies."""

    def __init__(self, containers: FakeContainers) -> None:
        self.containers = containers
        self.execs: dict[str, FakeExec] = {}
        self.output: list[Chunk] = []
        self.exit_code = 0
        self.hang = False
        #: Raised by the output stream after ``output``: the engine went away mid-run.
        self.broken: Exception | None = None

    def exec_create(self, container: str, cmd: list[str], **kwargs: Any) -> dict[str, str]:
        exec_id = f"e{len(self.execs)}"
        self.execs[exec_id] = FakeExec(container, cmd, kwargs)
        return {"Id": exec_id}

    def exec_start(self, exec_id: str, stream: bool = False, demux: bool = False) -> Any:
        if not stream:
            return b""
        assert demux, "the runtime reads stdout and stderr apart"
        return self._stream(exec_id)

    def _stream(self, exec_id: str) -> Iterator[Chunk]:
        yield from self.output
        if self.broken is not None:
            raise self.broken
        if self.hang:
            container = next(
                c for c in self.containers.made if c.id == self.execs[exec_id].container_id
            )
            assert container.killed.wait(10), "the hanging exec was never killed"

    def exec_inspect(self, exec_id: str) -> dict[str, Any]:
        return {"ExitCode": self.exit_code, "Running": False}

    @property
    def runs(self) -> list[FakeExec]:
        """The execs that ran a launch (not the cleanup after each)."""
        return [e for e in self.execs.values() if e.kwargs]


class FakeImages:
    """Every image is there: the real engine's tests cover a missing one."""

    def get(self, name: str) -> dict[str, str]:
        return {"Id": name}


class FakeDocker:
    """``docker.DockerClient`` as far as the runtime uses it."""

    def __init__(self) -> None:
        self.containers = FakeContainers()
        self.api = FakeApi(self.containers)
        self.images = FakeImages()
