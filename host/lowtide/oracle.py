"""Run a model in the host build of the real TFLite Micro interpreter (PyPI `tflite-micro`) and read its figures.

TFLM prints its arena accounting through MicroPrintf to file descriptor 2, not to Python's sys.stderr, so the
descriptor itself is redirected while `print_allocations()` runs.
"""

from __future__ import annotations

import os
import re
import tempfile
import threading
from dataclasses import dataclass

import numpy as np

from lowtide.errors import LowtideError
from lowtide.model.ir import Graph
from lowtide.model.reader import read_model

_ALLOCATION_LINE = re.compile(r"Arena allocation (total|head|tail) (\d+) bytes")
_RECORD_LINE = re.compile(r"'([^']+)' used (\d+) bytes .*for (\d+) ")
# Host (64-bit) minus 32-bit MCU size of the per-tensor and per-operator structs in the tail.
_EVAL_TENSOR_SAVING = 24 - 12  # TfLiteEvalTensor
_NODE_SAVING = 64 - 32  # NodeAndRegistration
_FD2_LOCK = threading.Lock()  # fd 2 is process-wide: one capture at a time


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


def _interpreter(model: bytes, arena_size: int):
    from tflite_micro.python.tflite_micro import runtime

    return runtime.Interpreter.from_bytes(model, arena_size=arena_size)


def _capture_fd2(fn) -> str:
    with _FD2_LOCK, tempfile.TemporaryFile(mode="w+b") as sink:
        saved = os.dup(2)
        try:
            os.dup2(sink.fileno(), 2)
            fn()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        sink.seek(0)
        return sink.read().decode("utf-8", "replace")


def random_inputs(graph: Graph, seed: int = 0) -> list[np.ndarray]:
    """Inputs covering each input tensor's full value range, reproducible from `seed`."""
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
            arrays.append(rng.integers(0, 2, size=t.shape).astype(np.bool_))
        else:
            arrays.append(rng.uniform(-1.0, 1.0, size=t.shape).astype(dtype))
    return arrays


def _figures(interp, path: str) -> ArenaFigures:
    report = _capture_fd2(interp.print_allocations)
    figures = {kind: int(value) for kind, value in _ALLOCATION_LINE.findall(report)}
    if set(figures) != {"total", "head", "tail"}:
        raise LowtideError("TFLite Micro printed no arena figures", path)
    records = {kind: (int(used), int(count)) for kind, used, count in _RECORD_LINE.findall(report)}
    return ArenaFigures(figures["total"], figures["head"], figures["tail"], records)


def _rejected(exc: RuntimeError, path: str) -> LowtideError:
    lines = str(exc).strip().splitlines() or ["unknown error"]
    return LowtideError(f"TFLite Micro rejected the model: {lines[-1]}", path)


def _arena_size(model: bytes, arena_size: int | None) -> int:
    # Larger than any shared model needs; TFLM only touches what it plans, so the size costs nothing.
    return arena_size or max(16 * len(model), 64 << 20)


def allocate(model: bytes, arena_size: int | None = None, path: str = "<model>") -> ArenaFigures:
    """Arena figures after AllocateTensors, without running the model."""
    try:
        return _figures(_interpreter(model, _arena_size(model, arena_size)), path)
    except RuntimeError as exc:
        raise _rejected(exc, path) from None


def run(model: bytes, inputs: list[np.ndarray] | None = None, arena_size: int | None = None,
        path: str = "<model>") -> OracleRun:
    """Build the interpreter (AllocateTensors), invoke it once on `inputs`, and read its arena figures."""
    output_count = len(read_model(model, path).main.outputs)
    try:
        interp = _interpreter(model, _arena_size(model, arena_size))
        for i, array in enumerate(inputs or []):
            interp.set_input(array, i)
        interp.invoke()
        figures = _figures(interp, path)
        outputs = [np.array(interp.get_output(i), copy=True) for i in range(output_count)]
    except RuntimeError as exc:
        raise _rejected(exc, path) from None
    return OracleRun(figures, tuple(outputs))


def run_sequence(model: bytes, input_sets: list[list[np.ndarray]], path: str = "<model>",
                 reset_before: frozenset[int] = frozenset()) -> list[tuple[np.ndarray, ...]]:
    """Outputs of one host TFLM interpreter invoked once per input set; variable tensors and resource variables
    carry over from one invocation to the next, except that `Reset()` is called before the invocations whose
    positions are in `reset_before`."""
    output_count = len(read_model(model, path).main.outputs)
    try:
        interp = _interpreter(model, _arena_size(model, None))
        sequence = []
        for n, inputs in enumerate(input_sets):
            if n in reset_before:
                interp.reset()
            for i, array in enumerate(inputs):
                interp.set_input(array, i)
            interp.invoke()
            sequence.append(tuple(np.array(interp.get_output(i), copy=True) for i in range(output_count)))
    except RuntimeError as exc:
        raise _rejected(exc, path) from None
    return sequence
