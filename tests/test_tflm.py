"""Stock TFLite Micro in the firmware (the `tflm` and `tflm-cmsis-nn` runtimes) and lowtide's exact 32-bit arena.

Real parts throughout: TFLM built from the pinned tree in ../shared/tflm for the Cortex-M4 (and M7) with Debian's
Arm toolchain, PlatformIO, QEMU, and the host TFLM interpreter as the reference for outputs. The library is built
once per core and kernel set (lazily, per operator) and reused by every test and model.
"""

from __future__ import annotations

import json
import shutil

import pytest

from conftest import SHARED_MODELS, needs_firmware_tools
from lowtide.errors import LowtideError
from lowtide.pipeline.measure import measure
from lowtide.settings import read_settings
from lowtide.tflm.build import CORES, build_library, check_kernels_fit_core, resolver_calls, sources_for
from lowtide.tflm.sizer import predict_arena32
from lowtide.tflm.tree import TFLM_COMMIT, TREE_SETTING, KernelSet, locate_tree
from lowtide.validation import load_model
from support.cli import run_lowtide

HELLO = SHARED_MODELS / "tflm_hello_world_int8.tflite"
KWS = SHARED_MODELS / "mlperf_kws_dscnn_int8.tflite"
MWW = SHARED_MODELS / "mww_v1_okay_nabu.tflite"  # CALL_ONCE and resource variables
MAGIC_WAND = SHARED_MODELS / "tflm_magic_wand.tflite"  # float32


def test_resolver_knows_tflm_builtins():
    entries = {
        call.split(".")[1].split("(")[0]
        for call in resolver_calls(locate_tree(KernelSet.REFERENCE), ["CONV_2D", "RESIZE_NEAREST_NEIGHBOR", "SVDF"])
    }
    assert entries == {"AddConv2D", "AddResizeNearestNeighbor", "AddSvdf"}


def test_cmsis_nn_sources_include_the_tables_their_kernels_read():
    """CMSIS-NN's int16 activations (reached from its LSTM kernel) read sigmoid_table_uint16, defined in a file with
    no function of its own: without it the dtln model's sizer and firmware did not link."""
    names = {path.name for path in sources_for(locate_tree(KernelSet.CMSIS_NN), ["UNIDIRECTIONAL_SEQUENCE_LSTM"])}
    assert {"arm_nn_activation_s16.c", "arm_nntables.c"} <= names


def test_operator_tflm_lacks_is_refused_before_building():
    with pytest.raises(LowtideError, match="TFLite Micro has no kernel for LSH_PROJECTION"):
        build_library(KernelSet.REFERENCE, CORES["cortex-m4f"], ["CONV_2D", "LSH_PROJECTION"], read_settings())


def test_tree_at_another_commit_is_refused(tmp_path, monkeypatch):
    fake = tmp_path / "tflm-ref" / "tensorflow" / "lite"
    fake.mkdir(parents=True)
    (fake / "micro.cc").write_text("// not TFLM at the pinned commit\n")
    monkeypatch.setenv(TREE_SETTING, str(tmp_path))
    with pytest.raises(LowtideError, match=f"not the export of commit {TFLM_COMMIT[:7]}"):
        locate_tree(KernelSet.REFERENCE)


def test_cmsis_nn_refused_for_a_core_it_cannot_run():
    with pytest.raises(LowtideError, match="CMSIS-NN kernels are for Arm Cortex-M cores"):
        check_kernels_fit_core(KernelSet.CMSIS_NN, CORES["xtensa-lx7"])


@needs_firmware_tools
def test_missing_tree_is_one_line_and_builds_nothing(tmp_path):
    env = {**__import__("os").environ, TREE_SETTING: str(tmp_path / "nowhere")}
    done = run_lowtide("measure", str(HELLO), "--board", "qemu-m4", "--runtime", "tflm-cmsis-nn", env=env)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and TREE_SETTING in lines[0] and "Traceback" not in done.stderr


@needs_firmware_tools
def test_model_too_big_for_the_board_is_refused_before_building(tmp_path):
    done = run_lowtide(
        "build",
        str(SHARED_MODELS / "tflm_mobilenet_v2_quantized_224.tflite"),
        "--board",
        "nano33ble",
        "--runtime",
        "tflm",
    )
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "SRAM of nano33ble" in done.stderr, done.stderr


