"""lowtide's settings: every environment variable lowtide reads, read in one function (`read_settings`) where a
process starts its work (a command, the pytest plugin, the host-tflm board's process), and handed down as a typed
`Settings`, or the values the stage needs, from there. A public entry point a user calls from Python without them
takes the environment's through `settings_or_read`; the modules below never read the environment themselves.

A value a user can get wrong (a number) is kept as given and judged where it is used, so a bad one is refused by
the command that needs it, in that command's words, as it was before these were gathered here.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from lowtide.errors import ModelError

# The variables, as the README and docs/ name them.
MAX_TENSOR_BYTES_ENV = "LOWTIDE_MAX_TENSOR_BYTES"
TIMEOUT_ENV = "LOWTIDE_TFLM_TIMEOUT"
TREE_SETTING = "LOWTIDE_TFLM_DIR"
CACHE_DIR_SETTING = "LOWTIDE_CACHE_DIR"
LOCK_DIR_ENV = "LOWTIDE_LOCK_DIR"
ARCHIVES_SETTING = "LOWTIDE_PLATFORMIO_ARCHIVES"
RUNNER_ENV = "LOWTIDE_MLPERF_RUNNER"  # the runner's folder or archive when --runner is not given
COMPILER_ENV = "CC"
QEMU_PLUGIN_HEADER_SETTING = "LOWTIDE_QEMU_PLUGIN_HEADER"  # the folder holding QEMU's qemu-plugin.h (cycle model)
COORDINATOR_ENV = "LG_COORDINATOR"  # labgrid's own name for its coordinator's address
PROXY_ENVS = ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")

# The largest SRAM plus external RAM any microcontroller board offers is tens of megabytes: a tensor or planned
# offset beyond this is a corrupt model, and honouring it would cost the host gigabytes.
DEFAULT_MAX_TENSOR_BYTES = 256 << 20
DEFAULT_TIMEOUT_S = 600.0  # a model can make TFLM loop forever (a WHILE whose condition never fails)
DEFAULT_LOCK_DIR = Path("/tmp/lowtide-locks")
DEFAULT_COMPILER = "gcc"


@dataclass(frozen=True)
class Settings:
    max_tensor_bytes_text: str | None  # LOWTIDE_MAX_TENSOR_BYTES as given: `max_tensor_bytes` judges it
    tflm_timeout_text: str | None  # LOWTIDE_TFLM_TIMEOUT as given, in seconds: `tflm_timeout_s` reads it
    tflm_dir: str | None  # a folder holding TFLM's trees or their archives
    cache_dir: str | None  # the user cache, in place of the platform's
    lock_dir: Path  # where the board locks are
    platformio_archives: str | None  # the folder of PlatformIO's ST packages as archives
    mlperf_runner: str | None  # MLCommons' runner, a folder or an archive
    compiler: str  # the host C compiler
    qemu_plugin_header: str | None  # the folder holding QEMU's qemu-plugin.h, for the emulated boards' cycle model
    labgrid_coordinator: str | None
    behind_proxy: bool  # a proxy is configured: whether the registry answers is left to PlatformIO

    @property
    def max_tensor_bytes(self) -> int:
        """The largest tensor a model may declare."""
        if self.max_tensor_bytes_text is None:
            return DEFAULT_MAX_TENSOR_BYTES
        try:
            return int(self.max_tensor_bytes_text)
        except ValueError:
            raise ModelError(
                f"{MAX_TENSOR_BYTES_ENV}={self.max_tensor_bytes_text!r} is not a number of bytes"
            ) from None

    @property
    def tflm_timeout_s(self) -> float:
        """How long the host TFLM may run in its child before it is killed."""
        return float(self.tflm_timeout_text) if self.tflm_timeout_text is not None else DEFAULT_TIMEOUT_S


def read_settings(environ: Mapping[str, str] = os.environ) -> Settings:
    """The settings `environ` gives (an empty value is an unset one, except for the tensor limit and the timeout,
    which are judged as given)."""
    return Settings(
        max_tensor_bytes_text=environ.get(MAX_TENSOR_BYTES_ENV),
        tflm_timeout_text=environ.get(TIMEOUT_ENV),
        tflm_dir=environ.get(TREE_SETTING) or None,
        cache_dir=environ.get(CACHE_DIR_SETTING) or None,
        lock_dir=Path(environ.get(LOCK_DIR_ENV) or DEFAULT_LOCK_DIR),
        platformio_archives=environ.get(ARCHIVES_SETTING) or None,
        mlperf_runner=environ.get(RUNNER_ENV) or None,
        compiler=environ.get(COMPILER_ENV, DEFAULT_COMPILER),
        qemu_plugin_header=environ.get(QEMU_PLUGIN_HEADER_SETTING) or None,
        labgrid_coordinator=environ.get(COORDINATOR_ENV) or None,
        behind_proxy=any(environ.get(name) for name in PROXY_ENVS),
    )


def settings_or_read(settings: Settings | None) -> Settings:
    """The settings a public entry point was handed, or the environment's when a user calling lowtide from Python
    gave it none: the one place that default is taken, and only those entry points take it (tests/test_settings.py
    names them); everything below them is handed the settings."""
    return settings if settings is not None else read_settings()
