"""The serial-port driver: finds a real board's port (pyserial's list_ports, by the USB VID:PID its board file
lists, and by the USB serial number of its probe where several boards share that VID:PID) and opens it, waiting
for a port that is coming back after an upload reset the board.

An ST Nucleo's port is its ST-LINK's virtual COM port: one USB device, so the port's USB serial number is the
probe's, which is how the upload (lowtide.device.drivers.platformio) tells OpenOCD which board to flash."""

from __future__ import annotations

import os
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
    serial_number: str | None = None  # the USB device's; an ST-LINK's identifies its probe

    def describe(self) -> str:
        serial = f" serial {self.serial_number}" if self.serial_number else ""
        description = f": {self.description}" if self.description else ""
        return f"{self.device} ({self.usb_id or 'not USB'}{serial}{description})"


def serial_port_candidates() -> list[SerialPortCandidate]:
    """The machine's serial ports, as pyserial lists them."""
    return [
        SerialPortCandidate(
            device=port.device,
            usb_id=f"{port.vid:04X}:{port.pid:04X}" if port.vid is not None and port.pid is not None else None,
            description=port.description if port.description and port.description != "n/a" else "",
            serial_number=port.serial_number or None,
        )
        for port in serial.tools.list_ports.comports()
    ]


def detect_serial_port(board: str, usb_ids: tuple[str, ...], probe_serial: str | None = None) -> str:
    """The one serial port whose USB VID:PID is one of `usb_ids` (from the board file), and whose USB serial number
    is `probe_serial` if given; an error listing the candidates and their serial numbers when there are several,
    or saying what was looked for when there is none."""
    wanted = {usb_id.upper() for usb_id in usb_ids}
    ports = serial_port_candidates()
    matching = [port for port in ports if port.usb_id in wanted]
    looked_for = f"USB {', '.join(sorted(wanted)) or 'IDs not listed'}"
    if probe_serial is not None:
        matching = [port for port in matching if (port.serial_number or "").lower() == probe_serial.lower()]
        looked_for += f", serial {probe_serial}"
    if len(matching) == 1:
        return matching[0].device
    if matching:
        raise LowtideError(
            f"several serial ports match {board} ({looked_for}): "
            f"{'; '.join(port.describe() for port in matching)}; choose one with --probe SERIAL "
            f"or --port"
        )
    others = f"ports found: {'; '.join(port.describe() for port in ports)}" if ports else "no serial ports at all"
    raise LowtideError(f"no serial port matches {board} ({looked_for}); {others}; connect the board or give --port")


def port_candidate(port: str) -> SerialPortCandidate | None:
    """The listed port that `port` is (a /dev/serial/by-id/... link resolved), None for one not listed (a URL, a
    pty)."""
    device = os.path.realpath(port)
    return next(
        (candidate for candidate in serial_port_candidates() if os.path.realpath(candidate.device) == device), None
    )


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
