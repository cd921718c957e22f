"""Start, probe and stop the local Kafka broker process."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import time
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from rollstream.dev.broker import acls
from rollstream.dev.broker.config import (
    READY_LINE,
    BrokerLayout,
    NodeIdentity,
    bind_failure,
    log_tail,
    render_log4j2_properties,
    render_server_properties,
    single_node_layout,
)
from rollstream.dev.broker.jars import ensure_jars
from rollstream.dev.broker.probe import _run_sync, _scan_for, probe_metadata
from rollstream.dev.broker.records import BrokerInfo, forget_stale, is_kafka_process, read_record
from rollstream.dev.broker.secure import (
    ADMIN,
    broker_files,
    ready_material,
    secure_client,
    secure_overrides,
    write_private,
)
from rollstream.dev.broker.settings import BrokerSettings
from rollstream.dev.broker.storage import format_storage
from rollstream.errors import BrokerError, PortTakenError
from rollstream.host import require_tool
from rollstream.lifecycle import die_with_parent
from rollstream.settings import StatePaths

log = logging.getLogger(__name__)

# How long a killed JVM of ours may take to die: its ports are taken until all its threads exit.
REAP_TIMEOUT_S = 10.0
# Starts of a broker whose port was taken between the check that it was free and its bind (a
# restart on recorded ports races every other program picking one): the check runs again each
# time, and a port still taken is named then.
BIND_ATTEMPTS = 3


class LocalBroker:
    """One combined broker+controller Kafka node on 127.0.0.1.

    ``start()`` fetches the jars if needed, formats the data directory once, starts the JVM and
    returns when the broker logs "Kafka Server started" and answers a metadata request.
    With ``record_state`` the broker is written to the state file that other rollstream
    commands discover it from (``rollstream kafka start``); the test fixture leaves it out.
    """

    def __init__(
        self,
        settings: BrokerSettings,
        paths: StatePaths,
        *,
        record_state: bool = True,
        overrides: dict[str, str] | None = None,
        outlive_parent: bool = True,
        identity: NodeIdentity | None = None,
        data_dir: Path | None = None,
        topic_prefix: str = "rollstream",
    ) -> None:
        self.settings = settings
        self.paths = paths
        self.data_dir = (data_dir or settings.data_dir or paths.state_dir / "kafka").resolve()
        #: Set for a node of a cluster: its id, ports, the cluster id and the voter set.
        self.identity = identity
        self.record_state = record_state
        self.overrides = overrides or {}
        self.outlive_parent = outlive_parent
        self.info: BrokerInfo | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        #: A secure broker's CA, certificate and passwords; its ACLs name ``topic_prefix``.
        self.secure = broker_files(settings.secure_dir, self.data_dir) if settings.secure else None
        self.topic_prefix = topic_prefix

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> BrokerInfo:
        """Start the broker (or return the one already running on this data directory)."""
        existing = self.running()
        if existing is not None:
            self.info = existing
            if self.secure is not None:
                self._ensure_acls(existing.bootstrap_servers)  # maybe for another topic prefix
            return existing
        for attempt in range(1, BIND_ATTEMPTS + 1):
            layout, cluster_id, began = self.launch()
            try:
                return self.wait_ready(layout, cluster_id, began)
            except PortTakenError as exc:
                if attempt == BIND_ATTEMPTS:
                    raise
                log.warning("%s Starting it again.", str(exc).splitlines()[0])
                time.sleep(1.0)
        raise AssertionError("unreachable")

    def launch(self) -> tuple[BrokerLayout, str, float]:
        """Format the data directory once and start the JVM, without waiting for it.

        A cluster launches all its nodes before waiting for any: a node's broker is ready only
        once a quorum of controllers runs.
        """
        if self._proc is not None:
            self._reap()  # a previous process of ours that was killed: its ports are free after
            self._proc = None
        began = time.monotonic()
        java = require_tool(
            self.settings.java,
            "a Java 17+ runtime (e.g. `apt-get install openjdk-17-jre-headless`)",
        )
        lib = ensure_jars(self.paths.cache_dir, self.settings.version, self.settings.mvn)
        layout, cluster_id = self._prepare_layout()
        classpath = f"{lib}/*"
        if not (layout.log_dirs / "meta.properties").exists():
            self._format(java, classpath, layout, cluster_id)
        layout.logs_dir.mkdir(parents=True, exist_ok=True)
        layout.server_log.unlink(missing_ok=True)
        cmd = [
            java,
            "-Xms256m",
            f"-Xmx{self.settings.heap}",
            "-XX:+UseG1GC",
            "-XX:+ExitOnOutOfMemoryError",
            "-Djava.awt.headless=true",
            f"-Dkafka.logs.dir={layout.logs_dir}",
            f"-Dlog4j2.configurationFile=file:{layout.log4j2_properties}",
            "-cp",
            classpath,
            "kafka.Kafka",
            str(layout.server_properties),
        ]
        with layout.stdout_log.open("wb") as out:
            # Own session: the broker outlives `rollstream kafka start` and a Ctrl+C aimed at
            # a foreground command does not reach it.
            self._proc = subprocess.Popen(
                cmd,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=None if self.outlive_parent else die_with_parent,
            )
        return layout, cluster_id, began

    def wait_ready(self, layout: BrokerLayout, cluster_id: str, began: float) -> BrokerInfo:
        """Wait until the launched broker is ready; record and return it."""
        assert self._proc is not None, "launch first"
        self._wait_ready(layout, began)
        if self.secure is not None:
            try:
                self._ensure_acls(layout.bootstrap_servers)
            except BaseException:
                self.kill_launched()  # a secure broker without its ACLs serves no one
                raise
        self.info = BrokerInfo(
            pid=self._proc.pid,
            bootstrap_servers=layout.bootstrap_servers,
            port=layout.port,
            controller_port=layout.controller_port,
            data_dir=str(self.data_dir),
            version=self.settings.version,
            cluster_id=cluster_id,
            started_at=time.time(),
            startup_seconds=round(time.monotonic() - began, 3),
            node_id=layout.node_id,
        )
        if self.record_state:
            state = self.paths.broker_state_file
            state.parent.mkdir(parents=True, exist_ok=True)
            state.write_text(self.info.to_json())
        if self.identity is not None:
            # A cluster's node records itself in its own directory: `kafka status` and `stop`
            # run in other processes and must find every node.
            self._node_file.write_text(self.info.to_json())
        log.info("Kafka %s ready at %s", self.settings.version, layout.bootstrap_servers)
        return self.info

    def _ensure_acls(self, bootstrap: str) -> None:
        """The ACL table of ``topic_prefix`` on the secure broker (made once per table)."""
        assert self.secure is not None
        rules = acls.plan(self.topic_prefix)
        if acls.apply(self.secure, bootstrap, rules):
            log.info("ACLs of %d principals made", len(acls.principals(rules)))

    def kill_launched(self) -> None:
        """SIGKILL the process :meth:`launch` started, if it still runs (a failed start)."""
        self._reap(grace=0.0)

    def stop(self, timeout: float = 30.0) -> bool:
        """Stop the broker: SIGTERM (controlled shutdown), SIGKILL after ``timeout``.

        Returns whether a running broker was stopped; a stale record of one that died is removed.
        """
        # Never the pid of self.info unchecked: if the broker died, it may be another program's.
        info = self.running()
        if info is None:
            self._reap()  # its own bound: ``timeout`` is a live broker's, for its shutdown
            return False
        with contextlib.suppress(ProcessLookupError):
            os.kill(info.pid, signal.SIGTERM)
        if not self.wait_exit(info.pid, timeout):
            log.warning("broker %d ignored SIGTERM for %.0fs, killing it", info.pid, timeout)
            with contextlib.suppress(ProcessLookupError):
                os.kill(info.pid, signal.SIGKILL)
            self.wait_exit(info.pid, 10.0)
        self.forget()
        return True

    def _reap(self, grace: float = REAP_TIMEOUT_S) -> None:
        """Wait up to ``grace`` for a child of ours to exit, then SIGKILL it: its ports are free."""
        if self._proc is None or self._proc.poll() is not None:
            return
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._proc.wait(grace)
        if self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()

    def forget(self) -> None:
        """Drop the records of this broker (once its process is gone)."""
        if self.record_state:
            self.paths.broker_state_file.unlink(missing_ok=True)
        self._node_file.unlink(missing_ok=True)
        self.info = None

    def running(self) -> BrokerInfo | None:
        """The broker recorded for this data directory, if its process is alive and is Kafka.

        A record whose process has gone (killed, crashed, the machine restarted) is removed.
        """
        if self.info is not None:
            if is_kafka_process(self.info.pid, self._props_path()):
                return self.info
            self.info = None
        if self.identity is not None:
            state = self._node_file
        elif self.record_state:
            state = self.paths.broker_state_file
        else:
            return None
        text = read_record(state)
        if text is None:
            return None
        try:
            info = BrokerInfo.from_json(text)
        except (ValueError, TypeError):
            return None  # not a broker's record (a cluster's), or not one at all
        if Path(info.data_dir) != self.data_dir:
            return None  # another broker's
        if not is_kafka_process(info.pid, self._props_path()):
            forget_stale(state, text, f"broker pid {info.pid} no longer runs")
            return None
        return info

    def healthy(self, timeout: float = 5.0) -> bool:
        """Whether the running broker answers a metadata request."""
        info = self.running()
        return info is not None and _run_sync(
            probe_metadata(info.bootstrap_servers, timeout, self.admin_security())
        )

    def admin_security(self) -> dict[str, Any] | None:
        """The admin's client arguments for a secure broker (None: PLAINTEXT)."""
        if self.secure is None:
            return None
        kwargs = secure_client(self.secure, ADMIN).client_kwargs()
        del kwargs["bootstrap_servers"], kwargs["client_id"]
        return kwargs

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- internals -------------------------------------------------------------------------

    @property
    def _node_file(self) -> Path:
        return self.data_dir / "node.json"

    @property
    def _principals(self) -> list[str]:
        return acls.principals(acls.plan(self.topic_prefix))

    def _props_path(self) -> Path:
        return self.data_dir / "server.properties"

    def _prepare_layout(self) -> tuple[BrokerLayout, str]:
        """Pick ports, keep the cluster id and controller port of an existing data directory."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if self.identity is not None:
            # A cluster's node: the cluster picked and keeps its ports and the voter set.
            layout = BrokerLayout(
                self.data_dir, self.identity.port, self.identity.controller_port, self.identity
            )
            cluster_id = self.identity.cluster_id
        else:
            layout, cluster_id = single_node_layout(self.data_dir, self.settings)
        overrides = self.overrides
        if self.secure is not None:
            provided = self.settings.secure_dir is not None
            ready_material(self.secure, self._principals, provided=provided)
            overrides = secure_overrides(layout, self.secure) | overrides
        # Private: a secure broker's file holds the admin's password.
        write_private(
            layout.server_properties, render_server_properties(layout, overrides).encode()
        )
        layout.log4j2_properties.write_text(render_log4j2_properties(layout))
        return layout, cluster_id

    def _format(self, java: str, classpath: str, layout: BrokerLayout, cluster_id: str) -> None:
        # A single node bootstraps its own dynamic quorum; a cluster names its voters.
        users = (self.secure, self._principals) if self.secure is not None else None
        format_storage(java, classpath, layout, cluster_id, self.identity is None, users)

    def _wait_ready(self, layout: BrokerLayout, began: float) -> None:
        assert self._proc is not None
        deadline = began + self.settings.start_timeout
        logged_ready = False
        scanned = 0
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                bind = bind_failure(layout.server_log)
                raise (BrokerError if bind is None else PortTakenError)(
                    f"the Kafka broker exited with code {self._proc.returncode} during start-up"
                    f"{f': {bind}' if bind else '.'}"
                    f"\n--- {layout.server_log} ---\n{log_tail(layout.server_log)}"
                    f"\n--- {layout.stdout_log} ---\n{log_tail(layout.stdout_log)}"
                )
            if not logged_ready:
                logged_ready, scanned = _scan_for(layout.server_log, READY_LINE, scanned)
            security = self.admin_security()
            if logged_ready and _run_sync(probe_metadata(layout.bootstrap_servers, 2.0, security)):
                return
            time.sleep(0.2)
        self._reap(grace=0.0)
        raise BrokerError(
            f"the Kafka broker was not ready after {self.settings.start_timeout:.0f}s."
            f"\n--- {layout.server_log} ---\n{log_tail(layout.server_log)}"
            f"\n--- {layout.stdout_log} ---\n{log_tail(layout.stdout_log)}"
        )

    def wait_exit(self, pid: int, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for broker ``pid`` to exit; whether it did."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc is not None and self._proc.pid == pid:
                if self._proc.poll() is not None:
                    return True
            elif not is_kafka_process(pid, self._props_path()):
                return True
            time.sleep(0.1)
        return False
