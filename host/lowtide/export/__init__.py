"""Stage 4: write an optimized model. The operators go in the new order, an `OfflineMemoryAllocation` plan fixes
every activation tensor's offset in the arena head, and a C header and a JSON sidecar give the arena size to
declare on a 32-bit microcontroller. `optimize_model` runs the whole pipeline (schedule, place, export, check)."""

from lowtide.export.offline_plan import ExportResult, export_optimized
from lowtide.export.pipeline import OptimizeResult, PhaseProgress, Verification, optimize_model
from lowtide.memory.placement import offline_plan
from lowtide.model.offline_memory import NAME as OFFLINE_PLAN_NAME

__all__ = [
    "OFFLINE_PLAN_NAME", "ExportResult", "OptimizeResult", "PhaseProgress",
    "Verification", "export_optimized", "offline_plan", "optimize_model",
]
