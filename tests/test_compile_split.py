"""SPLIT and SPLIT_V in `lowtide compile`, also run in place: generated C against the host TFLM interpreter.

The graph rewriter splits tensors along rows with SPLIT_V, and an offline memory plan may put each output on the
very bytes of the input it copies (and CONCATENATION inputs on their output's bytes), so the kernels copy memory
onto itself. The planned models here do exactly that; both TFLM and the compiled runtime must give the unplanned
model's outputs, and the runtime must never hand memcpy overlapping ranges (undefined behaviour in C even when
source and destination are equal, which AddressSanitizer lets pass): a preloaded memcpy aborts if it does.
"""

from __future__ import annotations

import math
import subprocess
from pathlib import Path

import numpy as np
import pytest

from lowtide import oracle
from lowtide.compile import compile_model, verify_compiled
from lowtide.compile.hostcheck import (
    build_host_binary,
    compare_outputs,
    first_divergence,
    run_compiled,
)
from lowtide.errors import LowtideError
from lowtide.memory import align_up, buffer_lifetimes, tflm_plan
from lowtide.memory.placement import offline_plan
from lowtide.model.attributes import ConcatenationAttributes, SplitAttributes, SplitVAttributes
from lowtide.model.builder import ModelBuilder
from lowtide.model.edit import with_offline_plan
from lowtide.model.reader import object_tree
from lowtide.validation import load_model
from support.compiled import assert_compiled_arena
from support.models import TinyModel

ROW_SIZES = [3, -1, 2]  # of 10 rows; a row of 4 x 8 int8 is 32 bytes, so every piece is a multiple of 16 bytes
CHANNEL_SIZES = [2, 6]


def _split_model(tmp_path: Path) -> Path:
    """conv -> SPLIT_V rows (3, -1, 2) -> conv per piece -> CONCATENATION rows -> SPLIT_V channels (2, 6) ->
    conv per piece -> CONCATENATION channels -> conv."""
    b = ModelBuilder(seed=4, name="split_v_rows_and_channels")
    x = b.input((1, 10, 4, 8))
    stem = b.conv2d(x, filters=8, kernel=3)
    rows = b.split(stem, ROW_SIZES, axis=1)
    convs = [
        b.conv2d(piece, filters=8, kernel=3, activation=activation)
        for piece, activation in zip(rows, ("RELU", "NONE", "RELU6"))
    ]
    joined = b.concat(convs, axis=1)
    channels = b.split(joined, CHANNEL_SIZES, axis=-1)
    mixed = b.concat([b.conv2d(piece, filters=4, kernel=1) for piece in channels])
    b.output(b.conv2d(mixed, filters=4, kernel=1, activation="NONE"))
    path = tmp_path / "split_v.tflite"
    path.write_bytes(b.build())
    return path


def _ops(path: Path, opcode: str):
    return [op for op in load_model(path).main.operators if op.opcode == opcode]


# ---- the builder's SPLIT_V on TFLM -------------------------------------------------------------------------------


def test_builder_split_v_runs_on_tflm_and_cuts_where_asked(tmp_path):
    b = ModelBuilder(seed=2)
    x = b.input((1, 6, 5, 3))
    stem = b.conv2d(x, filters=4, kernel=3)
    pieces = b.split(stem, [1, -1, 2], axis=2)
    b.output(stem, *pieces)
    path = tmp_path / "pieces.tflite"
    path.write_bytes(b.build())
    graph = load_model(path)
    assert [p.shape for p in pieces] == [(1, 6, 1, 4), (1, 6, 2, 4), (1, 6, 2, 4)]
    (op,) = _ops(path, "SPLIT_V")
    assert graph.constant_array(op.inputs[1]).tolist() == [1, -1, 2]
    raw = object_tree(graph).subgraphs[0].tensors
    stem_q = (list(raw[stem.index].quantization.scale), list(raw[stem.index].quantization.zeroPoint))
    assert all(
        (list(raw[p.index].quantization.scale), list(raw[p.index].quantization.zeroPoint)) == stem_q for p in pieces
    )

    run = oracle.run(path.read_bytes(), oracle.random_inputs(graph, 0))
    whole, *cut = run.outputs
    assert np.unique(whole).size > 20  # the stem's output is not degenerate
    for got, want in zip(cut, np.split(whole, [1, 3], axis=2)):
        np.testing.assert_array_equal(got, want)


