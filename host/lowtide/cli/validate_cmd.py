"""`lowtide validate`: every problem the validator finds in a model, at once."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from lowtide.cli.application import app
from lowtide.model import read_model
from lowtide.model.reader import load_bytes
from lowtide.settings import read_settings
from lowtide.validation import model_problems


@app.command()
def validate(
    model: Annotated[Path, typer.Argument(help=".tflite model to check")],
    json_output: Annotated[bool, typer.Option("--json", help="Print one JSON object instead of lines")] = False,
) -> None:
    """Check MODEL as every command does before running it, listing every problem; exit 2 if there is any (even
    one only the commands computing with operators' shapes refuse, which the others take with a warning)."""
    graph = read_model(load_bytes(model), str(model))  # unreadable files fail here, with one line
    problems = model_problems(graph, read_settings())
    if json_output:
        print(
            json.dumps(
                {
                    "model": str(model),
                    "valid": not problems,
                    "problems": [
                        # relied_on: null where every command refuses the problem, else what a command must rely on
                        # to refuse it (the others go ahead with a warning)
                        {"where": p.where, "reason": p.reason, "relied_on": p.relied_on and p.relied_on.name.lower()}
                        for p in problems
                    ],
                }
            )
        )
    else:
        for p in problems:
            print(f"{model}: {p.message}", file=sys.stderr)
        if not problems:
            print(
                f"{model}: valid ({len(graph.subgraphs)} subgraphs, {graph.operator_count} operators, "
                f"{graph.tensor_count} tensors)"
            )
    if problems:
        raise typer.Exit(2)
