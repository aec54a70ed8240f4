"""`lowtide demo-model`: write the project's own irregularly wired int8 example model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from lowtide.cli.application import app
from lowtide.errors import LowtideError
from lowtide.model import read_model
from lowtide.testing.zoo import demo_model


@app.command("demo-model")
def demo_model_command(
    out: Annotated[Path, typer.Argument(help="Where to write the demo .tflite")],
    json_output: Annotated[bool, typer.Option("--json", help="Print one JSON object")] = False,
) -> None:
    """Write the demo model: branches that merge, stored in a memory-hungry operator order."""
    data = demo_model()
    try:
        out.write_bytes(data)
    except OSError as exc:
        raise LowtideError(f"cannot write: {exc.strerror}", out) from None
    graph = read_model(data, str(out))
    summary = {"model": str(out), "bytes": len(data), "ops": graph.operator_count, "sha256": graph.sha256}
    print(json.dumps(summary) if json_output else f"wrote {out}: {graph.operator_count} operators, {len(data):,} bytes")
