"""The labgrid driver: a board in a labgrid farm, reached by acquiring its place through labgrid's client.

    lowtide measure MODEL --board labgrid:PLACE          # coordinator: $LG_COORDINATOR, else 127.0.0.1:20408

`acquired_place` acquires the place (waiting while another client holds it), finds the `NetworkSerialPort` it
exports, yields it as a pyserial URL (`rfc2217://` or, for protocol `raw`, `socket://`), and releases the place on
every way out: a return, an exception, Ctrl-C or SIGTERM. Only SIGKILL skips the release; for that case lowtide
notes each place it acquires in the lock directory, and the next run that gets the place's local lock (so the killed
run is gone) and finds the place still acquired by this user on this host with such a note releases it and goes
on. A place acquired by hand (`labgrid-client acquire`, no note) is used as it is and left acquired.

labgrid is an optional extra (`pip install 'lowtide[labgrid]'`); it is imported only here, only when used.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from lowtide.device.locking import lock_path
from lowtide.errors import LowtideError
from lowtide.settings import Settings

DEFAULT_COORDINATOR = "127.0.0.1:20408"
COORDINATOR_TIMEOUT_S = 30.0  # connecting, and any one exchange with the coordinator
_POLL_S = 0.5


@dataclass(frozen=True)
class PlaceSerial:
    url: str  # pyserial URL of the place's NetworkSerialPort
    speed: int


def coordinator_address(configured: str | None, settings: Settings) -> str:
    return configured or settings.labgrid_coordinator or DEFAULT_COORDINATOR


def lock_resource(place: str, coordinator: str | None, settings: Settings) -> str:
    """The local lock a run holds while it uses `place`: queues runs on this machine, and tells a killed run's
    acquisition (its lock is free) from a live one's."""
    return f"labgrid:{coordinator_address(coordinator, settings)}/{place}"


@contextlib.contextmanager
def acquired_place(
    place: str,
    coordinator: str | None,
    wait: float,
    settings: Settings,
    on_wait: Callable[[str], None] | None = None,
) -> Iterator[PlaceSerial]:
    """`place` acquired for the duration, as its serial port. Waits at most `wait` seconds for another client's
    acquisition to end; the caller holds `lock_resource(place, coordinator, settings)`."""
    try:
        from labgrid.remote.client import Error as LabgridError
        from labgrid.remote.client import start_session
    except ImportError:
        raise LowtideError("labgrid boards need labgrid: pip install 'lowtide[labgrid]'") from None
    address = coordinator_address(coordinator, settings)
    loop = asyncio.new_event_loop()
    note = lock_path(lock_resource(place, coordinator, settings), settings.lock_dir).with_suffix(".acquired")
    session = None

    def run(step, what: str):
        try:
            with _quiet():
                return loop.run_until_complete(asyncio.wait_for(step, COORDINATOR_TIMEOUT_S))
        except TimeoutError:
            raise LowtideError(
                f"labgrid coordinator {address}: no answer within {COORDINATOR_TIMEOUT_S:g} s while {what}"
            ) from None
        except LabgridError as exc:
            raise LowtideError(f"labgrid place {place!r} on {address}: {exc}") from None

    acquired = False
    try:
        with _sigterm_as_exit():
            try:
                asyncio.set_event_loop(loop)  # grpc's channel, made with the session, belongs to the current loop
                with _quiet():
                    session = start_session(
                        address,
                        loop=loop,
                        extra={"args": argparse.Namespace(place=place, allow_unmatched=False, kick=False)},
                    )
            except LabgridError as exc:
                raise LowtideError(f"cannot reach the labgrid coordinator at {address}: {exc}") from None
            me = f"{session.gethostname()}/{session.getuser()}"
            deadline = time.monotonic() + wait
            told = False
            while True:
                run(session.sync_with_coordinator(), "reading the places")
                if place not in session.places:
                    known = ", ".join(sorted(session.places)) or "none"
                    raise LowtideError(
                        f"labgrid place {place!r} does not exist on the coordinator at {address} (places: {known})"
                    )
                holder = session.places[place].acquired
                if not holder:
                    run(session.acquire(), "acquiring the place")
                    acquired = True
                    note.write_text(json.dumps({"pid": os.getpid()}))
                    break
                if holder == me and note.exists():  # a killed lowtide run's: we hold the lock, so it is gone
                    run(session.release(), "releasing a killed run's acquisition")
                    note.unlink(missing_ok=True)
                    continue
                if holder == me:
                    break  # acquired by hand on this host: use it, and leave it acquired
                if time.monotonic() >= deadline:
                    raise LowtideError(
                        f"labgrid place {place!r} is acquired by {holder}; gave up after waiting {wait:g} s"
                    )
                if not told and on_wait:
                    on_wait(holder)
                    told = True
                time.sleep(_POLL_S)
            resources = session.get_target_resources(session.places[place])
            yield _serial_port(place, resources)
    finally:
        with _sigterm_as_exit():
            try:
                if acquired and session is not None:
                    run(session.release(), "releasing the place")
                    note.unlink(missing_ok=True)
            finally:
                if session is not None:
                    with contextlib.suppress(Exception), _quiet():
                        loop.run_until_complete(asyncio.wait_for(session.stop(), COORDINATOR_TIMEOUT_S))
                        loop.run_until_complete(session.close())
                asyncio.set_event_loop(None)
                loop.close()


def _serial_port(place: str, resources: dict) -> PlaceSerial:
    ports = [entry for (_, cls), entry in resources.items() if cls == "NetworkSerialPort"]
    if not ports:
        kinds = ", ".join(sorted({cls for _, cls in resources})) or "no resources"
        raise LowtideError(f"labgrid place {place!r} exports no NetworkSerialPort ({kinds})")
    if len(ports) > 1:
        raise LowtideError(
            f"labgrid place {place!r} exports {len(ports)} NetworkSerialPorts: give the board its own place"
        )
    entry = ports[0]
    if not entry.avail:
        raise LowtideError(f"labgrid place {place!r}: its NetworkSerialPort is not available (exporter gone?)")
    args = entry.args
    scheme = "socket" if args.get("protocol") == "raw" else "rfc2217"
    return PlaceSerial(f"{scheme}://{args['host']}:{args['port']}", int(args.get("speed") or 115200))


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """labgrid's client prints its progress on stdout and logs its errors through the root logger (stderr): lowtide
    reports them as its own one line instead."""
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        yield


@contextlib.contextmanager
def _sigterm_as_exit() -> Iterator[None]:
    """SIGTERM raises SystemExit meanwhile, so that `finally` releases the place; only in the main thread, where
    Python runs signal handlers."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGTERM)

    def exit_now(signum, frame):
        raise SystemExit(128 + signum)

    if previous is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, exit_now)
    try:
        yield
    finally:
        if previous is signal.SIG_DFL:
            signal.signal(signal.SIGTERM, previous)