def test_builder_split_rejects_sizes_that_do_not_cut_the_axis():
    b = ModelBuilder()
    x = b.input((1, 4, 4, 2))
    for sizes in ([1, 2], [-1, -1], [5, -1], [4, -1], [0, 4]):
        with pytest.raises(LowtideError, match="do not cut"):
            b.split(x, sizes, axis=1)
    with pytest.raises(LowtideError, match="out of range"):
        b.split(x, [2, 2], axis=4)


# ---- compiled against TFLM ---------------------------------------------------------------------------------------


def test_split_v_rows_and_channels_bit_exact(tmp_path):
    path = _split_model(tmp_path)
    for seed in (0, 1):
        result = verify_compiled(load_model(path), seed=seed, sanitize=True)
        assert result.passed, result.outputs
        assert_compiled_arena(path, result)
    assert first_divergence(load_model(path), seed=2) is None  # every SPLIT_V output compared, not only the model's


def _split_graph(m: TinyModel, dtype: str) -> tuple[list[int], list[int]]:
    """SPLIT in three along axis 2 (batch 2: the pieces interleave), SPLIT_V (1, -1) along axis -1 with a
    scalar axis, and a CONCATENATION that swaps two pieces. int8 gives one SPLIT_V output its own quantization:
    TFLM copies bytes regardless."""
    int8 = dtype == "int8"

    def act(shape, scale=0.05, zero_point=3):
        return m.tensor(shape, dtype, *((scale, zero_point) if int8 else ()))

    x = act((2, 3, 6, 4))
    pieces = [act((2, 3, 2, 4)) for _ in range(3)]
    m.op("SPLIT", [m.tensor((1,), "int32", data=[2]), x], pieces, SplitAttributes(num_splits=3))
    narrow, wide = act((2, 3, 6, 1)), act((2, 3, 6, 3), scale=0.1, zero_point=-7)
    m.op(
        "SPLIT_V",
        [x, m.tensor((2,), "int32", data=[1, -1]), m.tensor((), "int32", data=-1)],
        [narrow, wide],
        SplitVAttributes(num_splits=2),
    )
    swapped = act((2, 3, 4, 4))
    m.op("CONCATENATION", [pieces[2], pieces[0]], [swapped], ConcatenationAttributes(axis=2))
    return [x], [swapped, pieces[1], narrow, wide]


@pytest.mark.parametrize("dtype", ["int8", "float32"])
def test_split_and_split_v_any_axis_bit_exact(tmp_path, dtype):
    m = TinyModel()
    inputs, outputs = _split_graph(m, dtype)
    path = m.save(tmp_path / f"split_{dtype}.tflite", inputs, outputs)
    result = verify_compiled(load_model(path), seed=0, sanitize=True)
    assert result.passed, result.outputs
    assert first_divergence(load_model(path), seed=1) is None
    # by construction, against numpy on the same inputs
    x = oracle.random_inputs(load_model(path), 0)[0]
    swapped, middle, narrow, wide = oracle.run(path.read_bytes(), [x]).outputs
    a, b, c = np.split(x, 3, axis=2)
    np.testing.assert_array_equal(swapped, np.concatenate([c, a], axis=2))
    np.testing.assert_array_equal(middle, b)
    np.testing.assert_array_equal(narrow, x[..., :1])
    np.testing.assert_array_equal(wide, x[..., 1:])


def test_size_splits_must_match_the_output_shapes(tmp_path):
    m = TinyModel()
    x = m.tensor((1, 4, 6), "float32")
    a, b = m.tensor((1, 4, 2), "float32"), m.tensor((1, 4, 4), "float32")
    m.op(
        "SPLIT_V",
        [x, m.tensor((2,), "int32", data=[3, -1]), m.tensor((), "int32", data=2)],
        [a, b],
        SplitVAttributes(num_splits=2),
    )
    path = m.save(tmp_path / "mismatch.tflite", [x], [a, b])
    with pytest.raises(
        LowtideError,
        match=r"operator 0 \(SPLIT_V\): declared output shape .* output 1 is declared \[1, 4, 2\], computed \[1, 4, 3\]",
    ):
        compile_model(load_model(path))


