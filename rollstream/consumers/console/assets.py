"""The built front end (``web/dist``): the page the server sends, and the one-file report.

The front end is built by the set-up from ``web/`` (``npm ci`` and esbuild, see
``rollstream console build``). The same two files serve the live console and are inlined into
a report with its data, so there is one renderer, not two.
"""

from __future__ import annotations

import html
import json
from importlib import resources
from pathlib import Path
from typing import Any

from rollstream.errors import ConfigurationError

#: The built files, by the name the page asks for.
FILES = ("console.js", "console.css")
_TITLE = "rollstream console"


def web_dir() -> Path:
    """The front end's source folder (``package.json``, ``src/``, ``dist/``)."""
    return Path(str(resources.files("rollstream.consumers.console").joinpath("web")))


def json_in_script(data: Any) -> str:
    """``data`` as JSON that no ``</script>`` or ``<!--`` inside it can end early."""
    return json.dumps(data, separators=(",", ":"), allow_nan=False).replace("<", "\\u003c")


def _inline(text: str, element: str) -> str:
    """A built file's text inside ``<element>``; refused if it would close the element."""
    if f"</{element}" in text.lower():
        raise ConfigurationError(f"the built front end holds '</{element}': it cannot be inlined")
    return text


class Assets:
    """The built front end in ``dist`` (by default the package's own)."""

    def __init__(self, dist: Path | None = None) -> None:
        self.dist = dist or web_dir() / "dist"

    def missing(self) -> list[str]:
        """The built files not there."""
        return [name for name in FILES if not (self.dist / name).is_file()]

    def require(self) -> None:
        """Raise ConfigurationError, saying how to build it, when the front end is not built."""
        if self.missing():
            raise ConfigurationError(
                f"the console's front end is not built ({', '.join(self.missing())} missing in "
                f"{self.dist}): run `rollstream console build` (needs Node.js and npm), or "
                "`make setup`"
            )

    def file(self, name: str) -> Path | None:
        """A built file by name, or None for any other name."""
        return self.dist / name if name in FILES and (self.dist / name).is_file() else None

    def page(self) -> str:
        """The live console's page: an empty shell that loads the front end."""
        return (
            f'<!doctype html><html><head><meta charset="utf-8"><title>{_TITLE}</title>'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            '<link rel="stylesheet" href="static/console.css"></head>'
            '<body><div id="app"></div><script src="static/console.js"></script></body></html>'
        )

    def static_page(self, data: dict[str, Any], title: str = _TITLE) -> str:
        """One self-contained page: the front end and ``data`` inline, no server needed."""
        self.require()
        css = (self.dist / "console.css").read_text(encoding="utf-8")
        js = (self.dist / "console.js").read_text(encoding="utf-8")
        return (
            f'<!doctype html><html><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
            f'<style>{_inline(css, "style")}</style></head><body><div id="app"></div>'
            f'<script id="rollstream-data" type="application/json">{json_in_script(data)}'
            f"</script><script>{_inline(js, 'script')}</script></body></html>"
        )
