"""Board files as typed specs (whether a model fits a board is checked against them by lowtide.pipeline.firmware).

lowtide ships board files (the top-level boards/ of its source, installed with the package: lowtide.resources); a
user's own board file is given by its path (`--board my-board.toml`).

A board file holds only what lowtide reads:

    name = "nucleo-f746zg"            # --board NAME; for emulated boards HELLO's name differs (qemu-mps2-an386)
    description = "..."               # the --board help and board listings
    core = "cortex-m7"                # TFLM's arena is predicted for this core
    sram_bytes = 327680               # the RAM lowtide's firmware links into (its linker script's writable
                                      # regions): fit checks (lowtide.pipeline.firmware), before and after building;
                                      # optional where [[memory]] is given: then the sum of the memories
    flash_bytes = 1048576
    clock_hz = 216000000              # must equal the clock the board's HELLO reports
    platformio_env = "nucleo_f746zg"  # the firmware build (and upload) env
    runtime = "compiled"              # optional: what runs the model unless --runtime says (compiled)
    arena_region = "axi_sram"         # optional: the [[memory]] that holds TFLM's (non-persistent) arena unless
                                      # --arena-region or --persistent-region is given (default: with .bss)
    persistent_region = "sram1"       # optional: TFLM's two arenas, the persistent one in this [[memory]], unless
                                      # either option is given
    platformio_config = "x.ini"       # optional: PlatformIO envs of its own (over the shipped ones), relative to
                                      # the board file
    [serial]                          # real boards: how lowtide finds and opens the port
    baud = 115200
    usb_ids = ["0483:374B"]           # VID:PID, for pyserial's list_ports
    port = "/dev/serial/by-id/..."    # optional: a fixed port instead
    probe_serial = "066DFF..."        # optional: the USB serial number of the board's ST-LINK, where several
                                      # boards share its VID:PID (`--probe` on the command line)
    [emulator]                        # emulated boards: QEMU's command line, {port} and {elf} filled in
    command = [...]
    [labgrid]                         # a board in a labgrid farm: the place that holds it
    place = "nucleo"
    coordinator = "lab:20408"         # optional: else $LG_COORDINATOR
    [[memory]]                        # optional, one table per RAM bank of the part (docs/firmware.md)
    name = "dtcm"                     # a name unique on the board
    address = 0x20000000
    size_bytes = 65536
    speed = "tcm"                     # tcm (core-coupled, zero wait), sram (on-chip bus), external (PSRAM, SDRAM)
    dma = false                       # whether the part's DMA controllers reach it (default true)
    cacheable = false                 # whether the core's data cache covers it (default false)

A bank must lie where the core's address map allows RAM and overlap no other; each writable region of the
firmware's linker script must lie inside one bank (lowtide.device.drivers.platformio.check_memory_map).

A key lowtide does not read is an error, so a board file never carries a field that nothing checks.
"""

from __future__ import annotations

import enum
import tomllib
from dataclasses import dataclass, replace
from pathlib import Path

from lowtide.errors import LowtideError
from lowtide.project import Runtime
from lowtide.resources import BOARDS_DIR

_KEYS = {
    "name",
    "description",
    "core",
    "sram_bytes",
    "flash_bytes",
    "clock_hz",
    "platformio_env",
    "runtime",
    "arena_region",
    "persistent_region",
    "platformio_config",
    "serial",
    "emulator",
    "labgrid",
    "memory",
}
_MEMORY_KEYS = {"name", "address", "size_bytes", "speed", "dma", "cacheable"}
_TABLE_KEYS = {
    "serial": {"baud", "usb_ids", "port", "probe_serial"},
    "emulator": {"command"},
    "labgrid": {"place", "coordinator"},
}


@dataclass(frozen=True)
class SerialSettings:
    baud: int
    usb_ids: tuple[str, ...]  # "VID:PID", hex, for autodetection
    port: str | None  # a fixed port, used instead of autodetection
    probe_serial: str | None = None  # the USB serial number that picks the board's port and its probe


@dataclass(frozen=True)
class LabgridSettings:
    place: str
    coordinator: str | None  # HOST:PORT; None: $LG_COORDINATOR


