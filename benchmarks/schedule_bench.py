"""Time the scheduler on every shared model: stored and best live peak, proven bound, states, seconds.

    python benchmarks/schedule_bench.py [--time-limit 30] [--json] [MODEL.tflite ...]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from lowtide.model import load_model
from lowtide.schedule import find_schedule
from rich.console import Console
from rich.table import Table

SHARED_MODELS = Path(__file__).resolve().parents[1].parent / "shared" / "models"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", type=Path)
    parser.add_argument("--time-limit", type=float, default=30.0)
    parser.add_argument("--json", action="store_true", help="one JSON object per model on stdout")
    args = parser.parse_args(argv)
    paths = args.models or sorted(SHARED_MODELS.glob("*.tflite"))
    table = Table("model", "ops", "stored peak", "best peak", "lower bound", "optimal", "states", "seconds")
    for path in paths:
        graph = load_model(path)
        s = find_schedule(graph, time_limit=args.time_limit)
        row = {
            "model": path.stem, "ops": graph.operator_count, "stored_peak_bytes": s.stored_peak_bytes,
            "live_peak_bytes": s.live_peak_bytes, "lower_bound_bytes": s.lower_bound_bytes,
            "optimal": s.optimal, "explored_states": s.explored_states, "seconds": round(s.seconds, 3),
        }
        if args.json:
            print(json.dumps(row), flush=True)
        else:
            table.add_row(path.stem, str(graph.operator_count), f"{s.stored_peak_bytes:,}", f"{s.live_peak_bytes:,}",
                          f"{s.lower_bound_bytes:,}", "yes" if s.optimal else "no", f"{s.explored_states:,}",
                          f"{s.seconds:.2f}")
    if not args.json:
        Console(width=None if sys.stdout.isatty() else 160).print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
