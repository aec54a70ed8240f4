"""Hardware-in-the-loop regression tests: a pytest plugin (`lowtide.hil.plugin`) that measures models on a board,
compares the figures with a baselines file (`baselines`, `compare`) and keeps two runs off one board (`locking`).

This package imports nothing from pytest; only `lowtide.hil.plugin` does.
"""

from lowtide.device.locking import LockTimeout, acquire
from lowtide.hil.baselines import Baseline, BaselineKey, load_baselines, merge_baselines, write_atomically
from lowtide.hil.compare import Comparison, FigureChange, Tolerances, compare

__all__ = [
    "Baseline",
    "BaselineKey",
    "Comparison",
    "FigureChange",
    "LockTimeout",
    "Tolerances",
    "acquire",
    "compare",
    "load_baselines",
    "merge_baselines",
    "write_atomically",
]
