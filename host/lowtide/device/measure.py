"""Measure a model on a board: upload the inputs, run it, read its figures and outputs, and compare the outputs
with the ones expected of it.

The device layer is handed everything it measures against (`Expected`: the host TFLM's outputs on the same inputs,
lowtide's predictions of the arena) and the image it runs (`Connection.image`); lowtide.pipeline.measure computes
them, builds the image and holds the board's lock. `run_on_board` is the measurement itself.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import asdict, dataclass

from lowtide.device.boards import Board, Connection
from lowtide.device.drivers.cycle_model import CycleModelInfo
from lowtide.device.drivers.platformio import FirmwareImage
from lowtide.device.protocol import Counter, Hello, ReadRegion, Result
from lowtide.device.session import BoardReset, DeviceSession
from lowtide.device.static_ram import StaticRamSplit
from lowtide.errors import LowtideError

# (phase, done, total): phase is "upload" (bytes) or "run" (invocations, warm-up included)
MeasureProgress = Callable[[str, int, int], None]
_RESET_RETRIES = 1  # a board that restarts mid-session is measured again from the start, once
# (phase, who): phase "lock" (another run on this machine holds the board) or "place" (another labgrid client)
WaitNotice = Callable[[str, str], None]
_COUNTER_UNITS = {Counter.CYCLES: "cycles", Counter.INSTRUCTIONS: "instructions"}


@dataclass(frozen=True)
class Expected:
    """What a run on a board is checked and reported against, known before it: the model the board must run, the
    inputs uploaded and the outputs the host TFLM gave on them, and lowtide's predictions of the board's figures."""

    model: str  # the model's path, as given
    model_sha256: str
    input_count: int
    output_count: int
    seed: int  # of the reproducible inputs (lowtide.oracle.random_inputs)
    inputs: tuple[bytes, ...]
    outputs: tuple[bytes, ...]  # lowtide.oracle.run's on `inputs`
    arena_planned_bytes: int  # lowtide's prediction of TFLM's arena head (lowtide.runtimes.planned_head_bytes)
    # TFLM runtimes on emulated boards: lowtide's 32-bit prediction of the arena used (lowtide.tflm.sizer).
    arena_predicted_used_bytes: int | None = None
    static_ram: StaticRamSplit | None = None  # of the image lowtide built, split (lowtide.device.static_ram)


@dataclass(frozen=True)
class Latency:
    unit: str  # "us" (real time), "cycles" (at the board's clock) or "instructions" (an emulator's)
    min: int
    median: int  # the lower middle value when the count is even
    max: int
    iterations: int


@dataclass(frozen=True)
class MeasureResult:
    model: str
    model_sha256: str
    board: str  # as the board names itself in its HELLO
    runtime: str
    port: str
    protocol_version: int
    clock_hz: int | None  # the CPU clock the board reports
    arena_capacity_bytes: int
    arena_planned_bytes: int  # lowtide's prediction of TFLM's arena head (Expected.arena_planned_bytes)
    board_planned_bytes: int | None  # the arena head as the board's runtime planned it
    arena_used_bytes: int | None  # what the board's allocator reports as used
    arena_high_water_bytes: int | None  # painted high-water mark; None where the board cannot paint
    latency: Latency | None  # microseconds of real time; None on an emulator, whose time is not real
    latency_cycles: Latency | None  # the board's counter: cycles, or an emulator's instructions; None without one
    warmup: int
    seed: int
    outputs_match: bool  # every output byte-identical to the expected ones (Expected.outputs: the host TFLM's)
    mismatched_outputs: tuple[int, ...]
    op_cycles: tuple[int, ...] | None
    damaged_frames: int  # frames the host dropped for a bad CRC or encoding: a measure of the link
    resends: int
    # From the firmware image lowtide built (emulated boards); None for boards it did not build for.
    static_ram_bytes: int | None = None  # the ELF's .data + .bss: the arena, staging buffer and runtime state
    flash_bytes: int | None = None  # the ELF's loaded sections: code, weights, .data's initial values
    # static_ram_bytes split into the arena, the runtime's own globals and the measuring harness (device.static_ram)
    static_ram: StaticRamSplit | None = None
    # From RESULT: the deepest the stack went over the RUN (painted), of its size; None where the board cannot tell.
    stack_high_water_bytes: int | None = None
    stack_size_bytes: int | None = None
    # TFLM runtimes on emulated boards: lowtide's 32-bit prediction of arena_used_bytes (lowtide.tflm.sizer).
    arena_predicted_used_bytes: int | None = None
    # What the model was taken in with: problems only stages this measurement does not use refuse, one line each.
    warnings: tuple[str, ...] = ()
    # Emulated boards with a cycle model (lowtide.device.drivers.cycle_model): the modelled cycles of each measured
    # invocation, and what the model is and assumes; None without one.
    modelled_cycles: Latency | None = None
    cycle_model: CycleModelInfo | None = None

    @property
    def arena_tail_bytes(self) -> int | None:
        """The persistent part of the arena (TFLM's tail): used less the planned head."""
        if self.arena_used_bytes is None or self.board_planned_bytes is None:
            return None
        return self.arena_used_bytes - self.board_planned_bytes

    def to_json(self) -> dict:
        data = asdict(self)
        data["arena_tail_bytes"] = self.arena_tail_bytes
        data["mismatched_outputs"] = list(self.mismatched_outputs)
        data["op_cycles"] = list(self.op_cycles) if self.op_cycles is not None else None
        data["warnings"] = list(self.warnings)
        return data


def run_on_board(
    board: Board,
    connection: Connection,
    expected: Expected,
    *,
    iterations: int,
    warmup: int,
    profile_ops: bool = False,
    progress: MeasureProgress | None = None,
) -> MeasureResult:
    """Measure the model `expected` describes on `board`, reached as `connection` says: `iterations` measured
    invocations after `warmup` ones, each operator's counter too with `profile_ops`."""
    # The sizes of firmware lowtide built; a host program has none.
    image = connection.image if isinstance(connection.image, FirmwareImage) else None
    with board.connect(connection) as link:
        # One session across a restart: sequence numbers keep counting.
        session = DeviceSession(link, connection.timeout)
        for attempt in range(_RESET_RETRIES + 1):
            try:
                hello = session.hello()
                _check_hello(hello, expected, link.name, board, iterations)
                for index, data in enumerate(expected.inputs):
                    session.set_input(index, data, _phase(progress, "upload"))
                result = session.run(warmup, iterations, profile_ops, _phase(progress, "run"))
                outputs = [
                    session.read(ReadRegion.OUTPUT, i, summary.nbytes) for i, summary in enumerate(result.outputs)
                ]
                op_cycles = _read_op_cycles(session, result) if profile_ops else None
                break
            except BoardReset:
                if attempt == _RESET_RETRIES:
                    raise
    for index, (data, summary) in enumerate(zip(outputs, result.outputs)):
        if zlib.crc32(data) != summary.crc32:
            raise LowtideError(f"output {index} read from the board does not match the digest it reported", link.name)
    if len(outputs) != len(expected.outputs):
        raise LowtideError(f"board returned {len(outputs)} outputs, the model has {len(expected.outputs)}", link.name)
    mismatched = tuple(i for i, (got, want) in enumerate(zip(outputs, expected.outputs)) if got != want)
    return MeasureResult(
        model=expected.model,
        model_sha256=expected.model_sha256,
        board=hello.board,
        runtime=hello.runtime,
        port=link.name,
        protocol_version=hello.protocol_version,
        clock_hz=hello.clock_hz or None,
        arena_capacity_bytes=hello.arena_capacity_bytes,
        arena_planned_bytes=expected.arena_planned_bytes,
        board_planned_bytes=result.arena_planned_bytes,
        arena_used_bytes=result.arena_used_bytes,
        arena_high_water_bytes=result.arena_high_water_bytes,
        latency=_latency("us", result.us_min, result.us_median, result.us_max, iterations),
        latency_cycles=_latency(
            _COUNTER_UNITS.get(hello.counter, ""),
            result.counter_min,
            result.counter_median,
            result.counter_max,
            iterations,
        ),
        warmup=warmup,
        seed=expected.seed,
        outputs_match=not mismatched,
        mismatched_outputs=mismatched,
        op_cycles=op_cycles,
        damaged_frames=session.damaged_frames,
        resends=session.resends,
        static_ram_bytes=image.static_ram_bytes if image else None,
        flash_bytes=image.flash_bytes if image else None,
        static_ram=expected.static_ram,
        stack_high_water_bytes=result.stack_high_water_bytes,
        stack_size_bytes=result.stack_size_bytes,
        arena_predicted_used_bytes=expected.arena_predicted_used_bytes,
        modelled_cycles=_modelled_cycles(connection, iterations),
        cycle_model=connection.cycle_model.info if connection.cycle_model else None,
    )


def _phase(progress: MeasureProgress | None, phase: str) -> Callable[[int, int], None] | None:
    return (lambda done, total: progress(phase, done, total)) if progress else None


def _check_hello(hello: Hello, expected: Expected, port: str, board: Board, iterations: int) -> None:
    if hello.model_sha256.hex() != expected.model_sha256:
        raise LowtideError(
            f"board runs another model (sha256 {hello.model_sha256.hex()[:16]}..., "
            f"{expected.model} is {expected.model_sha256[:16]}...)",
            port,
        )
    if not hello.model_ready:
        raise LowtideError(
            f"board could not allocate the model's tensors in its {hello.arena_capacity_bytes}-byte arena", port
        )
    if (hello.input_count, hello.output_count) != (expected.input_count, expected.output_count):
        raise LowtideError(
            f"board reports {hello.input_count} inputs and {hello.output_count} outputs, the model has "
            f"{expected.input_count} and {expected.output_count}",
            port,
        )
    if iterations > hello.max_iterations:
        raise LowtideError(
            f"board {hello.board} runs at most {hello.max_iterations} measured invocations at a time "
            f"(its HELLO says so); ask for fewer than {iterations}",
            port,
        )
    if board.spec is not None and hello.clock_hz != board.spec.clock_hz:
        raise LowtideError(
            f"board reports a {hello.clock_hz:,} Hz clock, its board file {board.spec.path.name} "
            f"says {board.spec.clock_hz:,} Hz: correct clock_hz, or the firmware's clock setup",
            port,
        )


def _latency(unit: str, low: int | None, median: int | None, high: int | None, iterations: int) -> Latency | None:
    if low is None or median is None or high is None or not unit:
        return None
    return Latency(unit, low, median, high, iterations)


def _modelled_cycles(connection: Connection, iterations: int) -> Latency | None:
    """The cycle model's figures for the last `iterations` windows: the measured invocations (the warm-up ones, and
    a run a board restart cut short, come first)."""
    if connection.cycle_model is None:
        return None
    windows = connection.cycle_model.read_windows()
    if len(windows) < iterations:
        raise LowtideError(
            f"the cycle model saw {len(windows)} timed invocations, the board ran {iterations}: "
            "the firmware lacks its timing marks (rebuild it with this lowtide)",
            connection.cycle_model.windows,
        )
    cycles = sorted(window.cycles for window in windows[-iterations:])
    return Latency("cycles", cycles[0], cycles[(iterations - 1) // 2], cycles[-1], iterations)


def _read_op_cycles(session: DeviceSession, result: Result) -> tuple[int, ...] | None:
    if not result.op_cycles_count:
        return None
    data = session.read(ReadRegion.OP_CYCLES, 0, 8 * result.op_cycles_count)
    return tuple(int.from_bytes(data[i : i + 8], "little") for i in range(0, len(data), 8))
