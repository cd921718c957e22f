"""Error types shared by every part of rollstream.

Every error carries a ``retriable`` flag: consumers decide between retrying a record and sending
it to the dead-letter topic from that flag alone, never from the message text.
"""

from __future__ import annotations


class RollstreamError(Exception):
    """Base of all rollstream errors.

    ``retriable`` says whether the same operation may succeed if tried again unchanged (a broker
    that is away, a schema not yet known) or will fail the same way forever (a corrupt record).
    """

    retriable: bool = False

    def __init__(self, message: str, *, retriable: bool | None = None) -> None:
        super().__init__(message)
        if retriable is not None:
            self.retriable = retriable


class ConfigurationError(RollstreamError):
    """A setting or a command-line argument that cannot work as given."""


class MissingToolError(ConfigurationError):
    """A program rollstream needs (java, mvn) is not installed."""


class ContainerEngineError(ConfigurationError):
    """The local container engine (a private Docker daemon) or an image of it could not be made.

    The message says what is missing or what the daemon logged, and how to fix it.
    """


class SerializationError(RollstreamError):
    """A record that cannot be encoded or decoded; retrying will not help."""


class RecordTooLargeError(SerializationError):
    """A record above the per-record budget: no broker would take it, so retrying cannot help.

    Writers check the budget before sending (``rollstream.schemas.topics.check_record_size``)
    and record what does not fit in a form that does, or dead-letter it with this reason, rather
    than let it abort a transaction or block every later record of its partition.
    """

    def __init__(self, what: str, size: int, limit: int) -> None:
        super().__init__(f"{what} is {size} bytes, over the {limit}-byte record budget")
        self.size = size
        self.limit = limit


class UnknownSchemaError(SerializationError):
    """A record whose writer schema this process does not know (yet).

    Retriable: the schema store may learn the fingerprint once a newer writer has published it.
    """

    retriable = True

    def __init__(self, fingerprint: bytes) -> None:
        super().__init__(f"unknown writer schema fingerprint {fingerprint.hex()}")
        self.fingerprint = fingerprint


class BrokerError(RollstreamError):
    """The local Kafka broker could not be started, reached or stopped."""

    retriable = True


class PortTakenError(BrokerError):
    """The broker could not bind a port that was free when it was picked: taken meanwhile."""
