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
from lowtide.resources import BOARDS_DIR

ARCHIVES = SHARED_MODELS.parent / "platformio"
KWS = SHARED_MODELS / "mlperf_kws_dscnn_int8.tflite"
ST_BOARDS = ("nucleo-f446re", "nucleo-f401re", "nucleo-l4r5zi", "nucleo-f746zg", "nucleo-h743zi")

pytestmark = [needs_firmware_tools,
              pytest.mark.skipif(not (ARCHIVES / "platform-ststm32.tar.gz").is_file(),
                                 reason=f"no PlatformIO archives in {ARCHIVES}")]


def _offline_prefix() -> list[str]:
    """`unshare -n`: a network namespace with no interface up, where one can be made (root, or user namespaces)."""
    for prefix in (["unshare", "-n"], ["unshare", "-rn"]):
        if shutil.which("unshare") and subprocess.run([*prefix, "true"], capture_output=True).returncode == 0:
            return prefix
    return []


def lowtide(*args: str, archives: Path | str = ARCHIVES, offline: bool = True,
            timeout: float = 1500) -> subprocess.CompletedProcess:
    """The CLI with the archives; `offline`: in a network namespace with no interface (no loopback either, so
    not for QEMU's TCP serial port)."""
    env = {**os.environ, "LOWTIDE_PLATFORMIO_ARCHIVES": str(archives)}
    prefix = _offline_prefix() if offline else []
    return subprocess.run([*prefix, sys.executable, "-c", "from lowtide.cli import main; main()", *args],
                          env=env, capture_output=True, text=True, timeout=timeout)


def one_line_error(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("lowtide: error: ") and "Traceback" not in done.stderr, lines
    return lines[0]


def build(board: str, runtime: str) -> dict:
    done = lowtide("build", str(KWS), "--board", board, "--runtime", runtime, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.parametrize("board", ST_BOARDS)
def test_each_st_board_builds_offline_with_the_compiled_runtime(board):
    image = build(board, "compiled")
    assert image["board"] == board and not image["emulated"] and Path(image["elf"]).is_file()
    assert image["static_ram_bytes"] + image["stack_bytes"] <= image["sram_capacity_bytes"]
    assert image["flash_bytes"] <= image["flash_capacity_bytes"]
    # The generated project names the unpacked archives, not the registry.
    ini = (Path(image["project_dir"]) / "platformio.ini").read_text()
    assert "platform = symlink://" in ini and "platformio/toolchain-gccarmnoneeabi@symlink://" in ini


@pytest.mark.parametrize("runtime", ["tflm", "tflm-cmsis-nn"])
def test_nucleo_f446re_builds_offline_with_tflm(runtime):
    image = build("nucleo-f446re", runtime)
    assert image["runtime"] == runtime and Path(image["elf"]).is_file()
    symbols = subprocess.run(["arm-none-eabi-nm", image["elf"]], capture_output=True, text=True, check=True).stdout
    assert "MicroInterpreter" in symbols
    attributes = subprocess.run(["arm-none-eabi-readelf", "-A", image["elf"]], capture_output=True, text=True,
                                check=True).stdout
    assert "Tag_ABI_VFP_args: VFP registers" in attributes  # the hard-float ABI TFLM was built for


def test_boards_lists_the_st_boards_as_buildable_with_the_archives():
    done = lowtide("boards", "--json")
    assert done.returncode == 0, done.stderr
    boards = {b["name"]: b for b in json.loads(done.stdout)["boards"]}
    for name in ST_BOARDS:
        assert boards[name]["buildable_here"], boards[name]
        assert boards[name]["runtimes"] == ["compiled", "tflm", "tflm-cmsis-nn"]
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
    assert ("sram_bytes = 262,144 does not fit the part: nucleo-f446re's memory map "
            "(firmware/bsp/stm32/ld/stm32f446re.ld) has 131,072 B") in message


@pytest.mark.parametrize("runtime", ["compiled", "tflm", "tflm-cmsis-nn"])
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
    done = lowtide(command, str(KWS), "--board", "nucleo-f446re", "--runtime", "compiled", "--port", "/dev/null",
                   "--probe", PROBE, "--json")
    message = one_line_error(done)
    assert message.startswith("lowtide: error: uploading the nucleo-f446re firmware for mlperf_kws_dscnn_int8.tflite "
                              "failed: no debug probe found (openocd: Error: open failed): connect the board's "
                              "ST-LINK USB port (log: ")
    log = Path(message.split("(log: ")[-1].rstrip(")")).read_text()
    # The exact command PlatformIO ran: the ST platform's own stlink upload, with the probe chosen first.
    (command_line,) = [line for line in log.splitlines() if line.startswith("openocd ")]
    assert re.fullmatch(
        rf'openocd -c "adapter serial {PROBE}" -d2 -s \S+/platformio/tool-openocd-[0-9a-f]{{12}}/openocd/scripts '
        r'-f board/st_nucleo_f4\.cfg -c "program \{\.pio/build/nucleo-f446re/firmware\.elf\}  verify reset; shutdown;"',
        command_line), command_line
    assert "tool-openocd @ 3.1200.0" in log and "Open On-Chip Debugger 0.12.0" in log  # the shim ran the real one
