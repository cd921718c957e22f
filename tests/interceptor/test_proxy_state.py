"""What an interceptor keeps in its state directory: one spool and registry of its own."""

from __future__ import annotations

from pathlib import Path

from rollstream.interceptor.proxy import Interceptor
from rollstream.interceptor.settings import InterceptorSettings
from rollstream.settings import KafkaSettings, StatePaths


def test_interceptors_on_any_free_port_keep_spools_of_their_own(tmp_path: Path) -> None:
    # Named after the port chosen, not after 0: sharing one spool, the second would wait for
    # the first's lock (and, before spools were locked, both wrote to one spool).
    paths = StatePaths(state_dir=tmp_path)
    kafka = KafkaSettings(bootstrap_servers="127.0.0.1:1")
    settings = InterceptorSettings(host="127.0.0.1", port=0, upstream="http://127.0.0.1:1")
    first = Interceptor(settings, kafka, paths=paths)
    second = Interceptor(settings, kafka, paths=paths)
    try:
        assert 0 not in (first.port, second.port) and first.port != second.port
        assert first.publisher.spool.directory != second.publisher.spool.directory
        assert first.publisher.spool.directory.name == f"interceptor-{first.port}"
    finally:
        first.publisher.spool.close()
        second.publisher.spool.close()
