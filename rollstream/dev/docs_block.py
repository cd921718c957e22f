"""A generated block of a document: the lines between a start and an end marker.

The configuration table (docs/configuration.md), the benchmark summary (bench/RESULTS.md) and
``docs/scaling.md``'s sizing table are each generated from the code or the results and kept in
their document between two HTML comments.
Each generator prints its block, writes it into the document (``--write``) or checks that the
document holds what it would write (``--check``); :class:`DocBlock` does that part for all.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from rollstream.errors import ConfigurationError


@dataclass(frozen=True)
class DocBlock:
    """The block between ``start`` and ``end`` (marker lines, kept), ``regenerate`` writes it.

    ``what`` names the block in messages ("the sizing table").
    """

    start: str
    end: str
    what: str
    regenerate: str

    def _span(self, text: str) -> tuple[int, int]:
        """Where the block's body begins (after ``start``) and ends (at ``end``) in ``text``."""
        begin = text.find(self.start)
        end = text.find(self.end, begin + len(self.start)) if begin >= 0 else -1
        if end < 0:
            raise ConfigurationError(f"no {self.start} ... {self.end} markers for {self.what}")
        return begin + len(self.start), end

    def body(self, text: str) -> str:
        """The block's body in ``text``, without the line breaks that join it to the markers."""
        begin, end = self._span(text)
        return text[begin:end].strip("\n")

    def replace(self, text: str, body: str) -> str:
        """``text`` with the block's body replaced by ``body``, each marker on a line of its own."""
        begin, end = self._span(text)
        return f"{text[:begin]}\n{body}\n{text[end:]}"

    def wrap(self, body: str) -> str:
        """``body`` between the markers, as the document holds it."""
        return f"{self.start}\n{body}\n{self.end}"

    def rewrite(self, path: Path, body: str) -> bool:
        """Replace the block in the file at ``path``; whether that changed it (else untouched)."""
        text = path.read_text(encoding="utf-8")
        new = self.replace(text, body)
        if new != text:
            path.write_text(new, encoding="utf-8")
        return new != text

    def is_current(self, path: Path, body: str) -> bool:
        """Whether the file at ``path`` holds ``body`` as its block, as ``rewrite`` would."""
        text = path.read_text(encoding="utf-8")
        return self.replace(text, body) == text

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser, metavar: str = "FILE") -> None:
        """The ``--write FILE`` and ``--check FILE`` options (neither: print the block)."""
        mode = parser.add_mutually_exclusive_group()
        mode.add_argument("--write", metavar=metavar, type=Path, help="replace the block in it")
        mode.add_argument("--check", metavar=metavar, type=Path, help="exit 1 if its block differs")

    def run(
        self,
        args: argparse.Namespace,
        body: str,
        *,
        shown: str | None = None,
        out: TextIO | None = None,
    ) -> int:
        """Do what :meth:`add_arguments`' options ask for; the exit code.

        Without either option prints ``shown`` (default: the body). A stale block is reported
        on ``out`` (default: standard error) with the command that regenerates it; missing
        markers on standard error.
        """
        try:
            if args.write is not None:
                self.rewrite(args.write, body)
            elif args.check is not None:
                if not self.is_current(args.check, body):
                    print(
                        f"{args.check}: {self.what} is out of date; run: {self.regenerate}",
                        file=out or sys.stderr,
                    )
                    return 1
            else:
                print(body if shown is None else shown)
        except ConfigurationError as exc:
            print(f"{args.write or args.check}: {exc}", file=sys.stderr)
            return 1
        return 0
