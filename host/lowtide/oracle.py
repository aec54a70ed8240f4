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
_FD2_LOCK = threading.Lock()  # fd 2 is process-wide: one capture at a time


@dataclass(frozen=True)
class OracleRun:
    total_bytes: int  # head + tail as TFLM's recording allocator reports them
    head_bytes: int  # non-persistent planned buffers (activations, scratch)
    tail_bytes: int  # persistent allocations (64-bit host structs)
    outputs: tuple[np.ndarray, ...]


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


def run(model: bytes, inputs: list[np.ndarray] | None = None, arena_size: int | None = None,
        path: str = "<model>") -> OracleRun:
    """Build the interpreter (AllocateTensors), invoke it once on `inputs`, and read its arena figures."""
    size = arena_size or max(16 * len(model), 64 << 20)
    try:
        interp = _interpreter(model, size)
        for i, array in enumerate(inputs or []):
            interp.set_input(array, i)
        interp.invoke()
        report = _capture_fd2(interp.print_allocations)
        outputs = [np.array(interp.get_output(i), copy=True) for i in range(len(read_model(model, path).main.outputs))]
    except RuntimeError as exc:
        raise LowtideError(f"TFLite Micro rejected the model: {str(exc).strip().splitlines()[-1]}", path) from None
    figures = {kind: int(value) for kind, value in _ALLOCATION_LINE.findall(report)}
    if set(figures) != {"total", "head", "tail"}:
        raise LowtideError("TFLite Micro printed no arena figures", path)
    return OracleRun(figures["total"], figures["head"], figures["tail"], tuple(outputs))
