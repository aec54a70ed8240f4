"""What runs a model in lowtide's firmware, and what each runtime needs of a board, known before any board is
involved: lowtide's compiled C (`compiled`, lowtide.compile, with its own arena plan), or TFLM's interpreter with
its reference or CMSIS-NN kernels (`tflm`, `tflm-cmsis-nn`), whose arena TFLM allocates itself (lowtide.tflm.sizer
predicts it on the core's emulator).

The figures here (the predicted arena, the footprint estimate) are computed from the model alone and handed to
lowtide.device, which checks them against a board and builds nothing it cannot hold: the device layer runs no
planner of its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from lowtide.compile.codegen import arena_plan
from lowtide.errors import LowtideError
from lowtide.memory import tflm_plan
from lowtide.model.ir import Graph, TensorKind
from lowtide.tflm.sizer import Arena32, predict_arena32
from lowtide.tflm.tree import KernelSet
from lowtide.validation import load_model

# What runs the model in the firmware: lowtide's compiled C, or TFLM's interpreter with one of its kernel sets.
RUNTIME_KERNELS: dict[str, KernelSet | None] = {
    "compiled": None, "tflm": KernelSet.REFERENCE, "tflm-cmsis-nn": KernelSet.CMSIS_NN,
}
# What the firmware adds to the model, for the size check before building. Both are lower bounds taken from the
# qemu-m4 images of the compiled runtime, so the estimate never refuses a model that would fit; the ELF is checked
# exactly after the build.
ARENA_SLACK_BYTES = 1024  # painted beyond the plan (LT_ARENA_SLACK_BYTES in lt_model_compiled.c)
RUNTIME_STATIC_RAM_BYTES = 13_000  # protocol buffers and per-invocation samples: 13,360 B with any model
RUNTIME_CODE_BYTES = 8_000  # protocol core and the fewest kernels: 9,112 B of code for tflm_hello_world_int8
TFLM_CODE_BYTES = 60_000  # TFLM's framework with the fewest kernels: 64,752 B of code for tflm_hello_world_int8


def check_runtime(runtime: str) -> str:
    if runtime not in RUNTIME_KERNELS:
        raise LowtideError(f"unknown runtime {runtime!r}; runtimes: {', '.join(RUNTIME_KERNELS)}")
    return runtime


@dataclass(frozen=True)
class FootprintEstimate:
    """What a model's firmware needs, known before building it."""

    model: str  # the model's file name without .tflite, for messages
    arena_bytes: int  # the planned arena head plus the painted slack
    static_ram_bytes: int  # everything else in RAM: the input staging buffer and the runtime's own state
    image_bytes: int  # the model's constant data plus the runtime's code


def estimate_footprint(graph: Graph, tflm_arena: Arena32 | None = None,
                       tflm_head_only: bool = False) -> FootprintEstimate:
    """The compiled runtime's footprint, or with `tflm_arena` TFLM's: its predicted arena, the whole .tflite in
    flash, and TFLM's own code. `tflm_head_only`: TFLM's footprint with the arena's head alone, a lower bound known
    before TFLM is built."""
    constant_buffers = {t.buffer: t.nbytes for sg in graph.subgraphs for t in sg.tensors
                        if t.kind is TensorKind.CONSTANT}
    staging = sum(graph.main.tensors[i].nbytes for i in graph.main.inputs)
    if tflm_arena is not None or tflm_head_only:
        arena_bytes = tflm_arena.arena_bytes if tflm_arena else tflm_plan(graph).head_bytes
        image_bytes = Path(graph.path).stat().st_size + RUNTIME_CODE_BYTES + TFLM_CODE_BYTES
    else:
        plan = arena_plan(graph, Path(graph.path).read_bytes())
        arena_bytes = plan.head_bytes + ARENA_SLACK_BYTES
        image_bytes = sum(constant_buffers.values()) + plan.wide_weight_bytes + RUNTIME_CODE_BYTES
    return FootprintEstimate(
        model=Path(graph.path).stem,
        arena_bytes=arena_bytes,
        static_ram_bytes=staging + RUNTIME_STATIC_RAM_BYTES,
        image_bytes=image_bytes,
    )


def compiled_arena_bytes(graph: Graph) -> int:
    """The arena the compiled runtime's generated code declares: lowtide's plan for it (in place, fused PADs, the
    fast kernels' scratch), which can be below TFLM's head."""
    return arena_plan(graph, Path(graph.path).read_bytes()).head_bytes


def predict_arena(model_path: Path, runtime: str, core: str, graph: Graph | None = None) -> Arena32 | None:
    """TFLM's arena for the model on `core` with `runtime`'s kernels (None for the compiled runtime)."""
    kernels = RUNTIME_KERNELS[check_runtime(runtime)]
    if kernels is None:
        return None
    graph = graph or load_model(model_path)
    return predict_arena32(Path(model_path).read_bytes(), graph, kernels, core)


def planned_head_bytes(graph: Graph, tflm_arena: Arena32 | None) -> int:
    """TFLM's arena head as lowtide predicts it: the sizer's, where the runtime is TFLM's and it sized the arena
    (`tflm_arena`), else lowtide's replica of TFLM's planner."""
    return tflm_arena.head_bytes if tflm_arena else tflm_plan(graph).head_bytes
