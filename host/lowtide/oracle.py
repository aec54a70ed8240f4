"""Run a model in the host build of the real TFLite Micro interpreter (PyPI `tflite-micro`) and read its figures.

TFLM trusts its model: on a bad one it can crash with a signal, abort or loop forever, and it would take lowtide
with it. So every call here runs the interpreter in a child process forked for the call: a crash becomes one
LowtideError line ("TFLite Micro crashed (signal 11) while allocating tensors") and lowtide keeps running. The
child's file descriptor 2, where TFLM prints its log through MicroPrintf, goes to a file: the figures of
`print_allocations()` are read from it, and on a failure the line that explains it is folded into the error.
Results (numpy arrays included) come back pickled through a pipe.
"""

from __future__ import annotations

import faulthandler
import os
import pickle
import re
import select
import signal
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from lowtide.errors import LowtideError
from lowtide.model.ir import Graph
from lowtide.model.reader import read_model
from lowtide.model.validate import EVERY_RELIANCE, Reliance
from lowtide.settings import TIMEOUT_ENV, Settings, settings_or_read
from lowtide.text import escape
from lowtide.validation import refused_problems

_ALLOCATION_LINE = re.compile(r"Arena allocation (total|head|tail) (\d+) bytes")
_RECORD_LINE = re.compile(r"'([^']+)' used (\d+) bytes .*for (\d+) ")
# Host (64-bit) minus 32-bit MCU size of the per-tensor and per-operator structs in the tail.
_EVAL_TENSOR_SAVING = 24 - 12  # TfLiteEvalTensor
_NODE_SAVING = 64 - 32  # NodeAndRegistration
T = TypeVar("T")


@dataclass(frozen=True)
class ArenaFigures:
    """TFLM's RecordingMicroAllocator report."""

    total_bytes: int  # head + tail
    head_bytes: int  # non-persistent planned buffers (activations, scratch)
    tail_bytes: int  # persistent allocations (64-bit host structs)
    records: dict[str, tuple[int, int]]  # allocation kind -> (bytes, count)

    @property
    def mcu32_tail_bytes(self) -> int:
        """Estimated tail on a 32-bit MCU: the host tail less the pointer-size savings of the two structs TFLM
        allocates per tensor and per operator. Kernel op-data holding pointers also shrinks a little, so this
        errs high by a few bytes per operator."""
        eval_tensors = self.records.get("TfLiteEvalTensor data", (0, 0))[1]
        nodes = self.records.get("NodeAndRegistration struct", (0, 0))[1]
        return self.tail_bytes - eval_tensors * _EVAL_TENSOR_SAVING - nodes * _NODE_SAVING


@dataclass(frozen=True)
class OracleRun:
    arena: ArenaFigures  # after one invoke
    outputs: tuple[np.ndarray, ...]

    @property
    def head_bytes(self) -> int:
        return self.arena.head_bytes

    @property
    def total_bytes(self) -> int:
        return self.arena.total_bytes


def random_inputs(graph: Graph, seed: int = 0) -> list[np.ndarray]:
    """Inputs covering each input tensor's full value range, reproducible from `seed`. Each is drawn in its own
    type (floats through one float64 array), so memory stays within a few times the model's declared inputs,
    which the validator bounds."""
    rng = np.random.default_rng(seed)
    sg = graph.main
    arrays = []
    for t_index in sg.inputs:
        t = sg.tensors[t_index]
        dtype = np.dtype(t.dtype if t.dtype != "bool" else np.bool_)
        if dtype.kind in "iu":
            info = np.iinfo(dtype)
            arrays.append(rng.integers(info.min, info.max, size=t.shape, endpoint=True, dtype=dtype))
        elif dtype.kind == "b":
            arrays.append(rng.integers(0, 2, size=t.shape, dtype=np.uint8).view(np.bool_))
        else:
            arrays.append(rng.uniform(-1.0, 1.0, size=t.shape).astype(dtype))
    return arrays


def _arena_size(model: bytes, arena_size: int | None) -> int:
    # Larger than any shared model needs; TFLM only touches what it plans, so the size costs nothing.
    return arena_size or max(16 * len(model), 64 << 20)


# ---- in the child ------------------------------------------------------------------------------------------------
# The child tells the parent which phase it is in with one byte before each, so that a crash can be placed; its
# result follows a RESULT byte, pickled.
_PHASES = {
    b"L": "loading the model and allocating tensors",
    b"I": "invoking the model",
    b"F": "reporting the arena figures",
}
_RESULT = b"R"


