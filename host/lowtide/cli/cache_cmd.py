"""`lowtide cache`: the user cache folder (lowtide.storage): where it is, what it holds, and clearing it.

lowtide cache            # its folder and the size of each part (TFLM sources and objects, sizer, firmware, ...)
lowtide cache --clear    # removes everything in it; lowtide rebuilds what it needs on the next run
"""

from __future__ import annotations

import json
import shutil
from typing import Annotated

import typer
from rich.console import Console

from lowtide.cli.application import app
from lowtide.cli.tables import Column, Kind, TerminalTable
from lowtide.errors import LowtideError
from lowtide.settings import read_settings
from lowtide.storage import CACHE_DIR_SETTING, cache_root, folder_bytes


@app.command("cache")
def cache_command(
    clear: Annotated[bool, typer.Option("--clear", help="remove everything in the cache")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object instead of a table")] = False,
) -> None:
    """Show the user cache folder lowtide builds into (TFLM, firmware projects, sizer figures), or clear it."""
    root = cache_root(read_settings())
    parts = sorted(
        p for p in root.rglob("*") if p.is_dir() and len(p.relative_to(root).parts) <= 2 and not p.name.startswith(".")
    )
    sizes = {
        p.relative_to(root).as_posix(): folder_bytes(p)
        for p in parts
        if len(p.relative_to(root).parts) == 2 or not any(p.iterdir())
    }
    total = folder_bytes(root)
    if clear:
        for entry in root.iterdir():
            try:
                shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
            except OSError as exc:
                raise LowtideError(f"cannot clear the cache: {exc.strerror or exc}", entry) from None
    if as_json:
        print(
            json.dumps(
                {
                    "cache_dir": str(root),
                    "setting": CACHE_DIR_SETTING,
                    "total_bytes": total,
                    "parts": sizes,
                    "cleared": clear,
                }
            )
        )
        return
    table = TerminalTable(
        Column("part", Kind.NAME),
        Column("bytes", Kind.FIGURE),
        title=f"lowtide's cache: {root}" + (" (cleared)" if clear else ""),
    )
    for name, size in sizes.items():
        table.add_row(name, f"{size:,}")
    table.add_row("[bold]total[/]", f"[bold]{total:,}[/]")
    Console().print(table)
