"""Every shipped schema version is kept in history, so records written with it stay readable."""

from __future__ import annotations

from pathlib import Path

import rollstream.schemas
from rollstream.schemas import KnownSchema
from rollstream.schemas.history import history_filename, record_current
from rollstream.schemas.registry import current_schemas, history_schemas


def test_every_current_schema_is_in_history() -> None:
    kept = {s.fingerprint for s in history_schemas()}
    missing = [s.name for s in current_schemas().values() if s.fingerprint not in kept]
    assert not missing, (
        f"schemas changed without a history entry: {missing}; "
        "run `python -m rollstream.schemas.history`"
    )


def test_history_files_are_named_by_their_fingerprint() -> None:
    history_dir = Path(rollstream.schemas.__file__).parent / "avro" / "history"
    files = sorted(history_dir.glob("*.avsc"))
    assert files
    for path in files:
        schema = KnownSchema.from_json(path.read_text())
        assert path.name == history_filename(schema.name, schema.fingerprint)


def test_record_current_writes_only_what_is_missing(tmp_path: Path) -> None:
    first = record_current(tmp_path)
    assert len(first) == len(current_schemas())
    assert record_current(tmp_path) == []
