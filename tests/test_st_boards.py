"""The ST Nucleo boards: built offline with PlatformIO's genuine ST platform and the STM32Cube HAL from archives
(`LOWTIDE_PLATFORMIO_ARCHIVES`), inside a network namespace with no interface where one can be made; and the
unmodified nucleo-f446re image measured in QEMU's netduinoplus2 (`qemu-nucleo-f446re`).

Silicon is not here: what the real boards' images do on their parts (clock tree, UART, DWT) is only built, not run.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import SHARED_MODELS, needs_firmware_tools
from lowtide.compile.codegen import arena_plan
from lowtide.device.drivers.platformio import RAM_SECTIONS, elf_sections, linker_regions, read_firmware_image
from lowtide.device.spec import banks_cover, get_board_spec
from lowtide.device.static_ram import static_ram_split
from lowtide.project import env_option
from lowtide.resources import BOARDS_DIR, DATA_DIR
from lowtide.runtimes import ARENA_SLACK_BYTES, runtime_named
from lowtide.settings import read_settings
from lowtide.tflm.sizer import predict_arena32
from lowtide.tflm.tree import KernelSet
from lowtide.validation import load_model
from support.builder_models import mobilenet_v2

ARCHIVES = SHARED_MODELS.parent / "platformio"
KWS = SHARED_MODELS / "mlperf_kws_dscnn_int8.tflite"
ST_BOARDS = ("nucleo-f446re", "nucleo-f401re", "nucleo-l4r5zi", "nucleo-f746zg", "nucleo-h743zi")
RUNTIMES = ("compiled", "tflm", "tflm-cmsis-nn")

pytestmark = [
    needs_firmware_tools,
    pytest.mark.skipif(
        not (ARCHIVES / "platform-ststm32.tar.gz").is_file(), reason=f"no PlatformIO archives in {ARCHIVES}"
    ),
]


def _offline_prefix() -> list[str]:
    """`unshare -n`: a network namespace with no interface up, where one can be made (root, or user namespaces)."""
    for prefix in (["unshare", "-n"], ["unshare", "-rn"]):
        if shutil.which("unshare") and subprocess.run([*prefix, "true"], capture_output=True).returncode == 0:
            return prefix
    return []


def lowtide(
    *args: str, archives: Path | str = ARCHIVES, offline: bool = True, timeout: float = 1500
) -> subprocess.CompletedProcess:
    """The CLI with the archives; `offline`: in a network namespace with no interface (no loopback either, so
    not for QEMU's TCP serial port)."""
    env = {**os.environ, "LOWTIDE_PLATFORMIO_ARCHIVES": str(archives)}
    prefix = _offline_prefix() if offline else []
    return subprocess.run(
        [*prefix, sys.executable, "-c", "from lowtide.cli import main; main()", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def one_line_error(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("lowtide: error: ") and "Traceback" not in done.stderr, lines
    return lines[0]


def build(board: str, runtime: str) -> dict:
    done = lowtide("build", str(KWS), "--board", board, "--runtime", runtime, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


# The FPU each board's image is built for, as `readelf -A` shows the linked ELF (TFLM's library merged with the
# firmware's objects): a library built for another core's FPU would show through. True: single precision only.
CORE_FPUS = {
    "cortex-m4f": ("VFPv4-D16", True),
    "cortex-m7-sp": ("FPv5/FP-D16 for ARMv8", True),
    "cortex-m7": ("FPv5/FP-D16 for ARMv8", False),
}


def symbol_names(elf: Path) -> set[str]:
    listing = subprocess.run(["arm-none-eabi-nm", "-C", elf], capture_output=True, text=True, check=True).stdout
    return {line.split(maxsplit=2)[-1] for line in listing.splitlines()}


# 15 builds of the one shared model (KWS), kept in the user cache per env, model and runtime: 2 s each warm. Cold,
# each compiles its board's STM32Cube HAL (25-60 s), and the first of a core and kernel set `make tflm-lib` did not
# build compiles its TFLM library (cortex-m7-sp reference and CMSIS-NN for the F746ZG, cortex-m7 CMSIS-NN for the
# H743ZI: 8-9 min each on 2 cores shared with other jobs).
@pytest.mark.parametrize("runtime", RUNTIMES)
@pytest.mark.parametrize("board", ST_BOARDS)
def test_each_st_board_builds_offline_with_each_runtime(board, runtime):
    spec = get_board_spec(board)
    report = build(board, runtime)
    assert report["board"] == board and report["runtime"] == runtime and not report["emulated"]
    elf = Path(report["elf"])
    # The generated project names the unpacked archives, not the registry.
    ini = (Path(report["project_dir"]) / "platformio.ini").read_text()
    assert "platform = symlink://" in ini and "platformio/toolchain-gccarmnoneeabi@symlink://" in ini

    # The board file states the whole memory map of the env's linker script, and every section of the ELF lies in
    # it: .data, .bss (the arena) and the stack in RAM regions, the code and weights in flash.
    regions = linker_regions(DATA_DIR / env_option(spec.platformio_env, spec.platformio_config, "board_build.ldscript"))
    assert sum(r.length for r in regions if r.writable) == spec.sram_bytes == report["sram_capacity_bytes"]
    assert sum(r.length for r in regions if not r.writable) == spec.flash_bytes == report["flash_capacity_bytes"]
    sections = [section for section in elf_sections(elf, read_settings()) if section.address and section.size]
    assert {s.name for s in sections} >= {".isr_vector", ".text", ".data", ".bss", ".stack"}
    for section in sections:
        if section.name.startswith(".lt_arena."):  # TFLM's arena in a memory of the board file's defaults (H743)
            assert banks_cover(spec, section.address, section.size), section
            continue
        placed = [r for r in regions if r.holds(section)]
        assert len(placed) == 1 and placed[0].writable == section.name.startswith(RAM_SECTIONS), (section, regions)
    image = read_firmware_image(elf, spec.platformio_env, read_settings())
    assert (image.flash_bytes, image.static_ram_bytes, image.stack_bytes) == (
        report["flash_bytes"],
        report["static_ram_bytes"],
        report["stack_bytes"],
    )
    assert 0 < image.ram_bytes <= spec.sram_bytes and 0 < image.flash_bytes <= spec.flash_bytes

    # The arena array in the image is what the fit check counted before building: TFLM's arena as lowtide predicts
    # it for the board's core and kernels (head and tail, to the byte), or the compiled plan with its painted
    # slack; and the estimate is a lower bound of the built image.
    graph = load_model(KWS)
    firmware = runtime_named(runtime)
    kernels = firmware.kernels
    predicted = predict_arena32(graph, kernels, read_settings(), spec.core) if kernels is not None else None
    estimate = firmware.estimate_footprint(graph, predicted)
    if predicted is not None and spec.persistent_region is not None:  # the board file's default: TFLM's two arenas
        assert predicted.split is not None
        assert (report["non_persistent_arena_bytes"], report["persistent_arena_bytes"]) == (
            predicted.split.non_persistent_arena_bytes,
            predicted.split.persistent_arena_bytes,
        )
        declared = {f".lt_arena.{spec.persistent_region}": report["persistent_arena_bytes"]}
        if spec.arena_region:
            declared[f".lt_arena.{spec.arena_region}"] = report["non_persistent_arena_bytes"]
        assert {section.name: section.size for section in sections if section.name in declared} == declared
    else:
        arena = static_ram_split(elf, image.static_ram_bytes, image.stack_bytes, arena_slack_bytes=0).arena_bytes
        assert arena == estimate.arena_bytes == report["arena_capacity_bytes"]
        if predicted is None:
            assert arena == arena_plan(graph).head_bytes + ARENA_SLACK_BYTES
        else:
            assert arena == predicted.arena_bytes >= predicted.used_bytes > 0
        assert estimate.arena_bytes + estimate.static_ram_bytes <= image.static_ram_bytes
    assert estimate.image_bytes <= image.flash_bytes

    # The runtime linked is the one asked for, built for the board's FPU with the hard-float ABI.
    symbols = symbol_names(elf)
    assert ("tflite::MicroInterpreter::Invoke()" in symbols) == (kernels is not None)
    assert ("arm_convolve_wrapper_s8" in symbols) == (runtime == "tflm-cmsis-nn")  # KWS's CONV_2Ds in CMSIS-NN
    attributes = subprocess.run(["arm-none-eabi-readelf", "-A", elf], capture_output=True, text=True, check=True).stdout
    fp_arch, single_precision = CORE_FPUS[spec.core]
    assert f"Tag_FP_arch: {fp_arch}\n" in attributes and "Tag_ABI_VFP_args: VFP registers" in attributes
    assert ("Tag_ABI_HardFP_use: SP only" in attributes) == single_precision


def test_boards_lists_the_st_boards_as_buildable_with_the_archives():
    done = lowtide("boards", "--json")
    assert done.returncode == 0, done.stderr
    boards = {b["name"]: b for b in json.loads(done.stdout)["boards"]}
    for name in ST_BOARDS:
        assert boards[name]["buildable_here"], boards[name]
        assert boards[name]["runtimes"] == list(RUNTIMES)
    assert boards["qemu-nucleo-f446re"]["emulated"] and boards["qemu-nucleo-f446re"]["buildable_here"]


def test_a_missing_framework_archive_is_one_line(tmp_path):
    (tmp_path / "platform-ststm32.tar.gz").symlink_to(ARCHIVES / "platform-ststm32.tar.gz")
    message = one_line_error(lowtide("build", str(KWS), "--board", "nucleo-f446re", archives=tmp_path))
    assert f"no framework-stm32cubef4.tar.gz in {tmp_path} (LOWTIDE_PLATFORMIO_ARCHIVES)" in message
    message = one_line_error(lowtide("build", str(KWS), "--board", "nucleo-f446re", archives=tmp_path / "nope"))
    assert f"LOWTIDE_PLATFORMIO_ARCHIVES names {tmp_path / 'nope'}, which is not a folder" in message


def test_an_unknown_st_board_is_one_line(tmp_path):
    (tmp_path / "envs.ini").write_text("[env:nucleo-f999]\nextends = env:nucleo-f446re\nboard = nucleo_f999zz\n")
    text = (BOARDS_DIR / "nucleo-f446re.toml").read_text().replace('"nucleo-f446re"', '"nucleo-f999"')  # name, env
    (tmp_path / "f999.toml").write_text(text.replace("[serial]", 'platformio_config = "envs.ini"\n\n[serial]'))
    message = one_line_error(lowtide("build", str(KWS), "--board", str(tmp_path / "f999.toml")))
    assert "PlatformIO's ststm32 platform has no board 'nucleo_f999zz'" in message


def test_a_board_file_whose_memory_does_not_fit_the_part_is_one_line(tmp_path):
    text = (BOARDS_DIR / "nucleo-f446re.toml").read_text().replace("sram_bytes = 131072", "sram_bytes = 262144")
    (tmp_path / "big.toml").write_text(text)
    message = one_line_error(lowtide("build", str(KWS), "--board", str(tmp_path / "big.toml")))
    assert "sram_bytes = 262,144 is more than its [[memory]] banks hold (131,072 B)" in message
    # Without banks the figure is checked against the linker script's memory map instead.
    text = text.split("\n# The part's RAM banks")[0]
    (tmp_path / "big.toml").write_text(text)
    message = one_line_error(lowtide("build", str(KWS), "--board", str(tmp_path / "big.toml")))
    assert (
        "sram_bytes = 262,144 does not fit the part: nucleo-f446re's memory map "
        "(firmware/bsp/stm32/ld/stm32f446re.ld) has 131,072 B"
    ) in message


# The STM32H743's RAM is 1 MiB in banks (RM0433): none holds more than the AXI SRAM's 512 KiB.
_KERNELS = {"tflm": KernelSet.REFERENCE, "tflm-cmsis-nn": KernelSet.CMSIS_NN}


@pytest.mark.parametrize("runtime", ["tflm", "tflm-cmsis-nn"])
def test_the_h743_builds_a_model_over_512_kib_with_its_arenas_in_two_banks(tmp_path, runtime):
    """MobileNetV2 at 0.75 width on 120x120 inputs: TFLM's arena is 547 KB, more than any bank; its head (432 KB)
    goes into the AXI SRAM beside .data and .bss, its persistent tail (115 KB) into SRAM1."""
    model = tmp_path / "mobilenet_v2_0.75_120.tflite"
    model.write_bytes(mobilenet_v2(resolution=120, width=0.75))
    spec = get_board_spec("nucleo-h743zi")
    banks = {bank.name: bank for bank in spec.memories}
    arena = predict_arena32(load_model(model), _KERNELS[runtime], read_settings(), spec.core)
    assert arena.split is not None
    assert arena.arena_bytes > max(bank.size_bytes for bank in spec.memories) == banks["axi_sram"].size_bytes

    # One arena (not the board file's split): refused before building, with the bank it overflows (the sum of the
    # banks would hold it).
    message = one_line_error(
        lowtide("build", str(model), "--board", spec.name, "--runtime", runtime, "--arena-region", "axi_sram")
    )
    assert f"arena {arena.arena_bytes:,} B > axi_sram of nucleo-h743zi (524,288 B = 512 KiB)" in message

    done = lowtide(
        "build", str(model), "--board", spec.name, "--runtime", runtime,
        "--arena-region", "axi_sram", "--persistent-region", "sram1", "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert (report["non_persistent_arena_bytes"], report["persistent_arena_bytes"]) == (
        arena.split.non_persistent_arena_bytes,
        arena.split.persistent_arena_bytes,
    )
    assert report["non_persistent_arena_bytes"] + report["persistent_arena_bytes"] > 512 * 1024

    # The linked image against the part's map: each arena its predicted size, in its bank; every other RAM section
    # in the bank the linker script gives it (.data, .bss in the AXI SRAM, the stack in the DTCM).
    sections = {s.name: s for s in elf_sections(Path(report["elf"]), read_settings()) if s.address and s.size}
    placed = {
        ".lt_arena.axi_sram": ("axi_sram", arena.split.non_persistent_arena_bytes),
        ".lt_arena.sram1": ("sram1", arena.split.persistent_arena_bytes),
        ".data": ("axi_sram", None),
        ".bss": ("axi_sram", None),
        ".stack": ("dtcm", 32768),
    }
    for name, (bank_name, size) in placed.items():
        section, bank = sections[name], banks[bank_name]
        assert bank.address <= section.address and section.address + section.size <= bank.end, (section, bank)
        assert size is None or section.size == size, section
    axi = [s for s in sections.values() if banks["axi_sram"].address <= s.address < banks["axi_sram"].end]
    assert sum(s.size for s in axi) <= banks["axi_sram"].size_bytes
    assert sections[".lt_arena.axi_sram"].address >= sections[".bss"].address + sections[".bss"].size


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_the_nucleo_f446re_image_measures_in_qemu_netduinoplus2(runtime):
    build("nucleo-f446re", runtime)  # offline; the emulated board then boots this same image
    done = lowtide("measure", str(KWS), "--board", "qemu-nucleo-f446re", "--runtime", runtime, "--json", offline=False)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["board"] == "nucleo-f446re"  # the unmodified image: it names the real board
    assert result["clock_hz"] == 16_000_000  # QEMU has no RCC: the HSI reset clock, reported as it is
    cycles = result["latency_cycles"]
    assert result["outputs_match"] and cycles["unit"] == "instructions"
    assert cycles["min"] == cycles["median"] == cycles["max"] > 0
    assert 0 < result["stack_high_water_bytes"] < result["stack_size_bytes"]
    assert result["arena_high_water_bytes"] > 0
    if runtime != "compiled":
        assert result["arena_used_bytes"] == result["arena_predicted_used_bytes"]  # lowtide's cortex-m4f sizer


# --- flashing: PlatformIO's upload through OpenOCD, with no probe attached ----------------------------------------

PROBE = "066DFF495150898367063731"  # an ST-LINK/V2-1's serial number, as its virtual COM port reports it


@pytest.mark.skipif(shutil.which("openocd") is None, reason="no openocd (scripts/install-firmware-deps.sh)")
@pytest.mark.parametrize("command", ["flash", "measure"])
def test_an_upload_with_no_probe_attached_runs_openocd_on_that_probe_and_fails_in_one_line(command):
    # No ST-LINK is attached here: the real upload runs, offline, through the tool-openocd shim into Debian's
    # OpenOCD, which finds no probe. --port: a port that is not a USB device, so the probe comes from --probe.
    done = lowtide(
        command,
        str(KWS),
        "--board",
        "nucleo-f446re",
        "--runtime",
        "compiled",
        "--port",
        "/dev/null",
        "--probe",
        PROBE,
        "--json",
    )
    message = one_line_error(done)
    assert message.startswith(
        "lowtide: error: uploading the nucleo-f446re firmware for mlperf_kws_dscnn_int8.tflite "
        "failed: no debug probe found (openocd: Error: open failed): connect the board's "
        "ST-LINK USB port (log: "
    )
    log = Path(message.split("(log: ")[-1].rstrip(")")).read_text()
    # The exact command PlatformIO ran: the ST platform's own stlink upload, with the probe chosen first.
    (command_line,) = [line for line in log.splitlines() if line.startswith("openocd ")]
    assert re.fullmatch(
        rf'openocd -c "adapter serial {PROBE}" -d2 -s \S+/platformio/tool-openocd-[0-9a-f]{{12}}/openocd/scripts '
        r'-f board/st_nucleo_f4\.cfg -c "program \{\.pio/build/nucleo-f446re/firmware\.elf\}  verify reset; shutdown;"',
        command_line,
    ), command_line
    assert "tool-openocd @ 3.1200.0" in log and "Open On-Chip Debugger 0.12.0" in log  # the shim ran the real one


FIRMWARE_DOC = Path(__file__).parents[1] / "docs" / "firmware.md"


def test_the_users_own_board_file_in_firmware_md_places_the_arenas_as_the_page_says(tmp_path):
    """docs/firmware.md, "Your own board, step by step": its board file, taken from the page, with the commands and
    the figures the page shows."""
    page = FIRMWARE_DOC.read_text()
    (text,) = re.findall(r"```toml\n# my-h743\.toml\n(.*?)```", page, re.S)
    board = tmp_path / "my-h743.toml"
    board.write_text(text)
    model = tmp_path / "mobilenet_v2_0.75_120.tflite"
    model.write_bytes(mobilenet_v2(resolution=120, width=0.75))
    split = ("--arena-region", "axi_sram", "--persistent-region", "sram1")
    common = (str(model), "--board", str(board), "--runtime", "tflm")

    inspected = lowtide("inspect", *common, *split, "--json")
    assert inspected.returncode == 0, inspected.stderr
    assert json.loads(inspected.stdout)["mcu32"]["core"] == "cortex-m7"  # the board's, without --core
    uses = {m["memory"]: m for m in json.loads(inspected.stdout)["board_memories"]}
    assert [(m, uses[m]["used_bytes"], uses[m]["fits"]) for m in ("axi_sram", "sram1")] == [
        ("axi_sram", 488_200, True),
        ("sram1", 115_072, True),
    ]
    assert "│ sram1    │ 0x30000000 │ 131,072 B │ TFLM's persistent     │ 115,072 B │ yes  │" in page

    message = one_line_error(lowtide("build", *common))
    assert message in page  # the refusal of one arena, word for word

    built = lowtide("build", *common, *split, "--json")
    assert built.returncode == 0, built.stderr
    report = json.loads(built.stdout)
    assert (report["board"], report["non_persistent_arena_bytes"], report["persistent_arena_bytes"]) == (
        "my-h743",
        432_000,
        115_072,
    )
    sections = {s.name: s for s in elf_sections(Path(report["elf"]), read_settings())}
    assert (sections[".lt_arena.sram1"].address, sections[".lt_arena.sram1"].size) == (0x30000000, 115_072)
    axi = sections[".lt_arena.axi_sram"]
    assert axi.address >= sections[".bss"].address + sections[".bss"].size and axi.address + axi.size <= 0x24080000
