"""The bearer tokens of a local stack: made once under the state directory, mode 0600.

``rollstream up`` gives each service the tokens it serves or calls with, and only those: the
interceptor its admin token; the node its API token and the interceptor's (to register
sessions); the reference backend its weights token. The commands of the stack (``rollstream
run``, the demo, its trainer) read them from the same files.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pydantic import SecretStr

from rollstream.http_auth import token_file


def tokens_dir(state_dir: Path) -> Path:
    """Where the stack's tokens are kept."""
    return state_dir / "stack" / "tokens"


@dataclass(frozen=True)
class StackTokens:
    """One token per control plane of the stack."""

    interceptor: SecretStr
    node: SecretStr
    backend: SecretStr

    @classmethod
    def kept(cls, state_dir: Path) -> StackTokens:
        """The tokens kept under ``state_dir``, each made (mode 0600) if missing."""
        folder = tokens_dir(state_dir)
        return cls(
            interceptor=token_file(folder / "interceptor-admin"),
            node=token_file(folder / "node-api"),
            backend=token_file(folder / "backend-admin"),
        )

    def env(self, component: str) -> dict[str, str]:
        """The variables ``component`` gets: the tokens it requires or sends, no other."""
        interceptor = self.interceptor.get_secret_value()
        if component == "interceptor":
            return {"ROLLSTREAM_INTERCEPTOR_ADMIN_TOKEN": interceptor}
        if component == "node":
            return {
                "ROLLSTREAM_NODE_API_TOKEN": self.node.get_secret_value(),
                "ROLLSTREAM_NODE_INTERCEPTOR_TOKEN": interceptor,
            }
        if component == "backend":
            return {"ROLLSTREAM_BACKEND_ADMIN_TOKEN": self.backend.get_secret_value()}
        return {}
