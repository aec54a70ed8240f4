"""A board's firmware with a model in it: whether the model fits the board, checked before building from the
runtime's estimates (lowtide.runtimes) and after it from the ELF, the project written (lowtide.project) and built or
uploaded by the PlatformIO driver (lowtide.device.drivers.platformio), which only runs PlatformIO.

A model that cannot fit stops with its numbers rather than with a linker log, and one whose TFLM arena is still to be
sized stops before TFLM is built for the core (`FirmwareRuntime.estimate_before_sizing`).

The host-tflm board's image is no firmware but its program (`host_program`): lowtide.pipeline.host_tflm, the host
TFLM behind the protocol, started with the model.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from lowtide.device.boards import Board, HostTflmBoard
from lowtide.device.drivers.platformio import (
    FirmwareImage,
    build_project,
    check_buildable,
    check_registry_reachable,
    read_firmware_image,
    upload_image,
    upload_settings,
)
from lowtide.device.drivers.process import HostProgram
from lowtide.device.spec import BoardSpec
from lowtide.errors import LowtideError
from lowtide.model.ir import Graph
from lowtide.pipeline import host_tflm
from lowtide.project import FirmwareProject, ProtocolDefines, cached_project_dir, project_files
from lowtide.runtimes import FirmwareRuntime, FootprintEstimate, runtime_for
from lowtide.settings import Settings, settings_or_read
from lowtide.tflm.sizer import Arena32
from lowtide.validation import load_model


def capacity(spec: BoardSpec, what: str, nbytes: int) -> str:
    return f"{what} of {spec.name} ({nbytes:,} B = {nbytes / 1024:,.0f} KiB)"


def check_estimate_fits(spec: BoardSpec, estimate: FootprintEstimate) -> None:
    """Refuses, with the numbers, a model whose firmware cannot fit `spec`'s SRAM or flash."""
    problems = []
    if estimate.arena_bytes + estimate.static_ram_bytes > spec.sram_bytes:
        problems.append(
            f"arena {estimate.arena_bytes:,} B + static RAM {estimate.static_ram_bytes:,} B > "
            + capacity(spec, "SRAM", spec.sram_bytes)
        )
    if estimate.image_bytes > spec.flash_bytes:
        problems.append(
            f"constant data and code {estimate.image_bytes:,} B > " + capacity(spec, "flash", spec.flash_bytes)
        )
    if problems:
        raise LowtideError(f"{estimate.model}: {'; '.join(problems)}")


def check_image_fits(spec: BoardSpec, image: FirmwareImage, model: str) -> None:
    """Refuses, with the numbers, a built image whose sections do not fit `spec`'s SRAM or flash."""
    problems = []
    if image.ram_bytes > spec.sram_bytes:
        problems.append(
            f"static RAM {image.static_ram_bytes:,} B + stack {image.stack_bytes:,} B > "
            + capacity(spec, "SRAM", spec.sram_bytes)
        )
    if image.flash_bytes > spec.flash_bytes:
        problems.append(f"image {image.flash_bytes:,} B > " + capacity(spec, "flash", spec.flash_bytes))
    if problems:
        raise LowtideError(f"{model}: the built firmware does not fit: {'; '.join(problems)}", image.elf)


def firmware_project(
    spec: BoardSpec,
    model: Graph | None,
    runtime: FirmwareRuntime,
    tflm_arena: Arena32 | None = None,
    project_dir: Path | None = None,
    protocol: ProtocolDefines | None = None,
    *,
    settings: Settings,
) -> FirmwareProject:
    """The project for `spec` with `model` in it (none: a model-less image; validated for what `runtime` relies on)
    run by `runtime`, built: in the user
    cache unless `project_dir` names a folder of the user's. Runs for the same content wait for one build. `protocol`:
    the image answers that protocol instead of lowtide's own (MLPerf Tiny's grammar: lowtide.mlperf)."""
    check_buildable(spec, settings)
    # The project names its env, not the board: boards that run one image (nucleo-f446re and qemu-nucleo-f446re)
    # then share one project in the cache, built once.
    files = project_files(
        spec.platformio_env,
        spec.platformio_config,
        f"PlatformIO env {spec.platformio_env}",
        model,
        runtime,
        spec.core,
        tflm_arena.arena_bytes if tflm_arena else None,
        settings,
        protocol,
    )
    directory = (
        project_dir.resolve()
        if project_dir
        else cached_project_dir(spec.platformio_env, runtime.name, model, files, settings)
    )
    project = FirmwareProject(directory, spec.platformio_env, runtime.name, model.name if model else None)
    what = f"building the {spec.platformio_env} firmware" + (f" for {model.name}" if model else "")
    build_project(project, files, reuse_built=project_dir is None, what=what, settings=settings)
    return project


