"""How a command reports what it took a model in with: problems only the stages it does not use refuse
(`lowtide.validation.load_checked`), one line each on stderr, beside the `warnings` list of its `--json`."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path


def print_warnings(model: Path, warnings: Iterable[str]) -> None:
    for warning in warnings:
        print(f"lowtide: warning: {model}: {warning}", file=sys.stderr)