class TflmChild:
    """The interpreter's side of one `isolated` call: `phase` announces each step to the parent."""

    def __init__(self, pipe: int, log: int):
        self.pipe, self.log = pipe, log

    def phase(self, code: bytes) -> None:
        os.write(self.pipe, code)

    def interpreter(self, model: bytes, arena_size: int):
        from tflite_micro.python.tflite_micro import runtime

        self.phase(b"L")
        return runtime.Interpreter.from_bytes(model, arena_size=arena_size)

    def invoke(self, interp) -> None:
        self.phase(b"I")
        interp.invoke()

    def allocations(self, interp) -> str:
        """What `print_allocations()` writes to fd 2, apart from the rest of the log."""
        self.phase(b"F")
        start = os.lseek(self.log, 0, os.SEEK_END)
        interp.print_allocations()
        end = os.lseek(self.log, 0, os.SEEK_END)
        return os.pread(self.log, end - start, start).decode("utf-8", "replace")


def isolated(work: Callable[[TflmChild], T], path: str, timeout_s: float) -> T:
    """`work` run in a forked child; its result (pickled), or LowtideError for a rejection, a crash or a hang.
    Everything lowtide does with the TFLM interpreter goes through here: the oracle's calls and the host-tflm
    board's runs. A child still running after `timeout_s` is killed: a model can make TFLM loop forever (a WHILE
    whose condition never fails)."""
    with tempfile.TemporaryFile() as log:
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: whatever happens, it leaves through os._exit, never back into the caller's code
            status = 1
            try:
                faulthandler.disable()  # a crash here is expected and reported by the parent, not dumped
                os.close(read_fd)
                os.dup2(log.fileno(), 2)
                try:
                    outcome: tuple[str, object] = ("ok", work(TflmChild(write_fd, log.fileno())))
                except Exception as exc:  # the interpreter refused the model or its inputs, or failed an operator
                    outcome = ("rejected", str(exc))
                payload = pickle.dumps(outcome, protocol=pickle.HIGHEST_PROTOCOL)
                os.write(write_fd, _RESULT)
                view = memoryview(payload)
                while view:
                    view = view[os.write(write_fd, view) :]
                status = 0
            finally:
                os._exit(status)
        os.close(write_fd)
        received, finished = b"", False
        try:
            received, finished = _read_all(read_fd, time.monotonic() + timeout_s)
        finally:
            os.close(read_fd)
            if not finished:
                os.kill(pid, signal.SIGKILL)
            _, status = os.waitpid(pid, 0)
        log.seek(0)
        log_text = log.read().decode("utf-8", "replace")
    phases, _, payload = received.partition(_RESULT)
    doing = _PHASES.get(phases[-1:], "starting")
    if not finished:
        raise LowtideError(
            f"TFLite Micro did not finish within {timeout_s:g} s while {doing} (set {TIMEOUT_ENV} to wait longer)", path
        )
    if os.WIFSIGNALED(status):
        raise LowtideError(
            f"TFLite Micro crashed (signal {os.WTERMSIG(status)}) while {doing}{_because(log_text)}", path
        )
    if not payload or os.WEXITSTATUS(status) != 0:
        raise LowtideError(
            f"TFLite Micro exited (status {os.WEXITSTATUS(status)}) while {doing}{_because(log_text)}", path
        )
    kind, value = pickle.loads(payload)
    if kind == "rejected":
        reason = _explaining_line(log_text) or (str(value).strip().splitlines() or ["unknown error"])[-1]
        raise LowtideError(f"TFLite Micro rejected the model: {escape(reason)}", path)
    return value


def _read_all(fd: int, deadline: float) -> tuple[bytes, bool]:
    """Everything the child writes until it closes the pipe, and whether it did before `deadline`."""
    chunks: list[bytes] = []
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
            return b"".join(chunks), False
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            return b"".join(chunks), True
        chunks.append(chunk)


# TFLM's own summary lines, printed after the line that says what went wrong.
_GENERIC_LOG = re.compile(
    r"(Failed starting model allocation|AllocateTensors\(\) failed|Invoke\(\) failed"
    r"|Node .* failed to (prepare|invoke)|Failed to allocate memory)",
    re.IGNORECASE,
)


