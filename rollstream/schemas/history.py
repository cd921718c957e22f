"""Keep every released schema version in ``avro/history`` so old records stay readable.

Run ``python -m rollstream.schemas.history`` after changing a schema in ``avro/``: it adds the new
version beside the old ones. The test suite fails while a current schema is missing there.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from rollstream.schemas.registry import current_schemas


def history_filename(name: str, fp: bytes) -> str:
    """The file a schema version is kept in: full name and fingerprint."""
    return f"{name}-{fp.hex()}.avsc"


def record_current(history_dir: Path) -> list[Path]:
    """Write each current schema not yet in ``history_dir``; returns the files written."""
    written = []
    for schema in current_schemas().values():
        path = history_dir / history_filename(schema.name, schema.fingerprint)
        if not path.exists():
            path.write_text(json.dumps(schema.schema, indent=2, sort_keys=True) + "\n")
            written.append(path)
    return written


def main() -> None:
    """Record the current schemas into the package's history directory."""
    history_dir = Path(__file__).parent / "avro" / "history"
    for path in record_current(history_dir):
        print(f"recorded {path.name}", file=sys.stderr)


if __name__ == "__main__":
    main()
