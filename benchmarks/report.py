"""Shared by the benchmark scripts: docs/benchmarks.md is made of sections, one per script, each between
`<!-- NAME-bench:start -->` and `<!-- NAME-bench:end -->`, so each script rewrites only its own."""

from __future__ import annotations

import math
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "benchmarks.md"
SHARED_MODELS = REPO / ".." / "shared" / "models"


def section_markers(name: str) -> tuple[str, str]:
    return f"<!-- {name}-bench:start -->", f"<!-- {name}-bench:end -->"


def write_section(doc: Path, name: str, body: str) -> None:
    """Replace the section `name` of `doc` with `body` (markdown without markers), leaving the others."""
    start, end = section_markers(name)
    section = f"{start}\n{body.rstrip()}\n{end}\n"
    text = doc.read_text() if doc.exists() else "# Benchmarks\n"
    pattern = re.compile(re.escape(start) + r".*?" + re.escape(end) + r"\n?", re.S)
    if pattern.search(text):
        text = pattern.sub(lambda _: section, text)
    else:
        text = text.rstrip("\n") + "\n\n" + section
    doc.parent.mkdir(parents=True, exist_ok=True)
    doc.write_text(text)


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def grid_text(tiling) -> str:
    """A `lowtide.rewrite.Tiling`'s grid as the tables show it."""
    return f"{tiling.kind}{' strips' if tiling.split_source else ''}"
