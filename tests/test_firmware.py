"""The measurement firmware on the emulated boards: offline builds, boot and HELLO in QEMU, `lowtide measure` against
the host TFLM interpreter, and the on-target unit tests through `pio test`.

Needs arm-none-eabi-gcc, qemu-system-arm and PlatformIO (scripts/install-firmware-deps.sh installs them; CI runs it
before the tests). Builds run inside an empty network namespace where the machine allows one, which proves they need
no registry.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, SHARED_MODELS, needs_firmware_tools, reference_figures
from lowtide.compile import compile_model
from lowtide.compile.codegen import arena_plan
from lowtide.device.boards import known_boards
from lowtide.device.drivers.qemu import run_emulator
from lowtide.device.protocol import PROTOCOL_VERSION, Counter
from lowtide.device.session import DeviceSession
from lowtide.device.spec import load_board_specs
from lowtide.errors import LowtideError
from lowtide.pipeline.firmware import firmware_project
from lowtide.pipeline.measure import measure
from lowtide.project import platformio_environment
from lowtide.rewrite import Objective, rewrite_auto
from lowtide.runtimes import RUNTIMES, Runtime
from lowtide.settings import read_settings
from lowtide.storage import cache_root
from lowtide.validation import load_model
from support.models import unsupported_model

pytestmark = needs_firmware_tools

REFERENCE = reference_figures()
HELLO_WORLD = SHARED_MODELS / "tflm_hello_world_int8.tflite"
KWS_DSCNN = SHARED_MODELS / "mlperf_kws_dscnn_int8.tflite"
# Models measured on qemu-m4 against the host TFLM: every shared model. mobilenet_v2_224 fits the MPS2's
# 4 MiB + 4 MiB (2.4 MB arena, 3.4 MB of weights); the keyword_scrambled (SVDF), mww (CALL_ONCE, resource variables)
# and LSTM models keep state between runs.
SWEEP_MODELS = [
    "tflm_person_detect",
    "mcunet_vww",
    "mcunet_detection",
    "mlperf_ad01_int8",
    "mlperf_ic_resnet8_int8",
    "mlperf_kws_dscnn_int8",
    "mlperf_vww_96_int8",
    "mlperf_str_ww_int8",
    "mlperf_ic_resnet_large_int8",
    "mlperf_ic_resnet_6blk_750k_int8",
    "mlperf_vww_96_14blk_int8",
    "mlperf_vww_96_20blk_int8",
    "mltk_image_classification",
    "mltk_rock_paper_scissors",
    "mltk_image_example1",
    "tflm_mobilenet_v2_quantized_224",
    "mltk_anomaly_detection",
    "tflm_keyword_scrambled",
    "tflm_keyword_scrambled_8bit",
    "mww_v1_okay_nabu",
    "mww_v2_okay_nabu",
    "mww_v2_vad",
    "tflm_micro_speech_lstm",
    "tflm_mnist_lstm_int8",
    "tflm_dtln_noise_suppression",
]


def _offline_prefix() -> list[str]:
    """`unshare -n`: a network namespace with no interface up, where one can be made (root, or user namespaces)."""
    if shutil.which("unshare"):
        for prefix in (["unshare", "-n"], ["unshare", "-rn"]):
            if subprocess.run([*prefix, "true"], capture_output=True).returncode == 0:
                return prefix
    return []


# The checkout's own PlatformIO project (a developer's `pio run` / `pio test` in lowtide's source): its core dir,
# where scripts/install-firmware-deps.sh registers the tool-scons shim.
CHECKOUT_CORE_DIR = REPO / ".pio-core"


def _pio(*args: str, build_dir: Path | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    env = platformio_environment(
        read_settings(),
        {
            "PLATFORMIO_CORE_DIR": str(CHECKOUT_CORE_DIR),
            **({"PLATFORMIO_BUILD_DIR": str(build_dir)} if build_dir else {}),
        },
    )
    return subprocess.run(
        [*_offline_prefix(), sys.executable, "-m", "platformio", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def build_firmware(spec, model: Path | None):
    graph = load_model(model) if model is not None else None
    return firmware_project(spec, graph, RUNTIMES[Runtime.COMPILED], settings=read_settings()).elf


@pytest.fixture(scope="module")
def checkout_packages():
    """The tool-scons shim in the checkout's PlatformIO core dir, as install-firmware-deps.sh leaves it."""
    if not (CHECKOUT_CORE_DIR / "packages" / "tool-scons.pio-link").is_file():
        done = _pio("pkg", "install", "-g", "-t", f"symlink://{REPO / 'firmware' / 'tools' / 'tool-scons'}")
        assert done.returncode == 0, done.stdout + done.stderr


