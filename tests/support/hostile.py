"""Running every lowtide command on a hostile model and holding it to lowtide's promise: no signal, no traceback,
exit 0, or exit 2 with one line naming the input file, and no file left behind."""

from __future__ import annotations

import faulthandler
import io
import os
import pickle
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

from lowtide.cli import main
from lowtide.model import model_bytes

COMMANDS = ("validate", "inspect", "optimize", "compile", "measure")


@dataclass(frozen=True)
class Outcome:
    command: str
    code: int
    stdout: str
    stderr: str


def command_args(command: str, model: Path, out_dir: Path) -> list[str]:
    return {
        "validate": ["validate", str(model)],
        "inspect": ["inspect", str(model), "--json"],
        "optimize": ["optimize", str(model), "-o", str(out_dir / "out.tflite"), "--time-limit", "1", "--json"],
        "compile": ["compile", str(model), "-o", str(out_dir / "c")],
        "measure": ["measure", str(model), "--board", "host-tflm", "--json", "--iterations", "1", "--warmup", "0"],
    }[command]


def run_in_process(command: str, model: Path, out_dir: Path, *extra: str) -> Outcome:
    """`lowtide.cli.main` as the console script runs it; an exception other than SystemExit escapes (a
    traceback is a failure of the test)."""
    out, err = io.StringIO(), io.StringIO()
    with (
        mock.patch.object(sys, "argv", ["lowtide", *command_args(command, model, out_dir), *extra]),
        redirect_stdout(out),
        redirect_stderr(err),
    ):
        try:
            main()
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return Outcome(command, code, out.getvalue(), err.getvalue())


def run_subprocess(command: str, model: Path, out_dir: Path, timeout: float = 300) -> Outcome:
    result = subprocess.run(
        [sys.executable, "-m", "lowtide", *command_args(command, model, out_dir)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return Outcome(command, result.returncode, result.stdout, result.stderr)


def assert_kept_promise(outcome: Outcome, model: Path, out_dir: Path, expect_error: str | None = None) -> None:
    """Exit 0, or exit 2 with one `lowtide: error: MODEL: ...` line (containing `expect_error` if given) and
    nothing written."""
    what = f"{outcome.command} on {model.name}: exit {outcome.code}\nstderr: {outcome.stderr}"
    assert outcome.code in (0, 2), what  # a negative code is a signal, 1 an uncaught exception
    assert "Traceback" not in outcome.stderr, what
    if expect_error is not None:
        assert outcome.code == 2, what
    if outcome.code == 2:
        lines = outcome.stderr.strip().splitlines()
        if outcome.command != "validate":  # validate lists every problem, one line each
            assert len(lines) == 1, what
        assert all(line.startswith(f"lowtide: error: {model}: ") or line.startswith(f"{model}: ") for line in lines), (
            what
        )
        if expect_error is not None:
            assert expect_error in outcome.stderr, what
        left = sorted(p.name for p in out_dir.iterdir())
        assert left == [], f"{what}\nleft behind: {left}"


def serialise_isolated(raw) -> bytes | None:
    """`model_bytes(raw)` in a forked child, or None if it fails: TFLM's C++ aligner, which it runs, can crash on
    an inconsistent object tree (a union type without its table), and must not take the test process along."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            faulthandler.disable()
            os.close(read_fd)
            with os.fdopen(write_fd, "wb") as pipe:
                pickle.dump(model_bytes(raw), pipe)
        finally:
            os._exit(0)
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as pipe:
        data = pipe.read()
    _, status = os.waitpid(pid, 0)
    return pickle.loads(data) if data and os.WIFEXITED(status) else None
