"""MLPerf Tiny: the firmware's grammar (firmware/app/lt_mlperf.c) built on this machine and driven byte by byte, and
MLCommons' runner, unmodified, driving qemu-m4 and the emulated real STM32 (qemu-nucleo-f446re: nucleo-f446re's image
in QEMU's netduinoplus2) in performance and accuracy mode: the throughput it prints is lowtide's, computed from the
board's timestamps, to every digit printed, and the board's instruction count at the board's clock; its scores are
the host TFLM's on the same inputs. The MLPerf image is that of a real Nucleo (nucleo-f446re)."""

from __future__ import annotations

import importlib.util
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import REPO, SHARED_MODELS, needs_firmware_tools
from lowtide import oracle
from lowtide.cli.mlperf_cmd import _table as mlperf_table
from lowtide.device.drivers.cycle_model import CycleModelInfo
from lowtide.device.spec import get_board_spec
from lowtide.mlperf.benchmarks import BENCHMARKS, INPUT_UINT8_AS_INT8, RESULT_SCORES, mlperf_protocol
from lowtide.mlperf.datasets import LABELS_FILE, generate_dataset
from lowtide.mlperf.runner import locate_runner, run_mlperf, session_results, window_throughput
from lowtide.pipeline.firmware import build_board_firmware
from lowtide.pipeline.measure import measure
from lowtide.runtimes import RUNTIMES, Runtime
from lowtide.settings import read_settings
from lowtide.validation import load_model
from support.tables import assert_whole, rendered

RUNNER_ARCHIVE = REPO.parent / "shared" / "mlperf-tiny" / "mlperf-tiny-runner-1afd2c98.tar.gz"
PLATFORMIO_ARCHIVES = REPO.parent / "shared" / "platformio"  # the ST platform, offline (tests/test_st_boards.py)
APP = REPO / "firmware" / "app"
KWS = SHARED_MODELS / "mlperf_kws_dscnn_int8.tflite"
AD = SHARED_MODELS / "mlperf_ad01_int8.tflite"
IC = SHARED_MODELS / "mlperf_ic_resnet8_int8.tflite"
VWW = SHARED_MODELS / "mlperf_vww_96_int8.tflite"
FAKE_INSTRUCTIONS, FAKE_CLOCK_HZ = 250000, 25000000  # firmware/hosttest/mlperf_host.c


# --- the grammar on the host ----------------------------------------------------------------------------------------


