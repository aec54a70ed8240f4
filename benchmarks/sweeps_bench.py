"""The sweeps over every shared model (the tests marked `slow`: every model through the compiled runtime, the host
TFLM, the rewrite, export and measure, and the HIL baselines of all 32 on host-tflm and qemu-m4). `make test`
leaves them out to keep CI short; this runs them as `make test` would and records the outcome in
docs/benchmarks.md.

    python benchmarks/sweeps_bench.py
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

from report import DOC, REPO, write_section

SECTION = "sweeps"
COMMAND = [
    *(sys.executable, "-m", "pytest", "-q", "-n", "2", "--dist", "loadfile", "-m", "slow"),
    *("--lowtide-board", "host-tflm", "--lowtide-board", "qemu-m4"),
]


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="lowtide-sweeps-") as tmp:
        report = Path(tmp) / "sweeps.xml"
        started = time.monotonic()
        run = subprocess.run([*COMMAND, f"--junitxml={report}"], cwd=REPO, check=False)
        minutes = (time.monotonic() - started) / 60
        outcomes: dict[str, Counter[str]] = {}
        for case in ET.parse(report).iter("testcase"):
            name = case.get("name", "").split("[")[0]
            kind = next((child.tag for child in case if child.tag in ("failure", "error", "skipped")), "passed")
            outcomes.setdefault(f"{case.get('classname')}::{name}", Counter())[kind] += 1
    lines = [
        "## Sweeps over every shared model",
        "",
        f"Made by `python benchmarks/sweeps_bench.py` on {time.strftime('%Y-%m-%d')}: the tests marked `slow`, run as",
        f"`make test` runs the rest (two workers); {minutes:.0f} min, pytest exit status {run.returncode}.",
        "",
        "| test | passed | failed | skipped |",
        "|---|---:|---:|---:|",
    ]
    for test, counts in sorted(outcomes.items()):
        failed = counts["failure"] + counts["error"]
        lines.append(f"| {test} | {counts['passed']} | {failed} | {counts['skipped']} |")
    write_section(DOC, SECTION, "\n".join(lines))
    sys.exit(run.returncode)


if __name__ == "__main__":
    main()
