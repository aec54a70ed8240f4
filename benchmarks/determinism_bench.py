"""Check that `lowtide optimize` and `optimize --rewrite auto` write the same bytes twice on every shared model, the
second time beside CPU-bound processes; write the determinism section of docs/benchmarks.md. Run from the
repository root:

    python benchmarks/determinism_bench.py [--busy 2] [--only MODEL ...] [--doc docs/benchmarks.md]

Every model is optimized once on the machine as it is, then again with `--busy` processes spinning beside it and
another PYTHONHASHSEED. Every file written (.tflite, .h, .json) must be byte-identical between the two runs, and no
search may have been cut by the wall clock (`--json`: `wall_clock_cut`). The section is written again after every
model, so an interrupted run leaves the models done so far. Exit status 1 if any model fails either.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from report import DOC, SHARED_MODELS, write_section

SECTION = "determinism"
MODES = {"optimize": (), "optimize --rewrite auto": ("--rewrite", "auto")}
LAUNCH = "import sys, lowtide.cli.optimize_cmd; from lowtide.cli import main; sys.argv[0] = 'lowtide'; main()"
# Far above the slowest run beside two busy processes, so that only a hung run fails by it.
RUN_TIMEOUT_S = 3600


@dataclass(frozen=True)
class Run:
    """One `lowtide optimize --json` run: the sha256 of every file written, by suffix, and its report."""

    digests: dict[str, str]
    head_bytes: int
    wall_clock_cuts: tuple[str, ...]
    seconds: float


@dataclass(frozen=True)
class Row:
    model: str
    mode: str
    quiet: Run
    loaded: Run

    @property
    def identical(self) -> bool:
        return self.quiet.digests == self.loaded.digests

    @property
    def cut(self) -> bool:
        return bool(self.quiet.wall_clock_cuts or self.loaded.wall_clock_cuts)


@contextmanager
def cpu_load(processes: int) -> Iterator[None]:
    """`processes` busy loops for the length of the block (ended, by their own ids, when it ends)."""
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(processes)]
    try:
        yield
    finally:
        for process in busy:
            process.kill()
            process.wait()


def optimize(model: Path, out_dir: Path, options: tuple[str, ...], hash_seed: str) -> Run:
    out_dir.mkdir(parents=True)
    out = out_dir / model.name
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", LAUNCH, "optimize", str(model), "-o", str(out), "--json", *options],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        env={**os.environ, "PYTHONHASHSEED": hash_seed},
    )
    if done.returncode != 0:
        raise SystemExit(f"{model.name} {' '.join(options)}: lowtide optimize failed:\n{done.stderr}")
    report = json.loads(done.stdout)
    digests = {path.suffix: hashlib.sha256(path.read_bytes()).hexdigest() for path in sorted(out_dir.iterdir())}
    return Run(
        digests, report["after"]["planned_head_bytes"], tuple(report["wall_clock_cut_at"]), time.monotonic() - started
    )


def markdown_section(rows: list[Row], models: int, command: str, busy: int, load: tuple[float, float]) -> str:
    lines = [
        "## Deterministic output: the same bytes beside CPU-bound jobs",
        "",
        f"Made by `{command}` on {time.strftime('%Y-%m-%d')} (Python {platform.python_version()}, "
        f"{platform.machine()}, {os.cpu_count()} cores shared with other jobs; load average {load[0]:.1f} at the "
        f"start, {load[1]:.1f} at the end).",
        "",
        "Each model optimized twice with the default options (no `--verify`): first on the machine as it was, then",
        f"beside {busy} processes spinning `while True: pass` and with another PYTHONHASHSEED. Identical = the",
        ".tflite, .h and .json written have the same sha256 in both runs; cut = the wall clock (`--time-limit`, the",
        "safety net) cut a search in either run. Times are wall-clock, the only figure that may differ.",
        "",
        "| model | mode | head | sha256 of the .tflite | identical | cut | time | time, loaded |",
        "|---|---|---:|---|---|---|---:|---:|",
    ]
    for row in rows:
        lines.append(
            f"| {row.model} | {row.mode} | {row.quiet.head_bytes:,} | `{row.quiet.digests['.tflite'][:16]}` | "
            f"{'yes' if row.identical else '**NO**'} | {'**yes**' if row.cut else 'no'} | "
            f"{row.quiet.seconds:.1f} s | {row.loaded.seconds:.1f} s |"
        )
    identical = sum(row.identical for row in rows)
    cut = sum(row.cut for row in rows)
    lines += [
        "",
        f"{identical} of {len(rows)} runs byte-identical; {cut} cut by the wall clock; slowest loaded run "
        f"{max(row.loaded.seconds for row in rows):.1f} s; {len(rows) // len(MODES)} of {models} models done.",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--busy", type=int, default=2, help="CPU-bound processes beside the second runs")
    parser.add_argument("--only", nargs="+", metavar="MODEL", help="model names (default: every shared model)")
    parser.add_argument("--doc", type=Path, default=DOC)
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    command = " ".join(["python benchmarks/determinism_bench.py", *argv])
    paths = (
        [SHARED_MODELS / f"{name}.tflite" for name in args.only]
        if args.only
        else sorted(SHARED_MODELS.glob("*.tflite"))
    )
    console = Console()
    load_at_start = os.getloadavg()[0]
    rows = []
    with tempfile.TemporaryDirectory(prefix="lowtide-determinism-") as tmp:
        for path in paths:
            for mode, options in MODES.items():
                out = Path(tmp) / f"{path.stem} {mode}"
                quiet = optimize(path, out / "quiet", options, "1")
                with cpu_load(args.busy):
                    loaded = optimize(path, out / "loaded", options, "2")
                rows.append(Row(path.stem, mode, quiet, loaded))
                console.print(
                    f"{path.stem} ({mode}): {quiet.head_bytes:,} B, {quiet.seconds:.1f} s; beside "
                    f"{args.busy} busy processes {'identical' if rows[-1].identical else 'DIFFERENT'}, "
                    f"{loaded.seconds:.1f} s" + (", wall-clock cut" if rows[-1].cut else "")
                )
            load = (load_at_start, os.getloadavg()[0])
            write_section(args.doc, SECTION, markdown_section(rows, len(paths), command, args.busy, load))
    console.print(f"wrote the {SECTION} section of {args.doc}")
    return 0 if all(row.identical and not row.cut for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
