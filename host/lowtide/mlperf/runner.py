"""MLCommons' MLPerf Tiny runner (benchmark/runner/main.py, unmodified) against a board running lowtide's firmware
built for MLPerf Tiny's grammar (firmware/app/lt_mlperf.h).

`run_mlperf` builds the firmware with the grammar for the benchmark, starts the board and runs the runner on it:
- an emulated board (qemu-m4): QEMU's serial line is relayed to a pty, and the runner is started through
  list_ports_launcher.py, which lists the pty with a USB VID:PID (the runner finds its device by nothing else);
- a real board: uploaded, then the runner finds it by the board file's USB VID:PID, as it would on its own.
The runner writes its session (log.txt, results.txt, results.json) under `work_dir`/sessions/ and prints the median
throughput (performance mode) or Top-1 and AUC (accuracy mode), which are read from what it printed.

Throughput is the board's: the runner takes each window's m-lap-us- timestamps T0 and T1 (microseconds from the
board's counter; on an emulator retired instructions at the board's stated clock, truncated to whole microseconds)
and computes N / ((T1 - T0) / 1e6), then the median of the five windows. lowtide computes the same figure itself
from the same timestamps (the runner's results.json) in the same floating-point steps, so it equals what the
runner printed to every digit printed, and reports it unrounded (`median_throughput_from_timestamps`). The runner
also refuses a performance run whose five windows took under 10 s of host time (ERROR 2), a rule for real
timers that an emulator, faster than the board it stands for, can break: the relay holds each window's m-infer-done
until MIN_WINDOW_HOST_S after its infer command. That wait changes no figure.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import select
import statistics
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import tty
from dataclasses import dataclass
from pathlib import Path

from lowtide.device.boards import EmulatedBoard, UsbBoard, get_board
from lowtide.device.drivers import cycle_model
from lowtide.device.drivers.qemu import run_emulator
from lowtide.device.transport import Link
from lowtide.errors import LowtideError
from lowtide.mlperf.benchmarks import Benchmark, benchmark_named, mlperf_protocol
from lowtide.mlperf.datasets import check_dataset, generate_dataset
from lowtide.pipeline.firmware import build_board_firmware, upload_firmware
from lowtide.runtimes import runtime_for, runtime_named
from lowtide.settings import RUNNER_ENV, Settings, settings_or_read
from lowtide.storage import cache_dir, unpacked_archive
from lowtide.validation import load_model

RUNNER_SUBDIR = Path("benchmark") / "runner"
RUNNER_FILES = ("main.py", "device_under_test.py", "script.py", "datasets.py")
MODES = {"performance": "p", "accuracy": "a"}
TEST_SCRIPTS = {"performance": "tests_performance.yaml", "accuracy": "tests_accuracy.yaml"}
EMULATED_USB_ID = (0x1209, 0x0001)  # pid.codes' test PID: for a port that is no product
EMULATED_BAUD = 115200  # a pty ignores it; the devices yaml needs one
MIN_WINDOW_HOST_S = 2.1  # 5 windows of it: over the runner's 10 s
BOOT_TIMEOUT_S = 30.0
LAUNCHER = Path(__file__).with_name("list_ports_launcher.py")

_MEDIAN = re.compile(r"Median throughput is\s+([0-9.]+) inf\./sec\.")
_WINDOW = re.compile(r"^\s*Throughput: ([0-9.eE+-]+) inf\./sec\.")
_TOP1 = re.compile(r"Top 1% = ([0-9.]+)")
_AUC = re.compile(r"AUC = ([0-9.]+)")
_REFUSED = re.compile(r"(ERROR \d+ - .*)$")
_SESSION = re.compile(r"Session logged in file (\S+)")


THROUGHPUT_FORMULA = (
    "inferences / ((T1 - T0) / 1e6) per window, T0 and T1 the board's m-lap-us- microseconds "
    "around its inferences (on an emulator: instructions * 1e6 // clock_hz), the median of the "
    "windows: the runner's own formula, on the timestamps it recorded in results.json"
)


@dataclass(frozen=True)
class MlperfWindow:
    """One performance window as the board timed it: the runner's record of its m-lap-us- lines (results.json)."""

    file: str  # the input the runner loaded for it
    inferences: int
    start_us: int  # T0
    end_us: int  # T1
    throughput: float  # inf./s, computed as the runner does: inferences / ((T1 - T0) / 1e6); 0 if T1 <= T0


def window_throughput(inferences: int, start_us: int, end_us: int) -> float:
    """The runner's throughput of one window (script.py, _print_AP_results), step for step: the same float
    operations give the same float. A window whose counter wrapped (T1 <= T0) is 0 there too."""
    elapsed_us = end_us - start_us
    return inferences / (elapsed_us / 1_000_000) if elapsed_us > 0 else 0.0


