"""The addon for ``mitmdump -s``: ``mitmdump --mode reverse:URL -s <this file>``.

Forward mode: ``ROLLSTREAM_INTERCEPTOR_MODE=forward mitmdump --mode regular -s <this file>``
(mitmproxy's CA is then the one in its own ``--set confdir``, by default ``~/.mitmproxy``).
Settings come from the environment (``ROLLSTREAM_INTERCEPTOR_*``, ``ROLLSTREAM_BOOTSTRAP_SERVERS``).
The publisher starts with mitmproxy's event loop and stops with it.
"""

from __future__ import annotations

from mitmproxy import ctx

from rollstream.interceptor import errorpages
from rollstream.interceptor.addon import RollstreamAddon
from rollstream.interceptor.forward import ForwardAddon
from rollstream.interceptor.proxy import session_hash_key
from rollstream.interceptor.settings import InterceptorSettings
from rollstream.producers.publisher.client import CapturePublisher, PublisherSettings
from rollstream.schemas import TopicNames
from rollstream.settings import KafkaSettings, StatePaths


class ScriptAddon(RollstreamAddon):
    """The addon plus the publisher's lifecycle, tied to mitmproxy's ``running``/``done``."""

    def __init__(self) -> None:
        settings, kafka = InterceptorSettings(), KafkaSettings()
        self._publisher = CapturePublisher(
            kafka,
            PublisherSettings(),
            TopicNames(kafka.topic_prefix).events,
            StatePaths().state_dir / "spool" / "mitmdump",
        )
        hash_key = session_hash_key(settings, StatePaths().state_dir)
        super().__init__(settings, self._publisher.publish, hash_key=hash_key)

    async def running(self) -> None:
        """Start publishing once mitmproxy is up."""
        # As in `rollstream interceptor`: an absent upstream must be an HTTP error.
        ctx.options.update(connection_strategy="lazy")
        await self._publisher.start()

    async def done(self) -> None:
        """Flush (or spool) what is queued as mitmproxy stops."""
        await self._publisher.stop()


errorpages.install()
_settings = InterceptorSettings()
addons: list[object] = [ScriptAddon()]
if _settings.mode == "forward":
    # After ScriptAddon, as in `rollstream interceptor`: see ForwardAddon.
    addons.append(ForwardAddon(_settings.upstream, _settings.other_traffic))
