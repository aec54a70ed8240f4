"""Stale memory: the host TFLM under different arena fills names the operators that read or leave stale bytes, and
`optimize --verify` compares only the bytes that do not depend on them."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np

from lowtide.export.pipeline import _same_outputs
from lowtide.model import read_model
from lowtide.model.builder import ModelBuilder
from lowtide.stale import check_stale

LAUNCH = "import sys; from lowtide.cli import main; sys.argv[0] = 'lowtide'; main()"
SIZE = 16  # input height and width
DECLARED = 17  # BATCH_TO_SPACE_ND's declared output height and width: one row and column more than it covers


def dilated_model(declared: int | None = DECLARED) -> bytes:
    """A branchy block with a SAME 3x3 convolution dilated by 2, lowered to SPACE_TO_BATCH_ND (operator 3),
    CONV_2D and BATCH_TO_SPACE_ND (operator 5); a 2x2 VALID convolution brings its output back to 16x16. Stored
    breadth-first, so that `optimize` reorders it."""
    b = ModelBuilder(seed=3, name="dilated")
    x = b.input((1, SIZE, SIZE, 4))
    stem = b.conv2d(x, 8, 3)
    wide = b.conv2d(stem, 32, 1)
    other = b.conv2d(stem, 16, 1)
    shape = (1, declared, declared, 8) if declared else None
    dilated = b.dilated_conv2d(stem, 8, kernel=3, dilation=2, declared_shape=shape)
    back = b.conv2d(dilated, 8, kernel=2, padding="VALID" if declared else "SAME")
    wide = b.conv2d(b.depthwise_conv2d(wide, 3), 8, 1)
    other = b.conv2d(b.depthwise_conv2d(other, 3), 8, 1)
    b.output(b.conv2d(b.concat([wide, other, back]), 8, 1, activation="NONE"))
    return b.build()


def _positions(mask: np.ndarray, shape: tuple[int, ...]) -> set[tuple[int, ...]]:
    return {tuple(int(i) for i in p) for p in np.argwhere(mask.reshape(shape))}


def test_batch_to_space_leaves_exactly_the_uncovered_rows_and_columns_unwritten():
    graph = read_model(dilated_model())
    report = check_stale(graph)
    (origin,) = report.origins
    assert (origin.op, origin.opcode) == (5, "BATCH_TO_SPACE_ND")
    # TFLM writes output row in_h * 2 + offset for in_h < 8, offset < 2 (crop_top 0): rows and columns 0..15 of
    # the 17 declared; every channel byte of row 16 and of column 16 keeps what the arena held.
    unwritten = np.zeros(DECLARED * DECLARED * 8, bool)
    for start, end in origin.unwritten:
        unwritten[start:end] = True
    expected = {(0, h, w, c) for h in range(DECLARED) for w in range(DECLARED) for c in range(8)
                if h == SIZE or w == SIZE}
    assert _positions(unwritten, (1, DECLARED, DECLARED, 8)) == expected
    assert origin.stale_read == ()
    assert origin.fix is not None and "(1, 16, 16, 8)" in origin.fix
    # The 2x2 VALID convolution reads row and column 16 for its last output row and column; the final 1x1
    # convolution mixes every channel, so exactly its row 15 and column 15 depend on stale memory.
    passed_on = {s.opcode for s in report.operators if not s.inputs_determined}
    assert passed_on == {"CONV_2D", "CONCATENATION"}
    (determined,) = report.output_determined
    assert _positions(~determined, (1, SIZE, SIZE, 8)) == {
        (0, h, w, c) for h in range(SIZE) for w in range(SIZE) for c in range(8) if h == SIZE - 1 or w == SIZE - 1}
    assert report.undetermined_output_bytes == (2 * SIZE - 1) * 8


def test_a_dilated_convolution_whose_shapes_agree_is_deterministic():
    report = check_stale(read_model(dilated_model(declared=None)))
    assert report.clean and report.operators == ()


def test_outputs_are_compared_only_where_determined():
    stock = (np.arange(8, dtype=np.int8).reshape(2, 4),)
    determined = (np.array([True] * 6 + [False] * 2),)
    stale_byte_differs = (stock[0].copy(),)
    stale_byte_differs[0][1, 3] = 100
    assert _same_outputs(stock, stale_byte_differs, determined)
    assert not _same_outputs(stock, stale_byte_differs)
    determined_byte_differs = (stock[0].copy(),)
    determined_byte_differs[0][0, 0] = 100
    assert not _same_outputs(stock, determined_byte_differs, determined)


def test_optimize_verify_names_the_stale_operator_and_verifies_the_determined_bytes(tmp_path):
    model, out = tmp_path / "dilated.tflite", tmp_path / "dilated_opt.tflite"
    model.write_bytes(dilated_model())
    done = subprocess.run([sys.executable, "-c", LAUNCH, "optimize", str(model), "-o", str(out), "--verify",
                           "--time-limit", "4", "--json"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["after"]["planned_head_bytes"] < report["before"]["tflm_head_bytes"]  # reordered and placed
    assert report["determined_outputs_identical"] is True
    stale = report["stale"]
    assert not stale["clean"] and stale["undetermined_output_bytes"] == (2 * SIZE - 1) * 8
    origins = [op for op in stale["operators"] if op["origin"]]
    assert [(op["index"], op["opcode"], op["unwritten_bytes"]) for op in origins] == [
        (5, "BATCH_TO_SPACE_ND", (DECLARED * DECLARED - SIZE * SIZE) * 8)]
    inspected = subprocess.run([sys.executable, "-c", LAUNCH, "inspect", str(model), "--check-stale"],
                               capture_output=True, text=True, timeout=300, env={**os.environ, "COLUMNS": "200"})
    assert inspected.returncode == 0, inspected.stderr
    assert "operator 5 (BATCH_TO_SPACE_ND) leaves 264 of its 2,312 output bytes unwritten" in inspected.stdout
