"""`lowtide` run as a real process, as a user runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping

LAUNCH = "import sys, lowtide.cli.optimize_cmd; from lowtide.cli import main; sys.argv[0] = 'lowtide'; main()"


def lowtide_cli(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", LAUNCH, *args], capture_output=True, text=True, timeout=120, **kwargs)


def run_lowtide(
    *args: str, env: Mapping[str, str] | None = None, prefix: tuple[str, ...] = (), timeout: float = 1200
) -> subprocess.CompletedProcess:
    """The installed CLI as a user runs it, in a child process; `env` adds to this process's environment; `prefix`
    runs it under another command (a network namespace, say)."""
    return subprocess.run(
        [*prefix, sys.executable, "-m", "lowtide", *args],
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def lowtide_json(*args: str, timeout: float = 1800) -> dict:
    """The CLI's one JSON object for `args` (with --json), asserting it exited 0."""
    done = run_lowtide(*args, "--json", timeout=timeout)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)
