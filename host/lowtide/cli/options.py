"""Options several commands share, defined once."""

from __future__ import annotations

from typing import Annotated

import typer

from lowtide.tflm import Arena32Mode

Arena32Option = Annotated[
    Arena32Mode,
    typer.Option(
        "--arena32",
        help="TFLM's 32-bit arena: exact (TFLM built for the core and run in QEMU, or one line saying what "
        "is missing), estimate (from the host interpreter, nothing built), or auto (exact where it can "
        "be; the output says which)",
    ),
]
