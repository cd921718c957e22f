"""Reading and changing topics' configs through aiokafka's admin client."""

from __future__ import annotations

import asyncio
import time

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from rollstream.kafka.reassignment import kafka_error

_UNKNOWN_TOPIC_OR_PARTITION = 3

#: A DescribeConfigs entry's source when the config is set on the topic itself.
DYNAMIC_TOPIC_CONFIG = 1

#: Each config in force on a topic: ``{key: (value, source)}``.
Entries = dict[str, tuple[str | None, int]]


async def describe_topic_configs(
    admin: AIOKafkaAdminClient, names: list[str], patience: float = 2.0
) -> dict[str, Entries]:
    """Each topic's configs in force (its own, the broker's, the defaults), with their source.

    The broker asked may not have applied a topic's creation yet (each broker of a cluster
    applies the metadata on its own): an unknown topic is asked again for ``patience`` seconds.
    """
    if not names:
        return {}
    deadline = time.monotonic() + patience
    while True:
        responses = await admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, name) for name in names]
        )
        result: dict[str, Entries] = {}
        unknown = False
        for response in responses:
            for code, message, _rtype, name, entries in response.resources:
                if code == _UNKNOWN_TOPIC_OR_PARTITION and time.monotonic() < deadline:
                    unknown = True
                elif code != 0:
                    raise kafka_error(code, message, f"describing topic {name!r}")
                else:
                    # Entry: (name, value, read_only, config_source, is_sensitive, synonyms).
                    result[name] = {e[0]: (e[1], e[3]) for e in entries}
        if not unknown:
            return result
        await asyncio.sleep(0.2)


def topic_level(entries: Entries) -> dict[str, str]:
    """The configs set on the topic itself, out of all those in force."""
    return {
        k: v
        for k, (v, source) in entries.items()
        if source == DYNAMIC_TOPIC_CONFIG and v is not None
    }


async def set_topic_config(
    admin: AIOKafkaAdminClient, name: str, entries: Entries, key: str, value: str
) -> None:
    """Set one config of topic ``name`` (whose configs in force are ``entries``), keeping the rest.

    AlterConfigs replaces a topic's whole set of topic-level configs (aiokafka has no
    IncrementalAlterConfigs), so the request carries the current ones with the change. A change
    made by someone else between the describe and this call would be lost.
    """
    configs = topic_level(entries) | {key: value}
    resource = ConfigResource(ConfigResourceType.TOPIC, name, configs)
    for response in await admin.alter_configs([resource]):
        for code, message, _rtype, _name in response.resources:
            if code != 0:
                raise kafka_error(code, message, f"setting {key}={value} on {name!r}")
