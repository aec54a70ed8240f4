"""The `lowtide` command. Each command lives in its own module here and registers itself on `app`.

Every user-facing failure is a LowtideError: printed as one line on stderr, exit status 2, no traceback.
"""

from __future__ import annotations

import sys

import typer

from lowtide.errors import LowtideError

app = typer.Typer(
    name="lowtide",
    help="Predict, minimise and measure the tensor arena TensorFlow Lite Micro needs for a model.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)



@app.callback()
def _group() -> None:
    """Keeps `lowtide` a group of commands even while only one is registered."""


# Command modules import `app` from here; importing them registers their commands.
from lowtide.cli import (  # noqa: E402,F401
    build_cmd, compile_cmd, demo_cmd, inspect_cmd, measure_cmd, optimize_cmd, partition_cmd, savings_cmd,
    tflm_cmd, validate_cmd,
)


def main() -> None:
    try:
        app()  # standalone: click reports usage errors itself (one line, exit 2)
    except LowtideError as exc:
        print(f"lowtide: error: {exc}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("lowtide: interrupted", file=sys.stderr)
        sys.exit(130)
