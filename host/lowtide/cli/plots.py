"""The pictures the commands draw: the arena as a map of tensors over execution steps and offsets (`inspect` and
`optimize --plot-map`), the figures per operator a board counts (`measure --plot-ops`), and the plots of `inspect
--plot` and `savings --plot`. matplotlib, on its Agg backend, is imported only when a picture is asked for; every
picture is saved one way (`save_figure`): PNG or SVG by the file's suffix, written atomically."""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from lowtide.errors import LowtideError
from lowtide.memory import MemoryPlan, tflm_plan
from lowtide.model import Graph
from lowtide.settings import Settings
from lowtide.storage import write_atomically
from lowtide.validation import load_model

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
    from matplotlib.ticker import Formatter

    from lowtide.device.measure import MeasureResult
    from lowtide.pipeline.optimize import OptimizeResult
    from lowtide.rewrite import RewriteResult

PLOT_FORMATS = {".png": "png", ".svg": "svg"}  # suffix -> matplotlib's format
_PANEL_INCHES = (7.0, 5.5)  # each map panel's share of the figure
_AXES_POINTS = (430.0, 310.0)  # about the plotting area of one panel, in points: what a box's label must fit
_LABEL_POINTS = 7  # font size of the names on boxes
_CHARACTER_POINTS = 4.3  # about the width of one character of a name
_SHORTEST_LABEL = 10  # characters: a box that fits fewer is left unnamed
_PEAK_COLOR = "tab:red"
_COLOR = "tab:blue"


def plot_format(path: Path) -> str:
    """The format a picture is saved in, from `path`'s suffix; one line if lowtide draws none such."""
    fmt = PLOT_FORMATS.get(path.suffix.lower())
    if fmt is None:
        kind = f"a {path.suffix} file" if path.suffix else "a file without a suffix"
        raise LowtideError(f"cannot draw into {kind}: name the picture .png or .svg", path)
    return fmt


def checked_plot_path(path: Path | None) -> Path | None:
    """A picture option's callback: the suffix is checked before the command does any work."""
    if path is not None:
        plot_format(path)
    return path


def plots_json(*paths: Path | None) -> dict[str, list[str]]:
    """The `--json` field naming the pictures written, none if none was asked for."""
    written = [str(p) for p in paths if p is not None]
    return {"plots": written} if written else {}


def pyplot() -> ModuleType:
    """matplotlib's pyplot on the Agg backend (no display), imported on the first picture."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig: Figure, path: Path) -> None:
    """Save `fig` as PNG or SVG by `path`'s suffix, atomically, and close it; one line if it cannot be written."""
    try:
        fmt = plot_format(path)
        buffer = io.BytesIO()
        fig.savefig(buffer, format=fmt, dpi=110)
    finally:
        pyplot().close(fig)
    try:
        write_atomically(path, buffer.getvalue())
    except OSError as exc:
        where = f" ({exc.filename})" if exc.filename and exc.filename != str(path) else ""
        raise LowtideError(f"cannot write plot: {exc.strerror or exc}{where}", path) from None


@dataclass(frozen=True)
class MapBox:
    """One buffer of a plan on the arena map: the bytes it holds while it is live."""

    buffer: int  # index into the plan's buffers
    subgraph: int
    tensor: int | None  # tensor index in its subgraph; None for a kernel's scratch buffer
    name: str  # the tensor's name, or `Buffer.label` for a scratch buffer
    first_step: int  # first step (index into the plan's steps) during which it is live
    last_step: int  # last such step, inclusive
    offset: int
    size: int


@dataclass(frozen=True)
class ArenaMap:
    """A plan as boxes over execution steps (x) and arena offsets (y)."""

    boxes: tuple[MapBox, ...]
    step_count: int
    step_opcodes: tuple[str, ...]
    head_bytes: int  # the plan's highest end: the arena head
    # Of the steps during which a box ending at the head is live, the one with the most bytes live (the first of
    # equals): where the plan is tightest under its highest end.
    peak_step: int | None


def arena_map(graph: Graph, plan: MemoryPlan) -> ArenaMap:
    """The boxes of `plan`: each buffer at its planned offset over the steps during which it is live (the
    memory stage's lifetimes). A buffer live while no operator runs (a graph input no operator reads) has none."""
    live_steps: dict[int, list[int]] = {}
    for k, step in enumerate(plan.steps):
        for i in step.buffers:
            live_steps.setdefault(i, []).append(k)
    boxes = []
    for i, (buffer, offset) in enumerate(zip(plan.buffers, plan.offsets)):
        steps = live_steps.get(i)
        if not steps:
            continue
        name = buffer.label if buffer.tensor is None else graph.subgraphs[buffer.subgraph].tensors[buffer.tensor].name
        boxes.append(MapBox(i, buffer.subgraph, buffer.tensor, name, steps[0], steps[-1], offset, buffer.size))
    at_head = {k for b in boxes if b.offset + b.size == plan.head_bytes for k in range(b.first_step, b.last_step + 1)}
    return ArenaMap(
        boxes=tuple(boxes),
        step_count=len(plan.steps),
        step_opcodes=tuple(s.opcode for s in plan.steps),
        head_bytes=plan.head_bytes,
        peak_step=min(at_head, key=lambda k: (-plan.steps[k].live_bytes, k), default=None),
    )


