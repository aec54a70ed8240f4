"""The pytest plugin: hardware-in-the-loop regression tests of TFLM arena memory, latency and outputs.

    def test_person_detect(lowtide_measure, assert_no_regression):
        result = lowtide_measure("models/person_detect.tflite")
        assert_no_regression(result, latency_percent=10)

    pytest tests/hil --lowtide-board host-tflm --lowtide-baselines tests/hil/baselines.json

Installed through the `pytest11` entry point `lowtide`; without an entry point, load it with
`-p lowtide.hil.plugin`. It does nothing until a test asks for one of its fixtures: without `--lowtide-board` those
tests are skipped, and runs that use none of them look exactly as they would without the plugin. See docs/hil.md.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, Unpack

import pytest

from lowtide.device import locking
from lowtide.errors import LowtideError
from lowtide.hil.baselines import (
    Baseline,
    BaselineKey,
    Figure,
    baseline_of,
    figures_of,
    load_baselines,
    memory_figures,
    merge_baselines,
)
from lowtide.hil.compare import Comparison, ToleranceOverrides, Tolerances, compare
from lowtide.settings import Settings, read_settings
from lowtide.storage import FileLock

if TYPE_CHECKING:
    from lowtide.device.measure import MeasureResult
    from lowtide.device.spec import BoardSpec

DEFAULT_BASELINES = "lowtide-baselines.json"  # in the rootdir, when neither the option nor the ini names one
DEFAULT_LOCK_TIMEOUT_S = 300.0
_INI_TOLERANCES = {  # ini option -> (Tolerances field, default, may be "off")
    "lowtide_arena_bytes": ("arena_bytes", "0", False),
    "lowtide_arena_percent": ("arena_percent", "0", False),
    "lowtide_latency_percent": ("latency_percent", "20", True),
    "lowtide_cycles_percent": ("cycles_percent", "1", True),
}


class NewBaselineWarning(UserWarning):
    """A measurement had no baseline to be compared against."""


MeasureModel = Callable[..., "MeasureResult"]


class CheckRegression(Protocol):
    """What `assert_no_regression` returns."""

    def __call__(self, result: MeasureResult, **overrides: Unpack[ToleranceOverrides]) -> Comparison | None: ...


@dataclass(frozen=True)
class Measurement:
    key: BaselineKey
    label: str  # prefix of its JUnit properties: the name given, else the model's file stem
    result: MeasureResult
    memories: dict[str, Figure]  # arena bytes used per memory of the board (hil.baselines.memory_figures)


@dataclass
class HilSession:
    """What one pytest run knows and holds: options, the baselines as loaded, updates to write, board locks."""

    boards: tuple[str, ...]
    port: str | None
    flash: BoardSpec | None  # the real board to upload each model to before measuring it
    runtime: str | None  # what runs the models on boards lowtide builds for; None: each board file's default
    baselines_path: Path
    update: bool
    require_baselines: bool
    lock_timeout: float
    tolerances: Tolerances
    config: pytest.Config
    settings: Settings  # read once, when the session is configured
    measured: int = 0
    # "compared", "regressed", "new", "recorded", "improved" -> the measurements, for the summary
    outcomes: dict[str, list[str]] = field(default_factory=dict)
    updates: dict[BaselineKey, Baseline] = field(default_factory=dict)
    claimed: set[BaselineKey] = field(default_factory=set)
    locks: dict[str, FileLock] = field(default_factory=dict)
    gave_up: set[str] = field(default_factory=set)  # lock resources that timed out once: not waited for again
    written_entries: int | None = None
    write_error: str | None = None
    _baselines: dict[BaselineKey, Baseline] | None = None

    @property
    def used(self) -> bool:
        return self.measured > 0 or self.write_error is not None

    def baselines(self) -> dict[BaselineKey, Baseline]:
        """The baselines file as it was when this run first needed it."""
        if self._baselines is None:
            self._baselines = load_baselines(self.baselines_path)
        return self._baselines

    def note(self, outcome: str, name: str) -> None:
        self.outcomes.setdefault(outcome, []).append(name)

    def say(self, message: str) -> None:
        """A line on the terminal now, even in the middle of a test whose output is captured."""
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        capture = self.config.pluginmanager.get_plugin("capturemanager")
        if reporter is None:
            return
        if capture is None:
            reporter.write_line(message)
            return
        with capture.global_and_fixture_disabled():
            reporter.write_line(message)

    def lock_board(self, board: str) -> None:
        """Hold `board` (or its port) until the end of this run, so that no other run uses it meanwhile."""
        resource = _lock_resource(board, self.port, self.settings)
        if resource is None or resource in self.locks:
            return
        what = f"board {board}" + (f" on {self.port}" if self.port else "")
        # After one timeout the board is known to be busy: later tests try once instead of waiting again.
        timeout = 0.0 if resource in self.gave_up else self.lock_timeout

        def waiting(holder: locking.LockHolder | None) -> None:
            by = holder.describe() if holder else "another run"
            self.say(f"lowtide: {what} is in use by {by}; waiting up to {timeout:g} s (--lowtide-lock-timeout)")

        try:
            self.locks[resource] = locking.acquire(
                resource, timeout, what, waiting if timeout else None, lock_dir=self.settings.lock_dir
            )
        except locking.LockTimeout:
            self.gave_up.add(resource)
            raise

    def release_locks(self) -> None:
        for held in self.locks.values():
            held.release()
        self.locks.clear()


_SESSION = pytest.StashKey[HilSession]()
_MEASUREMENTS = pytest.StashKey[list[Measurement]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("lowtide", "lowtide hardware-in-the-loop measurements")
    group.addoption(
        "--lowtide-board",
        action="append",
        default=[],
        metavar="NAME",
        help="board to measure on (host-tflm, qemu-m4, qemu-m7, serial, a real board file's name or path such as "
        "nucleo-f746zg, labgrid:PLACE ...); repeat to run every lowtide test on each board. Without it, tests that "
        "measure are skipped.",
    )
    group.addoption(
        "--lowtide-port",
        metavar="PORT",
        help="the board's port: /dev/ttyACM0, socket://HOST:PORT, rfc2217://HOST:PORT (serial); tcp:PORT (host-tflm)",
    )
    group.addoption(
        "--lowtide-flash",
        metavar="BOARD_FILE",
        help="before each measurement, build the firmware with the model for this board (a boards/*.toml name, e.g. "
        "nucleo-f746zg) and upload it to --lowtide-port with PlatformIO; for real boards on --lowtide-board serial",
    )
    group.addoption(
        "--lowtide-runtime",
        metavar="RUNTIME",
        help="what runs the models on boards lowtide builds firmware for: compiled, tflm or tflm-cmsis-nn (default: "
        "each board file's); baselines are kept per board and runtime",
    )
    group.addoption(
        "--lowtide-baselines",
        metavar="PATH",
        help=f"baselines JSON file (default: ini lowtide_baselines, else {DEFAULT_BASELINES} in the rootdir)",
    )
    group.addoption(
        "--lowtide-update-baselines",
        action="store_true",
        help="record the figures of every measurement that runs as its new baseline (other entries are kept)",
    )
    group.addoption(
        "--lowtide-require-baselines",
        action="store_true",
        help="fail a measurement that has no baseline (by default it is reported as NEW, with a warning)",
    )
    group.addoption(
        "--lowtide-lock-timeout",
        type=float,
        metavar="SECONDS",
        help=f"how long to wait for a board another run is using (default: ini lowtide_lock_timeout, "
        f"else {DEFAULT_LOCK_TIMEOUT_S:g})",
    )
    parser.addini("lowtide_baselines", "baselines JSON file, relative to the ini file", default="")
    parser.addini("lowtide_lock_timeout", "seconds to wait for a busy board", default=str(DEFAULT_LOCK_TIMEOUT_S))
    for name, (tolerance, default, may_be_off) in _INI_TOLERANCES.items():
        off = " ('off': not compared)" if may_be_off else ""
        parser.addini(name, f"default tolerance {tolerance}{off}", default=default)


def pytest_configure(config: pytest.Config) -> None:
    boards = tuple(dict.fromkeys(config.getoption("lowtide_board")))
    port = config.getoption("lowtide_port")
    if port and not boards:
        raise pytest.UsageError("--lowtide-port needs --lowtide-board (e.g. --lowtide-board serial)")
    flash = config.getoption("lowtide_flash")
    if flash and (boards != ("serial",) or not port):
        raise pytest.UsageError("--lowtide-flash needs --lowtide-board serial and --lowtide-port (the board's port)")
    lock_timeout = config.getoption("lowtide_lock_timeout")
    if lock_timeout is None:
        lock_timeout = _ini_number(config, "lowtide_lock_timeout", may_be_off=False)
    if lock_timeout < 0:
        raise pytest.UsageError(f"--lowtide-lock-timeout must be >= 0, got {lock_timeout:g}")
    config.stash[_SESSION] = HilSession(
        boards=boards,
        port=port,
        flash=_flash_spec(flash) if flash else None,
        runtime=config.getoption("lowtide_runtime"),
        baselines_path=_baselines_path(config),
        update=config.getoption("lowtide_update_baselines"),
        require_baselines=config.getoption("lowtide_require_baselines"),
        lock_timeout=lock_timeout,
        tolerances=_ini_tolerances(config),
        config=config,
        settings=read_settings(),
    )


def pytest_report_header(config: pytest.Config) -> list[str]:
    hil = config.stash[_SESSION]
    if not hil.boards:
        return []
    mode = " (updating)" if hil.update else ""
    port = f" on {hil.port}" if hil.port else ""
    flash = f" (flashed as {hil.flash.name} before each measurement)" if hil.flash else ""
    return [f"lowtide: boards {', '.join(hil.boards)}{port}{flash}; baselines {hil.baselines_path}{mode}"]


@pytest.hookimpl(trylast=True)  # after every other parametrization, so the board's id comes last in the test id
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    boards = metafunc.config.stash[_SESSION].boards
    if boards and "lowtide_board" in metafunc.fixturenames:
        metafunc.parametrize("lowtide_board", boards, indirect=True, ids=list(boards))


def pytest_report_teststatus(report: pytest.TestReport, config: pytest.Config):
    if (
        report.when == "call"
        and report.passed
        and any(name.endswith(".baseline") and value == "new" for name, value in report.user_properties)
    ):
        return "new", "N", ("NEW", {"yellow": True})
    return None


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    hil = session.config.stash.get(_SESSION, None)
    if hil is None:
        return
    try:
        if hil.update and hil.updates:
            hil.written_entries = merge_baselines(
                hil.baselines_path, hil.updates, hil.lock_timeout, hil.settings.lock_dir
            )
    except LowtideError as exc:
        hil.write_error = str(exc)
        if session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
    finally:
        hil.release_locks()


def pytest_unconfigure(config: pytest.Config) -> None:
    hil = config.stash.get(_SESSION, None)
    if hil is not None:
        hil.release_locks()


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    hil = config.stash.get(_SESSION, None)
    if hil is None or not hil.used:
        return
    write = terminalreporter.write_line
    terminalreporter.section("lowtide")
    counts = ", ".join(f"{len(names)} {outcome}" for outcome, names in sorted(hil.outcomes.items()))
    write(f"{hil.measured} measured on {', '.join(hil.boards)}" + (f": {counts}" if counts else ""))
    if hil.outcomes.get("new"):
        write(f"no baseline in {hil.baselines_path} (record with --lowtide-update-baselines):", yellow=True)
        for name in hil.outcomes["new"]:
            write(f"  {name}")
    if hil.outcomes.get("improved"):
        write("improved on their baselines (record with --lowtide-update-baselines to lock the gain in):")
        for name in hil.outcomes["improved"]:
            write(f"  {name}")
    if hil.written_entries is not None:
        write(f"baselines: wrote {len(hil.updates)} entries to {hil.baselines_path} ({hil.written_entries} in all)")
    if hil.write_error:
        write(f"baselines NOT written: {hil.write_error}", red=True)


@pytest.fixture
def lowtide_board(request: pytest.FixtureRequest) -> str:
    """The board this test measures on (one of --lowtide-board); skips the test if none is given or lowtide does
    not know the board."""
    board = getattr(request, "param", None)
    if board is None:
        pytest.skip("no board to measure on: run pytest with --lowtide-board NAME (host-tflm, qemu-m4, serial ...)")
    from lowtide.device.boards import get_board

    try:
        get_board(board)
    except LowtideError as exc:
        pytest.skip(str(exc))
    return board


@pytest.fixture
def lowtide_tolerances(pytestconfig: pytest.Config) -> Tolerances:
    """Default tolerances of assert_no_regression (from the ini options); override this fixture in a conftest or
    test module to change them for a group of tests."""
    return pytestconfig.stash[_SESSION].tolerances


@pytest.fixture
def lowtide_measure(request: pytest.FixtureRequest, lowtide_board: str) -> MeasureModel:
    """`lowtide_measure(model_path, name=None, *, iterations=10, warmup=1, timeout=10.0, seed=0, runtime=None,
    arena_region=None, persistent_region=None) -> MeasureResult`: build, flash and measure the model on the test's
    board (see lowtide.pipeline.measure), run by `runtime` (default: --lowtide-runtime, else the board file's), TFLM's
    arenas in the board's memories `arena_region` and `persistent_region` name (as `lowtide measure` places them;
    with the two arenas in two memories, each memory's arena bytes become figures of their own). Give each
    measurement a `name` when a test measures more than one. Its figures become JUnit XML properties
    `lowtide.<name>.<figure>`."""
    hil = request.config.stash[_SESSION]
    measurements = request.node.stash.setdefault(_MEASUREMENTS, [])
    test_name = _test_name(request.node, lowtide_board)

    def measure_model(
        model_path: str | Path,
        name: str | None = None,
        *,
        iterations: int = 10,
        warmup: int = 1,
        timeout: float = 10.0,
        seed: int = 0,
        runtime: str | None = None,
        arena_region: str | None = None,
        persistent_region: str | None = None,
    ) -> MeasureResult:
        from lowtide.device.boards import get_board
        from lowtide.pipeline.firmware import ArenaRegions, arena_memories, requested_regions, upload_firmware
        from lowtide.pipeline.measure import measure
        from lowtide.runtimes import runtime_for, runtime_named

        runtime = runtime or hil.runtime
        model_path = Path(model_path)
        label = name or model_path.stem
        if any(m.label == label for m in measurements):
            pytest.fail(f"lowtide: this test already measured {label!r}: give each measurement its own name=")
        regions = ArenaRegions(arena_region, persistent_region)
        if hil.flash is not None and not regions.default:
            pytest.fail(
                "lowtide: arena_region and persistent_region apply to boards the plugin builds for, not to "
                "--lowtide-flash uploads",
                pytrace=False,
            )
        try:
            hil.lock_board(lowtide_board)
            if hil.flash is not None:
                assert hil.port is not None  # --lowtide-flash needs --lowtide-port (pytest_configure)
                chosen = runtime_named(runtime) if runtime else None
                upload_firmware(hil.flash, model_path, hil.port, chosen, settings=hil.settings)
            result = measure(
                model_path,
                lowtide_board,
                hil.port,
                iterations=iterations,
                warmup=warmup,
                timeout=timeout,
                seed=seed,
                # A flashed board or the host interpreter runs what it runs: the runtime went into the upload.
                runtime=runtime if get_board(lowtide_board).builds_firmware else None,
                # The session holds the board's lock; a labgrid place another client holds is waited for as long.
                lock_timeout=hil.lock_timeout,
                take_lock=False,
                on_wait=lambda phase, holder: hil.say(
                    f"lowtide: board {lowtide_board} is in use by {holder}; "
                    f"waiting up to {hil.lock_timeout:g} s (--lowtide-lock-timeout)"
                ),
                settings=hil.settings,
                regions=regions,
            )
            spec = get_board(lowtide_board).spec
            if spec is not None and hil.flash is None:  # the board file's arena regions where none are given
                chosen_runtime = runtime_named(runtime) if runtime else None
                regions = requested_regions(spec, runtime_for(spec.runtime, chosen_runtime), regions)
            memories = memory_figures(result, *arena_memories(spec, regions)) if spec and regions.split else {}
        except LowtideError as exc:
            message = f"lowtide: measuring {model_path.name} on {lowtide_board} failed: {exc}"
            raise pytest.fail.Exception(message, pytrace=False) from None  # the message, not a chain of errors
        hil.measured += 1
        key = BaselineKey(result.board, result.runtime, f"{test_name}::{name}" if name else test_name)
        measurements.append(Measurement(key, label, result, memories))
        properties = {
            "model": model_path.name,
            "model_sha256": result.model_sha256,
            "board": result.board,
            "runtime": result.runtime,
            **figures_of(result),
            **memories,
        }
        # A figure the board does not have (None) is left out rather than written as "None".
        request.node.user_properties.extend((f"lowtide.{label}.{k}", v) for k, v in properties.items() if v is not None)
        return result

    return measure_model


@pytest.fixture
def assert_no_regression(request: pytest.FixtureRequest, lowtide_tolerances: Tolerances) -> CheckRegression:
    """`assert_no_regression(result, **tolerances) -> Comparison | None`: compare a result of lowtide_measure with
    its baseline and fail, naming the model and each figure before -> after, if any grew past its tolerance
    (keyword arguments override fields of `Tolerances`). None when there was no baseline (the test is reported
    NEW, or fails with --lowtide-require-baselines). With --lowtide-update-baselines it records instead of failing."""
    hil = request.config.stash[_SESSION]

    def check(result: MeasureResult, **overrides: Unpack[ToleranceOverrides]) -> Comparison | None:
        measurement = next((m for m in request.node.stash.get(_MEASUREMENTS, []) if m.result is result), None)
        if measurement is None:
            pytest.fail("lowtide: assert_no_regression needs a result that lowtide_measure returned in this test")
        key = measurement.key
        if key in hil.claimed:
            pytest.fail(f"lowtide: {key.name} on {key.board} was already checked in this run: give it a name=")
        hil.claimed.add(key)
        tolerances = replace(lowtide_tolerances, **overrides)
        measured = baseline_of(result, measurement.memories)
        try:
            baseline = hil.baselines().get(key)
        except LowtideError as exc:
            raise pytest.fail.Exception(f"lowtide: {exc}", pytrace=False) from None
        if hil.update:
            hil.updates[key] = measured
        record = request.node.user_properties.append
        if baseline is None:
            _no_baseline(hil, key, measured, record, measurement.label)
            return None
        counter_unit = result.latency_cycles.unit if result.latency_cycles else "cycles"
        comparison = compare(key, baseline, measured, tolerances, counter_unit)
        for figure, before in baseline.figures.items():
            if before is not None:
                record((f"lowtide.{measurement.label}.baseline.{figure}", before))
        outcome = "recorded" if hil.update else ("regressed" if comparison.regressed else "compared")
        record((f"lowtide.{measurement.label}.baseline", outcome))
        hil.note(outcome, f"{key.name} on {key.board}")
        if outcome == "compared" and comparison.improvements:
            hil.note(
                "improved",
                f"{key.name} on {key.board}: "
                + ", ".join(f"{c.figure} {c.before:,} -> {c.after:,} {c.unit}" for c in comparison.improvements),
            )
        if outcome == "regressed":
            pytest.fail(comparison.message(hil.baselines_path), pytrace=False)
        return comparison

    return check


def _no_baseline(hil: HilSession, key: BaselineKey, measured: Baseline, record, label: str) -> None:
    outcome = "recorded" if hil.update else "new"
    record((f"lowtide.{label}.baseline", outcome))
    hil.note(outcome, f"{key.name} on {key.board}")
    if hil.update:
        return
    others = sorted(k.runtime for k in hil.baselines() if (k.board, k.name) == (key.board, key.name))
    runtime_note = f"; it has baselines for another runtime ({'; '.join(others)})" if others else ""
    figures = ", ".join(f"{name} {value}" for name, value in measured.figures.items() if value is not None)
    message = (
        f"lowtide: no baseline for {key.name} on {key.board} ({key.runtime}) in {hil.baselines_path}{runtime_note}. "
        f"Measured {measured.model}: {figures}. Record it with --lowtide-update-baselines."
    )
    if hil.require_baselines:
        pytest.fail(message, pytrace=False)
    warnings.warn(NewBaselineWarning(message), stacklevel=3)


def _test_name(item: pytest.Item, board: str) -> str:
    """The test's id without the board: the baselines are keyed by board separately."""
    nodeid = item.nodeid
    callspec = getattr(item, "callspec", None)
    if callspec is not None and callspec.params.get("lowtide_board") == board:
        for suffix, replacement in ((f"[{board}]", ""), (f"-{board}]", "]")):
            if nodeid.endswith(suffix):
                return nodeid[: -len(suffix)] + replacement
    return nodeid


def _lock_resource(board: str, port: str | None, settings: Settings) -> str | None:
    """What a run must hold to use `board`, as the board says (`Board.lock_resource`)."""
    from lowtide.device.boards import get_board

    return get_board(board).lock_resource(port, settings)


def _flash_spec(name: str) -> BoardSpec:
    from lowtide.device.spec import get_board_spec

    try:
        spec = get_board_spec(name)
    except LowtideError as exc:
        raise pytest.UsageError(f"--lowtide-flash: {exc}") from None
    if spec.emulated:
        raise pytest.UsageError(f"--lowtide-flash: {name} is emulated; measure it with --lowtide-board {name}")
    return spec


def _baselines_path(config: pytest.Config) -> Path:
    option = config.getoption("lowtide_baselines")
    if option:
        return (config.invocation_params.dir / option).resolve()
    ini = config.getini("lowtide_baselines").strip()
    if ini:
        return ((config.inipath.parent if config.inipath else config.rootpath) / ini).resolve()
    return config.rootpath / DEFAULT_BASELINES


def _ini_number(config: pytest.Config, name: str, may_be_off: bool) -> float | None:
    text = str(config.getini(name)).strip()
    if may_be_off and text.lower() in ("off", "none"):
        return None
    try:
        return float(text)
    except ValueError:
        raise pytest.UsageError(
            f"ini option {name} = {text!r}: expected a number" + (" or 'off'" if may_be_off else "")
        ) from None


def _ini_tolerances(config: pytest.Config) -> Tolerances:
    values = {
        tolerance: _ini_number(config, name, may_be_off) for name, (tolerance, _, may_be_off) in _INI_TOLERANCES.items()
    }
    arena_bytes, arena_percent = values["arena_bytes"], values["arena_percent"]
    assert arena_bytes is not None and arena_percent is not None  # their options cannot be 'off'
    try:
        return Tolerances(
            arena_bytes=int(arena_bytes),
            arena_percent=arena_percent,
            latency_percent=values["latency_percent"],
            cycles_percent=values["cycles_percent"],
        )
    except ValueError as exc:
        raise pytest.UsageError(f"lowtide tolerances in the ini file: {exc}") from None
