"""What the interceptor hands its publisher, kept and decoded (addon tests without a broker)."""

from __future__ import annotations

from rollstream.schemas import AvroSerializer, CallRecord, record_size


class Published:
    """A publish callable for RollstreamAddon: keeps each record decoded, and its size."""

    def __init__(self) -> None:
        self.serializer = AvroSerializer()
        self.records: list[CallRecord] = []
        self.sizes: list[int] = []

    def __call__(self, key: bytes, value: bytes) -> None:
        record = self.serializer.decode_as(value, CallRecord)
        assert key == record.session_id.encode()  # the session is the record's key
        self.records.append(record)
        self.sizes.append(record_size(key, value))
