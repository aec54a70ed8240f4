"""Tensor placement: heuristics, CP-SAT, the overlap check, and TFLM's handling of scratch buffers."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from lowtide.errors import LowtideError
from lowtide.memory import buffer_lifetimes, tflm_plan
from lowtide.memory.lifetimes import Buffer
from lowtide.memory.placement import check_no_overlap, live_lower_bound, place, tflm_offsets_with_plan
from lowtide.validation import load_model

MODELS = Path(__file__).resolve().parents[1] / ".." / "shared" / "models"
MODEL_PATHS = sorted(MODELS.glob("*.tflite"))


def tensor(index: int, size_units: int, first: int, last: int) -> Buffer:
    return Buffer(subgraph=0, tensor=index, op=None, size=16 * size_units, first=first, last=last)


def brute_force_head(buffers: list[Buffer]) -> int:
    """Minimum head by exhaustion. Any placement can be compacted, buffer by buffer in order of offset, to the
    lowest gap that fits without raising the head, so the best first-fit over all orders is optimal."""
    best = None
    for order in itertools.permutations(range(len(buffers))):
        offsets: dict[int, int] = {}
        for i in order:
            b = buffers[i]
            clashes = sorted(
                (offsets[j], offsets[j] + buffers[j].size)
                for j in offsets
                if buffers[j].first <= b.last and b.first <= buffers[j].last
            )
            offset = 0
            for start, end in clashes:
                if start - offset >= b.size:
                    break
                offset = max(offset, end)
            offsets[i] = offset
        head = max(offsets[i] + buffers[i].size for i in offsets)
        best = head if best is None else min(best, head)
    return best


def random_buffers(rng: np.random.Generator, count: int) -> list[Buffer]:
    buffers = []
    for i in range(count):
        first = int(rng.integers(0, 5))
        buffers.append(tensor(i, int(rng.integers(1, 6)), first, first + int(rng.integers(0, 3))))
    return buffers


def test_placement_matches_exhaustive_search_on_small_instances():
    rng = np.random.default_rng(7)
    for _ in range(40):
        buffers = random_buffers(rng, 6)
        placement = place(buffers)
        check_no_overlap(buffers, placement.offsets)
        assert placement.head_bytes == brute_force_head(buffers)
        assert placement.lower_bound_bytes == live_lower_bound(buffers) <= placement.head_bytes
        assert placement.optimal


def test_cp_sat_finds_the_optimum_where_every_heuristic_falls_short():
    # Found by random search: every first-fit order tried and TFLM's greedy leave a 16-byte hole (160 bytes).
    shape = [(3, 0, 0), (3, 4, 7), (3, 1, 4), (2, 1, 3), (2, 3, 6), (4, 0, 2)]
    buffers = [tensor(i, units, first, last) for i, (units, first, last) in enumerate(shape)]
    placement = place(buffers)
    check_no_overlap(buffers, placement.offsets)
    assert placement.method == "cp-sat"
    assert placement.head_bytes == brute_force_head(buffers) == placement.lower_bound_bytes == 144
    assert placement.optimal


@pytest.mark.parametrize("path", MODEL_PATHS, ids=lambda p: p.stem)
def test_shared_models_stored_order(path):
    graph = load_model(path)
    buffers, _ = buffer_lifetimes(graph)
    stock = tflm_plan(graph).head_bytes
    placement = place(buffers)
    check_no_overlap(buffers, placement.offsets)
    assert placement.lower_bound_bytes <= placement.head_bytes <= stock
    assert placement.head_bytes <= 1.05 * placement.lower_bound_bytes


def test_mlperf_vww_reaches_the_live_bound_where_tflm_greedy_does_not():
    graph = load_model(MODELS / "mlperf_vww_96_int8.tflite")
    buffers, _ = buffer_lifetimes(graph)
    placement = place(buffers)
    assert tflm_plan(graph).head_bytes == 73_728
    assert placement.head_bytes == placement.lower_bound_bytes == 55_296
    assert placement.optimal


def test_overlap_check_names_both_tensors():
    buffers = [tensor(3, 2, 0, 2), tensor(5, 2, 2, 4), tensor(6, 2, 3, 4)]
    check_no_overlap(buffers, [0, 32, 0])  # t3 and t6 share bytes but are never live together
    with pytest.raises(LowtideError, match=r"t3 \[0, 32\) and t5 \[16, 48\)"):
        check_no_overlap(buffers, [0, 16, 64])


def test_overlap_check_rejects_unaligned_offsets():
    with pytest.raises(LowtideError, match="t1 at offset 8"):
        check_no_overlap([tensor(1, 1, 0, 0)], [8])


def test_scratch_buffers_go_where_tflm_greedy_puts_them_around_planned_tensors():
    scratch = Buffer(subgraph=0, tensor=None, op=1, size=32, first=1, last=1)
    buffers = [tensor(0, 2, 0, 1), tensor(1, 3, 1, 2), scratch]
    # t0 at 64, t1 at 0..48 overlaps t0's scope only at scope 1: [0,48) and [64,96) leave a 16-byte gap,
    # too small for the 32-byte scratch, so TFLM puts it on top, whatever offset is asked for.
    offsets = tflm_offsets_with_plan(buffers, [64, 0, 48])
    assert offsets == [64, 0, 96]


def _strips_then_patch() -> list[Buffer]:
    """An input (8 units, scopes 0-1) cut in place into two strips at scope 2; the first strip dies there, the
    second is read until scope 4; a patch output made at scope 3 fits only into the first strip's bytes."""
    return [
        tensor(0, 8, 0, 1),
        Buffer(0, 1, None, 64, 2, 2, shares=(0, 0)),
        Buffer(0, 2, None, 64, 2, 4, shares=(0, 64)),
        tensor(3, 4, 3, 4),
    ]


def test_in_place_outputs_stay_inside_their_input_and_free_its_bytes():
    buffers = _strips_then_patch()
    placement = place(buffers)
    check_no_overlap(buffers, placement.offsets)
    x, first, second, patch = placement.offsets
    assert (first, second) == (x, x + 64)
    assert placement.head_bytes == placement.lower_bound_bytes == 128 and placement.optimal
    assert patch == first  # the patch reuses the first strip's rows


def test_overlap_check_refuses_an_in_place_output_moved_off_its_input():
    buffers = _strips_then_patch()
    with pytest.raises(LowtideError, match="in-place output t2"):
        check_no_overlap(buffers, [0, 0, 128, 64])


def test_random_instances_with_in_place_groups_place_validly():
    rng = np.random.default_rng(3)
    for _ in range(30):
        buffers = random_buffers(rng, 6)
        # Cut buffer 0 into three strips at the scope after its last one; each strip lives on for a while.
        root = buffers[0]
        strip = root.size // 3 // 16 * 16
        for k in range(3):
            size = strip if k < 2 else root.size - 2 * strip
            if size:
                buffers.append(
                    Buffer(
                        0,
                        10 + k,
                        None,
                        size,
                        root.last + 1,
                        root.last + 1 + int(rng.integers(0, 4)),
                        shares=(root.tensor, k * strip),
                    )
                )
        placement = place(buffers)
        check_no_overlap(buffers, placement.offsets)
        assert placement.lower_bound_bytes <= placement.head_bytes