@dataclass(frozen=True)
class MlperfResult:
    """One run of the runner, with its figures as it printed them, and in performance mode lowtide's own
    computation of the throughput from the board's timestamps (THROUGHPUT_FORMULA)."""

    model: str
    benchmark: str
    mode: str  # performance | accuracy
    board: str
    runtime: str
    dataset: str  # the runner's --dataset_path
    generated_dataset: bool  # random inputs of the benchmark's format, not MLCommons' data
    median_throughput: float | None  # inf./s, performance mode
    window_throughputs: tuple[float, ...]  # each window's, performance mode
    top1_percent: float | None  # accuracy mode
    auc: float | None  # accuracy mode
    session_dir: str  # the runner's log.txt, results.txt, results.json
    windows: tuple[MlperfWindow, ...]  # performance mode: each window's timestamps and throughput
    median_throughput_from_timestamps: float | None  # lowtide's, unrounded: the median of the windows' throughput
    throughput_formula: str | None  # how lowtide computed it (performance mode)
    # Emulated boards with a cycle model: the median of every inference's modelled cycles (its input copy included,
    # as the board times it), and what the model is and assumes; None without one.
    modelled_cycles_per_inference: int | None = None
    cycle_model: cycle_model.CycleModelInfo | None = None
    warnings: tuple[str, ...] = ()  # one line each: a board without its cycle model says why


# --- the runner ---------------------------------------------------------------------------------------------------


def _runner_folder(path: Path) -> Path | None:
    for candidate in (path, path / RUNNER_SUBDIR):
        if all((candidate / name).is_file() for name in RUNNER_FILES):
            return candidate
    return None


def _unpacked(archive: Path, settings: Settings) -> Path:
    """The archive unpacked in the user cache, once per content (it is a package cache, not part of a project)."""
    try:
        digest = hashlib.sha256(archive.read_bytes()).hexdigest()[:16]
    except OSError as exc:
        raise LowtideError(f"cannot read the runner archive: {exc.strerror or exc}", archive) from None
    return unpacked_archive(archive, cache_dir(settings, "mlperf") / f"runner-{digest}", "runner archive")


def locate_runner(path: Path | None, settings: Settings) -> Path:
    """The runner's folder (the one with main.py): `path` (a folder of MLCommons' tiny repository, its
    benchmark/runner, or an archive of either), else the settings' ($LOWTIDE_MLPERF_RUNNER); an archive is unpacked
    into the settings' cache."""
    configured = settings.mlperf_runner
    if path is None:
        if not configured:
            raise LowtideError(
                f"no MLPerf Tiny runner: give --runner (a checkout of github.com/mlcommons/tiny, its "
                f"benchmark/runner, or an archive of it) or set {RUNNER_ENV}"
            )
        path = Path(configured)
    path = Path(path)
    if path.is_file() and tarfile.is_tarfile(path):
        unpacked = _unpacked(path, settings)
        found = next((f for f in (_runner_folder(unpacked), *map(_runner_folder, unpacked.iterdir())) if f), None)
    else:
        found = _runner_folder(path) if path.is_dir() else None
    if found is None:
        raise LowtideError(
            f"not MLCommons' MLPerf Tiny runner: no {RUNNER_SUBDIR}/ with {', '.join(RUNNER_FILES)}", path
        )
    return found


