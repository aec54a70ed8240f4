"""Measure a model on a board: upload reproducible inputs, run it, read its figures and outputs, and check the outputs
against the host TFLM interpreter on the same inputs.

`measure()` is the Python API (the pytest HIL plugin calls it); `lowtide measure` is its command line.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from lowtide import oracle
from lowtide.device import locking
from lowtide.device.boards import DEFAULT_WAIT_S, Board, board_for_spec, get_board
from lowtide.device.drivers.platformio import FirmwareImage
from lowtide.device.protocol import Counter, Hello, ReadRegion, Result
from lowtide.device.session import BoardReset, DeviceSession
from lowtide.device.spec import with_probe
from lowtide.device.static_ram import StaticRamSplit, static_ram_split
from lowtide.errors import LowtideError
from lowtide.model.ir import Graph
from lowtide.runtimes import FirmwareRuntime, planned_head_bytes, runtime_named
from lowtide.validation import load_model

# (phase, done, total): phase is "upload" (bytes) or "run" (invocations, warm-up included)
MeasureProgress = Callable[[str, int, int], None]
_RESET_RETRIES = 1  # a board that restarts mid-session is measured again from the start, once
# (phase, who): phase "lock" (another run on this machine holds the board) or "place" (another labgrid client)
WaitNotice = Callable[[str, str], None]
_COUNTER_UNITS = {Counter.CYCLES: "cycles", Counter.INSTRUCTIONS: "instructions"}


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
    arena_planned_bytes: int  # lowtide's prediction of TFLM's arena head (lowtide.runtimes.planned_head_bytes)
    board_planned_bytes: int | None  # the arena head as the board's runtime planned it
    arena_used_bytes: int | None  # what the board's allocator reports as used
    arena_high_water_bytes: int | None  # painted high-water mark; None where the board cannot paint
    latency: Latency | None  # microseconds of real time; None on an emulator, whose time is not real
    latency_cycles: Latency | None  # the board's counter: cycles, or an emulator's instructions; None without one
    warmup: int
    seed: int
    outputs_match: bool  # every output byte-identical to lowtide.oracle.run on the same inputs
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
        return data


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
) -> MeasureResult:
    """Measure `model_path` on `board` (see lowtide.device.boards), run by `runtime` (None: the board's own).
    `timeout` bounds every wait for the board; `lock_timeout` the wait for a board another run or labgrid client
    holds. `take_lock=False`: the caller holds the board's lock (`Board.lock_resource`) already, as the HIL plugin
    does for a whole session. `probe`: the USB serial number of a real board's probe (`--probe`), over its board
    file's `probe_serial`."""
    if iterations < 1 or warmup < 0:
        raise LowtideError(f"need iterations >= 1 and warmup >= 0, got {iterations} and {warmup}")
    model_path = Path(model_path)
    graph = load_model(model_path)
    target = get_board(board)
    chosen = runtime_named(runtime) if runtime else None
    if probe is not None:
        if target.spec is None:
            raise LowtideError(f"--probe picks a board lowtide flashes: --board {target.name} is not one")
        target = board_for_spec(with_probe(target.spec, probe))
    resource = target.lock_resource(port) if take_lock else None
    if resource is None:
        return _measure(target, graph, model_path, port, iterations, warmup, timeout, seed, profile_ops, progress,
                        chosen, lock_timeout, on_wait)
    what = f"board {target.name}" + (f" on {port}" if port else "")

    def lock_wait(holder: locking.LockHolder | None) -> None:
        if on_wait:
            on_wait("lock", holder.describe() if holder else "another run")

    with locking.locked(resource, lock_timeout, what, lock_wait):
        return _measure(target, graph, model_path, port, iterations, warmup, timeout, seed, profile_ops, progress,
                        chosen, lock_timeout, on_wait)


def _measure(target: Board, graph: Graph, model_path: Path, port: str | None, iterations: int, warmup: int,
             timeout: float, seed: int, profile_ops: bool, progress: MeasureProgress | None,
             runtime: FirmwareRuntime | None, wait: float, on_wait: WaitNotice | None) -> MeasureResult:
    model = model_path.read_bytes()
    inputs = oracle.random_inputs(graph, seed)
    expected = oracle.run(model, inputs, path=str(model_path)).outputs
    image = target.build(model_path, runtime)  # boards lowtide builds for: refused here if the model cannot fit
    predicted = target.predicted_arena(graph, runtime)
    planned = planned_head_bytes(graph, predicted)
    place_wait = (lambda holder: on_wait("place", holder)) if on_wait else None
    with target.connect(model_path, port, timeout, image, runtime, wait, place_wait) as link:
        session = DeviceSession(link, timeout)  # one session across a restart: sequence numbers keep counting
        for attempt in range(_RESET_RETRIES + 1):
            try:
                hello = session.hello()
                _check_hello(hello, graph, link.name, target, iterations)
                for index, array in enumerate(inputs):
                    session.set_input(index, array.tobytes(), _phase(progress, "upload"))
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
    if len(outputs) != len(expected):
        raise LowtideError(f"board returned {len(outputs)} outputs, the model has {len(expected)}", link.name)
    mismatched = tuple(i for i, (got, want) in enumerate(zip(outputs, expected)) if got != want.tobytes())
    return MeasureResult(
        model=str(model_path),
        model_sha256=graph.sha256,
        board=hello.board,
        runtime=hello.runtime,
        port=link.name,
        protocol_version=hello.protocol_version,
        clock_hz=hello.clock_hz or None,
        arena_capacity_bytes=hello.arena_capacity_bytes,
        arena_planned_bytes=planned,
        board_planned_bytes=result.arena_planned_bytes,
        arena_used_bytes=result.arena_used_bytes,
        arena_high_water_bytes=result.arena_high_water_bytes,
        latency=_latency("us", result.us_min, result.us_median, result.us_max, iterations),
        latency_cycles=_latency(_COUNTER_UNITS.get(hello.counter, ""), result.counter_min, result.counter_median,
                                result.counter_max, iterations),
        warmup=warmup,
        seed=seed,
        outputs_match=not mismatched,
        mismatched_outputs=mismatched,
        op_cycles=op_cycles,
        damaged_frames=session.damaged_frames,
        resends=session.resends,
        static_ram_bytes=image.static_ram_bytes if image else None,
        flash_bytes=image.flash_bytes if image else None,
        # Only a board with a board file builds an image.
        static_ram=_static_ram(image, runtime or target.spec.runtime) if image and target.spec else None,
        stack_high_water_bytes=result.stack_high_water_bytes,
        stack_size_bytes=result.stack_size_bytes,
        arena_predicted_used_bytes=predicted.used_bytes if predicted else None,
    )


def _static_ram(image: FirmwareImage, runtime: FirmwareRuntime) -> StaticRamSplit:
    """The image's static RAM split; the slack the runtime paints past its arena is the harness's."""
    return static_ram_split(image.elf, image.static_ram_bytes, image.stack_bytes, runtime.arena_slack_bytes)


def _phase(progress: MeasureProgress | None, phase: str) -> Callable[[int, int], None] | None:
    return (lambda done, total: progress(phase, done, total)) if progress else None


def _check_hello(hello: Hello, graph: Graph, port: str, board: Board, iterations: int) -> None:
    if hello.model_sha256.hex() != graph.sha256:
        raise LowtideError(
            f"board runs another model (sha256 {hello.model_sha256.hex()[:16]}..., "
            f"{graph.path} is {graph.sha256[:16]}...)",
            port,
        )
    if not hello.model_ready:
        raise LowtideError(
            f"board could not allocate the model's tensors in its {hello.arena_capacity_bytes}-byte arena", port
        )
    if (hello.input_count, hello.output_count) != (len(graph.main.inputs), len(graph.main.outputs)):
        raise LowtideError(
            f"board reports {hello.input_count} inputs and {hello.output_count} outputs, the model has "
            f"{len(graph.main.inputs)} and {len(graph.main.outputs)}",
            port,
        )
    if iterations > hello.max_iterations:
        raise LowtideError(f"board {hello.board} runs at most {hello.max_iterations} measured invocations at a time "
                           f"(its HELLO says so); ask for fewer than {iterations}", port)
    if board.spec is not None and hello.clock_hz != board.spec.clock_hz:
        raise LowtideError(f"board reports a {hello.clock_hz:,} Hz clock, its board file {board.spec.path.name} "
                           f"says {board.spec.clock_hz:,} Hz: correct clock_hz, or the firmware's clock setup", port)


def _latency(unit: str, low: int | None, median: int | None, high: int | None, iterations: int) -> Latency | None:
    if low is None or median is None or high is None or not unit:
        return None
    return Latency(unit, low, median, high, iterations)


def _read_op_cycles(session: DeviceSession, result: Result) -> tuple[int, ...] | None:
    if not result.op_cycles_count:
        return None
    data = session.read(ReadRegion.OP_CYCLES, 0, 8 * result.op_cycles_count)
    return tuple(int.from_bytes(data[i : i + 8], "little") for i in range(0, len(data), 8))
