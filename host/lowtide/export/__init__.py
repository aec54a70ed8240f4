"""Stage 4: write an optimized model. The operators go in the new order, an `OfflineMemoryAllocation` plan fixes
every activation tensor's offset in the arena head, and a C header and a JSON sidecar give the arena size to
declare on a 32-bit microcontroller."""

from lowtide.export.offline_plan import (
    ARENA_START_ALIGNMENT_BYTES,
    OFFLINE_PLAN_NAME,
    ExportResult,
    export_optimized,
    offline_plan_words,
)

__all__ = ["ARENA_START_ALIGNMENT_BYTES", "OFFLINE_PLAN_NAME", "ExportResult", "export_optimized",
           "offline_plan_words"]