# ---- in place: outputs on their input's bytes ----------------------------------------------------------------------


def _with_plan(path: Path, offsets: dict[int, int], out: Path) -> Path:
    """`path` with an OfflineMemoryAllocation plan giving each activation its offset in `offsets`."""
    graph = load_model(path)
    buffers, _ = buffer_lifetimes(graph)
    words = offline_plan(graph, buffers, [offsets[b.tensor] for b in buffers])
    out.write_bytes(with_offline_plan(graph, words).data)
    return out


def _in_place_offsets(path: Path) -> tuple[dict[int, int], int]:
    """Each row SPLIT_V output at its input's offset + the bytes before it, each row CONCATENATION input at its
    output's offset + the bytes before it; every other activation in a region of its own. Returns the offsets
    and the arena size."""
    graph = load_model(path)
    sg = graph.main
    split = next(op for op in _ops(path, "SPLIT_V") if sg.tensors[op.outputs[0]].shape[1] != 10)
    concat = next(op for op in _ops(path, "CONCATENATION") if op.attributes.axis == 1)
    inside: dict[int, tuple[int, int]] = {}  # tensor -> (tensor it lies in, byte offset inside)
    for whole, parts in ((split.inputs[0], split.outputs), (concat.outputs[0], concat.inputs)):
        position = 0
        for part in parts:
            inside[part] = (whole, position)
            position += sg.tensors[part].nbytes
    offsets, cursor = {}, 0
    for t in sg.tensors:
        if t.planned and t.index not in inside:
            offsets[t.index] = cursor
            cursor += align_up(t.nbytes)
    for part, (whole, position) in inside.items():
        assert position % 16 == 0
        offsets[part] = offsets[whole] + position
    return offsets, cursor


def test_split_v_and_concatenation_in_place_match_the_unplanned_model(tmp_path):
    path = _split_model(tmp_path)
    offsets, arena = _in_place_offsets(path)
    planned = _with_plan(path, offsets, tmp_path / "in_place.tflite")

    # the compile path sees the in-place plan: three row pieces inside the split's input, three inside the concat
    plan = tflm_plan(load_model(planned))
    seen = {b.tensor: o for b, o in zip(plan.buffers, plan.offsets)}
    assert seen == offsets and plan.head_bytes == arena
    sg = load_model(planned).main
    split = next(op for op in sg.operators if op.opcode == "SPLIT_V")
    assert [seen[t] - seen[split.inputs[0]] for t in split.outputs] == [0, 96, 256]
    concat = next(op for op in sg.operators if op.opcode == "CONCATENATION")
    assert [seen[t] - seen[concat.outputs[0]] for t in concat.inputs] == [0, 96, 256]

    for seed in (0, 3):
        inputs = oracle.random_inputs(load_model(path), seed)
        reference = oracle.run(path.read_bytes(), inputs)
        in_place = oracle.run(planned.read_bytes(), inputs)
        assert in_place.head_bytes == arena
        np.testing.assert_array_equal(in_place.outputs[0], reference.outputs[0])  # (a) TFLM honours it
        # (b) the compiled runtime too, told to keep the model's plan: its own plan, which has no rule for a
        # CONCATENATION in place, is smaller and would be used otherwise
        result = verify_compiled(load_model(planned), seed=seed, sanitize=True, keep_model_plan=True)
        assert result.passed, result.outputs
        assert result.arena_bytes == arena  # the fast layers' int16 rows fit between the planned tensors
        assert (
            compile_model(load_model(planned)).arena_bytes
            == compile_model(load_model(path)).arena_bytes
            < result.arena_bytes
        )


