"""Every command's tables in an 80-column terminal (issue 41): no line wider, no cell cut with "…", and the figures
the command's --json reports whole in the text; at 200 columns, the same figures. The commands run as a user runs
them, on real models; measure and savings need a board, so their tables are drawn from real measurements on the
host-tflm board (mlperf's, from the runner's runs, in test_mlperf.py)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from typer.testing import CliRunner

from conftest import SHARED_MODELS, needs_firmware_tools
from lowtide.cli import app
from lowtide.cli.measure_cmd import _table as measure_table
from lowtide.cli.savings_cmd import VARIANTS, _figures
from lowtide.cli.savings_cmd import _table as savings_table
from lowtide.pipeline.measure import measure
from lowtide.pipeline.optimize import optimize_model
from lowtide.runtimes import runtime_named
from lowtide.storage import CACHE_DIR_SETTING
from support.builder_models import nas_model
from support.tables import assert_whole, rendered

KWS = SHARED_MODELS / "mlperf_kws_dscnn_int8.tflite"
HELLO = SHARED_MODELS / "tflm_hello_world_int8.tflite"
WIDTHS = (80, 200)


def _n(value: int) -> str:
    return f"{value:,}"


def _lowtide(args: list[str], width: int, env: dict[str, str]) -> str:
    result = CliRunner().invoke(app, args, env={**env, "COLUMNS": str(width)})
    assert result.exit_code == 0, result.output
    return result.stdout


def _check(args: list[str], words: Callable[[dict], list[str]], env: dict[str, str] | None = None) -> None:
    """Runs the command with --json, then at each width, where every word `words` picks from the report is whole."""
    expected = words(json.loads(_lowtide([*args, "--json"], 200, env or {})))
    assert expected
    for width in WIDTHS:
        assert_whole(_lowtide(args, width, env or {}), width, expected)


def test_boards():
    def words(report: dict) -> list[str]:
        return [
            word
            for board in report["boards"]
            for word in (
                board["name"],
                board["core"],
                _n(board["sram_bytes"] // 1024),
                _n(board["flash_bytes"] // 1024),
                *board["runtimes"],
            )
        ]

    _check(["boards"], words)

    def banks(report: dict) -> list[str]:
        return [
            word
            for board in report["boards"]
            for bank in board["memory"]
            for word in (bank["name"], f"0x{bank['address']:08X}", f"{bank['size_bytes'] / 1024:,.0f}", bank["speed"])
        ]

    _check(["boards", "--map"], banks)


def test_inspect_operators_and_arena():
    def words(report: dict) -> list[str]:
        mcu32, measured = report["mcu32"], report["measured"]
        return [
            *(_n(op["live_bytes"]) for op in report["ops"]),
            *(op["opcode"] for op in report["ops"]),  # DEPTHWISE_CONV_2D was cut at 80 columns
            *map(_n, (report["tflm_head_bytes"], report["live_peak_bytes"])),
            *map(_n, (mcu32["used_bytes"], mcu32["head_bytes"], mcu32["tail_bytes"], mcu32["arena_bytes"])),
            *map(_n, (measured["tflm_head_bytes"], measured["tflm_total_bytes"])),
        ]

    _check(["inspect", str(KWS), "--verify"], words)


def test_inspect_stale_operators(tmp_path):
    model = tmp_path / "nas.tflite"
    model.write_bytes(nas_model())

    def words(report: dict) -> list[str]:
        operators = report["stale"]["operators"]
        assert operators
        return [
            word
            for op in operators
            for word in (
                op["opcode"],
                *map(_n, (op["unwritten_bytes"], op["tensor_bytes"], op["stale_read_bytes"], op["observed_bytes"])),
            )
        ]

    _check(["inspect", str(model), "--check-stale", "--arena32", "estimate"], words)


def test_optimize_with_its_pareto_front(tmp_path):
    def words(report: dict) -> list[str]:
        before, after = report["before"], report["after"]
        assert report["rewrite"]["pareto"]
        return [
            *map(_n, (before["tflm_head_bytes"], before["tflm_total_bytes"], report["lower_bound_bytes"])),
            *map(_n, (after["planned_head_bytes"], after["tflm_total_bytes"])),
            *map(_n, (before["mcu32"]["used_bytes"], after["mcu32"]["used_bytes"], after["mcu32"]["arena_bytes"])),
            *(
                _n(figure)
                for point in report["rewrite"]["pareto"]
                for figure in (point["head_bytes"] or point["live_peak_bytes"], point["declared_bytes"])
            ),
            *(_n(graph["declared_bytes"]) for graph in report["rewrite"]["candidates"]),
        ]

    out = tmp_path / "kws.tflite"
    _check(["optimize", str(KWS), "-o", str(out), "--rewrite", "auto", "--effort", "0.05", "--verify"], words)


def test_compile(tmp_path):
    def words(report: dict) -> list[str]:
        figures = ("arena_bytes", "fixed_state_bytes", "ram_bytes", "tflm_total_bytes", "tflm_head_bytes")
        tensors = [*report["inputs"], *report["outputs"]]
        return [
            str(report["operators"]),
            *(_n(report[name]) for name in figures),
            *(word for t in tensors for word in (t["name"], str(t["offset"]), _n(t["nbytes"]), str(t["zero_point"]))),
            *(_n(output["elements"]) for output in report["verify"]["outputs"]),
        ]

    _check(["compile", str(KWS), "-o", str(tmp_path), "--verify"], words)


def test_partition(tmp_path):
    def words(report: dict) -> list[str]:
        return [_n(report[name]) for name in ("stock_tflm_head_bytes", "best_order_head_bytes", "tflm_head_bytes")]

    model = SHARED_MODELS / "mcunet_vww.tflite"
    _check(["partition", str(model), "-o", str(tmp_path / "p.tflite"), "--headroom", "1.5"], words)


def test_cache(tmp_path):
    """A cache whose parts have the long names firmware projects get."""
    for part, size in (
        ("firmware/qemu-m4-compiled-mlperf_kws_dscnn_int8-5ceb1a4ddcc4b773", 1_011_100),
        ("firmware/nucleo-f446re-tflm-cmsis-nn-mlperf_kws_dscnn_int8-ba1b54a11f165fad", 2_168_951),
        ("tflm/sources", 26_677_986),
    ):
        (tmp_path / part).mkdir(parents=True)
        (tmp_path / part / "data").write_bytes(bytes(size))

    def words(report: dict) -> list[str]:
        return [_n(report["total_bytes"]), *map(_n, report["parts"].values())]

    _check(["cache"], words, env={CACHE_DIR_SETTING: str(tmp_path)})


@needs_firmware_tools
def test_build():
    def words(report: dict) -> list[str]:
        figures = ("flash_bytes", "flash_capacity_bytes", "static_ram_bytes", "sram_capacity_bytes", "stack_bytes")
        return [_n(report[name]) for name in (*figures, "arena_planned_bytes", "arena_capacity_bytes")]

    _check(["build", str(HELLO), "--board", "qemu-m7", "--runtime", "compiled"], words)


def test_measure_and_savings_on_the_host_tflm_board(tmp_path):
    """measure's table, and savings' from the figures of the stock and the optimized model measured on host-tflm."""
    stock = measure(HELLO, "host-tflm", iterations=1, warmup=0)
    optimized = tmp_path / "hello_optimized.tflite"
    optimize_model(HELLO, optimized, 10.0, verify=True)
    variants = [
        _figures(VARIANTS[0], stock, True, None),
        *(_figures(v, measure(optimized, "host-tflm", iterations=1, warmup=0), True, None) for v in VARIANTS[1:]),
    ]
    figures = stock.to_json()
    assert figures["arena_used_bytes"] and figures["arena_tail_bytes"]
    latency = stock.latency
    assert latency is not None
    measured = [
        *(_n(figures[name]) for name in ("arena_planned_bytes", "board_planned_bytes", "arena_used_bytes")),
        _n(figures["arena_tail_bytes"]),
        *(_n(value) for value in (latency.min, latency.median, latency.max)),
    ]
    saved = [
        _n(value)
        for v in variants
        for value in (v.arena_used_bytes, v.arena_head_bytes, v.arena_tail_bytes, v.arena_predicted_used_bytes)
        if value is not None
    ]
    for width in (50, *WIDTHS, 120):  # drawn here, narrower widths cost nothing: savings' turns on its side in parts
        assert_whole(rendered(measure_table(stock), width), width, measured)
        table = savings_table(Path(HELLO.name), "host-tflm", runtime_named("tflm"), variants)
        assert_whole(rendered(table, width), width, saved)
