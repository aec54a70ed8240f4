"""Runs MLCommons' runner (its main.py, unmodified) with one more serial port in pyserial's port list.

The runner finds its device only through `serial.tools.list_ports.comports()`, by USB VID:PID; an emulator's serial
line (a pty lowtide relays to QEMU) has no USB IDs, so this adds an entry for it before running main.py as
`__main__`. Run as a script, not a module: it imports nothing of lowtide's, and the runner's folder replaces this
one at the front of sys.path (the runner has a `datasets` module of its own).

    python list_ports_launcher.py DEVICE VID PID RUNNER/main.py [main.py's arguments]
"""

import runpy
import sys
from pathlib import Path

from serial.tools import list_ports, list_ports_common


def main() -> None:
    device, vid, pid, runner_main, *arguments = sys.argv[1:]
    port = list_ports_common.ListPortInfo(device, skip_link_detection=True)
    port.vid, port.pid = int(vid, 16), int(pid, 16)
    port.description = port.product = "lowtide emulated board"
    listed = list_ports.comports
    list_ports.comports = lambda include_links=False: [*listed(include_links), port]
    sys.argv = [runner_main, *arguments]
    sys.path[0] = str(Path(runner_main).resolve().parent)
    runpy.run_path(runner_main, run_name="__main__")


if __name__ == "__main__":
    main()