def test_board_files_describe_every_platformio_env():
    specs = load_board_specs()
    assert {"qemu-m4", "qemu-m7"} <= set(known_boards())  # what `lowtide measure --board` accepts
    ini = (REPO / "platformio.ini").read_text()
    assert {
        "qemu-m4",
        "qemu-m7",
        "qemu-m33",
        "qemu-m55",
        "qemu-nucleo-f446re",
        "nucleo-f446re",
        "nucleo-f401re",
        "nucleo-l4r5zi",
        "nucleo-f746zg",
        "nucleo-h743zi",
        "nano33ble",
        "esp32-s3-devkitc-1",
        "pico",
    } <= set(specs)
    for spec in specs.values():
        assert f"[env:{spec.platformio_env}]" in ini, spec.name
        assert spec.sram_bytes > 0 and spec.flash_bytes > 0 and spec.clock_hz > 0
        assert spec.emulated or (spec.serial.baud > 0 and spec.serial.usb_ids), spec.name
    assert [s.name for s in specs.values() if s.emulated] == [
        "qemu-m33",
        "qemu-m4-banks",
        "qemu-m4",
        "qemu-m55",
        "qemu-m7",
        "qemu-nucleo-f446re",
    ]
    assert "{port}" in " ".join(specs["qemu-m4"].emulator_command) and "-icount" in specs["qemu-m4"].emulator_command


