"""Measure a model on a board: reproducible inputs and the host TFLM's outputs on them (lowtide.oracle), the firmware
built for the board (lowtide.pipeline.firmware) and lowtide's predictions of its arena (lowtide.runtimes), all
handed to the device layer, which runs the model on the board and compares (lowtide.device.measure).

`measure()` is the Python API (the pytest HIL plugin calls it); `lowtide measure` is its command line.
"""

from __future__ import annotations

import contextlib
import dataclasses
import tempfile
from pathlib import Path

from lowtide import oracle
from lowtide.device import locking
from lowtide.device.boards import DEFAULT_WAIT_S, Board, Connection, board_for_spec, get_board
from lowtide.device.drivers import cycle_model
from lowtide.device.drivers.platformio import FirmwareImage
from lowtide.device.measure import Expected, MeasureProgress, MeasureResult, WaitNotice, run_on_board
from lowtide.device.spec import with_probe
from lowtide.device.static_ram import StaticRamSplit, static_ram_split
from lowtide.errors import LowtideError
from lowtide.model.ir import Graph
from lowtide.pipeline.firmware import (
    IN_BSS,
    ArenaRegions,
    board_firmware,
    predicted_arena,
    predicted_head_and_used,
    requested_regions,
)
from lowtide.runtimes import FirmwareRuntime, planned_head_bytes, runtime_for, runtime_named
from lowtide.settings import Settings, settings_or_read
from lowtide.validation import load_checked


def measure(
    model_path: str | Path,
    board: str,
    port: str | None = None,
    *,
    iterations: int = 10,
    warmup: int = 1,
    timeout: float = 10.0,
    seed: int = 0,
    profile_ops: bool = False,
    progress: MeasureProgress | None = None,
    runtime: str | None = None,
    lock_timeout: float = DEFAULT_WAIT_S,
    take_lock: bool = True,
    on_wait: WaitNotice | None = None,
    probe: str | None = None,
    settings: Settings | None = None,
    regions: ArenaRegions = IN_BSS,
) -> MeasureResult:
    """Measure `model_path` on `board` (see lowtide.device.boards), run by `runtime` (None: the board's own).
    `timeout` bounds every wait for the board; `lock_timeout` the wait for a board another run or labgrid client
    holds. `take_lock=False`: the caller holds the board's lock (`Board.lock_resource`) already, as the HIL plugin
    does for a whole session. `probe`: the USB serial number of a real board's probe (`--probe`), over its board
    file's `probe_serial`. `settings`: the command's (the environment's when none are given). `regions`: where
    TFLM's arenas go (`--arena-region`, `--persistent-region`)."""
    if iterations < 1 or warmup < 0:
        raise LowtideError(f"need iterations >= 1 and warmup >= 0, got {iterations} and {warmup}")
    settings = settings_or_read(settings)
    model_path = Path(model_path)
    target = get_board(board)
    chosen = runtime_named(runtime) if runtime else None
    # A board without a board file runs what it runs (the host-tflm board: TFLM, on the declared shapes).
    relies_on = runtime_for(target.spec.runtime, chosen).relies_on if target.spec else frozenset()
    loaded = load_checked(model_path, settings, relies_on)
    if probe is not None:
        if target.spec is None:
            raise LowtideError(f"--probe picks a board lowtide flashes: --board {target.name} is not one")
        target = board_for_spec(with_probe(target.spec, probe))
    resource = target.lock_resource(port, settings) if take_lock else None
    what = f"board {target.name}" + (f" on {port}" if port else "")

    def lock_wait(holder: locking.LockHolder | None) -> None:
        if on_wait:
            on_wait("lock", holder.describe() if holder else "another run")

    # Without a lock (the caller holds it, or the board needs none) the run is the same, only not waited for.
    held = (
        contextlib.nullcontext()
        if resource is None
        else locking.locked(resource, lock_timeout, what, lock_wait, lock_dir=settings.lock_dir)
    )
    with held, tempfile.TemporaryDirectory(prefix="lowtide-cycles-") as scratch:
        timing, timing_warning = cycle_model.for_board(target.spec, Path(scratch) / "windows.txt", settings)
        result = _measure(
            target,
            loaded.graph,
            model_path,
            port,
            iterations,
            warmup,
            timeout,
            seed,
            profile_ops,
            progress,
            chosen,
            lock_timeout,
            on_wait,
            settings,
            regions,
            timing,
        )
    notes = (timing_warning,) if timing_warning else ()
    return dataclasses.replace(result, warnings=(*(w.warning for w in loaded.warnings), *notes))


def _measure(
    target: Board,
    graph: Graph,
    model_path: Path,
    port: str | None,
    iterations: int,
    warmup: int,
    timeout: float,
    seed: int,
    profile_ops: bool,
    progress: MeasureProgress | None,
    runtime: FirmwareRuntime | None,
    wait: float,
    on_wait: WaitNotice | None,
    settings: Settings,
    regions: ArenaRegions,
    timing: cycle_model.CycleModel | None,
) -> MeasureResult:
    inputs = oracle.random_inputs(graph, seed)
    outputs = oracle.run(graph.data, inputs, path=str(model_path), settings=settings).outputs
    if target.spec is not None:  # the board file's arena regions where none are given
        regions = requested_regions(target.spec, runtime_for(target.spec.runtime, runtime), regions)
    image = board_firmware(target, model_path, graph, runtime, settings, port, regions)  # refused if it cannot fit
    predicted = predicted_arena(target, graph, runtime, settings)
    head, used = predicted_head_and_used(predicted, regions) if predicted else (planned_head_bytes(graph, None), None)
    expected = Expected(
        model=str(model_path),
        model_sha256=graph.sha256,
        input_count=len(graph.main.inputs),
        output_count=len(graph.main.outputs),
        seed=seed,
        inputs=tuple(array.tobytes() for array in inputs),
        outputs=tuple(array.tobytes() for array in outputs),
        arena_planned_bytes=head,
        arena_predicted_used_bytes=used,
        # Only a board with a board file builds firmware.
        static_ram=(
            _static_ram(image, runtime_for(target.spec.runtime, runtime))
            if isinstance(image, FirmwareImage) and target.spec
            else None
        ),
    )
    place_wait = (lambda holder: on_wait("place", holder)) if on_wait else None
    connection = Connection(model_path, port, timeout, settings, image, wait, place_wait, timing)
    return run_on_board(
        target, connection, expected, iterations=iterations, warmup=warmup, profile_ops=profile_ops, progress=progress
    )


def _static_ram(image: FirmwareImage, runtime: FirmwareRuntime) -> StaticRamSplit:
    """The image's static RAM split; the slack the runtime paints past its arena is the harness's."""
    return static_ram_split(image.elf, image.static_ram_bytes, image.stack_bytes, runtime.arena_slack_bytes)
