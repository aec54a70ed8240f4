"""The serial-port driver: finds a real board's port (pyserial's list_ports, by the USB VID:PID its board file
lists) and opens it, waiting for a port that is coming back after an upload reset the board."""

from __future__ import annotations

import time
from dataclasses import dataclass

import serial.tools.list_ports

from lowtide.device.transport import DEFAULT_BAUDRATE, SerialLink, open_link
from lowtide.errors import LowtideError

_REOPEN_POLL_S = 0.1


@dataclass(frozen=True)
class SerialPortCandidate:
    device: str  # /dev/ttyACM0, COM3
    usb_id: str | None  # "VID:PID" in upper-case hex; None for a port that is not USB
    description: str

    def describe(self) -> str:
        return f"{self.device} ({self.usb_id or 'not USB'}{': ' + self.description if self.description else ''})"


def serial_port_candidates() -> list[SerialPortCandidate]:
    """The machine's serial ports, as pyserial lists them."""
    return [
        SerialPortCandidate(
            device=port.device,
            usb_id=f"{port.vid:04X}:{port.pid:04X}" if port.vid is not None and port.pid is not None else None,
            description=port.description if port.description and port.description != "n/a" else "",
        )
        for port in serial.tools.list_ports.comports()
    ]


def detect_serial_port(board: str, usb_ids: tuple[str, ...]) -> str:
    """The one serial port whose USB VID:PID is one of `usb_ids` (from the board file); an error listing the
    candidates when there are several, or saying what was looked for when there is none."""
    wanted = {usb_id.upper() for usb_id in usb_ids}
    ports = serial_port_candidates()
    matching = [port for port in ports if port.usb_id in wanted]
    if len(matching) == 1:
        return matching[0].device
    if matching:
        raise LowtideError(f"several serial ports match {board} (USB {', '.join(sorted(wanted))}): "
                           f"{'; '.join(port.describe() for port in matching)}; choose one with --port")
    others = f"ports found: {'; '.join(port.describe() for port in ports)}" if ports else "no serial ports at all"
    raise LowtideError(f"no serial port matches {board} (USB {', '.join(sorted(wanted)) or 'IDs not listed'}); "
                       f"{others}; connect the board or give --port")


def open_port(url: str, timeout: float, baudrate: int = DEFAULT_BAUDRATE) -> SerialLink:
    """`url` opened, retried for up to `timeout` seconds: a USB board re-enumerates after an upload resets it."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return open_link(url, baudrate)
        except LowtideError:
            if time.monotonic() >= deadline:
                raise
        time.sleep(_REOPEN_POLL_S)