@needs_firmware_tools
@pytest.mark.parametrize(
    ("model", "runtime", "board"),
    [
        (HELLO, "tflm", "qemu-m4"),
        (HELLO, "tflm", "qemu-m7"),
        (KWS, "tflm", "qemu-m4"),
        (KWS, "tflm-cmsis-nn", "qemu-m4"),
        (MWW, "tflm", "qemu-m4"),
        (MAGIC_WAND, "tflm", "qemu-m4"),
    ],
)
def test_tflm_on_the_board_uses_the_predicted_arena(model, runtime, board):
    """The board's arena_used_bytes() equals lowtide's 32-bit prediction to the byte, the head is the predicted
    head, and the outputs are bit-identical to the host TFLM's."""
    result = measure(model, board, runtime=runtime, profile_ops=True, iterations=2, timeout=60.0)
    kernels = KernelSet.CMSIS_NN if runtime == "tflm-cmsis-nn" else KernelSet.REFERENCE
    core = "cortex-m7" if board == "qemu-m7" else "cortex-m4f"
    predicted = predict_arena32(load_model(model), kernels, read_settings(), core)
    assert result.runtime == runtime
    assert result.arena_used_bytes == predicted.used_bytes == result.arena_predicted_used_bytes
    assert result.board_planned_bytes == predicted.head_bytes
    assert result.arena_capacity_bytes == predicted.arena_bytes >= predicted.used_bytes
    assert result.outputs_match, f"outputs {result.mismatched_outputs} differ from the host TFLM"
    # The painted high-water mark: the tail and at least the planned head were written, never beyond the arena.
    assert predicted.tail_bytes < result.arena_high_water_bytes <= result.arena_capacity_bytes
    # One instruction count per operator of the main graph, through TFLM's profiler interface.
    assert result.op_cycles is not None and len(result.op_cycles) == len(load_model(model).main.operators)
    assert 0 < sum(result.op_cycles) <= result.latency_cycles.median


@needs_firmware_tools
def test_optimized_model_uses_exactly_the_arena_its_header_declares(tmp_path):
    out = tmp_path / "mww_opt.tflite"
    done = run_lowtide("optimize", str(MWW), "-o", str(out), "--time-limit", "10", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    header = out.with_suffix(".h").read_text()
    assert report["after"]["mcu32"]["exact"] and report["before"]["mcu32"]["exact"]
    used = report["after"]["mcu32"]["used_bytes"]
    assert f"#define MWW_OPT_ARENA_USED_BYTES {used}\n" in header
    assert f"#define MWW_OPT_ARENA_SIZE {report['after']['mcu32']['arena_bytes']}\n" in header
    stock = measure(MWW, "qemu-m4", runtime="tflm", iterations=1)
    optimized = measure(out, "qemu-m4", runtime="tflm", iterations=1)
    assert optimized.arena_used_bytes == used
    assert optimized.board_planned_bytes == report["after"]["planned_head_bytes"]
    predicted_drop = report["before"]["mcu32"]["used_bytes"] - used
    assert stock.arena_used_bytes - optimized.arena_used_bytes == predicted_drop > 0
    assert optimized.outputs_match


@needs_firmware_tools
def test_savings_measures_three_variants_on_the_board(tmp_path):
    plot = tmp_path / "savings.png"
    done = run_lowtide(
        "savings",
        str(HELLO),
        "--board",
        "qemu-m4",
        "--runtime",
        "tflm",
        "--time-limit",
        "5",
        "--plot",
        str(plot),
        "--json",
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    variants = {v["variant"]: v for v in report["variants"]}
    assert list(variants) == ["stock", "optimize", "optimize --rewrite auto"]
    for figures in variants.values():
        assert figures["arena_used_bytes"] == figures["arena_predicted_used_bytes"]
        assert figures["outputs_identical"]
        assert figures["cycles"] > figures["instructions"] > 0  # the cycle model's column (the tests set its header)
    assert variants["optimize"]["arena_used_bytes"] <= variants["stock"]["arena_used_bytes"]
    assert plot.read_bytes().startswith(b"\x89PNG")
    shutil.rmtree(tmp_path, ignore_errors=True)
