"""A real board's USB port, stood in for by an emulated board behind a pty: the PlatformIO upload command of the
test env in tests/test_real_board.py (`upload_protocol = custom`).

    python tests/usb_stand_in.py FIRMWARE.elf PORT

PlatformIO runs it as it would run st-flash or esptool: with the built firmware and the --upload-port lowtide
passes. It records the call (one JSON line in PORT.uploads), ends the board it flashed before (PORT.pid), boots
the new firmware in QEMU with its UART on a pty, and points PORT (a symlink, as /dev/serial/by-id/... is) at that
pty, as a board re-enumerating after a flash would. QEMU outlives this command, like a flashed board; the test
ends it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

MACHINE = "mps2-an386"  # the qemu-m4 board's machine: the firmware is the qemu-m4 env's
BOOT_TIMEOUT_S = 10.0


def main(elf: Path, port: Path) -> int:
    with open(f"{port}.uploads", "a") as log:
        log.write(
            json.dumps({"elf": str(elf), "port": str(port), "sha256": hashlib.sha256(elf.read_bytes()).hexdigest()})
            + "\n"
        )
    pid_file = Path(f"{port}.pid")
    with contextlib.suppress(FileNotFoundError, ProcessLookupError, ValueError):
        os.kill(int(pid_file.read_text()), signal.SIGKILL)  # the firmware flashed before stops running
    console = Path(f"{port}.qemu.log")
    with open(console, "wb") as output:
        board = subprocess.Popen(
            [
                "qemu-system-arm",
                "-machine",
                MACHINE,
                "-display",
                "none",
                "-monitor",
                "none",
                "-serial",
                "pty",
                "-icount",
                "shift=0",
                "-semihosting-config",
                "enable=on,target=native",
                "-kernel",
                str(elf),
            ],
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    pid_file.write_text(str(board.pid))
    deadline = time.monotonic() + BOOT_TIMEOUT_S
    while not (found := re.search(rb"redirected to (/dev/pts/\d+)", console.read_bytes())):
        if board.poll() is not None or time.monotonic() > deadline:
            print(f"QEMU did not open its pty: {console.read_text()}", file=sys.stderr)
            return 1
        time.sleep(0.05)
    link = Path(f"{port}.new")
    link.unlink(missing_ok=True)
    link.symlink_to(found[1].decode())
    os.replace(link, port)
    print(f"flashed {elf} to {port} -> {found[1].decode()}")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]).resolve(), Path(sys.argv[2])))  # PlatformIO passes it relative to the project