def test_pio_run_builds_both_emulated_envs_offline(tmp_path, checkout_packages):
    # A bare `pio run` builds the default envs: the two emulated boards, from scratch, without the network.
    result = _pio("run", build_dir=tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    for env in ("qemu-m4", "qemu-m7"):
        elf = tmp_path / env / "firmware.elf"
        assert elf.read_bytes()[:4] == b"\x7fELF"
        assert re.search(rf"^{env}\s+SUCCESS", result.stdout, re.MULTILINE)


def test_firmware_boots_in_qemu_and_answers_hello():
    spec = load_board_specs()["qemu-m7"]
    elf = build_firmware(spec, None)
    with run_emulator(spec.emulator_command, elf, timeout=10) as link:
        session = DeviceSession(link, timeout=5)
        hello = session.hello()
        again = session.hello()  # a second request, answered with its own sequence number
    assert hello.protocol_version == PROTOCOL_VERSION
    assert hello.board == "qemu-mps2-an500" and hello.runtime == "none"
    assert not hello.model_ready and (hello.input_count, hello.output_count) == (0, 0)
    # The board file's clock is the one the board reports; its counter counts instructions, at most 256 a RUN.
    assert hello.clock_hz == spec.clock_hz == 25_000_000 and hello.counter is Counter.INSTRUCTIONS
    assert hello.max_iterations == 256 and hello.max_payload == 1000
    assert again == hello
    assert session.resends == 0 and session.damaged_frames == 0


def test_result_carries_the_stack_high_water_mark():
    spec = load_board_specs()["qemu-m4"]
    elf = build_firmware(spec, KWS_DSCNN)
    with run_emulator(spec.emulator_command, elf, timeout=10) as link:
        session = DeviceSession(link, timeout=10)
        hello = session.hello()
        assert hello.input_count == 1
        session.set_input(0, bytes(490))  # the 49x10 int8 spectrogram, all zero
        result = session.run(warmup=0, iterations=1)
    assert result.stack_size_bytes == 0x10000  # the linker script's stack region
    assert 0 < result.stack_high_water_bytes < result.stack_size_bytes
    assert not session.logs  # v1 sent it as a LOG line; v2 says nothing it does not have to
    # the compiled runtime has no allocator: used is its plan, lowtide's plan for the compiled runtime
    assert (
        result.arena_used_bytes
        == result.arena_planned_bytes
        == compile_model(load_model(KWS_DSCNN)).arena_bytes
        == 8_384  # row chains: each layer over its own input (test_compile_rows)
    )
    # instructions are not time: an emulated board reports no microseconds
    assert result.counter_median > 0 and result.us_median is None


@pytest.mark.parametrize("model", [HELLO_WORLD, KWS_DSCNN], ids=lambda p: p.stem)
def test_measure_on_qemu_matches_host_tflm_and_is_deterministic(model):
    first = measure(model, "qemu-m4", iterations=2, warmup=1, timeout=20)
    second = measure(model, "qemu-m4", iterations=3, warmup=0, timeout=20)
    profiled = measure(model, "qemu-m4", iterations=1, warmup=0, timeout=20, seed=1, profile_ops=True)
    head = int(REFERENCE[model.stem]["tflm_head"])
    compiled = compile_model(load_model(model)).arena_bytes  # lowtide's plan for the compiled runtime
    for result in (first, second, profiled):
        assert result.outputs_match, result.mismatched_outputs
        assert result.runtime == "lowtide-compiled" and result.board == "qemu-mps2-an386"
        # the board runs lowtide's compiled plan (its fast kernels' scratch included); TFLM's head is predicted
        assert result.board_planned_bytes == compiled and result.arena_planned_bytes == head
        assert 0 < result.arena_high_water_bytes <= result.board_planned_bytes
        assert result.arena_capacity_bytes > result.board_planned_bytes  # painted beyond the plan, too
        cycles = result.latency_cycles
        assert cycles.unit == "instructions" and cycles.min == cycles.median == cycles.max > 0
        assert result.latency is None and result.clock_hz == 25_000_000
    # Two QEMU boots, another warm-up count: the same instruction count, because the tick phase is aligned before
    # every invocation.
    assert first.latency_cycles.min == second.latency_cycles.min
    assert first.arena_high_water_bytes == second.arena_high_water_bytes
    # Per-operator counts: one per operator, adding up to no more than the whole (the hooks cost instructions too).
    assert len(profiled.op_cycles) == int(REFERENCE[model.stem]["ops"])
    assert 0 < sum(profiled.op_cycles) <= profiled.latency_cycles.min


# 3 min 47 s warm on 2 shared cores: mostly sending inputs over QEMU's emulated UART (about 8 KiB/s:
# mcunet_detection's 240 KB input takes 30-40 s), then mobilenet_v2 and resnet_6blk (3.6 and 5 G instructions a run).
@pytest.mark.slow
@pytest.mark.parametrize("name", SWEEP_MODELS)
def test_shared_models_on_qemu_m4(name):
    # Three runs in one boot (each boot costs an input upload); boots are compared by
    # test_measure_on_qemu_matches_host_tflm_and_is_deterministic. One warm-up: a CALL_ONCE runs its init
    # subgraph in the first invocation only.
    result = measure(SHARED_MODELS / f"{name}.tflite", "qemu-m4", iterations=3, warmup=1, timeout=120)
    assert result.outputs_match, result.mismatched_outputs  # bit-identical with the host TFLM, same inputs
    head = int(REFERENCE[name]["tflm_head"])
    # lowtide's plan for the compiled runtime
    compiled = compile_model(load_model(SHARED_MODELS / f"{name}.tflite")).arena_bytes
    assert result.board_planned_bytes == compiled and result.arena_planned_bytes == head
    assert 0 < result.arena_high_water_bytes <= result.board_planned_bytes
    cycles = result.latency_cycles
    assert cycles.iterations == 3 and cycles.min == cycles.max > 0, cycles  # the same count on every run
    # the arena is a static array: the plan plus 1 KiB of painted slack, which the ELF's split gives the harness
    assert result.static_ram.arena_bytes == compiled and result.static_ram_bytes >= compiled + 1024
    assert 0 < result.stack_high_water_bytes < result.stack_size_bytes == 0x10000


def test_tiled_model_with_in_place_strips_runs_on_qemu_m4_in_its_planned_arena(tmp_path):
    """mlperf_vww_96 rewritten with its input cut into row strips by a SPLIT_V planned inside the input's bytes:
    the compiled firmware, which copies nothing for the in-place SPLIT_V, computes what the host TFLM computes
    within the planned half of the stock head."""
    # the compiled runtime has no per-operator tail: its RAM is the head
    rewritten = rewrite_auto(load_model(SHARED_MODELS / "mlperf_vww_96_int8.tflite"), objective=Objective.HEAD)
    assert any(t.split_source for t in rewritten.tilings) and rewritten.head_bytes <= 73_728 // 2
    out = tmp_path / "vww_tiled.tflite"
    out.write_bytes(rewritten.model.data)
    result = measure(out, "qemu-m4", iterations=1, warmup=0, timeout=120)
    assert result.outputs_match, result.mismatched_outputs
    # the rewritten model's plan (TFLM's rules) with the fast kernels' scratch fitted around it, or the compiled
    # runtime's own plan where that is smaller
    plan = arena_plan(load_model(out))
    assert result.arena_planned_bytes == rewritten.head_bytes
    assert result.board_planned_bytes == plan.head_bytes == compile_model(load_model(out)).arena_bytes
    assert plan.head_bytes <= rewritten.head_bytes + max(plan.fast_scratch_bytes.values())
    assert 0 < result.arena_high_water_bytes <= plan.head_bytes


def test_measure_cli_json_on_qemu_m4():
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "lowtide",
            "measure",
            str(HELLO_WORLD),
            "--board",
            "qemu-m4",
            "--iterations",
            "3",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["outputs_match"] is True
    assert report["board"] == "qemu-mps2-an386"
    assert (
        0 < report["arena_high_water_bytes"] <= report["board_planned_bytes"] == 32
    )  # activations only: one-row FCs need no scratch
    assert report["latency_cycles"]["min"] == report["latency_cycles"]["max"] > 0
    assert report["latency_cycles"]["unit"] == "instructions" and report["latency"] is None
    # from the ELF: the 1,056-byte arena (32 B planned, 1 KiB painted slack), the 1-byte staging buffer and the
    # protocol's buffers; a stateless compiled model has no globals of its own beyond the C library's
    split = report["static_ram"]
    assert split["arena_bytes"] == 32 and split["harness_bytes"] >= 1024 + 1
    assert split["arena_bytes"] + split["runtime_bytes"] + split["harness_bytes"] == report["static_ram_bytes"]
    assert split["runtime_bytes"] < 256 and split["stack_bytes"] == 0x10000
    assert 0 < report["stack_high_water_bytes"] < report["stack_size_bytes"] == 0x10000


def test_measure_reports_a_model_the_compiler_rejects(tmp_path):
    # A float L2_POOL_2D has no kernel in the compiled runtime: the user gets the compiler's one line, before
    # PlatformIO runs (the model is compiled when its project is written), and no project is left.
    path = unsupported_model(tmp_path / "l2_pool.tflite")
    projects = set((cache_root(read_settings()) / "firmware").glob("*l2_pool*"))
    with pytest.raises(LowtideError) as failure:
        measure(path, "qemu-m4", iterations=1, timeout=20)
    message = str(failure.value)
    assert message == (
        f"{path}: cannot compile operator 0 (L2_POOL_2D float32 -> float32): no kernel in the lowtide runtime"
    )
    assert set((cache_root(read_settings()) / "firmware").glob("*l2_pool*")) == projects


def test_pio_test_runs_firmware_unit_tests_in_qemu(checkout_packages):
    result = _pio("test", "-e", "qemu-m4")
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    verdicts = [line for line in result.stdout.splitlines() if line.startswith(("PASS ", "FAIL "))]
    assert len(verdicts) >= 19 and all(v.startswith("PASS ") for v in verdicts)
    assert "PASS test_cycles_are_deterministic_at_any_phase" in verdicts
    assert "PASS test_run_with_zero_iterations_or_no_model_is_refused" in verdicts
    assert "PASS test_run_over_the_iteration_limit_is_refused" in verdicts
