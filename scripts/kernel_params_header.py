"""Rewrite firmware/runtime/lt_params.h from the kernel parameter dataclasses (lowtide.compile.kernel_params):
`python scripts/kernel_params_header.py`; tests/test_kernel_params.py fails when the header is stale."""

from pathlib import Path

from lowtide.compile.kernel_params import c_header
from lowtide.storage import write_atomically

HEADER = Path(__file__).resolve().parents[1] / "firmware" / "runtime" / "lt_params.h"


if __name__ == "__main__":
    write_atomically(HEADER, c_header())
    print(f"wrote {HEADER}")