class MemorySpeed(enum.Enum):
    """How fast a RAM bank is, fastest first: what placement prefers for the tensors read most."""

    TCM = "tcm"  # tightly coupled to the core: zero wait states, no cache
    SRAM = "sram"  # on-chip SRAM on the bus matrix
    EXTERNAL = "external"  # off-chip (PSRAM, SDRAM) or behind a slow port


@dataclass(frozen=True)
class MemoryBank:
    """One RAM bank of a board (a [[memory]] table): where it is and what it allows."""

    name: str
    address: int
    size_bytes: int
    speed: MemorySpeed
    dma: bool
    cacheable: bool

    @property
    def end(self) -> int:
        return self.address + self.size_bytes


# Where the Armv6-M, Armv7-M and Armv8-M memory map allows RAM: the Code region (a TCM, a RAM that also holds code),
# the SRAM region, External RAM and External device (PSRAM and SDRAM controllers map there). The Peripheral region
# and the system space (the PPB, vendor) hold no RAM.
_CORTEX_M_RAM_SPANS = ((0x0000_0000, 0x4000_0000), (0x6000_0000, 0xE000_0000))


@dataclass(frozen=True)
class BoardSpec:
    """One boards/*.toml file."""

    name: str
    description: str
    core: str
    sram_bytes: int
    flash_bytes: int
    clock_hz: int
    platformio_env: str
    runtime: Runtime  # the runtime the board's firmware uses unless --runtime names another (its object:
    # lowtide.runtimes.runtime_for)
    platformio_config: Path | None  # envs over the shipped ones (lowtide.project); None: the shipped envs alone
    serial: SerialSettings | None  # None for emulated boards
    emulator_command: tuple[str, ...] | None  # with {port} and {elf}; None for a real board
    labgrid: LabgridSettings | None
    path: Path
    memories: tuple[MemoryBank, ...] = ()  # the part's RAM banks, by address; empty for a board file without them
    # Where TFLM's arenas go when neither --arena-region nor --persistent-region is given ([[memory]] names; None:
    # the arena with .bss, one arena): lowtide.pipeline.firmware.requested_regions
    arena_region: str | None = None
    persistent_region: str | None = None

    @property
    def emulated(self) -> bool:
        return self.emulator_command is not None


def _check_keys(data: dict) -> None:
    unknown = [key for key in data if key not in _KEYS]
    unknown += [
        f"{table}.{key}" for table, keys in _TABLE_KEYS.items() for key in data.get(table, {}) if key not in keys
    ]
    unknown += [f"memory.{key}" for bank in data.get("memory", ()) for key in bank if key not in _MEMORY_KEYS]
    if unknown:
        raise LowtideError(f"unknown keys {', '.join(unknown)} (lowtide reads only: {', '.join(sorted(_KEYS))})")


def load_board_spec(path: Path) -> BoardSpec:
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
        _check_keys(data)
        serial, emulator, labgrid = data.get("serial"), data.get("emulator"), data.get("labgrid")
        if emulator is None and serial is None and labgrid is None:
            raise LowtideError("a real board needs [serial] (how to find its port) or [labgrid] (its place)")
        config = data.get("platformio_config")
        memories = _memories(data.get("memory", ()), data["core"])
        if "sram_bytes" not in data and not memories:
            raise LowtideError("give sram_bytes or the part's [[memory]] banks")
        banks_bytes = sum(m.size_bytes for m in memories)
        sram_bytes = int(data["sram_bytes"]) if "sram_bytes" in data else banks_bytes
        if memories and sram_bytes > banks_bytes:
            raise LowtideError(
                f"sram_bytes = {sram_bytes:,} is more than its [[memory]] banks hold ({banks_bytes:,} B)"
            )
        names = {m.name for m in memories}
        for key in ("arena_region", "persistent_region"):
            if key in data and data[key] not in names:
                raise LowtideError(
                    f"{key} = {data[key]!r} names no [[memory]] of the board ({', '.join(sorted(names)) or 'none'})"
                )
        return BoardSpec(
            name=data["name"],
            description=data["description"],
            core=data["core"],
            sram_bytes=sram_bytes,
            flash_bytes=int(data["flash_bytes"]),
            clock_hz=int(data["clock_hz"]),
            platformio_env=data["platformio_env"],
            runtime=Runtime.named(data.get("runtime", "compiled")),
            platformio_config=(path.parent / config).resolve() if config else None,
            serial=SerialSettings(
                int(serial.get("baud", 115200)),
                tuple(serial.get("usb_ids", ())),
                serial.get("port"),
                serial.get("probe_serial"),
            )
            if serial is not None
            else None,
            emulator_command=tuple(emulator["command"]) if emulator else None,
            labgrid=LabgridSettings(labgrid["place"], labgrid.get("coordinator")) if labgrid else None,
            path=path,
            memories=memories,
            arena_region=data.get("arena_region"),
            persistent_region=data.get("persistent_region"),
        )
    except (OSError, tomllib.TOMLDecodeError, KeyError, TypeError, ValueError, AttributeError) as exc:
        raise LowtideError(f"bad board file: {type(exc).__name__}: {exc}", path) from None
    except LowtideError as exc:
        raise LowtideError(f"bad board file: {exc.message}", path) from None


