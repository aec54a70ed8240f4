"""Where a tiling can lower the memory peak: the tileable regions (`lowtide.rewrite.regions`) whose operators
include the one at the peak, from the cut tensors and activations before it to those after it."""

from __future__ import annotations

from lowtide.model.ir import Graph
from lowtide.model.operators import TILEABLE_OPCODES
from lowtide.rewrite.emit import is_window
from lowtide.rewrite.errors import NotApplicable
from lowtide.rewrite.regions import Region, RegionEnds, cut_tensors, region_between

# Regions around the peak end at most this many cut tensors past it, or at a tensor computed before that.
TARGET_CUTS_PAST_PEAK = 2


def regions_at_peak(graph: Graph, peak_op: int) -> tuple[list[Region], str]:
    """Tileable regions whose operators include the one at the memory peak, shallow targets first; where there
    are none, why."""
    sg = graph.main
    cuts = cut_tensors(graph)
    if not cuts:
        return [], "no tensor cuts the graph in two (no single spatial prefix)"
    producers = sg.producers()
    sources = [t for t in _sources(graph, cuts, peak_op) if _feeds_spatial(graph, t)]
    regions: list[Region] = []
    refusals: list[str] = []  # why regions from each source end before the peak's tensors are done, each once
    ends = RegionEnds(graph)
    for source in sources:
        for target in _targets(graph, ends, cuts, source, peak_op):
            if producers.get(target, -1) < peak_op or sg.operators[producers[target]].opcode == "PAD":
                continue  # a PAD's output is reassembled unpadded by its consumer's patches instead
            try:
                region = region_between(graph, source, target)
            except NotApplicable as refused:
                if producers.get(target, -1) > peak_op:
                    refusals += [refused.message] if refused.message not in refusals else []
                    break
                continue
            if peak_op in region.all_ops:
                regions.append(region)
    reason = f"the peak (operator {peak_op}, {sg.operators[peak_op].opcode}) is in no tileable region"
    return regions, ("" if regions else ": ".join([reason, "; ".join(refusals)] if refusals else [reason]))


def _sources(graph: Graph, cuts: list[int], peak_op: int) -> list[int]:
    """Where a region around the peak may start: the cut tensors before it, and every 4-D activation computed
    after the last of them and before the peak (a region starting there holds what it reads from before it
    whole: a decoder's skip tensors, a residual block's input)."""
    sg = graph.main
    producers = sg.producers()
    before = [t for t in cuts if producers.get(t, -1) < peak_op]
    last = producers.get(before[-1], -1) if before else -1
    inside = [
        t
        for op in sg.operators[last + 1 : peak_op]
        for t in op.outputs
        if t not in cuts
        and sg.tensors[t].planned
        and len(sg.tensors[t].shape) == 4
        and not is_window(sg.tensors[t].name)
    ]
    return before + inside


def _targets(graph: Graph, ends: RegionEnds, cuts: list[int], source: int, peak_op: int) -> list[int]:
    """Where a region from `source` around the peak may end, nearest first: the cut tensors after it, and the
    4-D activations computed from the peak up to the second cut after it that no later operator reads but
    through them (`escaping_tensor`: an encoder's block output while its input is still read by the decoder, a
    backbone's stage read again by the FPN)."""
    sg = graph.main
    producers = sg.producers()
    after = [t for t in cuts if producers.get(t, -1) > producers.get(source, -1)]
    later = [producers[t] for t in after if producers[t] >= peak_op]
    end = later[TARGET_CUTS_PAST_PEAK - 1] if len(later) >= TARGET_CUTS_PAST_PEAK else len(sg.operators)
    inside = [
        t
        for op in sg.operators[peak_op:end]
        for t in op.outputs
        if t not in cuts
        and sg.tensors[t].planned
        and len(sg.tensors[t].shape) == 4
        and not is_window(sg.tensors[t].name)
        and not ends.escaping(source, t)
    ]
    return sorted(set(after) | set(inside), key=lambda t: producers[t])


def _feeds_spatial(graph: Graph, tensor: int) -> bool:
    sg = graph.main
    return any(sg.operators[c].opcode in TILEABLE_OPCODES for c in sg.consumers().get(tensor, []))
