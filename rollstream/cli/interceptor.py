"""``rollstream interceptor``: the capturing reverse proxy."""

from __future__ import annotations

import click

from rollstream.cli.extras import require_extra
from rollstream.cli.options import settings_options
from rollstream.interceptor.settings import InterceptorSettings
from rollstream.lifecycle import StopSignal, announce, run_service
from rollstream.producers.publisher.client import PublisherSettings
from rollstream.settings import KafkaSettings, StatePaths


@click.command(
    name="interceptor", short_help="The capturing proxy: records every model call to Kafka."
)
@settings_options(InterceptorSettings, "settings")
@settings_options(KafkaSettings, "kafka")
@settings_options(PublisherSettings, "publisher")
def interceptor(
    settings: InterceptorSettings, kafka: KafkaSettings, publisher: PublisherSettings
) -> None:
    """Proxy harness calls to the inference server; record every call to Kafka.

    Point a harness's base URL at the printed address and give it its session id as API key.
    With --workers N, N interceptor processes share the work, each session on one of them.
    """
    require_extra("interceptor")
    if settings.workers > 1:
        _pool(settings, kafka, publisher)
        return
    from rollstream.interceptor.proxy import Interceptor

    async def main(stop: StopSignal) -> None:
        proxy = Interceptor(settings, kafka, publisher, StatePaths())
        await proxy.start()
        click.echo(
            f"intercepting on {proxy.url} -> {settings.upstream}; "
            f"calls to {kafka.topic_prefix}.events at {kafka.bootstrap_servers}",
            err=True,
        )
        if settings.mode == "forward":
            click.echo(f"forward proxy: trust the CA {proxy.ca_cert_path}", err=True)
        announce(interceptor=proxy.url, admin=proxy.admin_url)
        try:
            await stop.event.wait()
        finally:
            await proxy.stop()

    run_service(main)


def _pool(
    settings: InterceptorSettings, kafka: KafkaSettings, publisher: PublisherSettings
) -> None:
    """Run ``settings.workers`` interceptors under one supervisor until stopped."""
    from rollstream.interceptor.pool import InterceptorPool

    async def main(stop: StopSignal) -> None:
        pool = InterceptorPool(settings, kafka, publisher, StatePaths())
        await pool.start()
        click.echo(
            f"intercepting on {pool.url} with {settings.workers} workers -> {settings.upstream}; "
            f"admin {pool.admin_url}; calls to {kafka.topic_prefix}.events at "
            f"{kafka.bootstrap_servers}",
            err=True,
        )
        if settings.mode == "forward":
            click.echo(
                f"forward proxy: trust the CA {pool.confdir}/mitmproxy-ca-cert.pem", err=True
            )
        announce(interceptor=pool.url, admin=pool.admin_url)
        try:
            await stop.event.wait()
        finally:
            await pool.stop()

    run_service(main)
