"""`lowtide` run as a real process, as a user runs it."""

from __future__ import annotations

import subprocess
import sys

LAUNCH = "import sys, lowtide.cli.optimize_cmd; from lowtide.cli import main; sys.argv[0] = 'lowtide'; main()"


def lowtide_cli(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", LAUNCH, *args], capture_output=True, text=True, timeout=120, **kwargs)
