"""Formatting a broker's data directory once (Kafka's StorageTool), with its SCRAM users."""

from __future__ import annotations

import subprocess

from rollstream.dev.broker.config import BrokerLayout
from rollstream.dev.broker.secure import SecureFiles, scram_argfile
from rollstream.errors import BrokerError


def format_storage(
    java: str,
    classpath: str,
    layout: BrokerLayout,
    cluster_id: str,
    standalone: bool,
    users: tuple[SecureFiles, list[str]] | None = None,
) -> None:
    """Format ``layout``'s log directories for ``cluster_id``; a BrokerError with the tool's words.

    ``standalone``: a single node that bootstraps its own dynamic quorum (a cluster names its
    voters). ``users``: a secure broker's files and principals, whose SCRAM credentials are
    written into the metadata here, before any client (from a private argument file).
    """
    cmd = [
        java,
        "-cp",
        classpath,
        f"-Dlog4j2.configurationFile=file:{layout.log4j2_properties}",
        f"-Dkafka.logs.dir={layout.logs_dir}",
        "kafka.tools.StorageTool",
        "format",
        *(["--standalone"] if standalone else []),
        f"--cluster-id={cluster_id}",
        "--config",
        str(layout.server_properties),
    ]
    argfile = scram_argfile(*users) if users is not None else None
    if argfile is not None:
        cmd.append(f"@{argfile}")
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    finally:
        if argfile is not None:
            argfile.unlink(missing_ok=True)
    if proc.returncode != 0:
        output = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-20:])
        raise BrokerError(f"formatting the Kafka data directory failed:\n{output}")
