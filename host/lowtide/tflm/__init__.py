"""TFLite Micro for the MCU: its pinned sources (`tree`), its library built per core and kernel set (`build`), and
its arena on a 32-bit core read from TFLM itself (`sizer`).

`mcu32_arena` is what `inspect` and `optimize` report, and they say which it is (`exact`, `method`): exact where the
sizer can run (Arm toolchain, QEMU and the TFLM tree present), else an estimate from the 64-bit host interpreter,
marked as such with the reason. `--arena32 exact` asks for the exact figure or fails saying what is missing;
`--arena32 estimate` never builds TFLM.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from lowtide import oracle
from lowtide.errors import LowtideError
from lowtide.model.ir import Graph
from lowtide.settings import Settings
from lowtide.tflm.build import ProgressCallback
from lowtide.tflm.sizer import ARENA_ALIGNMENT, predict_arena32
from lowtide.tflm.tree import KernelSet

DEFAULT_CORE = "cortex-m4f"
# The estimate's margin: an arena array need not start 16-byte aligned, and TFLM aligns its start.
_ESTIMATE_MARGIN_BYTES = ARENA_ALIGNMENT


class Arena32Mode(enum.StrEnum):
    """How the 32-bit arena is found: exact if the sizer can run else an estimate, exact or fail, estimate only."""

    AUTO = "auto"
    EXACT = "exact"
    ESTIMATE = "estimate"


@dataclass(frozen=True)
class Mcu32Arena:
    """TFLM's arena for a model on a 32-bit MCU."""

    kernels: str
    core: str
    head_bytes: int
    tail_bytes: int
    used_bytes: int  # what MicroInterpreter::arena_used_bytes() reports
    arena_bytes: int  # what to declare: at least the smallest arena AllocateTensors accepts
    # TFLM's two arenas, what to declare for each (MicroAllocator::Create(persistent, size, non_persistent, size)):
    # sized by the sizer only, None for an estimate
    non_persistent_arena_bytes: int | None
    persistent_arena_bytes: int | None
    exact: bool
    method: str  # how the figures were found, and why they are not exact where they are not

    def to_json(self) -> dict:
        return dict(self.__dict__)


def mcu32_arena(
    graph: Graph,
    head_bytes: int,
    kernels: KernelSet = KernelSet.REFERENCE,
    core: str = DEFAULT_CORE,
    progress: ProgressCallback | None = None,
    mode: Arena32Mode = Arena32Mode.AUTO,
    *,
    settings: Settings,
) -> Mcu32Arena:
    """TFLM's arena for `graph` on `core` with `kernels`: from TFLM's allocator built for the core (exact), or,
    where that cannot run here or `mode` says so, the host's 64-bit tail less the pointer-size savings plus
    `head_bytes` (the greedy replica's head), for the reference kernels. `progress` follows the first build of
    TFLM's objects."""
    if mode is Arena32Mode.ESTIMATE:
        why = "--arena32 estimate"
    else:
        try:
            arena = predict_arena32(graph, kernels, settings, core, progress)
        except LowtideError as exc:
            if mode is Arena32Mode.EXACT:
                raise LowtideError(f"no exact 32-bit arena (--arena32 exact): {exc}") from None
            if kernels is not KernelSet.REFERENCE:
                raise LowtideError(f"cannot size the arena for {kernels.value} kernels: {exc}") from None
            why = str(exc)
        else:
            return Mcu32Arena(
                arena.kernels,
                arena.core,
                arena.head_bytes,
                arena.tail_bytes,
                arena.used_bytes,
                arena.arena_bytes,
                arena.split.non_persistent_arena_bytes if arena.split else None,
                arena.split.persistent_arena_bytes if arena.split else None,
                exact=True,
                method=f"exact: TFLM's allocator built for {core} with {kernels.value} kernels, run in QEMU",
            )
    if kernels is not KernelSet.REFERENCE:
        raise LowtideError(f"the estimate is for the reference kernels only; {kernels.value} needs the exact figure")
    tail = oracle.allocate(graph.data, path=graph.source, settings=settings).mcu32_tail_bytes
    return Mcu32Arena(
        kernels.value,
        core,
        head_bytes,
        tail,
        head_bytes + tail,
        head_bytes + tail + _ESTIMATE_MARGIN_BYTES,
        None,
        None,
        exact=False,
        method=f"estimate (64-bit host tail less pointer-size savings), because {why}",
    )
