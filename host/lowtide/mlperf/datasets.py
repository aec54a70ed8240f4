"""Datasets in the runner's layout: DIR/<benchmark id>/y_labels.csv, one row per input file (file, classes, class;
ad01 adds bytes_to_send and stride, the windows its recordings are cut into), the files beside it.

`check_dataset` refuses a folder the runner would trip over (a missing file, a size that is not the benchmark's
input); `generate_dataset` writes random inputs of the benchmark's format, so performance mode runs without
MLCommons' data (accuracy figures from such inputs mean nothing, but equal the host TFLM's on them).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lowtide.errors import LowtideError
from lowtide.mlperf.benchmarks import Benchmark

LABELS_FILE = "y_labels.csv"  # the test scripts' truth_file
PERFORMANCE_WINDOWS = 5  # performance mode's `loop 5` takes the first five files


@dataclass(frozen=True)
class LabelledInput:
    file: Path
    label: int


@dataclass(frozen=True)
class Dataset:
    root: Path  # the runner's --dataset_path: holds a folder named by the benchmark id
    benchmark: Benchmark
    inputs: tuple[LabelledInput, ...]

    @property
    def folder(self) -> Path:
        return self.root / self.benchmark.id


def check_dataset(path: Path, benchmark: Benchmark) -> Dataset:
    """The dataset at `path` (the folder holding `<id>/`, or `<id>/` itself), checked against `benchmark`."""
    path = Path(path)
    root = path.parent if (path / LABELS_FILE).is_file() and path.name == benchmark.id else path
    folder = root / benchmark.id
    labels = folder / LABELS_FILE
    if not labels.is_file():
        raise LowtideError(f"not an MLPerf Tiny dataset for {benchmark.id}: no {benchmark.id}/{LABELS_FILE}", path)
    try:
        rows = [row for row in csv.reader(labels.read_text().splitlines()) if row]
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise LowtideError(f"cannot read the labels: {exc}", labels) from None
    if not rows:
        raise LowtideError("no inputs listed", labels)
    inputs, window_counts = [], set()
    for number, row in enumerate(rows, 1):
        where = f"{labels}:{number}"
        if len(row) < 3 or not row[1].strip().isdigit() or not row[2].strip().isdigit():
            raise LowtideError(
                "expected FILE,CLASSES,CLASS" + (",BYTES_TO_SEND,STRIDE" if benchmark.window_stride else ""), where
            )
        file = folder / row[0].strip()
        if not file.is_file():
            raise LowtideError(f"no input file {row[0].strip()!r}", where)
        size = file.stat().st_size
        if benchmark.window_stride is None:
            if benchmark.input_bytes is not None and size != benchmark.input_bytes:
                raise LowtideError(
                    f"{file.name} has {size:,} bytes; a {benchmark.id} input has "
                    f"{benchmark.input_bytes:,} ({benchmark.elements:,} {benchmark.element})",
                    where,
                )
        else:
            if len(row) < 5 or not row[3].strip().isdigit() or not row[4].strip().isdigit():
                raise LowtideError(f"{benchmark.id} rows need FILE,CLASSES,CLASS,BYTES_TO_SEND,STRIDE", where)
            window, stride = int(row[3]), int(row[4])
            if window != benchmark.input_bytes or stride <= 0:
                raise LowtideError(
                    f"windows of {window:,} bytes every {stride:,}; {benchmark.id} sends "
                    f"{benchmark.input_bytes:,} ({benchmark.elements:,} {benchmark.element})",
                    where,
                )
            if size < window or size % 4:
                raise LowtideError(f"{file.name} has {size:,} bytes: not fp32 values, at least one window", where)
            window_counts.add((size - window) // stride + 1)
        inputs.append(LabelledInput(file, int(row[2])))
    if len(window_counts) > 1:
        # The runner takes the first file's window count for every file.
        raise LowtideError(
            f"{benchmark.id} files must all hold as many windows; these hold "
            f"{', '.join(map(str, sorted(window_counts)))}",
            labels,
        )
    return Dataset(root, benchmark, tuple(inputs))


def generate_dataset(
    root: Path, benchmark: Benchmark, input_bytes: int, label_classes: int, seed: int = 0, windows: int = 1
) -> Dataset:
    """Random inputs of `benchmark`'s format (`input_bytes` each) in `root`/<id>/: enough for performance mode's
    five windows and for each of `label_classes` to appear (accuracy's AUC needs every one); `windows` per file for
    ad01."""
    rng = np.random.default_rng(seed)
    folder = root / benchmark.id
    folder.mkdir(parents=True, exist_ok=True)
    label_classes = max(label_classes, 2)
    rows = []
    for i in range(max(PERFORMANCE_WINDOWS, label_classes)):
        label = i % label_classes
        name = f"lowtide_{i:04d}_{label}.bin"
        if benchmark.element == "float32":
            stride = benchmark.window_stride or input_bytes
            values = rng.normal(0.0, 1.0, (input_bytes + stride * (windows - 1)) // 4).astype("<f4")
            data = values.tobytes()
        else:
            data = rng.integers(0, 256, input_bytes, dtype=np.uint8).tobytes()
        (folder / name).write_bytes(data)
        extra = [str(input_bytes), str(benchmark.window_stride)] if benchmark.window_stride else []
        rows.append(",".join([name, str(label_classes), str(label), *extra]))
    (folder / LABELS_FILE).write_text("\n".join(rows) + "\n")
    return check_dataset(root, benchmark)
