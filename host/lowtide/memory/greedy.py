"""A replica of TFLM's GreedyMemoryPlanner (memory_planner/greedy_memory_planner.cc).

Offline-planned buffers keep their offsets. Online buffers are listed in reverse order of addition, then
stably sorted by size, largest first; each goes into the lowest gap between already placed buffers whose
lifetimes overlap its own.
"""

from __future__ import annotations

from lowtide.memory.lifetimes import Buffer


def greedy_offsets(buffers: list[Buffer]) -> list[int]:
    offline = [i for i, b in enumerate(buffers) if b.offline_offset is not None]
    online = [i for i, b in enumerate(buffers) if b.offline_offset is None]
    online.reverse()
    online.sort(key=lambda i: -buffers[i].size)  # list.sort is stable, like TFLM's bubble sort
    offsets = [0] * len(buffers)
    placed: list[int] = []  # buffer indices sorted by offset; equal offsets keep insertion order
    for i in offline + online:
        b = buffers[i]
        if b.offline_offset is not None:
            candidate = b.offline_offset
        else:
            candidate = 0
            for j in placed:
                other = buffers[j]
                if other.last < b.first or other.first > b.last:
                    continue
                if offsets[j] - candidate >= b.size:
                    break
                candidate = max(candidate, offsets[j] + other.size)
        offsets[i] = candidate
        position = len(placed)
        for k, j in enumerate(placed):
            if offsets[j] > candidate:
                position = k
                break
        placed.insert(position, i)
    return offsets


def arena_head(buffers: list[Buffer], offsets: list[int]) -> int:
    return max((o + b.size for o, b in zip(offsets, buffers)), default=0)
