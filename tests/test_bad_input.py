"""Bad input gives one clear line on stderr naming the file, exit status 2: no traceback, hang or huge allocation."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from conftest import SHARED_MODELS
from lowtide.model import model_bytes
from lowtide.model.reader import object_tree
from lowtide.validation import load_model

MODEL = SHARED_MODELS / "mlperf_ic_resnet8_int8.tflite"
PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c4890000000d4944415478da63f8ffff3f0005fe02fea7d6a4ab0000000049454e44ae426082"
)


def _bad_index_model() -> bytes:
    graph = load_model(MODEL)
    object_tree(graph).subgraphs[0].operators[3].inputs[0] = 9999
    return model_bytes(object_tree(graph))


def _absurd_size_model() -> bytes:
    graph = load_model(MODEL)
    object_tree(graph).subgraphs[0].tensors[graph.main.operators[0].outputs[0]].shape = np.array(
        [1 << 20, 1 << 20, 1 << 12], dtype=np.int32
    )
    return model_bytes(object_tree(graph))


def _bad_opcode_model() -> bytes:
    graph = load_model(MODEL)
    object_tree(graph).subgraphs[0].operators[0].opcodeIndex = 200
    return model_bytes(object_tree(graph))


CASES = {
    "empty": (lambda: b"", "file is empty"),
    "random": (lambda: np.random.default_rng(1).bytes(4096), "not a TFLite model"),
    "png": (lambda: PNG, "not a TFLite model"),
    "truncated": (lambda: MODEL.read_bytes()[: MODEL.stat().st_size // 2], "corrupt or truncated"),
    "header_only": (lambda: MODEL.read_bytes()[:12], "corrupt or truncated"),
    "index_out_of_range": (_bad_index_model, "refers to tensor 9999"),
    "opcode_out_of_range": (_bad_opcode_model, "opcode index 200 out of range"),
    "absurd_tensor_size": (_absurd_size_model, "more than a 32-bit address space"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_model_gives_one_line_and_exit_2(case, tmp_path):
    make, expected = CASES[case]
    path = tmp_path / f"{case}.tflite"
    path.write_bytes(make())
    result = subprocess.run(
        [sys.executable, "-m", "lowtide", "inspect", str(path)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert str(path) in lines[0] and expected in lines[0]
    assert "Traceback" not in result.stderr and result.stdout == ""


def test_random_bytes_with_identifier_never_escape_as_traceback():
    """Garbage behind a valid 'TFL3' identifier: every outcome is a ModelError or a readable model."""
    from lowtide.errors import ModelError
    from lowtide.model import read_model

    rng = np.random.default_rng(3)
    for _ in range(300):
        body = bytearray(rng.bytes(int(rng.integers(8, 2048))))
        body[4:8] = b"TFL3"
        try:
            read_model(bytes(body))
        except ModelError:
            pass


def test_bit_flips_in_a_real_model_never_escape_as_traceback():
    from lowtide.errors import ModelError
    from lowtide.model import read_model

    data = (SHARED_MODELS / "tflm_hello_world_int8.tflite").read_bytes()
    rng = np.random.default_rng(4)
    for _ in range(300):
        corrupt = bytearray(data)
        for position in rng.integers(0, len(data), size=4):
            corrupt[position] ^= 1 << int(rng.integers(0, 8))
        try:
            read_model(bytes(corrupt))
        except ModelError:
            pass


def test_missing_file_and_directory(tmp_path):
    for target, expected in ((tmp_path / "nope.tflite", "no such file"), (tmp_path, "is a directory")):
        result = subprocess.run(
            [sys.executable, "-m", "lowtide", "inspect", str(target)], capture_output=True, text=True, timeout=60
        )
        assert result.returncode == 2 and expected in result.stderr and "Traceback" not in result.stderr