def _test_script(runner: Path, mode: str, benchmark: Benchmark) -> Path:
    import yaml  # the runner's own dependency, in lowtide's `mlperf` extra

    script = runner / TEST_SCRIPTS[mode]
    try:
        tests = yaml.safe_load(script.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise LowtideError(f"cannot read the runner's test script: {exc}", script) from None
    if not isinstance(tests, dict) or benchmark.id not in tests:
        raise LowtideError(f"the runner has no {mode} test for {benchmark.id}", script)
    return script


def devices_yaml(name: str, usb_ids: list[tuple[int, int]], baud: int) -> str:
    """The runner's device list (--device_list): one DUT, found by any of `usb_ids`."""
    ids = "".join(f"\n    0x{vid:04X}: 0x{pid:04X}" for vid, pid in usb_ids)
    return (
        f"- name: {name}\n  type: dut\n  baud:\n    energy: {baud}\n    performance: {baud}\n"
        f"    accuracy: {baud}\n  usb:{ids}\n"
    )


# --- an emulator's serial line as a port --------------------------------------------------------------------------


class _PtyRelay:
    """Relays a pty to a board's link: the runner opens the pty's path as its serial port. What the board sent
    before the runner's first byte (its boot lines) is dropped, as a real port opened late would have missed it."""

    def __init__(self, link: Link, hold_windows: bool):
        self.link, self.hold_windows = link, hold_windows
        self.master, self.slave = os.openpty()
        tty.setraw(self.slave)  # kept open here, so the master never sees the runner's close as a hang-up
        self.path = os.ttyname(self.slave)
        self.stop = threading.Event()
        self.runner_spoke = threading.Event()
        self.infer_sent_at = 0.0
        self.failure: str | None = None
        self.threads = [
            threading.Thread(target=self._guard, args=(f,), daemon=True) for f in (self._to_board, self._to_runner)
        ]

    def _guard(self, work) -> None:
        try:
            work()
        except (LowtideError, OSError) as exc:
            self.failure = str(exc)
            self.stop.set()

    def _to_board(self) -> None:
        pending = b""
        while not self.stop.is_set():
            if not select.select([self.master], [], [], 0.1)[0]:
                continue
            data = os.read(self.master, 4096)
            pending += data
            *commands, pending = pending.split(b"%")
            if any(c.strip().startswith(b"infer") for c in commands):
                self.infer_sent_at = time.monotonic()
            self.runner_spoke.set()
            self.link.write(data)

    def _to_runner(self) -> None:
        pending = b""
        while not self.stop.is_set():
            data = self.link.read(0.1)
            if not self.runner_spoke.is_set():
                continue
            pending += data
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                if self.hold_windows and line.startswith(b"m-infer-done"):
                    time.sleep(max(0.0, self.infer_sent_at + MIN_WINDOW_HOST_S - time.monotonic()))
                os.write(self.master, line + b"\n")

    def __enter__(self) -> _PtyRelay:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=5)
        os.close(self.master)
        os.close(self.slave)


# --- a run --------------------------------------------------------------------------------------------------------


def _figures(output: str, work_dir: Path) -> tuple[float | None, tuple[float, ...], float | None, float | None, Path]:
    lines = output.splitlines()
    refused = [m.group(1) for line in lines if (m := _REFUSED.search(line))]
    if refused:
        raise LowtideError(f"the MLPerf Tiny runner refused the run: {refused[-1]}")

    def last(pattern: re.Pattern) -> float | None:
        found = [float(m.group(1)) for line in lines if (m := pattern.search(line))]
        return found[-1] if found else None

    sessions = [m.group(1) for line in lines if (m := _SESSION.search(line))]
    windows = tuple(float(m.group(1)) for line in lines if (m := _WINDOW.search(line)))
    session = work_dir / sessions[-1] if sessions else work_dir / "sessions"
    return last(_MEDIAN), windows, last(_TOP1), last(_AUC), session.parent