def build_board_firmware(
    spec: BoardSpec,
    model_path: Path,
    runtime: FirmwareRuntime | None = None,
    project_dir: Path | None = None,
    protocol: ProtocolDefines | None = None,
    graph: Graph | None = None,
    settings: Settings | None = None,
) -> FirmwareImage:
    """The firmware for `spec` with the model in it, run by `runtime` (default: the board's): refused before
    building if the model cannot fit the board, built (or found built), and checked against the board's memory
    from its ELF. `graph`: the model at `model_path`, when the caller has already read and validated it."""
    settings = settings_or_read(settings)
    runtime = runtime_for(spec.runtime, runtime)
    graph = graph if graph is not None else load_model(model_path, settings, runtime.relies_on)
    early = runtime.estimate_before_sizing(graph)
    if early is not None:
        # Before TFLM is built to size the arena: the head alone and the model file must fit.
        check_estimate_fits(spec, early)
        check_registry_reachable(spec, settings)
    tflm_arena = runtime.predict_arena(graph, spec.core, settings)
    check_estimate_fits(spec, runtime.estimate_footprint(graph, tflm_arena))
    project = firmware_project(spec, graph, runtime, tflm_arena, project_dir, protocol, settings=settings)
    built = read_firmware_image(project.elf, spec.platformio_env, settings)
    image = dataclasses.replace(built, project_dir=project.directory)
    check_image_fits(spec, image, model_path.stem)
    return image


def upload_firmware(
    spec: BoardSpec,
    model_path: Path,
    port: str,
    runtime: FirmwareRuntime | None = None,
    protocol: ProtocolDefines | None = None,
    *,
    settings: Settings,
) -> None:
    """The firmware for `spec` (built, or found built) uploaded to the board on `port` by the env's own uploader;
    for an ST board, OpenOCD on that board's ST-LINK (lowtide.device.drivers.platformio.upload_probe), which is
    checked before building."""
    variables = upload_settings(spec, port, settings)
    image = build_board_firmware(spec, model_path, runtime, protocol=protocol, settings=settings)
    upload_image(spec, image, port, variables, model_path.name, settings)


def board_firmware(
    board: Board,
    model_path: Path,
    graph: Graph,
    runtime: FirmwareRuntime | None,
    settings: Settings,
    port: str | None = None,
) -> FirmwareImage | HostProgram | None:
    """What `board` runs for `model_path`: the firmware built with `runtime` (None: the board file's) and checked
    against the board's memory; the host-tflm board's program, serving on `port` (None: its default); None for a
    board flashed beforehand."""
    if board.spec is None:
        if runtime is not None:
            raise LowtideError(
                f"--board {board.name} runs whatever it runs: --runtime applies to boards lowtide builds firmware for"
            )
        return host_program(model_path, port) if isinstance(board, HostTflmBoard) else None
    return build_board_firmware(board.spec, Path(model_path), runtime, graph=graph, settings=settings)


def host_program(model_path: Path, port: str | None) -> HostProgram:
    """The host-tflm board's process: lowtide.pipeline.host_tflm with the model, on `port` (None: its default)."""
    serve_on = ("--port", port) if port else ()
    return HostProgram((sys.executable, "-m", host_tflm.__name__, "--model", str(model_path), *serve_on))


def predicted_arena(board: Board, graph: Graph, runtime: FirmwareRuntime | None, settings: Settings) -> Arena32 | None:
    """lowtide's prediction of the TFLM arena `board`'s firmware will report for `graph`; None where it runs no TFLM
    built by lowtide."""
    if board.spec is None:
        return None
    return runtime_for(board.spec.runtime, runtime).predict_arena(graph, board.spec.core, settings)