@dataclass(frozen=True)
class MapPanel:
    key: str  # prefixes each rectangle's gid (`box_gid`): unique within a figure, an element id in an SVG
    title: str
    map: ArenaMap


def box_gid(panel: MapPanel, box: MapBox) -> str:
    return f"{panel.key}-buffer-{box.buffer}"


def stored_plan_panel(graph: Graph, plan: MemoryPlan) -> MapPanel:
    """TFLM's plan of `graph` as stored (`tflm_plan`): its operator order, and its offline plan where it carries
    one (TFLM follows it; the greedy planner places only the rest)."""
    kind = "its offline plan" if graph.offline_plan is not None else "TFLM's greedy plan"
    return MapPanel("tflm", f"{graph.name}: {kind}, stored order", arena_map(graph, plan))


def draw_arena_maps(panels: Sequence[MapPanel]) -> Figure:
    """One panel per plan, side by side on one y scale: a rectangle per box (steps by offset .. offset + size),
    the head a dashed line, the step of the peak marked, the large boxes named."""
    plt = pyplot()
    fig, axes = plt.subplots(
        1, len(panels), figsize=(_PANEL_INCHES[0] * len(panels), _PANEL_INCHES[1]), sharey=True, squeeze=False
    )
    top = max((p.map.head_bytes for p in panels), default=0) or 1
    for ax, panel in zip(axes[0], panels):
        _draw_map(ax, panel, top)
    axes[0][0].set_ylabel("arena offset (bytes)")
    axes[0][0].set_ylim(0, top * 1.08)
    fig.tight_layout()
    return fig


def _draw_map(ax: Axes, panel: MapPanel, top: int) -> None:
    from matplotlib import colormaps
    from matplotlib.patches import Rectangle

    amap = panel.map
    width = max(amap.step_count, 1)
    colors = colormaps["tab20"]
    for box in amap.boxes:
        at_head = box.offset + box.size == amap.head_bytes
        ax.add_patch(
            Rectangle(
                (box.first_step, box.offset),
                box.last_step - box.first_step + 1,
                box.size,
                facecolor="lightgrey" if box.tensor is None else colors(box.buffer % colors.N),
                hatch="//" if box.tensor is None else None,
                edgecolor=_PEAK_COLOR if at_head else "white",
                linewidth=1.5 if at_head else 0.5,
                gid=box_gid(panel, box),
            )
        )
        span = box.last_step - box.first_step + 1
        across, up = span / width * _AXES_POINTS[0], box.size / top * _AXES_POINTS[1]
        fits = int(max(across, up) / _CHARACTER_POINTS)  # written along the box's longer side
        if min(across, up) >= 1.3 * _LABEL_POINTS and fits >= _SHORTEST_LABEL:
            # the end of a long name says more than its start (a layer's path ends in the layer)
            name = box.name if len(box.name) <= fits else "…" + box.name[-(fits - 1) :]
            ax.text(
                box.first_step + span / 2,
                box.offset + box.size / 2,
                name,
                rotation=90 if up > across else 0,
                ha="center",
                va="center",
                fontsize=_LABEL_POINTS,
                clip_on=True,
                parse_math=False,  # names are not TeX: a `$` stays a `$`
            )
    ax.axhline(amap.head_bytes, color=_PEAK_COLOR, linestyle="--", linewidth=1)
    if amap.peak_step is not None:
        ax.axvline(amap.peak_step + 0.5, color=_PEAK_COLOR, linestyle=":", linewidth=1)
        ax.annotate(
            f"head {amap.head_bytes:,} B at step {amap.peak_step} ({amap.step_opcodes[amap.peak_step]})",
            (amap.peak_step + 0.5, amap.head_bytes),
            xytext=(0, 4),
            textcoords="offset points",
            ha="left" if amap.peak_step < width / 2 else "right",
            va="bottom",
            fontsize=8,
            color=_PEAK_COLOR,
            parse_math=False,
        )
    ax.set_xlim(0, width)
    ax.set_xlabel("execution step")
    ax.yaxis.set_major_formatter(_thousands())
    ax.set_title(panel.title, fontsize=10, loc="left")


def plot_model_map(graph: Graph, plan: MemoryPlan, path: Path) -> None:
    """`inspect --plot-map`: the arena map of the model as TFLM will plan it (`stored_plan_panel`)."""
    save_figure(draw_arena_maps([stored_plan_panel(graph, plan)]), path)


def optimized_panels(original: Graph, written: Graph) -> list[MapPanel]:
    """`optimize --plot-map`'s two plans: TFLM's greedy plan of the original model in its stored order, and the one
    lowtide wrote (the new order and its offline plan, the scratch buffers where TFLM's planner puts them)."""
    return [
        stored_plan_panel(original, tflm_plan(original)),
        MapPanel(
            "lowtide",
            f"{written.name}: lowtide's plan, new order + offline plan",
            arena_map(written, tflm_plan(written)),
        ),
    ]


