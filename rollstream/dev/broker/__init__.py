"""A real Apache Kafka broker or cluster (KRaft, combined nodes) run as local JVM processes.

The jars come from Maven Central through a small pom; no tarball, no Docker. Used by
``rollstream kafka start|stop|status``, by the test suite's session fixture and by the local stack.
"""

from rollstream.dev.broker.cluster import ClusterInfo, LocalCluster, local_kafka
from rollstream.dev.broker.process import LocalBroker
from rollstream.dev.broker.records import BrokerInfo
from rollstream.dev.broker.settings import BrokerSettings

__all__ = [
    "BrokerInfo",
    "BrokerSettings",
    "ClusterInfo",
    "LocalBroker",
    "LocalCluster",
    "local_kafka",
]