def _host_build(out: Path, name: str, defines: dict[str, str]) -> Path:
    if shutil.which("gcc") is None:
        pytest.fail("gcc is needed to build firmware/app/lt_mlperf.c on the host")
    exe = out / name
    flags = [f"-D{k}={v}" for k, v in defines.items()]
    build = subprocess.run(
        [
            "gcc",
            "-std=c99",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-fsanitize=address,undefined",
            "-fno-sanitize-recover",
            "-DLT_PROTOCOL_MLPERF",
            *flags,
            f"-I{APP}",
            f"-I{REPO / 'firmware' / 'bsp'}",
            f"-I{REPO / 'firmware' / 'protocol'}",
            str(APP / "lt_mlperf.c"),
            str(REPO / "firmware" / "hosttest" / "mlperf_host.c"),
            "-o",
            str(exe),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert build.returncode == 0, build.stderr
    return exe


@pytest.fixture(scope="module")
def kws_like(tmp_path_factory) -> Path:
    """8 int8 bytes in, the same 8 out as scores (scale 1/256, zero point -128)."""
    return _host_build(
        tmp_path_factory.mktemp("mlperf_c"),
        "kws_like",
        {
            "LT_MLPERF_MODEL_ID": '"kws01"',
            "LT_MLPERF_DB_BYTES": "8",
            "FAKE_INPUT_BYTES": "8",
            "LT_MLPERF_OUTPUT_SCALE": "0.00390625f",
            "LT_MLPERF_OUTPUT_ZERO_POINT": "-128",
        },
    )


@pytest.fixture(scope="module")
def ad_like(tmp_path_factory) -> Path:
    """4 fp32 values in, quantized (scale 0.1, zero point 3); the score is the reconstruction's mean squared error."""
    return _host_build(
        tmp_path_factory.mktemp("mlperf_c"),
        "ad_like",
        {
            "LT_MLPERF_MODEL_ID": '"ad01"',
            "LT_MLPERF_DB_BYTES": "16",
            "FAKE_INPUT_BYTES": "4",
            "LT_MLPERF_INPUT": "2",
            "LT_MLPERF_RESULT": "1",
            "LT_MLPERF_INPUT_SCALE": "0.1f",
            "LT_MLPERF_INPUT_ZERO_POINT": "3",
            "LT_MLPERF_OUTPUT_SCALE": "0.1f",
            "LT_MLPERF_OUTPUT_ZERO_POINT": "3",
        },
    )


def _decimal(value: float) -> str:
    """A score as the firmware prints it: 6 decimals, halves rounded up (not Python's round-half-even)."""
    fixed = int(abs(value) * 10**6 + 0.5)
    return f"{'-' if value < 0 else ''}{fixed // 10**6}.{fixed % 10**6:06d}"


def _replies(exe: Path, commands: bytes) -> list[list[str]]:
    """The board's lines for each command (after the boot lines), split at m-ready."""
    run = subprocess.run([exe], input=commands, capture_output=True, check=False)
    assert run.returncode == 0, run.stderr.decode()
    text = run.stdout.decode()
    assert "\r\n" in text and "\n" not in text.replace("\r\n", "")
    replies, current = [], []
    for line in text.split("\r\n")[:-1]:
        current.append(line)
        if line == "m-ready":
            replies.append(current[:-1])
            current = []
    assert replies[0] == ["m-init-done"] and not current
    return replies[1:]


def test_grammar_answers_the_runners_commands(kws_like):
    name, profile, load, chunk1, chunk2, infer, results = _replies(
        kws_like, b"name%profile%db load 8%db 0001027f%db 80ff0203%infer 3 1%results%"
    )
    assert name == ["m-name-dut-[lowtide host]"]
    assert profile == ["m-profile-[ULPMark for tinyML Firmware V0.0.1]", "m-model-[kws01]"]
    assert load == ["m-[Expecting 8 bytes]"] and chunk1 == [] and chunk2 == ["m-load-done"]
    assert infer[:3] == ["m-warmup-start-1", "m-warmup-done", "m-infer-start-3"]
    t0, t1 = (int(line.removeprefix("m-lap-us-")) for line in infer[3:5])
    # instructions at the board's clock: the warm-up's, then three inferences'
    assert (t0, t1) == (FAKE_INSTRUCTIONS * 10**6 // FAKE_CLOCK_HZ, 4 * FAKE_INSTRUCTIONS * 10**6 // FAKE_CLOCK_HZ)
    scores = [(b - 256 if b > 127 else b) for b in bytes.fromhex("0001027f80ff0203")]
    expected = ",".join(_decimal((q + 128) / 256) for q in scores)
    assert infer[5:] == ["m-infer-done", f"m-results-[{expected}]"]
    assert results == [f"m-results-[{expected}]"]


@pytest.mark.parametrize(
    "commands, error",
    [
        (b"x" * 81 + b"%", "e-[Command longer than the 80-character buffer]"),
        (b"db load 9%", "e-[This model takes 8 bytes, not 9]"),
        (b"db load 0%", "e-[Command 'db load' requires the # of bytes, >0]"),
        (b"db 0011%", "e-[No db load in progress]"),
        (b"db 0g%", "e-[Invalid hex digit in 0g]"),
        (b"db 001%", "e-[Insufficent number of hex digits]"),
        (b"infer 2%", "e-[Load the input first: db load 8, then its bytes]"),
        (b"infer 0 1%", "e-[Inference iterations must be >0]"),
        (b"infer 1 -1%", "e-[Inference warmup must be >=0]"),
        (b"results%", "e-[No inference has completed]"),
        (b"%", "e-[Empty command]"),
        (b"bogus 1%", "e-[Unknown command: bogus]"),
    ],
)
def test_bad_commands_get_one_error_and_the_board_stays_ready(kws_like, commands, error):
    *replies, after = _replies(kws_like, commands + b"db load 8%db 0001020304050607%infer 1 0%")
    assert replies[0] == [error]
    assert after[-2:] == ["m-infer-done", f"m-results-[{','.join(_decimal((q + 128) / 256) for q in range(8))}]"]


def test_more_bytes_than_announced_abandon_the_load(kws_like):
    load, over, infer = _replies(kws_like, b"db load 8%db 000102030405060708%infer 1 0%")
    assert over == ["e-[More bytes than db load announced]"]
    assert infer == ["e-[Load the input first: db load 8, then its bytes]"]


def test_fp32_inputs_are_quantized_and_scored_by_reconstruction(ad_like):
    values = np.array([1.0, -2.0, 0.26, 10.0], "<f4")
    _, _, infer = _replies(ad_like, b"db load 16%db " + values.tobytes().hex().encode() + b"%infer 1 0%")
    q = np.clip(np.trunc(values / np.float32(0.1) + np.copysign(np.float32(0.5), values)) + 3, -128, 127)
    reconstruction = ((q - 3) * np.float32(0.1)).astype(np.float32)
    assert infer[-1] == f"m-results-[{_decimal(float(np.mean((reconstruction - values) ** 2)))}]"


# --- input checks ---------------------------------------------------------------------------------------------------


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO / "host"))
    return subprocess.run(
        [sys.executable, "-c", "from lowtide.cli import main; main()", "mlperf", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        check=False,
        timeout=120,
    )


def _bad_dataset(root: Path) -> Path:
    folder = root / "kws01"
    folder.mkdir(parents=True)
    (folder / "a.bin").write_bytes(bytes(489))
    (folder / LABELS_FILE).write_text("a.bin,12,3\n")
    return root


@pytest.mark.parametrize(
    "case, message",
    [
        ("model", r"input \(1, 640\) has 640 elements, but kws01 sends 490"),
        ("runner", r"not MLCommons' MLPerf Tiny runner"),
        ("dataset", r"a\.bin has 489 bytes; a kws01 input has 490"),
        ("no dataset", r"not an MLPerf Tiny dataset for kws01: no kws01/y_labels.csv"),
        ("streaming", r"sww01 streams audio through an interface board"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, case, message):
    model, benchmark, extra = (AD if case == "model" else KWS), "sww01" if case == "streaming" else "kws01", []
    if case == "runner":
        extra = ["--runner", str(tmp_path)]
    else:
        extra = ["--runner", str(RUNNER_ARCHIVE)]
    if case == "dataset":
        extra += ["--dataset", str(_bad_dataset(tmp_path / "data"))]
    if case == "no dataset":
        extra += ["--dataset", str(tmp_path)]
    done = _cli(str(model), "--board", "qemu-m4", "--benchmark", benchmark, *extra, cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert len(done.stderr.splitlines()) == 1 and done.stderr.startswith("lowtide: error: ")
    assert re.search(message, done.stderr), done.stderr


@pytest.mark.parametrize("model, benchmark_id", [(IC, "ic01"), (VWW, "vww01")])
def test_the_image_benchmarks_inputs_are_what_the_runner_reads(tmp_path, model, benchmark_id):
    """ic01 and vww01 end to end take minutes on qemu-m4 (docs/mlperf.md: their figures, from a run by hand): here
    their models' grammar, and the generated inputs as the runner's own datasets.py reads them."""
    spec = BENCHMARKS[benchmark_id]
    graph = load_model(model)
    protocol = mlperf_protocol(graph, spec)
    assert protocol.db_bytes == {"ic01": 32 * 32 * 3, "vww01": 96 * 96 * 3}[benchmark_id]
    assert (protocol.input_encoding, protocol.result, protocol.output_float32) == (
        INPUT_UINT8_AS_INT8,
        RESULT_SCORES,
        False,
    )
    assert graph.main.tensors[graph.main.outputs[0]].shape[-1] == spec.label_classes  # one score per class
    dataset = generate_dataset(tmp_path, spec, protocol.db_bytes, spec.label_classes)
    module = importlib.util.spec_from_file_location(
        "mlperf_runner_datasets", locate_runner(RUNNER_ARCHIVE, read_settings()) / "datasets.py"
    )
    runner_datasets = importlib.util.module_from_spec(module)
    module.loader.exec_module(runner_datasets)
    files = runner_datasets.DataSet(str(dataset.folder), LABELS_FILE)
    read = [files.get_file_by_index(i) for i in range(files.get_num_files())]
    assert len(read) == max(5, spec.label_classes)  # performance mode's five windows, and every class
    assert {len(data) for _, data in read} == {protocol.db_bytes}
    assert {truth["classes"] for truth, _ in read} == {str(spec.label_classes)}
    assert {int(truth["class"]) for truth, _ in read} == set(range(spec.label_classes))


_RUNNERS_THROUGHPUT = """
import json, sys
import numpy as np
from script import _ScriptInferStep
out = []
for n, t0, t1 in json.loads(sys.argv[1]):
    infer = {"elapsed_time": t1 - t0, "results": []}
    _ScriptInferStep(iterations=n)._print_AP_results(infer, "p")
    out.append(infer["throughput"])
print(json.dumps({"windows": out, "medians": [float(np.median(m)) for m in json.loads(sys.argv[2])]}))
"""


def test_lowtides_throughput_is_the_runners_own_code_to_the_bit(tmp_path):
    """window_throughput and the median against the runner's own functions (script.py, numpy's median), on windows
    of every size a board gives, a wrapped counter among them (T1 < T0: 0), and on odd and even counts of windows."""
    rng = random.Random(7)
    windows = [
        (n, t0, t0 + d)
        for n, t0, d in [
            (70, 10148793, 15373429),
            (1500, 5, 1),
            (20, 2**32 - 10, -(2**32) + 20),
            (70, 4000000000, -3999999000),
            (1, 0, 0),
        ]
    ]
    windows += [(rng.choice([1, 20, 70, 1500]), rng.randrange(2**32), rng.randrange(1, 2**31)) for _ in range(300)]
    medians = [[rng.uniform(0.1, 5000) for _ in range(rng.choice([1, 2, 4, 5, 6]))] for _ in range(100)]
    done = subprocess.run(
        [sys.executable, "-c", _RUNNERS_THROUGHPUT, json.dumps(windows), json.dumps(medians)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        env=dict(os.environ, PYTHONPATH=str(locate_runner(RUNNER_ARCHIVE, read_settings()))),
    )
    assert done.returncode == 0, done.stderr
    runners = json.loads(done.stdout.splitlines()[-1])
    assert [window_throughput(*w) for w in windows] == runners["windows"]
    assert runners["windows"][2:5] == [0, 0, 0]
    assert [statistics.median(m) for m in medians] == runners["medians"]


# --- the runner against the emulated boards -----------------------------------------------------------------------

# (model, benchmark, runtime, board). qemu-nucleo-f446re runs nucleo-f446re's own image, built with the ST platform
# from its archives: one model and one runtime, as its build and QEMU's netduinoplus2 are the slow ones.
CASES = [
    (KWS, "kws01", "compiled", "qemu-m4"),
    (KWS, "kws01", "tflm-cmsis-nn", "qemu-m4"),
    (AD, "ad01", "compiled", "qemu-m4"),
    (AD, "ad01", "tflm-cmsis-nn", "qemu-m4"),
    (KWS, "kws01", "compiled", "qemu-nucleo-f446re"),
]
# m-name-dut-[lowtide NAME]: the board the image was built for (qemu-nucleo-f446re runs nucleo-f446re's unmodified)
IMAGE_NAMES = {"qemu-m4": "qemu-mps2-an386", "qemu-nucleo-f446re": "nucleo-f446re"}


@pytest.fixture(scope="module", params=CASES, ids=lambda c: f"{c[1]}-{c[2]}-{c[3]}")
def runs(request, tmp_path_factory):
    """One performance and one accuracy run of the runner for a model, runtime and board (one firmware build)."""
    model, benchmark, runtime, board = request.param
    work = tmp_path_factory.mktemp(f"mlperf-{benchmark}-{runtime}-{board}")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LOWTIDE_PLATFORMIO_ARCHIVES", str(PLATFORMIO_ARCHIVES))
        performance = run_mlperf(
            model, board, benchmark, "performance", runner=RUNNER_ARCHIVE, runtime=runtime, work_dir=work
        )
        # Accuracy on a dataset of the test's own (the generated one goes with its run), which --dataset checks.
        # ad01's recordings cut into windows are the runner's doing, checked once: each window is 83 commands to QEMU.
        graph = load_model(model)
        dataset = generate_dataset(
            work / "datasets",
            BENCHMARKS[benchmark],
            mlperf_protocol(graph, BENCHMARKS[benchmark]).db_bytes,
            BENCHMARKS[benchmark].label_classes,
            seed=1,
            windows=2 if (runtime, board) == ("compiled", "qemu-m4") else 1,
        )
        accuracy = run_mlperf(
            model,
            board,
            benchmark,
            "accuracy",
            dataset=dataset.root,
            runner=RUNNER_ARCHIVE,
            runtime=runtime,
            work_dir=work,
        )
        # lowtide's own count of one invocation's instructions, through its own protocol on the same board
        measured = measure(model, board=board, runtime=runtime, iterations=1, warmup=0)
    return model, benchmark, runtime, board, performance, accuracy, measured


@needs_firmware_tools
def test_runner_throughput_is_lowtides_from_the_boards_instruction_count(runs):
    model, benchmark, runtime, board, performance, _, measured = runs
    windows = performance.windows
    assert len(windows) == len(performance.window_throughputs) == 5
    assert all(w.inferences == {"kws01": 70, "ad01": 1500}[benchmark] for w in windows)
    # lowtide's figure from the board's timestamps is the runner's: each window's as it printed it (every digit:
    # results.txt prints the float whole), the median to the 3 decimals it prints.
    assert tuple(w.throughput for w in windows) == performance.window_throughputs
    assert f"{performance.median_throughput_from_timestamps:.3f}" == f"{performance.median_throughput:.3f}"
    assert "T1 - T0" in performance.throughput_formula
    # On an emulator a timestamp is instructions * 1e6 // clock, at the clock the image itself reports (QEMU's
    # netduinoplus2 has no RCC: nucleo-f446re's image stays on its 16 MHz reset clock): each window's inferences
    # took that many instructions, to the one-microsecond truncation at each end.
    clock = get_board_spec(board).clock_hz
    assert clock == measured.clock_hz == {"qemu-m4": 25_000_000, "qemu-nucleo-f446re": 16_000_000}[board]
    for w in windows:
        per_inference = (w.end_us - w.start_us) * clock / 1e6 / w.inferences
        # lowtide's own count of one invocation on its own random input: a window's inference also copies the input
        # in (the compiled runtime writes over it; TFLM also resets), reads the counter, and runs on the runner's
        # input; m-lap-us- T0's line is inside the window too, as in MLCommons' reference DUT.
        assert per_inference == pytest.approx(measured.latency_cycles.median, rel=5e-3)
    # The cycle model times each inference the same way (the tests read QEMU's plugin header from ../shared): the
    # median of every inference's modelled cycles is what measure models for one invocation, to the input copy
    # (ad01 with TFLM + CMSIS-NN on qemu-m4: 720,057 against 716,089 cycles, 0.55%).
    assert performance.cycle_model == CycleModelInfo("cortex-m4f") == measured.cycle_model
    assert performance.modelled_cycles_per_inference == pytest.approx(measured.modelled_cycles.median, rel=1e-2)
    assert performance.modelled_cycles_per_inference > measured.latency_cycles.median
    log = (Path(performance.session_dir) / "log.txt").read_text()
    assert "Runtime requirements have been met." in log
    assert f"Device name retrieved: lowtide {IMAGE_NAMES[board]}\n" in log


def _host_scores(model: Path, benchmark: str, inputs: list[bytes]) -> list[list[float]]:
    """What the firmware's m-results should say for each input, from the host TFLM."""
    graph = load_model(model)
    protocol = mlperf_protocol(graph, BENCHMARKS[benchmark])
    if benchmark == "ad01":
        floats = [np.frombuffer(data, "<f4") for data in inputs]
        scale = np.float32(protocol.input_scale)
        quantized = [
            np.clip(
                np.trunc(x / scale + np.copysign(np.float32(0.5), x)) + protocol.input_zero_point, -128, 127
            ).astype(np.int8)
            for x in floats
        ]
    else:
        quantized = [np.frombuffer(data, np.int8) for data in inputs]
    shape = graph.main.tensors[graph.main.inputs[0]].shape
    outputs = oracle.run_sequence(
        model.read_bytes(),
        [[q.reshape(shape)] for q in quantized],
        str(model),
        reset_before=frozenset(range(len(inputs))),
    )
    scores = []
    for x, (out,) in zip(inputs, outputs):
        values = (out.astype(np.float32).ravel() - protocol.output_zero_point) * np.float32(protocol.output_scale)
        if benchmark == "ad01":
            diff = values - np.frombuffer(x, "<f4")
            total = np.float32(0)
            for d in diff:
                total = np.float32(total + d * d)
            scores.append([float(total / np.float32(len(diff)))])
        else:
            scores.append([float(v) for v in values])
    return scores


@needs_firmware_tools
def test_runner_accuracy_scores_are_the_host_tflms(runs):
    model, benchmark, runtime, _, _, accuracy, _ = runs
    entries = [e for e in session_results(accuracy) if "infer" in e]
    folder = Path(accuracy.dataset) / benchmark
    inputs, windows_sent = [], {}
    for entry in entries:
        data = (folder / entry["file"]).read_bytes()
        if benchmark == "ad01":
            # the runner's windows of each recording, in order: bytes_to_send every stride
            index = windows_sent[entry["file"]] = windows_sent.get(entry["file"], -1) + 1
            start = index * int(entry["stride"])
            data = data[start : start + int(entry["bytes_to_send"])]
        inputs.append(data)
    expected = _host_scores(model, benchmark, inputs)
    for entry, scores in zip(entries, expected):
        assert entry["infer"]["results"] == pytest.approx([round(s, 6) for s in scores], abs=2e-6, rel=1e-5)
    assert accuracy.top1_percent is not None and accuracy.auc is not None
    if benchmark == "kws01":
        labels = [int(e["class"]) for e in entries]
        top1 = 100 * np.mean([int(np.argmax(s)) == label for s, label in zip(expected, labels)])
        assert accuracy.top1_percent == round(float(top1), 1)
    assert accuracy.median_throughput is None


@needs_firmware_tools
def test_the_tables_keep_every_figure_whole_at_80_columns(runs):
    """`lowtide mlperf`'s table of both runs at 80 columns and at 200 (tests/test_tables_80.py: every command's)."""
    *_, performance, accuracy, _ = runs
    assert performance.median_throughput is not None and performance.median_throughput_from_timestamps is not None
    assert accuracy.top1_percent is not None and accuracy.auc is not None
    throughputs = [performance.median_throughput, *performance.window_throughputs]
    for result, figures in (
        (performance, [*(f"{t:.3f}" for t in throughputs), f"{performance.median_throughput_from_timestamps:.6f}"]),
        (accuracy, [f"{accuracy.top1_percent:.1f}", f"{accuracy.auc:.3f}"]),
    ):
        for width in (80, 200):
            assert_whole(rendered(mlperf_table(result), width), width, figures)


# --- a real Nucleo ------------------------------------------------------------------------------------------------


@needs_firmware_tools
def test_the_mlperf_image_builds_for_a_real_nucleo(tmp_path, monkeypatch):
    """nucleo-f446re (USART2 to the ST-LINK, DWT cycles at 180 MHz), built offline with the grammar in place of
    lowtide's protocol: byte for byte the image qemu-nucleo-f446re runs above. Silicon is not here: on the real part
    it is only built, not run."""
    env = dict(os.environ, PYTHONPATH=str(REPO / "host"), LOWTIDE_PLATFORMIO_ARCHIVES=str(PLATFORMIO_ARCHIVES))
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "from lowtide.cli import main; main()",
            "build",
            str(KWS),
            "--board",
            "nucleo-f446re",
            "--runtime",
            "compiled",
            "--mlperf",
            "kws01",
            "--json",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        check=False,
        timeout=1500,
    )
    assert done.returncode == 0, done.stderr
    image = json.loads(done.stdout)
    assert image["board"] == "nucleo-f446re" and not image["emulated"]
    assert image["static_ram_bytes"] + image["stack_bytes"] <= image["sram_capacity_bytes"]
    symbols = subprocess.run(["arm-none-eabi-nm", image["elf"]], capture_output=True, text=True, check=True).stdout
    names = {line.split()[-1] for line in symbols.splitlines()}
    assert {"lt_mlperf_push_byte", "lt_dwt_cycles", "HAL_UART_Init"} <= names
    assert "lt_server_push_byte" not in names  # lowtide's own protocol is not in this image
    strings = subprocess.run(["arm-none-eabi-strings", image["elf"]], capture_output=True, text=True, check=True).stdout
    assert "m-model-[kws01]" in strings and "m-name-dut-[lowtide " in strings
    monkeypatch.setenv("LOWTIDE_PLATFORMIO_ARCHIVES", str(PLATFORMIO_ARCHIVES))
    protocol = mlperf_protocol(load_model(KWS), BENCHMARKS["kws01"]).firmware_defines()
    emulated = build_board_firmware(
        get_board_spec("qemu-nucleo-f446re"),
        KWS,
        RUNTIMES[Runtime.COMPILED],  # cached
        protocol=protocol,
    )
    assert Path(image["elf"]).read_bytes() == emulated.elf.read_bytes()
