"""Graph rewriting below the best schedule, as builtin operators stock TFLM runs.

- Spatial tiling (MCUNetV2-style patch-based inference): the memory-heavy spatial prefix runs patch by patch,
  with halos, bit-identical to the original. `rewrite_auto` searches split points and patch grids; `tile`
  applies one chosen tiling. The source may first be cut into row strips by a SPLIT_V planned in place, so its
  rows come free as the patches move down; `planned_model` adds the offline plan that makes that real.
- Channel partitioning: `partition_concat_conv` (SERENITY-style) runs a convolution of a concatenation, and
  `partition_wide_layer` an inverted bottleneck's wide layers, as partial convolutions summed by ADD (not
  bit-identical: about 1 LSB).
- Variants of a tiling with fewer patches (`fewer_patches`), which `lowtide optimize` weighs by TFLM's own tail
  (`Weigher`) beside the search's choice.
"""

from lowtide.rewrite.candidates import Candidate, RejectedCandidate
from lowtide.rewrite.channels import ChannelSplit, partition_at_peak, partition_concat_conv, partition_wide_layer
from lowtide.rewrite.emit import planned_model
from lowtide.rewrite.errors import NotApplicable
from lowtide.rewrite.limits import Objective
from lowtide.rewrite.search import RewriteResult, rewrite_auto
from lowtide.rewrite.tiling import Tiling, apply_tilings, tile
from lowtide.rewrite.variants import ArenaCandidate, Weigher, fewer_patches

__all__ = [
    "ArenaCandidate",
    "Candidate",
    "ChannelSplit",
    "NotApplicable",
    "Objective",
    "RejectedCandidate",
    "RewriteResult",
    "Tiling",
    "Weigher",
    "apply_tilings",
    "fewer_patches",
    "partition_at_peak",
    "partition_concat_conv",
    "partition_wide_layer",
    "planned_model",
    "rewrite_auto",
    "tile",
]