def _run_runner(argv: list[str], work_dir: Path, timeout: float) -> str:
    try:
        done = subprocess.run(
            argv, cwd=work_dir, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired:
        raise LowtideError(f"the MLPerf Tiny runner took longer than {timeout:g} s") from None
    output = done.stdout + done.stderr
    if done.returncode != 0:
        lines = [line.strip() for line in output.splitlines() if line.strip()] or ["no output"]
        raise LowtideError(f"the MLPerf Tiny runner failed (exit {done.returncode}): {lines[-1]}")
    return output


def _usb_ids(texts: tuple[str, ...]) -> list[tuple[int, int]]:
    return [(int(vid, 16), int(pid, 16)) for vid, pid in (text.split(":") for text in texts)]


def run_mlperf(
    model: Path,
    board_name: str,
    benchmark_id: str,
    mode: str = "performance",
    dataset: Path | None = None,
    runner: Path | None = None,
    runtime: str | None = None,
    port: str | None = None,
    work_dir: Path | None = None,
    timeout: float = 3600.0,
    settings: Settings | None = None,
) -> MlperfResult:
    """The runner's figures for `model` as `benchmark_id` on `board_name` in `mode`; without `dataset`, on random
    inputs of the benchmark's format. Everything that can be checked before building is."""
    if mode not in MODES:
        raise LowtideError(f"mode {mode!r}: performance or accuracy (energy mode needs a power monitor)")
    settings = settings_or_read(settings)
    model = Path(model)
    benchmark = benchmark_named(benchmark_id)
    graph = load_model(model, settings)
    protocol = mlperf_protocol(graph, benchmark)
    runner_dir = locate_runner(runner, settings)
    test_script = _test_script(runner_dir, mode, benchmark)
    board = get_board(board_name)
    if not isinstance(board, (EmulatedBoard, UsbBoard)):
        raise LowtideError(
            f"--board {board.name}: lowtide mlperf builds the firmware for an emulated board or a real "
            f"one on this machine's USB (a board file's board: `lowtide boards`)"
        )
    chosen = runtime_for(board.spec.runtime, runtime_named(runtime) if runtime else None)
    work_dir = Path(work_dir or Path.cwd()).resolve()
    work_dir.mkdir(parents=True, exist_ok=True)
    with contextlib.ExitStack() as stack:
        scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="lowtide-mlperf-")))
        if dataset is not None:
            data = check_dataset(Path(dataset).resolve(), benchmark)
        else:
            outputs = graph.main.tensors[graph.main.outputs[0]]
            data = generate_dataset(
                scratch / "datasets",
                benchmark,
                protocol.db_bytes,
                benchmark.label_classes or outputs.shape[-1],
                windows=2 if benchmark.window_stride else 1,
            )
        arguments = [f"--dataset_path={data.root}", f"--test_script={test_script}", f"--mode={MODES[mode]}"]
        devices = scratch / "devices.yaml"
        timing, timing_warning = cycle_model.for_board(board.spec, scratch / "cycle-windows.txt", settings)
        if isinstance(board, EmulatedBoard):
            image = build_board_firmware(
                board.spec, model, chosen, protocol=protocol.firmware_defines(), settings=settings
            )
            devices.write_text(devices_yaml(f"lowtide-{board.name}", [EMULATED_USB_ID], EMULATED_BAUD))
            command = board.emulator_command + (timing.qemu_arguments() if timing else ())
            link = stack.enter_context(run_emulator(command, image.elf, BOOT_TIMEOUT_S))
            relay = stack.enter_context(_PtyRelay(link, hold_windows=mode == "performance"))
            vid, pid = EMULATED_USB_ID
            argv = [
                sys.executable,
                str(LAUNCHER),
                relay.path,
                f"{vid:04x}",
                f"{pid:04x}",
                str(runner_dir / "main.py"),
                f"--device_list={devices}",
                *arguments,
            ]
            try:
                output = _run_runner(argv, work_dir, timeout)
            except LowtideError:
                if relay.failure:
                    raise LowtideError(f"the board's serial line failed: {relay.failure}") from None
                raise
        else:
            port = board.port(port)
            upload_firmware(board.spec, model, port, chosen, protocol=protocol.firmware_defines(), settings=settings)
            devices.write_text(devices_yaml(f"lowtide-{board.name}", _usb_ids(board.serial.usb_ids), board.serial.baud))
            argv = [sys.executable, str(runner_dir / "main.py"), f"--device_list={devices}", *arguments]
            output = _run_runner(argv, work_dir, timeout)
        median, printed_windows, top1, auc, session = _figures(output, work_dir)
        windows = timed_windows(_results(session)) if mode == "performance" else ()
        # statistics.median is numpy's (the runner's) to the bit: the middle value, or the two middle ones' mean
        computed = statistics.median(w.throughput for w in windows) if windows else None
        inferences = sorted(window.cycles for window in timing.read_windows()) if timing else []
        return MlperfResult(
            model=model.name,
            benchmark=benchmark.id,
            mode=mode,
            board=board.name,
            runtime=chosen.name,
            dataset=str(data.root),
            generated_dataset=dataset is None,
            median_throughput=median,
            window_throughputs=printed_windows,
            top1_percent=top1,
            auc=auc,
            session_dir=str(session),
            windows=windows,
            median_throughput_from_timestamps=computed,
            throughput_formula=THROUGHPUT_FORMULA if windows else None,
            modelled_cycles_per_inference=inferences[(len(inferences) - 1) // 2] if inferences else None,
            cycle_model=timing.info if timing and inferences else None,
            warnings=(timing_warning,) if timing_warning else (),
        )


def timed_windows(results: list[dict]) -> tuple[MlperfWindow, ...]:
    """The performance windows of a session's results.json, with the throughput computed from their timestamps:
    the entries the runner's median takes (main.py, summarize_result), an infer with a throughput and no error."""
    windows = []
    for entry in results:
        infer = entry.get("infer") if isinstance(entry, dict) else None
        if (
            not isinstance(infer, dict)
            or "throughput" not in infer
            or entry.get("error")
            or not {"class", "file"} <= entry.keys()
        ):
            continue
        try:
            n, t0, t1 = int(infer["iterations"]), int(infer["start_time"]), int(infer["end_time"])
        except (KeyError, TypeError, ValueError):
            raise LowtideError(f"the runner's results hold a window without its timestamps: {infer}") from None
        windows.append(MlperfWindow(str(entry.get("file")), n, t0, t1, window_throughput(n, t0, t1)))
    return tuple(windows)


def _results(session: Path) -> list[dict]:
    path = session / "results.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise LowtideError(f"cannot read the runner's results: {exc}", path) from None


def session_results(result: MlperfResult) -> list[dict]:
    """The runner's results.json of the run: one entry per window or input file."""
    return _results(Path(result.session_dir))
