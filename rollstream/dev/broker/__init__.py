"""A real Apache Kafka broker (KRaft, one combined node) run as a local JVM process.

The jars come from Maven Central through a small pom; no tarball, no Docker. Used by
``rollstream kafka start|stop|status``, by the test suite's session fixture and by the local stack.
"""

from rollstream.dev.broker.process import BrokerInfo, LocalBroker
from rollstream.dev.broker.settings import BrokerSettings

__all__ = ["BrokerInfo", "BrokerSettings", "LocalBroker"]