# Interposes memcpy for the compiled model's process: aborts on any overlap, equal addresses included, and
# writes how many calls it saw to $OVERLAP_GUARD_LOG at exit, which shows it was in the path at all.
_OVERLAP_GUARD = r"""
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

static unsigned long calls;

void *memcpy(void *dst, const void *src, size_t n) {
    volatile unsigned char *d = dst;
    const volatile unsigned char *s = src;
    calls++;
    if (n && (size_t)((const unsigned char *)dst - (const unsigned char *)src + n - 1) < 2 * n - 1) abort();
    for (size_t i = 0; i < n; ++i) d[i] = s[i];
    return dst;
}

__attribute__((destructor)) static void report(void) {
    const char *path = getenv("OVERLAP_GUARD_LOG");
    FILE *f = path ? fopen(path, "w") : NULL;
    if (f) {
        fprintf(f, "%lu\n", calls);
        fclose(f);
    }
}
"""


def test_in_place_copies_never_give_memcpy_overlapping_ranges(tmp_path, monkeypatch):
    path = _split_model(tmp_path)
    planned = _with_plan(path, _in_place_offsets(path)[0], tmp_path / "in_place.tflite")
    source = tmp_path / "overlap_guard.c"
    source.write_text(_OVERLAP_GUARD)
    guard = tmp_path / "overlap_guard.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-O1", "-fno-builtin", str(source), "-o", str(guard)], check=True)
    compiled = compile_model(load_model(planned), keep_model_plan=True)
    build = tmp_path / "build"
    build.mkdir()
    binary = build_host_binary(compiled, build)
    inputs = oracle.random_inputs(load_model(planned), 0)
    log = tmp_path / "memcpy_calls.txt"
    monkeypatch.setenv("OVERLAP_GUARD_LOG", str(log))
    monkeypatch.setenv("LD_PRELOAD", str(guard))
    outputs, hook_pairs = run_compiled(compiled, inputs, build, binary=binary)
    monkeypatch.delenv("LD_PRELOAD")
    assert int(log.read_text()) > 10  # the channel split and concatenation copy rows through it
    reference = oracle.run(path.read_bytes(), inputs)
    assert all(c.passed for c in compare_outputs(list(reference.outputs), outputs))
    assert hook_pairs == compiled.operator_count


def test_an_overlap_no_copy_can_run_in_place_is_refused(tmp_path):
    """A channel SPLIT_V output at its input's offset would overwrite bytes the next rows still need."""
    path = _split_model(tmp_path)
    offsets, _ = _in_place_offsets(path)
    sg = load_model(path).main
    channel_split = next(
        op for op in sg.operators if op.opcode == "SPLIT_V" and sg.tensors[op.outputs[0]].shape[3] != 8
    )
    offsets[channel_split.outputs[0]] = offsets[channel_split.inputs[0]]
    planned = _with_plan(path, offsets, tmp_path / "bad.tflite")
    with pytest.raises(LowtideError, match=r"\(SPLIT_V [^)]*\): the memory plan overlaps tensors"):
        compile_model(load_model(planned), keep_model_plan=True)


def test_quantize_and_requantize_in_place(tmp_path):
    """float32 -> int8 QUANTIZE and int8 -> int8 requantize, each output at its input's offset."""
    m = TinyModel()
    x = m.tensor((1, 8, 4, 4), "float32")
    q = m.tensor((1, 8, 4, 4), "int8", 0.01, 5)
    m.op("QUANTIZE", [x], [q])
    r = m.tensor((1, 8, 4, 4), "int8", 0.013, -9)
    m.op("QUANTIZE", [q], [r])
    path = m.save(tmp_path / "quantize.tflite", [x], [r])
    planned = _with_plan(path, {x: 0, q: 0, r: 0}, tmp_path / "quantize_in_place.tflite")
    for seed in (0, 1):
        inputs = oracle.random_inputs(load_model(path), seed)
        reference = oracle.run(path.read_bytes(), inputs).outputs[0]
        assert np.unique(reference).size > 50
        np.testing.assert_array_equal(oracle.run(planned.read_bytes(), inputs).outputs[0], reference)
        result = verify_compiled(load_model(planned), seed=seed, sanitize=True)
        assert result.passed and result.arena_bytes == math.prod((1, 8, 4, 4)) * 4
