"""The pictures: every box of the arena map is a buffer at its planned offset over the steps it is live, drawn as
that rectangle; the files written are real PNG and SVG; a suffix lowtide cannot draw into fails in one line."""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from matplotlib.colors import to_rgba

from conftest import SHARED_MODELS, needs_firmware_tools
from lowtide import oracle
from lowtide.cli.plots import (
    ArenaMap,
    MapPanel,
    arena_map,
    box_gid,
    draw_arena_maps,
    draw_operator_counts,
    front_gid,
    optimized_panels,
    pyplot,
    stored_plan_panel,
)
from lowtide.memory import MemoryPlan, tflm_plan
from lowtide.model import Graph
from lowtide.testing.zoo import demo_model
from lowtide.validation import load_model

PNG = b"\x89PNG\r\n\x1a\n"
VWW = SHARED_MODELS / "mcunet_vww.tflite"  # 63 steps, six kernel scratch buffers


def _lowtide(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lowtide", *args], capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("demo") / "demo.tflite"
    path.write_bytes(demo_model())
    return path


def _check_boxes(graph: Graph, plan: MemoryPlan, amap: ArenaMap) -> None:
    """Every box is one buffer of `plan`, at its offset and size, over exactly the steps whose scope lies in the
    buffer's lifetime; every buffer has its box; the map's head is the plan's highest end."""
    assert len(amap.boxes) == len(plan.buffers) == len({box.buffer for box in amap.boxes})
    for box in amap.boxes:
        buffer = plan.buffers[box.buffer]
        live = [k for k, step in enumerate(plan.steps) if buffer.first <= step.scope <= buffer.last]
        assert (box.first_step, box.last_step) == (live[0], live[-1]), buffer.label
        assert (box.offset, box.size) == (plan.offsets[box.buffer], buffer.size)
        assert (box.subgraph, box.tensor) == (buffer.subgraph, buffer.tensor)
        if buffer.tensor is not None:
            assert box.name == graph.subgraphs[buffer.subgraph].tensors[buffer.tensor].name
    assert amap.head_bytes == max(box.offset + box.size for box in amap.boxes) == plan.head_bytes
    assert amap.peak_step is not None and any(
        box.first_step <= amap.peak_step <= box.last_step and box.offset + box.size == amap.head_bytes
        for box in amap.boxes
    )


def _check_drawn(panels: list[MapPanel]) -> None:
    """The rectangles matplotlib holds are the boxes, one each (x: steps, y: offset .. offset + size), and the head
    is a line at the plan's highest end; the panels share one y scale."""
    fig = draw_arena_maps(panels)
    try:
        for ax, panel in zip(fig.axes, panels, strict=True):
            drawn = {p.get_gid(): (p.get_x(), p.get_y(), p.get_width(), p.get_height()) for p in ax.patches}
            assert len(drawn) == len(ax.patches)
            assert drawn == {
                box_gid(panel, box): (box.first_step, box.offset, box.last_step - box.first_step + 1, box.size)
                for box in panel.map.boxes
            }
            heads = [line for line in ax.lines if list(line.get_ydata()) == [panel.map.head_bytes] * 2]
            assert len(heads) == 1
        assert len({ax.get_ylim() for ax in fig.axes}) == 1
        assert fig.axes[0].get_ylim()[1] >= max(panel.map.head_bytes for panel in panels)
    finally:
        pyplot().close(fig)


@pytest.mark.parametrize("which", ["mcunet_vww", "demo"])
def test_every_box_is_a_buffer_at_its_planned_offset_and_steps(which, demo):
    path = VWW if which == "mcunet_vww" else demo
    graph = load_model(path)
    plan = tflm_plan(graph)
    panel = stored_plan_panel(graph, plan)
    assert panel.map == arena_map(graph, plan)
    _check_boxes(graph, plan, panel.map)
    assert any(box.tensor is None for box in panel.map.boxes) == (which == "mcunet_vww")  # scratch buffers drawn
    # The map's top is the head TFLM itself allocates for the model.
    assert panel.map.head_bytes == oracle.allocate(path.read_bytes()).head_bytes
    _check_drawn([panel])


def test_inspect_plot_map_writes_png_and_svg_of_the_boxes(tmp_path, demo):
    png, svg = tmp_path / "map.png", tmp_path / "map.svg"
    for picture in (png, svg):
        done = _lowtide("inspect", str(demo), "--plot-map", str(picture), "--arena32", "estimate", "--json")
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["plots"] == [str(picture)]
    assert png.read_bytes().startswith(PNG)
    graph = load_model(demo)
    panel = stored_plan_panel(graph, tflm_plan(graph))
    ids = {e.get("id") for e in ET.parse(svg).iter() if e.get("id", "").startswith("tflm-buffer-")}
    assert ids == {box_gid(panel, box) for box in panel.map.boxes}


def test_optimize_plot_map_draws_tflm_plan_beside_the_one_written(tmp_path, demo):
    out, picture = tmp_path / "demo_opt.tflite", tmp_path / "maps.png"
    done = _lowtide(
        "optimize", str(demo), "-o", str(out), "--plot-map", str(picture), "--arena32", "estimate", "--json"
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["plots"] == [str(picture)] and picture.read_bytes().startswith(PNG)
    original, written = load_model(demo), load_model(out)
    panels = optimized_panels(original, written)
    assert [p.key for p in panels] == ["tflm", "lowtide"]
    # Left: TFLM's greedy plan of the stored order, the head the host TFLM measured; right: the written plan.
    assert panels[0].map.head_bytes == report["before"]["tflm_head_bytes"] == 92_160
    assert panels[1].map.head_bytes == report["after"]["planned_head_bytes"] == 59_904
    _check_boxes(original, tflm_plan(original), panels[0].map)
    _check_boxes(written, tflm_plan(written), panels[1].map)
    # The written boxes sit where the model's OfflineMemoryAllocation puts them.
    plan = written.offline_plan
    assert plan is not None
    for box in panels[1].map.boxes:
        assert box.tensor is not None
        assert plan.offset(written.tensor_counts, box.subgraph, box.tensor) == box.offset
    _check_drawn(panels)


def test_unknown_suffix_and_unwritable_path_fail_in_one_line(tmp_path, demo):
    out = tmp_path / "never.tflite"
    done = _lowtide("optimize", str(demo), "-o", str(out), "--plot-map", str(tmp_path / "maps.jpg"))
    assert done.returncode == 2 and not out.exists()  # refused before anything ran
    assert (
        done.stderr.strip()
        == f"lowtide: error: {tmp_path / 'maps.jpg'}: cannot draw into a .jpg file: name the picture .png or .svg"
    )
    blocker = tmp_path / "file"
    blocker.write_text("")
    done = _lowtide("inspect", str(demo), "--plot-map", str(blocker / "map.png"), "--arena32", "estimate")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"lowtide: error: {blocker / 'map.png'}: cannot write plot: File exists ({blocker})"
    ]


@needs_firmware_tools
def test_measure_plot_ops_draws_the_board_counts(tmp_path):
    model, picture = SHARED_MODELS / "mlperf_kws_dscnn_int8.tflite", tmp_path / "ops.svg"
    done = _lowtide(
        "measure", str(model), "--board", "qemu-m4", "--iterations", "1", "--plot-ops", str(picture), "--json"
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    counts = report["op_cycles"]  # --plot-ops counts per operator without --profile-ops
    graph = load_model(model)
    assert report["plots"] == [str(picture)] and len(counts) == len(graph.main.operators) == 13
    slowest = counts.index(max(counts))
    # The file holds one bar per operator, the slowest one red.
    bars = {e.get("id"): e for e in ET.parse(picture).iter() if e.get("id", "").startswith("operator-")}
    assert set(bars) == {f"operator-{i}" for i in range(len(counts))}
    red = {i for i in range(len(counts)) if "#d62728" in ET.tostring(bars[f"operator-{i}"], encoding="unicode")}
    assert red == {slowest}
    # The counts are the board's instructions, the same on every run: drawn again here, the bars are the counts.
    fig = draw_operator_counts(graph, counts, "instructions", "kws")
    try:
        (ax,) = fig.axes
        assert [p.get_width() for p in ax.patches] == counts
        red = [i for i, p in enumerate(ax.patches) if p.get_facecolor() == to_rgba("tab:red")]
        assert red == [slowest]
        assert [t.get_text() for t in ax.get_yticklabels()][
            slowest
        ] == f"{slowest} {graph.main.operators[slowest].opcode}"
    finally:
        pyplot().close(fig)


def test_optimize_plot_front_draws_a_bar_per_point_of_the_rewrites_front(tmp_path):
    """Each bar is a point of `--json`'s Pareto front: its head (or live peak) and TFLM's tail on top, the top the
    declared arena; without --rewrite the option is refused in one line."""
    model, out, picture = SHARED_MODELS / "mlperf_kws_dscnn_int8.tflite", tmp_path / "kws.tflite", tmp_path / "f.svg"
    done = _lowtide(
        "optimize",
        str(model),
        "-o",
        str(out),
        "--rewrite",
        "auto",
        "--effort",
        "0.05",
        "--plot-front",
        str(picture),
        "--arena32",
        "estimate",
        "--json",
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    front = report["rewrite"]["pareto"]
    assert report["plots"] == [str(picture)] and front
    ids = {e.get("id") for e in ET.parse(picture).iter() if e.get("id", "").startswith("front-point-")}
    assert ids == {front_gid(i) for i in range(len(front))}
    assert all(p["declared_bytes"] == (p["head_bytes"] or p["live_peak_bytes"]) + p["tail_bytes"] for p in front)
    refused = _lowtide("optimize", str(model), "-o", str(out), "--plot-front", str(picture))
    assert refused.returncode != 0 and refused.stderr.strip().count("\n") == 0 and "--rewrite auto" in refused.stderr
