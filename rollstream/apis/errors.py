"""The error a translator raises for a request it cannot translate."""

from __future__ import annotations

from rollstream.errors import RollstreamError


class TranslationError(RollstreamError):
    """The harness's request cannot be expressed upstream; answered as a 400 in its format.

    ``param`` names the offending field where there is one.
    """

    retriable = False

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param
