"""`lowtide partition`: channel partitioning of the layer at the memory peak (not bit-identical: reports by how much
the outputs move)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import numpy as np
import typer
from rich.console import Console

from lowtide import oracle
from lowtide.cli.application import app
from lowtide.cli.tables import Column, Kind, TerminalTable
from lowtide.errors import LowtideError
from lowtide.model.edit import with_outputs
from lowtide.rewrite import partition_at_peak, partition_concat_conv, partition_wide_layer
from lowtide.settings import read_settings
from lowtide.validation import load_model


@app.command("partition")
def partition_command(
    model: Annotated[Path, typer.Argument(help="The .tflite model")],
    out: Annotated[Path, typer.Option("-o", "--out", help="Where to write the partitioned .tflite")],
    op: Annotated[
        int | None,
        typer.Option(
            help="Operator to split: the expand CONV_2D of an inverted bottleneck "
            "or a CONV_2D reading a concatenation (default: the one at the peak)"
        ),
    ] = None,
    parts: Annotated[int, typer.Option(min=2, help="Channel groups of an inverted bottleneck")] = 2,
    headroom: Annotated[
        float,
        typer.Option(
            min=1.0,
            help="Partial sums' scale over the output's: 1 rounds to "
            "within 1 LSB but clips partials outside the output's "
            "range; more clips less, rounds coarser",
        ),
    ] = 1.0,
    json_output: Annotated[bool, typer.Option("--json", help="Print one JSON object")] = False,
) -> None:
    """Run the wide layers at the memory peak as channel groups whose partial convolutions are summed. The summed
    layer differs from the original by about 1 LSB (requantized partial sums); this command measures that on the
    host TFLM, at that layer and at the model outputs."""
    if out.resolve() == model.resolve():
        raise LowtideError("output would overwrite the input model; choose another -o path", out)
    settings = read_settings()
    graph = load_model(model, settings)
    sg = graph.main
    if op is None:
        split = partition_at_peak(graph, parts, headroom)
    elif not 0 <= op < len(sg.operators):
        raise LowtideError(f"no operator {op}: the main subgraph has {len(sg.operators)}", model)
    elif sg.operators[sg.producers().get(sg.operators[op].inputs[0], op)].opcode == "CONCATENATION":
        split = partition_concat_conv(graph, op, headroom)
    else:
        split = partition_wide_layer(graph, op, parts, headroom)
    try:
        out.write_bytes(split.model.data)
    except OSError as exc:
        raise LowtideError(f"cannot write: {exc.strerror}", out) from None

    inputs = oracle.random_inputs(graph)
    before = oracle.run(graph.data, inputs, settings=settings)
    after = oracle.run(split.model.data, inputs, settings=settings)
    # The summed layer's values, read as an extra output of both models.
    probes = []
    for probed in (graph, split.model):
        summed = next(t.index for t in probed.main.tensors if t.name == split.summed_tensor)
        probes.append(oracle.run(with_outputs(probed, [summed]).data, inputs, settings=settings).outputs[-1])
    probe_before, probe_after = probes
    report = {
        "model": str(model),
        "output": str(out),
        "parts": split.parts,
        "headroom": headroom,
        "summed_tensor": split.summed_tensor,
        "stock_tflm_head_bytes": before.head_bytes,
        "best_order_head_bytes": split.original_head_bytes,
        "tflm_head_bytes": after.head_bytes,
        "layer_max_difference": _max_difference(probe_before, probe_after),
        "output_max_difference": max(_max_difference(a, b) for a, b in zip(before.outputs, after.outputs)),
    }
    if json_output:
        print(json.dumps(report))
        return
    table = TerminalTable(
        Column(),
        Column("arena head", Kind.FIGURE),
        title=f"{model.name} -> {out.name}: {split.parts} channel groups",
        title_justify="left",
    )
    table.add_row("stock TFLM", f"{before.head_bytes:,} B")
    table.add_row("best order, unpartitioned", f"{split.original_head_bytes:,} B")
    table.add_row("partitioned (TFLM)", f"{after.head_bytes:,} B", style="bold green")
    console = Console()
    console.print(table)
    console.print(
        f"{split.summed_tensor}: max difference {report['layer_max_difference']} (summed partials); "
        f"model outputs: max difference {report['output_max_difference']}"
    )


def _max_difference(a: np.ndarray, b: np.ndarray) -> float | int:
    """In the tensor's own units: LSB for integer tensors."""
    if a.dtype.kind in "iu":
        return int(np.abs(a.astype(np.int64) - b.astype(np.int64)).max(initial=0))
    return float(np.abs(a.astype(np.float64) - b.astype(np.float64)).max(initial=0.0))
