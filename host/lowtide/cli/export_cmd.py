"""`lowtide export`: a model as a library of the user's own firmware (the TFLM library the TFLM runtimes' libraries
link: `lowtide tflm-library`, lowtide.cli.tflm_cmd).

    lowtide export MODEL --library lib/kws                     # compiled runtime: C99, no other dependency
    lowtide export MODEL --library lib/kws --runtime tflm --board nucleo-f446re   # TFLM's arena for the board's core
    lowtide tflm-library lib/tflite-micro --core cortex-m4f --ops-from MODEL        # what `tflite-micro` names

The folders are PlatformIO and Arduino libraries, CMake subdirectories and Zephyr modules, with no path of this
machine in them (lowtide.library; docs/firmware.md, "Your own firmware: the model as a library").
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from lowtide.cli.application import app
from lowtide.device.spec import get_board_spec
from lowtide.errors import LowtideError
from lowtide.library import LIBRARY_SPEC, default_prefix, library_files, write_library_folder
from lowtide.runtimes import runtime_named
from lowtide.settings import read_settings
from lowtide.tflm import DEFAULT_CORE
from lowtide.validation import load_model


def _core(core: str | None, board: str | None) -> str:
    if core and board:
        raise LowtideError("give --core or --board, not both")
    return get_board_spec(board).core if board else core or DEFAULT_CORE


@app.command("export")
def export_command(
    model: Annotated[Path, typer.Argument(help=".tflite model (lowtide optimize's output, or any model)")],
    library: Annotated[Path, typer.Option("--library", help="the library folder to write (new or empty)")],
    runtime: Annotated[str, typer.Option("--runtime", help="compiled, tflm or tflm-cmsis-nn")] = "compiled",
    prefix: Annotated[
        str | None, typer.Option("--prefix", help="C prefix of the API (default: from the model's file name)")
    ] = None,
    core: Annotated[
        str | None, typer.Option("--core", help=f"the core TFLM's arena is sized for ({DEFAULT_CORE})")
    ] = None,
    board: Annotated[str | None, typer.Option("--board", help="or the core of this board")] = None,
    json_output: Annotated[bool, typer.Option("--json", help="Print one JSON object")] = False,
) -> None:
    """Write MODEL as a library of your own firmware: the model's code on RUNTIME, one small C API with the arena
    inside, and PlatformIO, Arduino, CMake and Zephyr manifests."""
    settings = read_settings()
    chosen = runtime_named(runtime)
    core_name = _core(core, board)
    graph = load_model(model, settings)
    if not chosen.runs_on(core_name):
        raise LowtideError(f"the {chosen} runtime does not run on {core_name}")
    name = prefix or default_prefix(graph)
    files = library_files(graph, chosen, name, core_name, settings)  # raises before anything is written
    write_library_folder(library, files, LIBRARY_SPEC)
    spec = json.loads(files[LIBRARY_SPEC])
    report = {"library": str(library), "files": sorted(files), **spec}
    if json_output:
        print(json.dumps(report))
        return
    arena = spec["arena"]
    console = Console()
    console.print(f"{model.name} -> {library} ({chosen}, prefix {name}): {len(files)} files")
    console.print(
        f"arena {arena['arena_bytes']:,} B inside the library (head {arena['head_bytes']:,} B, "
        f"tail {arena['tail_bytes']:,} B), static state {arena['state_bytes']:,} B"
    )
    if spec["tflm_kernels"]:
        console.print(
            f"links TFLM (`tflite-micro`): lowtide tflm-library DIR --core {core_name} "
            f"--kernels {spec['tflm_kernels']} --ops-from {model}"
        )
