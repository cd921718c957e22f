"""The report as a browser shows it: a headless Chromium screenshot, checked pixel by pixel.

Token backgrounds are exact colours nobody else on the page uses; the token boxes are found by
their border colour, so the legend's swatches (above them) are not counted as tokens.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from rollstream.dev.report import MASK0_COLOR, MASK1_COLOR, TOKEN_BOX_COLOR, render_report
from rollstream.dev.report.facts import Reportable
from rollstream.models.tokenizer import ChatTokenizer
from tests.dev.report.records import conversation, prompt_only, scored

CHROMIUM = shutil.which("chromium")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None,
    reason="chromium not installed (`make test` installs Debian's package when apt-get is usable)",
)

# Enough sampled text that its background covers thousands of pixels at 13 px.
ANSWER = (
    "I will read the file first.\n<tool_call>\n"
    '{"name": "bash", "arguments": {"command": "cat main.py && pytest -q tests"}}\n</tool_call>'
)

Rgb = tuple[int, int, int]
Pixels = np.ndarray[tuple[int, int, int], np.dtype[np.uint8]]


def _rgb(color: str) -> Rgb:
    value = int(color.lstrip("#"), 16)
    return (value >> 16) & 255, (value >> 8) & 255, value & 255


def _screenshot(page: str, tmp_path: Path) -> Pixels:
    html_path, png_path = tmp_path / "report.html", tmp_path / "report.png"
    html_path.write_text(page, encoding="utf-8")
    assert CHROMIUM is not None
    done = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--force-device-scale-factor=1",
            f"--user-data-dir={tmp_path / 'profile'}",
            f"--screenshot={png_path}",
            "--window-size=1200,1600",
            html_path.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0 and png_path.exists(), done.stderr[-2000:]
    pixels = np.asarray(Image.open(png_path).convert("RGB"))
    assert pixels.shape == (1600, 1200, 3)
    return pixels


def _where(pixels: Pixels, color: str) -> np.ndarray[tuple[int, int], np.dtype[np.bool_]]:
    # Annotated: with the Pillow the vocabulary packages bring, the comparison is typed Any.
    mask: np.ndarray[tuple[int, int], np.dtype[np.bool_]] = np.all(
        pixels == np.array(_rgb(color), np.uint8), axis=2
    )
    return mask


def _token_area(pixels: Pixels) -> tuple[slice, slice]:
    """Rows and columns of the bounding box of the token boxes' borders."""
    ys, xs = np.nonzero(_where(pixels, TOKEN_BOX_COLOR))
    assert len(xs), "no token box on the screenshot"
    return slice(int(ys.min()), int(ys.max()) + 1), slice(int(xs.min()), int(xs.max()) + 1)


def _count(pixels: Pixels, color: str) -> int:
    return int(_where(pixels, color).sum())


def _check(records: list[Reportable], tokenizer: ChatTokenizer, tmp_path: Path) -> dict[str, int]:
    pixels = _screenshot(render_report(records, tokenizer), tmp_path)
    rows, columns = _token_area(pixels)
    inside, above = pixels[rows, columns], pixels[: rows.start]
    return {
        "m1": _count(inside, MASK1_COLOR),
        "m0": _count(inside, MASK0_COLOR),
        "m1 above": _count(above, MASK1_COLOR),
        "m0 above": _count(above, MASK0_COLOR),
        "top": rows.start,
        "bottom": rows.stop,
    }


def test_sampled_and_prompt_tokens_show_in_their_colours(
    tokenizer: ChatTokenizer, tmp_path: Path
) -> None:
    seg = conversation(tokenizer, "Fix the failing test in main.py, please.", [(ANSWER, "ok")] * 2)
    records: list[Reportable] = [
        scored("t-0", "g", 0, [seg], 1.0),
        scored("t-1", "g", 1, [seg], 0.0),
    ]
    counts = _check(records, tokenizer, tmp_path)
    assert counts["m1"] > 10_000 and counts["m0"] > 10_000, counts
    # The legend (above the tokens) shows both colours too, but is not counted as tokens.
    assert counts["m1 above"] > 0 and counts["m0 above"] > 0, counts


def test_a_page_without_sampled_tokens_has_none_of_their_colour(
    tokenizer: ChatTokenizer, tmp_path: Path
) -> None:
    text = "Only a prompt here, and a long one so that it fills a few lines. " * 4
    records: list[Reportable] = [
        scored("t-0", "g", 0, [prompt_only(tokenizer, text)], None, "no answer"),
        scored("t-1", "g", 1, [prompt_only(tokenizer, text)], 0.0),
    ]
    counts = _check(records, tokenizer, tmp_path)
    assert counts["m1"] == 0 and counts["m0"] > 10_000, counts
    assert counts["m1 above"] > 0, counts  # the legend's swatch: the colour is rendered
