"""The `lowtide` command. Each command lives in its own module here and registers itself on `app`
(lowtide.cli.application).

Every user-facing failure is a LowtideError: printed as one line on stderr, exit status 2, no traceback.
"""

from __future__ import annotations

import sys

# Importing the command modules registers their commands on `app`.
from lowtide.cli import (  # noqa: F401
    boards_cmd,
    build_cmd,
    cache_cmd,
    compile_cmd,
    demo_cmd,
    export_cmd,
    inspect_cmd,
    measure_cmd,
    mlperf_cmd,
    optimize_cmd,
    partition_cmd,
    savings_cmd,
    tflm_cmd,
    validate_cmd,
)
from lowtide.cli.application import app
from lowtide.errors import LowtideError


def main() -> None:
    try:
        app()  # standalone: click reports usage errors itself (one line, exit 2)
    except LowtideError as exc:
        print(f"lowtide: error: {exc}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("lowtide: interrupted", file=sys.stderr)
        sys.exit(130)
