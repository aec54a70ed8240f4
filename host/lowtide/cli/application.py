"""The `lowtide` Typer application. Each command module (lowtide/cli/*_cmd.py) imports `app` from here and
registers its command on it; lowtide.cli imports every command module. Kept apart from lowtide.cli so that the
command modules never import the package that imports them (tests/test_import_cycles.py)."""

from __future__ import annotations

import typer

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
