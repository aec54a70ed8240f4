"""Stale memory: which bytes of a model's outputs depend on what the arena held before TFLM ran it.

TFLM never clears its arena, and a kernel that leaves part of its output unwritten (BATCH_TO_SPACE_ND when the
model declares a larger output than its input covers) or reads memory before writing it makes the model's outputs
depend on whatever the memory plan put there earlier. Such outputs change when only the plan changes, so they
cannot be compared bit for bit between two plans of one model.

`fills` observes it on the host TFLM (a copy of the model under several arena fills); `dependence` has each
operator's data dependence; `report` finds the origins and proves, by propagating them, which bytes are
independent (`check_stale`).
"""

from lowtide.stale.fills import FILLS
from lowtide.stale.report import ByteRanges, StaleOperator, StaleReport, check_stale

__all__ = ["FILLS", "ByteRanges", "StaleOperator", "StaleReport", "check_stale"]
