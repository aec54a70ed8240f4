"""Time the scheduler on every shared model, or on RandWire graphs: stored and best live peak, proven bound, time.

    python benchmarks/schedule_bench.py [--effort 1] [--json] [MODEL.tflite ...]
    python benchmarks/schedule_bench.py --randwire [--effort 4] [--doc docs/benchmarks.md]

`--randwire` schedules the builder's RandWire graphs (`lowtide.testing.zoo.RandWireSpec`) as `lowtide optimize`
does (outputs placed inside dying inputs where allowed) and writes the schedule-randwire section of the doc.
Each search gets `--effort` times `find_schedule`'s default budget of work units, so the orders and bounds are the
same on any machine; only the times vary.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

from lowtide.model import read_model
from lowtide.model.ir import Graph
from lowtide.schedule import SCHEDULE_UNITS, Schedule, find_schedule, schedule_budget, subgraph_problem
from lowtide.schedule.search import Block, simple_orders
from lowtide.testing.zoo import RandWireSpec, randwire_model
from lowtide.validation import load_model
from report import DOC, SHARED_MODELS, write_section

SECTION = "schedule-randwire"
# WS, ER and BA wiring, concatenation and addition, 100 to 400 operators (two stages of 24 to 48 nodes, or three
# of 32).
RANDWIRE_SPECS = [
    RandWireSpec("ws", 24, 2, "concat", seed=0),
    RandWireSpec("ws", 48, 2, "concat", seed=1),
    RandWireSpec("ws", 48, 2, "concat", seed=2),
    RandWireSpec("ws", 32, 2, "add", seed=0),
    RandWireSpec("ws", 48, 2, "add", seed=1),
    RandWireSpec("ws", 48, 2, "add", seed=2),
    RandWireSpec("er", 48, 2, "concat", seed=1),
    RandWireSpec("er", 48, 2, "concat", seed=2),
    RandWireSpec("er", 32, 3, "concat", seed=1),
    RandWireSpec("er", 24, 2, "add", seed=0),
    RandWireSpec("er", 32, 2, "add", seed=0),
    RandWireSpec("ba", 40, 2, "concat", seed=0),
    RandWireSpec("ba", 48, 2, "concat", seed=1),
    RandWireSpec("ba", 48, 2, "concat", seed=2),
    RandWireSpec("ba", 24, 2, "add", seed=0),
    RandWireSpec("ba", 32, 2, "add", seed=0),
]


@dataclass(frozen=True)
class RandWireRow:
    spec: RandWireSpec
    ops: int
    schedule: Schedule
    best_simple_peak_bytes: int  # the best of the stored, depth-first and greedy orders


def best_simple_peak(graph: Graph, in_place: bool) -> int:
    problem = subgraph_problem(graph, 0, in_place)
    return min(peak for peak, _ in simple_orders(problem, Block(0, problem.all_ops, 0)))


def randwire_section(rows: list[RandWireRow], command: str, effort: float, load: tuple[float, float]) -> str:
    lines = [
        "## Scheduling RandWire graphs: anytime search, gap to the lower bound",
        "",
        f"Made by `{command}` (Python {platform.python_version()}, {platform.machine()}, a budget of "
        f"{effort * SCHEDULE_UNITS:,.0f} work units per graph, `lowtide.budget`, on {os.cpu_count()} cores shared "
        f"with other jobs: load average {load[0]:.1f} at the start, {load[1]:.1f} at the end). Every figure but the "
        "time is the same on any machine under any load; no search was cut by the wall clock"
        + ("" if not any(r.schedule.wall_clock_cut for r in rows) else " but those marked (cut)")
        + ".",
        "",
        "Randomly wired int8 networks in the shape of Xie et al. 2019 from `lowtide.testing.zoo.RandWireSpec`",
        "(generator, aggregation, stages x nodes, seed): every node a CONCATENATION or a chain of ADDs of its",
        "inputs, a 3x3 depthwise and a 1x1 convolution. Live peaks as `lowtide optimize` counts them (outputs",
        "placed inside dying inputs where allowed). Lower bound = the highest minimum cut of the bytes live at one",
        "operator, raised by ordered pairs, by the exact search and by budget probes that drop every search state",
        "whose own minimum cuts (given what it has run) exceed the budget (`lowtide.schedule.anytime`); gap = result",
        "above it. Best heuristic = the best of the stored order, two depth-first orders and the greedy order.",
        "",
        "| graph | operators | stored | lower bound | result | gap | proven optimal | time | best heuristic |",
        "|---|---:|---:|---:|---:|---:|---|---:|---:|",
    ]
    for row in rows:
        s = row.schedule
        lines.append(
            f"| {row.spec.name} | {row.ops} | {s.stored_peak_bytes:,} | {s.lower_bound_bytes:,} | "
            f"{s.live_peak_bytes:,} | {s.gap:.1%} | {'yes' if s.optimal else 'no'} | {s.seconds:.1f} s"
            f"{' (cut)' if s.wall_clock_cut else ''} | "
            f"{row.best_simple_peak_bytes:,} |"
        )
    proven = sum(1 for r in rows if r.schedule.optimal)
    within = sum(1 for r in rows if r.schedule.gap <= 0.10)
    worst = max(rows, key=lambda r: r.schedule.gap)
    lines += [
        "",
        f"{proven} of {len(rows)} graphs proven optimal, {within} within 10% of the lower bound (the widest gap "
        f"{worst.schedule.gap:.1%}, {worst.spec.name}); every result at or below the best heuristic: "
        f"{'yes' if all(r.schedule.live_peak_bytes <= r.best_simple_peak_bytes for r in rows) else 'NO'}; "
        f"slowest {max(r.schedule.seconds for r in rows):.1f} s.",
    ]
    return "\n".join(lines) + "\n"


def run_randwire(effort: float, doc: Path, command: str) -> int:
    console = Console()
    table = Table(
        "graph",
        "ops",
        "lower bound",
        "result",
        "gap",
        "proven",
        "seconds",
        "best heuristic",
        title="RandWire scheduling",
        title_justify="left",
    )
    rows = []
    load_at_start = os.getloadavg()[0]
    for spec in RANDWIRE_SPECS:
        graph = read_model(randwire_model(spec))
        schedule = find_schedule(graph, schedule_budget(effort), in_place=True)
        row = RandWireRow(spec, graph.operator_count, schedule, best_simple_peak(graph, in_place=True))
        rows.append(row)
        table.add_row(
            spec.name,
            str(row.ops),
            f"{schedule.lower_bound_bytes:,}",
            f"{schedule.live_peak_bytes:,}",
            f"{schedule.gap:.1%}",
            "yes" if schedule.optimal else "no",
            f"{schedule.seconds:.1f}",
            f"{row.best_simple_peak_bytes:,}",
        )
        console.print(f"{spec.name}: {schedule.live_peak_bytes:,} B, gap {schedule.gap:.1%}, {schedule.seconds:.1f} s")
    console.print(table)
    write_section(doc, SECTION, randwire_section(rows, command, effort, (load_at_start, os.getloadavg()[0])))
    console.print(f"wrote the {SECTION} section of {doc}")
    return 0 if all(r.schedule.live_peak_bytes <= r.best_simple_peak_bytes for r in rows) else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", type=Path)
    parser.add_argument("--effort", type=float, default=1.0, help="times find_schedule's default work budget")
    parser.add_argument("--json", action="store_true", help="one JSON object per model on stdout")
    parser.add_argument("--randwire", action="store_true", help="RandWire graphs instead of models; writes --doc")
    parser.add_argument("--doc", type=Path, default=DOC)
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    if args.randwire:
        return run_randwire(args.effort, args.doc, " ".join(["python benchmarks/schedule_bench.py", *argv]))
    paths = args.models or sorted(SHARED_MODELS.glob("*.tflite"))
    table = Table("model", "ops", "stored peak", "best peak", "lower bound", "optimal", "states", "seconds")
    for path in paths:
        graph = load_model(path)
        s = find_schedule(graph, schedule_budget(args.effort))
        row = {
            "model": path.stem,
            "ops": graph.operator_count,
            "stored_peak_bytes": s.stored_peak_bytes,
            "live_peak_bytes": s.live_peak_bytes,
            "lower_bound_bytes": s.lower_bound_bytes,
            "optimal": s.optimal,
            "gap_bytes": s.gap_bytes,
            "explored_states": s.explored_states,
            "seconds": round(s.seconds, 3),
        }
        if args.json:
            print(json.dumps(row), flush=True)
        else:
            table.add_row(
                path.stem,
                str(graph.operator_count),
                f"{s.stored_peak_bytes:,}",
                f"{s.live_peak_bytes:,}",
                f"{s.lower_bound_bytes:,}",
                "yes" if s.optimal else "no",
                f"{s.explored_states:,}",
                f"{s.seconds:.2f}",
            )
    if not args.json:
        Console(width=None if sys.stdout.isatty() else 160).print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