def _explaining_line(log_text: str) -> str | None:
    """The log line that says why TFLM failed: the last specific one, skipping its generic summaries."""
    lines = [line.strip() for line in log_text.splitlines() if line.strip()]
    specific = [line for line in lines if not _GENERIC_LOG.search(line)]
    found = specific or lines
    return found[-1] if found else None


def _because(log_text: str) -> str:
    line = _explaining_line(log_text)
    return f": {escape(line)}" if line else ""


def _figures(report: str, path: str) -> ArenaFigures:
    figures = {kind: int(value) for kind, value in _ALLOCATION_LINE.findall(report)}
    if set(figures) != {"total", "head", "tail"}:
        raise LowtideError("TFLite Micro printed no arena figures", path)
    records = {kind: (int(used), int(count)) for kind, used, count in _RECORD_LINE.findall(report)}
    return ArenaFigures(figures["total"], figures["head"], figures["tail"], records)


# ---- the oracle's calls ------------------------------------------------------------------------------------------


def allocate(
    model: bytes, arena_size: int | None = None, path: str = "<model>", settings: Settings | None = None
) -> ArenaFigures:
    """Arena figures after AllocateTensors, without running the model."""
    timeout_s = settings_or_read(settings).tflm_timeout_s
    size = _arena_size(model, arena_size)

    def work(child: TflmChild) -> str:
        return child.allocations(child.interpreter(model, size))

    return _figures(isolated(work, path, timeout_s), path)


def run(
    model: bytes,
    inputs: list[np.ndarray] | None = None,
    arena_size: int | None = None,
    path: str = "<model>",
    settings: Settings | None = None,
) -> OracleRun:
    """Build the interpreter (AllocateTensors), invoke it once on `inputs`, and read its arena figures."""
    timeout_s = settings_or_read(settings).tflm_timeout_s
    output_count = len(read_model(model, path).main.outputs)
    size = _arena_size(model, arena_size)

    def work(child: TflmChild) -> tuple[str, list[np.ndarray]]:
        interp = child.interpreter(model, size)
        for i, array in enumerate(inputs or []):
            interp.set_input(array, i)
        child.invoke(interp)
        report = child.allocations(interp)
        return report, [np.array(interp.get_output(i), copy=True) for i in range(output_count)]

    report, outputs = isolated(work, path, timeout_s)
    return OracleRun(_figures(report, path), tuple(outputs))


def refusal(
    model: bytes,
    path: str = "<model>",
    settings: Settings | None = None,
    relies_on: frozenset[Reliance] = EVERY_RELIANCE,
) -> str | None:
    """Why `model` cannot be used, or None: lowtide's validator's first problem a stage relying on `relies_on`
    refuses, else what TFLM says when it prepares the model and invokes it once on random inputs (in a child
    process, so a crash is a reason too). For models lowtide made itself (rewrite candidates), before anything is
    weighed or written."""
    settings = settings_or_read(settings)
    try:
        graph = read_model(model, path)
        problems = refused_problems(graph, settings, relies_on)
        if problems:
            return problems[0].message
        run(model, random_inputs(graph), path=path, settings=settings)
    except LowtideError as exc:
        return exc.message
    return None


def run_sequence(
    model: bytes,
    input_sets: list[list[np.ndarray]],
    path: str = "<model>",
    reset_before: frozenset[int] = frozenset(),
    arena_size: int | None = None,
    settings: Settings | None = None,
) -> list[tuple[np.ndarray, ...]]:
    """Outputs of one host TFLM interpreter invoked once per input set; variable tensors and resource variables
    carry over from one invocation to the next, except that `Reset()` is called before the invocations whose
    positions are in `reset_before`."""
    timeout_s = settings_or_read(settings).tflm_timeout_s
    output_count = len(read_model(model, path).main.outputs)
    size = _arena_size(model, arena_size)

    def work(child: TflmChild) -> list[tuple[np.ndarray, ...]]:
        interp = child.interpreter(model, size)
        sequence = []
        for n, inputs in enumerate(input_sets):
            if n in reset_before:
                interp.reset()
            for i, array in enumerate(inputs):
                interp.set_input(array, i)
            child.invoke(interp)
            sequence.append(tuple(np.array(interp.get_output(i), copy=True) for i in range(output_count)))
        return sequence

    return isolated(work, path, timeout_s)
