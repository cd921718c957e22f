"""How many bytes a topic takes in the brokers' log directories (DescribeLogDirs, API key 35).

aiokafka has no admin call for it, so this defines the request (version 1, which Kafka 4.x still
serves) on aiokafka's protocol classes. The size the broker reports is the sum of the
partition's log segment files: the record batches as stored, compressed, with their headers.
Asking the broker works for any broker, not only one whose data directory is on this machine.
"""

from __future__ import annotations

from typing import Any

from aiokafka.client import AIOKafkaClient
from aiokafka.errors import KafkaError
from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.types import Array, Boolean, Int16, Int32, Int64, Schema, String

from rollstream.errors import BrokerError
from rollstream.settings import KafkaSettings

_API_KEY = 35


class _DescribeLogDirsResponseV1(Response):  # type: ignore[misc]
    API_KEY = _API_KEY
    API_VERSION = 1
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        (
            "results",
            Array(
                ("error_code", Int16),
                ("log_dir", String("utf-8")),
                (
                    "topics",
                    Array(
                        ("name", String("utf-8")),
                        (
                            "partitions",
                            Array(
                                ("partition_index", Int32),
                                ("partition_size", Int64),
                                ("offset_lag", Int64),
                                ("is_future_key", Boolean),
                            ),
                        ),
                    ),
                ),
            ),
        ),
    )


class _DescribeLogDirsRequestV1(RequestStruct):  # type: ignore[misc]
    API_KEY = _API_KEY
    API_VERSION = 1
    RESPONSE_TYPE = _DescribeLogDirsResponseV1
    SCHEMA = Schema(("topics", Array(("topic", String("utf-8")), ("partitions", Array(Int32)))))


class _DescribeLogDirs(Request[_DescribeLogDirsRequestV1]):  # type: ignore[misc]
    API_KEY = _API_KEY

    def __init__(self, topics: list[tuple[str, list[int]]]) -> None:
        self.topics = topics

    def build(self, request_struct_class: type[Any]) -> Any:
        return request_struct_class(self.topics)


async def topic_log_bytes(kafka: KafkaSettings, topic: str, partitions: int) -> int:
    """Bytes of ``topic``'s log segments, one replica of each partition (the largest).

    Raises BrokerError when a broker cannot answer.
    """
    client = AIOKafkaClient(**kafka.client_kwargs())
    sizes: dict[int, int] = {}
    try:
        await client.bootstrap()
        request = _DescribeLogDirs([(topic, list(range(partitions)))])
        for broker in client.cluster.brokers():
            response = await client.send(broker.nodeId, request)
            for result in response.to_object()["results"]:
                if result["error_code"]:
                    raise BrokerError(
                        f"DescribeLogDirs on broker {broker.nodeId} ({result['log_dir']}): "
                        f"error code {result['error_code']}"
                    )
                for entry in result["topics"]:
                    if entry["name"] != topic:
                        continue
                    for p in entry["partitions"]:
                        if p["is_future_key"]:  # a replica being moved between directories
                            continue
                        index = p["partition_index"]
                        sizes[index] = max(sizes.get(index, 0), p["partition_size"])
    except KafkaError as exc:
        raise BrokerError(f"cannot describe the log dirs of {topic}: {exc}") from exc
    finally:
        await client.close()
    return sum(sizes.values())
