"""Outputs are read from regular files of their own: never through a link, never a FIFO."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rollstream.sandbox.outputs import OutputError, open_output, read_head, read_tail


def test_an_own_file_is_read_and_its_tail_taken(tmp_path: Path) -> None:
    (tmp_path / "own").write_text("0123456789")
    with open_output(tmp_path / "own") as f:
        assert f.read() == b"0123456789"
    assert read_tail(tmp_path / "own", 4) == (b"6789", 10)
    assert read_head(tmp_path / "own", 4) == (b"0123", 10)
    assert read_head(tmp_path / "own", 40) == (b"0123456789", 10)
    with pytest.raises(FileNotFoundError):
        open_output(tmp_path / "missing")


def test_a_link_or_a_special_file_in_place_of_an_output_is_refused(tmp_path: Path) -> None:
    secret = tmp_path / "token"
    secret.write_text("s3cret")
    (tmp_path / "symlink").symlink_to(secret)
    (tmp_path / "hardlink").hardlink_to(secret)
    os.mkfifo(tmp_path / "fifo")  # opening it for reading must not block either
    for name in ("symlink", "hardlink", "fifo"):
        with pytest.raises(OutputError, match=r"cannot be read|not a file of its own"):
            open_output(tmp_path / name)
