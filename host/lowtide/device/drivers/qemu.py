"""The QEMU driver: boots a firmware ELF in an emulated machine and yields a link to its UART.

The board file's `[emulator] command` has `{port}` and `{elf}` placeholders. The driver picks a free port on
127.0.0.1, starts QEMU with `-serial tcp:127.0.0.1:PORT,server=on,wait=on` (the guest waits until the host connects,
so nothing it sends is lost), connects with pyserial's `socket://`, and always ends QEMU afterwards: every wait is
bounded, and terminate is followed by kill.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from lowtide.device.drivers.process import last_line, stop_process
from lowtide.device.transport import Link, open_link
from lowtide.errors import LowtideError

_CONNECT_POLL_S = 0.02
_PORT_ATTEMPTS = 3  # another process may take the free port between our probe and QEMU's bind


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextlib.contextmanager
def run_emulator(command: tuple[str, ...], elf: Path, timeout: float) -> Iterator[Link]:
    """Boots `elf` with `command` ({port}, {elf} filled in; a cycle model's `-plugin` appended by the board) and
    yields a link to its UART. QEMU is ended on exit, whatever happened; connecting waits at most `timeout` seconds."""
    for attempt in range(_PORT_ATTEMPTS):
        port = free_port()
        argv = [part.format(port=port, elf=elf) for part in command]
        with tempfile.TemporaryFile() as stderr_file:
            try:
                process = subprocess.Popen(
                    argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr_file
                )
            except OSError as exc:
                raise LowtideError(f"cannot start {argv[0]}: {exc.strerror or exc}") from None
            try:
                link = _connect(process, port, timeout)
                if link is None:  # QEMU exited before listening: maybe the port was taken meanwhile
                    message = last_line(stderr_file)
                    if "Address already in use" in message and attempt + 1 < _PORT_ATTEMPTS:
                        continue
                    raise LowtideError(f"{argv[0]} exited with status {process.returncode}: {message}")
                try:
                    yield link
                finally:
                    link.close()
                return
            finally:
                stop_process(process)


def _connect(process: subprocess.Popen, port: int, timeout: float) -> Link | None:
    """The host's connection to QEMU's serial port, retried until QEMU listens (a refused connect on 127.0.0.1
    fails at once). No probe connection: QEMU would take it as the host's and start the guest talking to it."""
    deadline = time.monotonic() + timeout
    url = f"socket://127.0.0.1:{port}"
    while True:
        if process.poll() is not None:
            return None
        try:
            return open_link(url)
        except LowtideError:
            if time.monotonic() >= deadline:
                raise LowtideError(f"QEMU did not open its serial port within {timeout:g} s", url) from None
        time.sleep(_CONNECT_POLL_S)
