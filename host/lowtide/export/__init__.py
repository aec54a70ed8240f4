"""Write an optimized model. The operators go in the new order, an `OfflineMemoryAllocation` plan fixes every
activation tensor's offset in the arena head, and a C header and a JSON sidecar give the arena size to declare on a
32-bit microcontroller. The whole optimization (schedule, place, export, check) is `lowtide.pipeline.optimize`."""

from lowtide.export.offline_plan import ExportResult, export_optimized
from lowtide.memory.placement import offline_plan
from lowtide.model.offline_memory import NAME as OFFLINE_PLAN_NAME

__all__ = ["OFFLINE_PLAN_NAME", "ExportResult", "export_optimized", "offline_plan"]
