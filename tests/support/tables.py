"""A command's tables as a terminal of some width shows them, and what every one of them must keep whole."""

from __future__ import annotations

import io
import re
from collections.abc import Iterable

from rich.cells import cell_len
from rich.console import Console, RenderableType


def rendered(renderable: RenderableType, width: int) -> str:
    """The text rich prints for `renderable` on a console `width` columns wide."""
    out = io.StringIO()
    Console(file=out, width=width, color_system=None).print(renderable)
    return out.getvalue()


def assert_whole(text: str, width: int, words: Iterable[str]) -> None:
    """No line of `text` is wider than `width`, no cell is cut with "…", and each of `words` (figures as the
    command formats them, names) stands whole on one line: not part of a longer number or name, not folded."""
    wide = [line for line in text.splitlines() if cell_len(line) > width]
    assert not wide, f"lines wider than {width} columns: {wide}\n{text}"
    assert "…" not in text, f"a cell cut at {width} columns:\n{text}"
    missing = [word for word in words if not re.search(rf"(?<![\w,.]){re.escape(word)}(?!\w|[,.]\d)", text)]
    assert not missing, f"not whole at {width} columns: {missing}\n{text}"
