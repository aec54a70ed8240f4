"""`lowtide build` and `lowtide flash`, the size checks before and after building, serial port autodetection, and a
hung emulator ended at the timeout.

Builds and boots need arm-none-eabi-gcc, qemu-system-arm and PlatformIO (scripts/install-firmware-deps.sh); the
port detection and size-refusal tests need none of them.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest
import serial.tools.list_ports

from conftest import SHARED_MODELS, needs_firmware_tools, reference_figures
from lowtide import runtimes
from lowtide.compile import compile_model
from lowtide.compile.codegen import arena_plan
from lowtide.device import spec as board_spec
from lowtide.device.boards import BOARDS, EmulatedBoard, known_boards
from lowtide.device.drivers.platformio import (
    FirmwareImage,
    check_one_probe,
    openocd_upload_flags,
    read_firmware_image,
    registry_unreachable,
    upload_probe,
)
from lowtide.device.drivers.serialport import detect_serial_port
from lowtide.errors import LowtideError
from lowtide.model.ir import TensorKind
from lowtide.pipeline.firmware import build_board_firmware, check_image_fits
from lowtide.pipeline.measure import measure
from lowtide.resources import BOARDS_DIR
from lowtide.settings import read_settings
from lowtide.storage import cache_dir
from lowtide.validation import load_model

REFERENCE = reference_figures()
KWS_DSCNN = SHARED_MODELS / "mlperf_kws_dscnn_int8.tflite"
HELLO_WORLD = SHARED_MODELS / "tflm_hello_world_int8.tflite"
MOBILENET = SHARED_MODELS / "tflm_mobilenet_v2_quantized_224.tflite"
# `lowtide build` and `lowtide flash` whether or not lowtide.cli already imports build_cmd.
_CLI = "import lowtide.cli.build_cmd; from lowtide.cli import main; main()"


def _lowtide(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", _CLI, *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def _symbol_sizes(elf: Path) -> dict[str, int]:
    listing = subprocess.run(["arm-none-eabi-nm", "-S", str(elf)], capture_output=True, text=True, check=True).stdout
    return {fields[3]: int(fields[1], 16) for fields in map(str.split, listing.splitlines()) if len(fields) == 4}


# --- lowtide build -------------------------------------------------------------------------------------------------


@needs_firmware_tools
def test_build_json_reports_the_elf_and_its_memory():
    result = _lowtide("build", str(KWS_DSCNN), "--board", "qemu-m4", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    elf = Path(report["elf"])
    assert elf.read_bytes()[:4] == b"\x7fELF" and report["platformio_env"] == "qemu-m4" and report["emulated"]
    head = int(REFERENCE[KWS_DSCNN.stem]["tflm_head"])
    # the compiled runtime's plan: what the firmware's arena holds
    planned = compile_model(load_model(KWS_DSCNN)).arena_bytes
    assert report["arena_planned_bytes"] == head and report["arena_capacity_bytes"] == planned + 1024
    # The arena and the input staging buffer are static arrays: .bss holds them, at the sizes the report gives.
    symbols = _symbol_sizes(elf)
    assert symbols["arena"] == report["arena_capacity_bytes"]
    assert symbols["staging"] == 49 * 10  # the int8 spectrogram input
    assert report["static_ram_bytes"] >= symbols["arena"] + symbols["staging"]
    assert report["stack_bytes"] == 0x10000  # mps2.ld's stack region
    # The weights are in flash, with the code; the convolutions' widened to int16 take their bytes once more.
    graph = load_model(KWS_DSCNN)
    weights = sum({t.buffer: t.nbytes for t in graph.main.tensors if t.kind is TensorKind.CONSTANT}.values())
    weights += arena_plan(graph).wide_weight_bytes
    assert weights < report["flash_bytes"] < weights + 64 * 1024
    assert report["flash_capacity_bytes"] == report["sram_capacity_bytes"] == 4 * 1024 * 1024
    # The same figures as the sections of the ELF, read directly.
    image = read_firmware_image(elf, "qemu-m4", read_settings())
    assert (image.flash_bytes, image.static_ram_bytes) == (report["flash_bytes"], report["static_ram_bytes"])


@needs_firmware_tools
def test_build_table_names_the_elf():
    result = _lowtide("build", str(HELLO_WORLD), "--board", "qemu-m7")
    assert result.returncode == 0, result.stderr
    assert "qemu-m7" in result.stdout and "static RAM" in result.stdout and "1,056 B" in result.stdout  # 32 + 1,024


def test_a_model_too_large_for_the_board_is_refused_before_building():
    started = time.monotonic()
    result = _lowtide("build", str(MOBILENET), "--board", "nucleo-f746zg", "--json", timeout=120)
    assert result.returncode == 2 and result.stdout == ""
    message = result.stderr.strip()
    assert "\n" not in message, message
    # the compiled runtime's plan (in place, below TFLM's head) and the painted slack
    planned = arena_plan(load_model(MOBILENET)).head_bytes
    assert planned < int(REFERENCE[MOBILENET.stem]["tflm_head"])
    staging = 224 * 224 * 3
    assert message.startswith(
        f"lowtide: error: {MOBILENET.stem}: arena {planned + 1024:,} B + static RAM "
        f"{staging + runtimes.RUNTIME_STATIC_RAM_BYTES:,} B > SRAM of nucleo-f746zg "
        f"(327,680 B = 320 KiB)"
    )
    assert "> flash of nucleo-f746zg (1,048,576 B = 1,024 KiB)" in message
    assert time.monotonic() - started < 60  # no PlatformIO run: that would go to the registry for ststm32


@needs_firmware_tools
def test_the_estimate_is_a_lower_bound_of_the_built_image():
    # The check before building must never refuse a model that fits: its figures are below the built image's.
    spec = board_spec.load_board_specs()["qemu-m4"]
    for model in (HELLO_WORLD, KWS_DSCNN):
        estimate = runtimes.RUNTIMES[runtimes.Runtime.COMPILED].estimate_footprint(load_model(model))
        image = build_board_firmware(spec, model)
        assert estimate.arena_bytes + estimate.static_ram_bytes <= image.static_ram_bytes
        assert estimate.image_bytes <= image.flash_bytes


def test_the_built_image_is_checked_against_the_board():
    spec = dataclasses.replace(
        board_spec.load_board_specs()["qemu-m4"], name="tiny", sram_bytes=64 * 1024, flash_bytes=32 * 1024
    )
    image = FirmwareImage(
        elf=Path("firmware.elf"),
        platformio_env="qemu-m4",
        flash_bytes=43_320,
        data_bytes=8,
        bss_bytes=30_856,
        stack_bytes=65_536,
    )
    with pytest.raises(LowtideError) as failure:
        check_image_fits(spec, image, "kws")
    assert str(failure.value) == (
        "firmware.elf: kws: the built firmware does not fit: static RAM 30,864 B + stack 65,536 B > SRAM of tiny "
        "(65,536 B = 64 KiB); image 43,320 B > flash of tiny (32,768 B = 32 KiB)"
    )


# --- lowtide flash -------------------------------------------------------------------------------------------------


@needs_firmware_tools
def test_flash_on_an_emulated_board_builds_and_says_there_is_nothing_to_flash():
    result = _lowtide("flash", str(HELLO_WORLD), "--board", "qemu-m4", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["flashed"] is False and report["port"] is None
    assert "emulated: nothing to flash" in report["message"]
    assert Path(report["elf"]).is_file()


def _fake_port(device: str, vid: int | None, pid: int | None, serial_number: str | None = None) -> SimpleNamespace:
    return SimpleNamespace(device=device, vid=vid, pid=pid, description="fake", serial_number=serial_number)


@pytest.fixture
def fake_ports(monkeypatch):
    ports: list[SimpleNamespace] = []
    monkeypatch.setattr(serial.tools.list_ports, "comports", lambda *args, **kwargs: list(ports))
    return ports


def test_port_autodetection_finds_the_one_matching_port(fake_ports):
    fake_ports += [
        _fake_port("/dev/ttyS0", None, None),
        _fake_port("/dev/ttyUSB0", 0x10C4, 0xEA60),
        _fake_port("/dev/ttyACM3", 0x0483, 0x374B),
    ]
    assert detect_serial_port("nucleo-f746zg", ("0483:374B",)) == "/dev/ttyACM3"
    # board files may spell the hex in lower case; several IDs per board (the Pico's two firmwares)
    fake_ports.append(_fake_port("/dev/ttyACM7", 0x2E8A, 0x000A))
    assert detect_serial_port("pico", ("2e8a:00c0", "2E8A:000A")) == "/dev/ttyACM7"


def test_port_autodetection_lists_the_candidates_when_ambiguous(fake_ports):
    fake_ports += [
        _fake_port("/dev/ttyACM0", 0x0483, 0x374B),
        _fake_port("/dev/ttyACM1", 0x0483, 0x374B),
        _fake_port("/dev/ttyUSB0", 0x10C4, 0xEA60),
    ]
    with pytest.raises(LowtideError) as failure:
        detect_serial_port("nucleo-f746zg", ("0483:374B",))
    message = str(failure.value)
    assert message.startswith("several serial ports match nucleo-f746zg (USB 0483:374B): ")
    assert "/dev/ttyACM0 (0483:374B: fake)" in message and "/dev/ttyACM1" in message
    assert "/dev/ttyUSB0" not in message and message.endswith("choose one with --probe SERIAL or --port")


def test_port_autodetection_says_when_no_port_matches(fake_ports):
    fake_ports.append(_fake_port("/dev/ttyUSB0", 0x10C4, 0xEA60))
    with pytest.raises(LowtideError) as failure:
        detect_serial_port("nano33ble", ("2341:805A",))
    assert str(failure.value) == (
        "no serial port matches nano33ble (USB 2341:805A); ports found: /dev/ttyUSB0 "
        "(10C4:EA60: fake); connect the board or give --port"
    )
    fake_ports.clear()
    with pytest.raises(LowtideError, match="no serial ports at all"):
        detect_serial_port("nano33ble", ("2341:805A",))


# --- the Arduino envs: not built here ------------------------------------------------------------------------------


@pytest.mark.parametrize("board", ["nano33ble", "esp32-s3-devkitc-1", "pico"])
def test_an_arduino_board_without_the_registry_fails_in_one_line_before_platformio_runs(board):
    if registry_unreachable() is None:
        pytest.skip("PlatformIO's registry is reachable from here: the Arduino envs can be built")
    projects = set(cache_dir(read_settings(), "firmware").glob(f"{board}-*"))
    started = time.monotonic()
    result = _lowtide("build", str(HELLO_WORLD), "--board", board, "--runtime", "tflm", "--json", timeout=120)
    assert result.returncode == 2 and result.stdout == ""
    (line,) = result.stderr.splitlines()
    platform = {"nano33ble": "nordicnrf52", "esp32-s3-devkitc-1": "espressif32", "pico": "raspberrypi"}[board]
    assert line.startswith(
        f"lowtide: error: {board} is not built here: its platform {platform} (framework arduino) "
        f"comes from PlatformIO's registry, which this machine cannot reach "
        f"(api.registry.platformio.org: "
    )
    assert time.monotonic() - started < 30  # neither TFLM built for the core nor a PlatformIO run
    assert set(cache_dir(read_settings(), "firmware").glob(f"{board}-*")) == projects  # no project written


# --- several boards with one VID:PID: the ST-LINK's USB serial number picks one --------------------------------------

F446RE = board_spec.get_board_spec("nucleo-f446re")
TWO_NUCLEOS = [("/dev/ttyACM0", "066DFF495150898367063731"), ("/dev/ttyACM1", "0670FF383930434B43152231")]


@pytest.fixture
def two_nucleos(fake_ports):
    fake_ports += [_fake_port(device, 0x0483, 0x374B, serial) for device, serial in TWO_NUCLEOS]
    fake_ports.append(_fake_port("/dev/ttyUSB0", 0x10C4, 0xEA60, "0001"))
    return fake_ports


def test_two_boards_with_one_vid_pid_and_no_serial_given_are_refused_naming_their_serials(two_nucleos):
    with pytest.raises(LowtideError) as failure:
        detect_serial_port("nucleo-f446re", ("0483:374B",))
    assert str(failure.value) == (
        "several serial ports match nucleo-f446re (USB 0483:374B): "
        "/dev/ttyACM0 (0483:374B serial 066DFF495150898367063731: fake); "
        "/dev/ttyACM1 (0483:374B serial 0670FF383930434B43152231: fake); choose one with --probe SERIAL or --port"
    )


def test_the_probe_serial_picks_the_port_and_the_port_picks_the_probe(two_nucleos):
    assert detect_serial_port("nucleo-f446re", ("0483:374B",), "0670ff383930434b43152231") == "/dev/ttyACM1"
    with pytest.raises(LowtideError) as failure:
        detect_serial_port("nucleo-f446re", ("0483:374B",), "0001")  # the CP210x's serial, not an ST-LINK's port
    assert str(failure.value).startswith(
        "no serial port matches nucleo-f446re (USB 0483:374B, serial 0001); "
        "ports found: /dev/ttyACM0 (0483:374B serial 066DFF"
    )
    # OpenOCD is told the ST-LINK whose virtual COM port is the port measured, whatever the board file says.
    assert upload_probe(F446RE, "/dev/ttyACM0") == "066DFF495150898367063731"
    assert (
        upload_probe(board_spec.with_probe(F446RE, "0670FF383930434B43152231"), "/dev/ttyACM1")
        == "0670FF383930434B43152231"
    )
    with pytest.raises(LowtideError) as failure:
        upload_probe(board_spec.with_probe(F446RE, "0670FF383930434B43152231"), "/dev/ttyACM0")
    assert str(failure.value) == (
        "/dev/ttyACM0 is the port of the probe with serial 066DFF495150898367063731, not "
        "0670FF383930434B43152231 (--probe or the board file's probe_serial): not flashing "
        "one board to measure another"
    )
    assert openocd_upload_flags("066DFF495150898367063731") == {
        "PLATFORMIO_UPLOAD_FLAGS": "-c\nadapter serial 066DFF495150898367063731"
    }  # one argument a line
    with pytest.raises(LowtideError, match="bad probe serial number"):
        openocd_upload_flags('066D"; shutdown')


def test_a_port_with_no_serial_number_is_refused_while_several_st_links_are_attached(two_nucleos):
    # A port pyserial does not list (a pty, a by-id link to nothing): OpenOCD would take the first ST-LINK it finds.
    assert upload_probe(F446RE, "/dev/pts/9") is None
    with pytest.raises(LowtideError) as failure:
        check_one_probe(F446RE, "/dev/pts/9")
    assert str(failure.value).startswith(
        "/dev/pts/9 has no USB serial number and 2 boards with nucleo-f446re's USB "
        "IDs are attached (/dev/ttyACM0 (0483:374B serial 066DFF"
    )
    assert str(failure.value).endswith("OpenOCD would flash any one of them; choose it with --probe SERIAL")
    del two_nucleos[1]
    check_one_probe(F446RE, "/dev/pts/9")  # one ST-LINK attached: it is the board's


def test_the_board_file_names_its_probe_and_only_real_boards_take_one(tmp_path):
    text = (BOARDS_DIR / "nucleo-f446re.toml").read_text()
    board = tmp_path / "mine.toml"
    board.write_text(text.replace("[serial]\n", '[serial]\nprobe_serial = "066DFF495150898367063731"\n'))
    assert board_spec.load_board_spec(board).serial.probe_serial == "066DFF495150898367063731"
    assert F446RE.serial.probe_serial is None
    result = _lowtide("flash", str(HELLO_WORLD), "--board", "qemu-m4", "--probe", "066DFF495150898367063731")
    assert result.returncode == 2
    assert result.stderr == "lowtide: error: qemu-m4 is emulated: there is no probe to choose\n"
    result = _lowtide(
        "measure", str(HELLO_WORLD), "--board", "host-tflm", "--probe", "066DFF495150898367063731", "--json"
    )
    assert result.returncode == 2
    assert result.stderr == "lowtide: error: --probe picks a board lowtide flashes: --board host-tflm is not one\n"


def test_flash_cli_fails_fast_without_the_board():
    # No ST-LINK is plugged into this machine: the command stops before building, naming the USB ID it looked for.
    if any(p.vid == 0x0483 and p.pid == 0x374B for p in serial.tools.list_ports.comports()):
        pytest.skip("an ST-LINK is connected")
    result = _lowtide("flash", str(HELLO_WORLD), "--board", "nucleo-f746zg", timeout=120)
    assert result.returncode == 2
    assert result.stderr.startswith("lowtide: error: no serial port matches nucleo-f746zg (USB 0483:374B)")


# --- measure: the new figures, and a hung emulator -----------------------------------------------------------------


def test_host_tflm_has_no_firmware_figures():
    result = measure(HELLO_WORLD, "host-tflm", iterations=1, warmup=0)
    data = result.to_json()
    assert data["static_ram_bytes"] is None and data["stack_high_water_bytes"] is None and result.outputs_match


def _processes_with(marker: str) -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(int(pid))
        except OSError:
            continue  # ended meanwhile
    return found


def _cpu_never_starts(command: tuple[str, ...]) -> tuple[str, ...]:
    return (*command, "-S")  # QEMU listens on the serial port but never starts the CPU: no HELLO ever comes


def _uart_elsewhere(command: tuple[str, ...]) -> tuple[str, ...]:
    at = command.index("-serial") + 1  # UART0 to null: QEMU runs, but never opens the port the host waits on
    return (*command[:at], "null", *command[at + 1 :])


@needs_firmware_tools
@pytest.mark.parametrize(
    ("hang", "expected"),
    [
        (_cpu_never_starts, "no HELLO from the board within 1 s"),
        (_uart_elsewhere, "QEMU did not open its serial port within 1 s"),
    ],
    ids=["cpu-stopped", "no-serial-port"],
)
def test_a_hung_emulator_is_ended_at_the_timeout(monkeypatch, hang, expected):
    from typer.testing import CliRunner

    from lowtide.cli import app

    spec = board_spec.load_board_specs()["qemu-m4"]
    build_board_firmware(spec, KWS_DSCNN)  # built before the clock starts: the test times only the emulator
    marker = f"lowtide-hung-{uuid.uuid4().hex[:12]}"  # names this test's QEMU in the process table
    hung = dataclasses.replace(spec, name="qemu-hung", emulator_command=(*hang(spec.emulator_command), "-name", marker))
    known_boards()
    monkeypatch.setitem(BOARDS, "qemu-hung", EmulatedBoard(hung))
    started = time.monotonic()
    result = CliRunner().invoke(app, ["measure", str(KWS_DSCNN), "--board", "qemu-hung", "--timeout", "1", "--json"])
    elapsed = time.monotonic() - started
    assert isinstance(result.exception, LowtideError), result.output
    assert expected in str(result.exception)
    # 1 s for the port, 1 s for the HELLO, at most 3 s for SIGTERM, plus the host TFLM reference run and imports
    assert elapsed < 15, elapsed
    assert _processes_with(marker) == []


# --- board files: only what lowtide reads, and what the board reports -----------------------------------------------


def test_every_board_file_loads_and_a_key_nothing_reads_is_refused(tmp_path):
    specs = board_spec.load_board_specs()
    assert set(specs) <= set(known_boards())  # each registered as a board
    text = (board_spec.BOARDS_DIR / "nucleo-f746zg.toml").read_text()
    bad = tmp_path / "stale.toml"
    bad.write_text('mcu = "STM32F746ZG"\n' + text.replace("[serial]", '[serial]\nhow = "by hand"'))
    with pytest.raises(LowtideError) as failure:
        board_spec.load_board_spec(bad)
    assert str(failure.value).startswith(f"{bad}: bad board file: unknown keys mcu, serial.how (lowtide reads only: ")


@needs_firmware_tools
def test_a_board_reporting_another_clock_than_its_file_is_refused(tmp_path):
    """The board file's clock_hz is checked against the clock the board's HELLO reports (qemu-m4: 25 MHz SYSCLK)."""
    wrong = tmp_path / "qemu-m4-wrong-clock.toml"
    wrong.write_text(
        (board_spec.BOARDS_DIR / "qemu-m4.toml")
        .read_text()
        .replace('name = "qemu-m4"', 'name = "qemu-m4-wrong-clock"')
        .replace("clock_hz = 25000000", "clock_hz = 24000000")
    )
    with pytest.raises(
        LowtideError,
        match="board reports a 25,000,000 Hz clock, its board file qemu-m4-wrong-clock.toml says 24,000,000 Hz",
    ):
        measure(HELLO_WORLD, str(wrong), iterations=1, timeout=20)
    assert measure(HELLO_WORLD, str(board_spec.BOARDS_DIR / "qemu-m4.toml"), iterations=1).outputs_match
