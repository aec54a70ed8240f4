"""Checks shared by the tests of `lowtide compile`."""

from __future__ import annotations

from lowtide.compile.codegen import arena_plan
from lowtide.memory import align_up
from lowtide.validation import load_model


def assert_compiled_arena(model, result) -> None:
    """The compiled model's (`result` of the model file `model`) arena is lowtide's plan for the compiled runtime (in place, fused PADs, each fast
    layer's int16 scratch beside the tensors live while it runs), and never above TFLM's head with the largest of
    those scratch buffers on top (what the generated code kept in a static buffer before)."""
    plan = arena_plan(load_model(model))
    assert result.arena_bytes == plan.head_bytes
    largest = max(plan.fast_scratch_bytes.values(), default=0)
    assert result.arena_bytes <= result.tflm_head_bytes + align_up(largest)