def banks_cover(spec: BoardSpec, address: int, size: int) -> bool:
    """Whether `spec`'s memory banks hold every byte of [address, address + size): one bank, or several that follow
    each other without a gap (an STM32F446's SRAM1 and SRAM2, linked as one region)."""
    end = address + size
    while address < end:
        bank = next((b for b in spec.memories if b.address <= address < b.end), None)
        if bank is None:
            return False
        address = bank.end
    return True


def _memories(tables: list[dict], core: str) -> tuple[MemoryBank, ...]:
    """The [[memory]] tables as banks sorted by address, refused where two share a name or bytes, where one is empty,
    or where a Cortex-M core's address map has no RAM."""
    banks = []
    for table in tables:
        speed = table.get("speed", "sram")
        try:
            bank = MemoryBank(
                name=table["name"],
                address=int(table["address"]),
                size_bytes=int(table["size_bytes"]),
                speed=MemorySpeed(speed),
                dma=bool(table.get("dma", True)),
                cacheable=bool(table.get("cacheable", False)),
            )
        except ValueError:
            raise LowtideError(
                f"memory {table.get('name')!r}: speed {speed!r} is none of {', '.join(s.value for s in MemorySpeed)}"
            ) from None
        if bank.size_bytes <= 0:
            raise LowtideError(f"memory {bank.name!r} has size_bytes = {bank.size_bytes}")
        if core.startswith("cortex-m") and not any(
            start <= bank.address and bank.end <= end for start, end in _CORTEX_M_RAM_SPANS
        ):
            raise LowtideError(
                f"memory {bank.name!r} ({_span(bank)}) lies outside where a {core}'s address map has RAM "
                "(0x00000000-0x3FFFFFFF, 0x60000000-0xDFFFFFFF)"
            )
        banks.append(bank)
    banks.sort(key=lambda b: b.address)
    names = [b.name for b in banks]
    if len(set(names)) < len(names):
        raise LowtideError(f"memory names repeat: {', '.join(sorted({n for n in names if names.count(n) > 1}))}")
    for before, after in zip(banks, banks[1:]):
        if after.address < before.end:
            raise LowtideError(f"memory {after.name!r} ({_span(after)}) overlaps {before.name!r} ({_span(before)})")
    return tuple(banks)


def _span(bank: MemoryBank) -> str:
    return f"0x{bank.address:08X}-0x{bank.end - 1:08X}"


def with_probe(spec: BoardSpec, probe_serial: str | None) -> BoardSpec:
    """`spec` with `probe_serial` over its board file's (`--probe`); `spec` itself for None."""
    if probe_serial is None:
        return spec
    if spec.serial is None:
        raise LowtideError(
            f"--probe picks a board on this machine's USB: {spec.name} is "
            f"{'emulated' if spec.emulated else 'reached through labgrid'}"
        )
    return replace(spec, serial=replace(spec.serial, probe_serial=probe_serial))


def load_board_specs(directory: Path = BOARDS_DIR) -> dict[str, BoardSpec]:
    specs = [load_board_spec(path) for path in sorted(directory.glob("*.toml"))]
    return {spec.name: spec for spec in specs}


def get_board_spec(name: str, directory: Path = BOARDS_DIR) -> BoardSpec:
    """A board file by its name in `directory`, or by its path (anything ending in .toml)."""
    if name.endswith(".toml"):
        return load_board_spec(Path(name))
    specs = load_board_specs(directory)
    try:
        return specs[name]
    except KeyError:
        raise LowtideError(f"unknown board {name!r}; board files: {', '.join(sorted(specs))}") from None