def plot_optimized_maps(result: OptimizeResult, path: Path, settings: Settings) -> None:
    """`optimize --plot-map`: the model taken in beside the one written (`optimized_panels`), both read back."""
    original, written = (load_model(p, settings) for p in (result.model_path, result.export.model_path))
    save_figure(draw_arena_maps(optimized_panels(original, written)), path)


def front_gid(index: int) -> str:
    """The SVG id of the `index`-th point of the rewrite's Pareto front (`draw_pareto_front`)."""
    return f"front-point-{index}"


def draw_pareto_front(rewrite: RewriteResult, title: str) -> Figure:
    """`optimize --rewrite auto --plot-front`: each point of the rewrite's Pareto front at its extra MACs, a bar
    of its head (placed, or the live peak of one not built) with TFLM's persistent tail above it, so the bar's
    top is the arena it declares; the untiled graph's declared arena as a line."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    points = rewrite.pareto
    xs = [100 * (c.macs / max(rewrite.macs_before, 1) - 1) for c in points]
    width = 0.6 * min((b - a for a, b in zip(xs, xs[1:]) if b > a), default=1.0)
    heads = [c.head_bytes if c.head_bytes is not None else c.live_peak_bytes for c in points]
    tails = [c.tail_bytes for c in points]
    for index, (x, head, tail) in enumerate(zip(xs, heads, tails)):
        ax.bar(x, head, width, color="#4c72b0", gid=front_gid(index))
        ax.bar(x, tail, width, bottom=head, color="#dd8452")
    ax.axhline(rewrite.original_declared_bytes, color="black", linestyle="--", linewidth=1)
    ax.bar([], [], color="#4c72b0", label="head (live peak where not built)")
    ax.bar([], [], color="#dd8452", label="TFLM's persistent tail")
    ax.plot([], [], color="black", linestyle="--", label="untiled: head + tail")
    ax.set_xlabel("extra MACs (%)")
    ax.set_ylabel("declared 32-bit arena, bytes")
    ax.yaxis.set_major_formatter(_thousands())
    ax.set_title(title)
    ax.legend(fontsize="small")
    fig.tight_layout()
    return fig


def plot_pareto_front(result: OptimizeResult, path: Path) -> None:
    if result.rewrite is None or not result.rewrite.pareto:
        raise LowtideError("--plot-front: the rewrite explored no tiling, so there is no front to draw")
    save_figure(draw_pareto_front(result.rewrite, f"{result.model_path.name}: rewrite's Pareto front"), path)


def draw_operator_counts(graph: Graph, counts: Sequence[int], unit: str, title: str) -> Figure:
    """One horizontal bar per operator of `graph`'s main subgraph, by index and opcode, in execution order from the
    top: `counts[i]`, the board's `unit` per invocation for operator i, the slowest highlighted."""
    if not counts:
        raise LowtideError(f"{title}: no per-operator figures to draw")
    operators = graph.main.operators
    slowest = max(range(len(counts)), key=counts.__getitem__)
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 1.2 + 0.22 * len(counts)))
    bars = ax.barh(
        range(len(counts)), counts, color=[_PEAK_COLOR if i == slowest else _COLOR for i in range(len(counts))]
    )
    for i, bar in enumerate(bars):
        bar.set_gid(f"operator-{i}")
    labels = [f"{i} {operators[i].opcode}" if i < len(operators) else str(i) for i in range(len(counts))]
    ax.set_yticks(range(len(counts)), labels, fontsize=7)
    ax.set_ylim(len(counts) - 0.5, -0.5)  # operator 0 at the top
    total = sum(counts)
    ax.annotate(
        f" {counts[slowest]:,} ({counts[slowest] / max(total, 1):.0%})",
        (counts[slowest], slowest),
        va="center",
        fontsize=7,
        color=_PEAK_COLOR,
    )
    ax.set_xlim(0, max(counts[slowest], 1) * 1.2)  # room for the slowest one's figure
    ax.set_xlabel(f"{unit} per invocation")
    ax.xaxis.set_major_formatter(_thousands())
    ax.set_title(f"{title}\n{total:,} {unit} in its operators", fontsize=10, loc="left")
    fig.tight_layout()
    return fig


def _thousands() -> Formatter:
    from matplotlib.ticker import StrMethodFormatter

    return StrMethodFormatter("{x:,.0f}")


def plot_operator_counts(result: MeasureResult, path: Path, settings: Settings) -> None:
    """`measure --plot-ops`: the board's counts per operator, the model read again for their opcodes."""
    if not result.op_cycles:
        raise LowtideError(f"board {result.board} reports no per-operator figures: no plot", path)
    unit = result.latency_cycles.unit if result.latency_cycles else "cycles"
    title = f"{Path(result.model).name} on {result.board} ({result.runtime})"
    save_figure(draw_operator_counts(load_model(result.model, settings), result.op_cycles, unit, title), path)
