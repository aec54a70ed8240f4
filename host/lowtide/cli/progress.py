"""One way a command shows the progress of long work: rich bars on stderr, gone when the work is done, none under
`--json` (stdout holds the one JSON object)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TaskID, TextColumn, TimeElapsedColumn


class ProgressBars:
    """Bars by their label, each shown from the first report of its work: work that reports nothing (found built
    in the cache) shows no bar."""

    def __init__(self, progress: Progress):
        self._progress = progress
        self._tasks: dict[str, TaskID] = {}

    def update(self, label: str, done: int, total: int) -> None:
        """`done` of `total` steps of the work labelled `label`: the callback the stages take (with the label
        bound), e.g. `functools.partial(bars.update, "TFLM for cortex-m4f")`."""
        if label not in self._tasks:
            self._tasks[label] = self._progress.add_task(label, total=total, detail="")
        self._progress.update(self._tasks[label], completed=done, total=total, detail=f"{done}/{total}")

    def phase(self, label: str, fraction: float | None, detail: str) -> None:
        """Work done in phases one after another (`optimize`'s search, placement, checks): a new label ends the
        last phase's bar; `fraction` of the phase done (None: not known, the bar pulses), `detail` beside it."""
        if label not in self._tasks:
            for other in self._tasks.values():
                self._progress.update(other, total=1, completed=1)
            self._tasks[label] = self._progress.add_task(label, total=None, detail="")
        if fraction is not None:
            self._progress.update(self._tasks[label], total=1, completed=fraction, detail=detail)
        else:
            self._progress.update(self._tasks[label], detail=detail)


@contextmanager
def progress_bars(disable: bool = False) -> Iterator[ProgressBars]:
    """Bars on stderr for the block's work; `disable` (a command's `--json`): none."""
    with Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.fields[detail]}"),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
        disable=disable,
    ) as progress:
        yield ProgressBars(progress)
