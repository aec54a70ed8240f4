"""`lowtide tflm-get` and `lowtide tflm-build`: TFLite Micro's pinned sources, and its library for a core.

    lowtide tflm-get                         # export the pinned TFLM commit with TFLM's own exporter (internet)
    lowtide tflm-get --archive DIR           # offline: from the archives (tflm-ref-*.tar.gz, tflm-cmsis-nn-*.tar.gz)
    lowtide tflm-build --core cortex-m4f     # compile TFLM for a core ahead of time (once per machine)
    lowtide tflm-library DIR --core cortex-m4f --ops-from MODEL   # it as the `tflite-micro` library of your firmware

Both put what they make in the user cache. tflm-build compiles the framework, the kernel helpers and the kernels of
the operators named, so that later builds, measurements and 32-bit arena predictions take seconds."""

from __future__ import annotations

import contextlib
import json
from functools import partial
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from lowtide.cli.application import app
from lowtide.cli.progress import progress_bars
from lowtide.library import TFLM_LIBRARY_SPEC, tflm_library_files, write_library_folder
from lowtide.settings import Settings, read_settings
from lowtide.storage import cache_dir
from lowtide.tflm import DEFAULT_CORE
from lowtide.tflm.build import build_library, core_named
from lowtide.tflm.tree import TFLM_COMMIT, KernelSet, export_from_repository, install_archives
from lowtide.validation import load_model


@app.command("tflm-get")
def tflm_get(
    archive: Annotated[
        list[Path], typer.Option(help="offline: an archive of the trees, or a folder holding them (repeat for several)")
    ] = [],  # noqa: B006
    json_output: Annotated[bool, typer.Option("--json", help="Print one JSON object")] = False,
) -> None:
    """Get TFLM's sources at the commit lowtide is pinned to, into the user cache (the tflm runtimes and the exact
    32-bit arena need them)."""
    settings = read_settings()
    if archive:
        trees = install_archives(archive, settings)
    else:
        log = cache_dir(settings, "tflm") / "tflm-get.log"
        status = Console(stderr=True).status(f"exporting TFLM {TFLM_COMMIT[:7]} with its own exporter (log: {log})")
        with contextlib.nullcontext() if json_output else status:
            trees = export_from_repository(log, settings)
    if json_output:
        print(json.dumps({"commit": TFLM_COMMIT, "trees": [str(t) for t in trees]}))
    else:
        for tree in trees:
            Console().print(f"TFLM {TFLM_COMMIT[:7]}: {tree}")


def _opcodes(op: list[str], ops_from: list[Path], settings: Settings) -> list[str]:
    """The operators named, and those of every model in `ops_from` (files, or folders of .tflite files)."""
    opcodes = set(op)
    for path in ops_from:
        for model in sorted(path.glob("*.tflite")) if path.is_dir() else [path]:
            opcodes |= {o.opcode for sg in load_model(model, settings).subgraphs for o in sg.operators}
    return sorted(opcodes)


@app.command("tflm-build")
def tflm_build(
    kernels: Annotated[list[KernelSet], typer.Option(help="kernel sets to build (repeat for several)")] = [  # noqa: B006
        KernelSet.REFERENCE
    ],
    core: Annotated[list[str], typer.Option(help="cores to build for (repeat for several)")] = [DEFAULT_CORE],  # noqa: B006
    op: Annotated[list[str], typer.Option(help="also the kernels of these builtin operators, e.g. CONV_2D")] = [],  # noqa: B006
    ops_from: Annotated[
        list[Path],
        typer.Option("--ops-from", help="also the kernels of every operator in these .tflite files or folders of them"),
    ] = [],  # noqa: B006
    json_output: Annotated[bool, typer.Option("--json", help="Print one JSON object instead of progress")] = False,
) -> None:
    """Build TFLM from the pinned sources (lowtide tflm-get) for each core and kernel set, once per machine."""
    settings = read_settings()
    opcodes = _opcodes(op, ops_from, settings)
    built = []
    with progress_bars(disable=json_output) as bars:
        for core_name in core:
            for kernel_set in kernels:
                label = f"TFLM for {core_name}, {kernel_set.value} kernels"
                library = build_library(
                    kernel_set, core_named(core_name), opcodes, settings, progress=partial(bars.update, label)
                )
                built.append({"core": core_name, "kernels": kernel_set.value, "library": str(library.archive)})
    if json_output:
        print(json.dumps({"libraries": built}))
    else:
        for entry in built:
            Console().print(f"TFLM for {entry['core']}, {entry['kernels']} kernels: {entry['library']}")


@app.command("tflm-library")
def tflm_library(
    directory: Annotated[Path, typer.Argument(help="the library folder to write (new or empty)")],
    kernels: Annotated[KernelSet, typer.Option(help="TFLM's kernel set")] = KernelSet.REFERENCE,
    core: Annotated[str, typer.Option(help="the core to build TFLM for")] = DEFAULT_CORE,
    op: Annotated[list[str], typer.Option(help="the kernels of these builtin operators, e.g. CONV_2D")] = [],  # noqa: B006
    ops_from: Annotated[
        list[Path],
        typer.Option("--ops-from", help="the kernels of every operator in these .tflite files or folders of them"),
    ] = [],  # noqa: B006
    json_output: Annotated[bool, typer.Option("--json", help="Print one JSON object")] = False,
) -> None:
    """Write TFLM built for a core (its static library, headers and weak platform hooks) as the `tflite-micro`
    library that the libraries `lowtide export --runtime tflm` writes depend on: PlatformIO and CMake."""
    settings = read_settings()
    built = build_library(kernels, core_named(core), _opcodes(op, ops_from, settings), settings)
    write_library_folder(directory, tflm_library_files(built, kernels.value), TFLM_LIBRARY_SPEC)
    if json_output:
        print(json.dumps({"library": str(directory), "core": core, "kernels": kernels.value}))
    else:
        Console().print(f"TFLM for {core}, {kernels.value} kernels -> {directory} (the `tflite-micro` library)")
