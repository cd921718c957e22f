"""``rollstream backend``: the reference inference server."""

from __future__ import annotations

import asyncio

import click

from rollstream.cli.options import settings_options
from rollstream.dev.backend.settings import BackendSettings
from rollstream.lifecycle import StopSignal, announce, run_service


async def serve(settings: BackendSettings, stop: StopSignal) -> None:
    """Serve until ``stop`` is set; prints the address once listening."""
    # Imported here so that `rollstream --help` works without the optional packages.
    from aiohttp import web

    from rollstream.dev.backend.server import Backend
    from rollstream.http_auth import warn_if_open

    backend = Backend(settings)
    runner = web.AppRunner(backend.app(), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, settings.host, settings.port)
    await site.start()
    port = runner.addresses[0][1]  # the real port when 0 was asked
    click.echo(
        f"serving {settings.model} ({settings.policy} policy, {backend.tokenizer.vocab_size} "
        f"tokens) on http://{settings.host}:{port}/v1 ({backend.family.name} family)",
        err=True,
    )
    announce(backend=f"http://{settings.host}:{port}")
    token = settings.admin_token
    warn_if_open("the backend's /admin/weights", token, "ROLLSTREAM_BACKEND_ADMIN_TOKEN")
    try:
        await stop.event.wait()
    finally:
        await runner.cleanup()
        await asyncio.sleep(0)


@click.command(name="backend", short_help="The reference inference server (vLLM's API on the CPU).")
@settings_options(BackendSettings, "settings")
def backend(settings: BackendSettings) -> None:
    """Serve vLLM's OpenAI-compatible subset on the CPU (token ids, logprobs, tool calls).

    With no options: the shipped tokenizer and the tiny policy on 127.0.0.1:8000. With
    --family (qwen3, qwen3-coder, llama-3, gpt-oss, ...): that model family's renderer, parsers
    and real vocabulary (from the cache, built the first time), so prompts, tool calls and
    reasoning are in its native format.
    """

    async def main(stop: StopSignal) -> None:
        await serve(settings, stop)

    run_service(main)
