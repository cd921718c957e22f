"""Where a private daemon keeps everything, how it is started, and what it is when it runs."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

from rollstream.dev.containers import procfs
from rollstream.errors import ContainerEngineError

log = logging.getLogger(__name__)

#: Longest path a unix socket can have (sun_path is 108 bytes with its terminating NUL).
_MAX_SOCKET_PATH = 107
#: containerd allows its own sockets, under the exec root, no more than 104 bytes.
_MAX_CONTAINERD_SOCKET = 104
#: The longest socket the daemon's containerd makes under the exec root.
_CONTAINERD_SOCKET = "containerd/containerd-debug.sock"
#: Where the exec roots of daemons whose directory is too deep for containerd's sockets go.
_SHORT_EXEC_ROOTS = Path("/run/rollstream-docker")


@dataclass(frozen=True)
class EngineInfo:
    """A running daemon: its pid, where to reach it, and how it came up."""

    pid: int
    docker_host: str
    dir: str
    version: str
    api_version: str
    startup_seconds: float
    #: Whether the daemon was already running (from an earlier start on the same directory).
    reused: bool

    def to_json(self) -> str:
        """The record as JSON (``rollstream docker status --json``)."""
        return json.dumps(asdict(self), indent=2)


@dataclass(frozen=True)
class EngineLayout:
    """The files of one daemon, all under ``dir``."""

    dir: Path

    @property
    def socket(self) -> Path:
        """The daemon's API socket."""
        return self.dir / "docker.sock"

    @property
    def docker_host(self) -> str:
        """``DOCKER_HOST`` for clients of this daemon: ``unix://DIR/docker.sock``."""
        return f"unix://{self.socket}"

    @property
    def pidfile(self) -> Path:
        """The pid file the daemon writes (and refuses to start over, if its pid lives)."""
        return self.dir / "docker.pid"

    @property
    def log(self) -> Path:
        """The daemon's log (the previous start's is kept as ``dockerd.log.1``)."""
        return self.dir / "dockerd.log"

    @property
    def config(self) -> Path:
        """The daemon's configuration file: empty, so the machine's is not read."""
        return self.dir / "daemon.json"

    @property
    def data_root(self) -> Path:
        """Images, containers and volumes."""
        return self.dir / "data"

    @property
    def exec_root(self) -> Path:
        """Run-time state: containerd's sockets, the containers' bundles.

        ``DIR/exec``, unless containerd's sockets would be too long there (a test's temporary
        directory is deep): then a short directory of /run named after ``dir``, with
        ``DIR/exec`` a link to it.
        """
        inside = self.dir / "exec"
        if len(os.fsencode(inside / _CONTAINERD_SOCKET)) <= _MAX_CONTAINERD_SOCKET:
            return inside
        key = hashlib.sha256(os.fsencode(self.dir)).hexdigest()[:16]
        return _SHORT_EXEC_ROOTS / key

    def daemon_pid(self) -> int | None:
        """The pid in the pid file, if it is alive and is the daemon of this directory."""
        pid = procfs.read_pid(self.pidfile)
        if pid is not None and procfs.runs(pid, "dockerd", str(self.pidfile)):
            return pid
        return None

    def prepare(self) -> None:
        """Make the directory ready for a launch: a short enough socket path, config, log."""
        if len(os.fsencode(self.socket)) > _MAX_SOCKET_PATH:
            raise ContainerEngineError(
                f"the daemon's socket {self.socket} is longer than a unix socket path may be "
                f"({_MAX_SOCKET_PATH} bytes): set ROLLSTREAM_DOCKER_DIR to a shorter directory"
            )
        self.dir.mkdir(parents=True, exist_ok=True)
        link = self.dir / "exec"
        if self.exec_root != link and not link.is_symlink():
            self.exec_root.mkdir(parents=True, exist_ok=True)
            link.symlink_to(self.exec_root)  # to find it from the daemon's directory
        # dockerd refuses a flag its configuration file also sets: the machine's
        # /etc/docker/daemon.json could contradict the flags below.
        self.config.write_text("{}\n")
        if self.log.exists():
            self.log.replace(self.log.with_name("dockerd.log.1"))

    def command(self, dockerd: str, storage_driver: str) -> list[str]:
        """The daemon's command line."""
        return [
            dockerd,
            # Leave the machine's networking alone: no rules, no bridge, no forwarding turned on.
            "--iptables=false",
            "--ip6tables=false",
            "--ip-forward=false",
            "--ip-masq=false",
            "--bridge=none",
            f"--storage-driver={storage_driver}",
            f"--config-file={self.config}",
            f"--data-root={self.data_root}",
            f"--exec-root={self.exec_root}",
            f"--pidfile={self.pidfile}",
            f"--host={self.docker_host}",
        ]

    def clear_leftovers(self) -> None:
        """Undo what a daemon that is gone left: processes, mounts, pid files.

        Only while no daemon runs here. A killed daemon leaves its containers' shims and their
        processes running, and their overlays and its data root mounted; a restart would wait
        for them, and removing the directory would fail. A stopped one can leave its data
        root's bind mount and the namespace of the host network mounted.
        """
        if self.daemon_pid() is not None:
            return
        marker = f"{self.exec_root}/"
        procfs.kill_all("containerd-shim-runc-v2", marker, "its daemon is gone")
        procfs.kill_all("containerd", marker, "its daemon is gone")
        stuck = procfs.unmount_under(self.dir) + procfs.unmount_under(self.exec_root)
        if stuck:
            log.warning("still mounted under %s: %s", self.dir, ", ".join(map(str, stuck)))
        elif not self.exec_root.is_relative_to(self.dir):
            # Run-time state only, recreated at the next start: /run is not to fill up with it.
            shutil.rmtree(self.exec_root, ignore_errors=True)
            (self.dir / "exec").unlink(missing_ok=True)
        # dockerd refuses to start over a pid file whose pid is alive, whatever runs there now,
        # and reuses the containerd a leftover pid file names.
        self.pidfile.unlink(missing_ok=True)
        (self.exec_root / "containerd" / "containerd.pid").unlink(missing_ok=True)


def log_tail(path: Path, lines: int = 25) -> str:
    """The last ``lines`` lines of the file at ``path`` (a note if there is none)."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return f"(no log at {path})"
    return "\n".join(text.strip().splitlines()[-lines:])
