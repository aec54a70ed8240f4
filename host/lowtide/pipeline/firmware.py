"""A board's firmware with a model in it: whether the model fits the board, checked before building from the
runtime's estimates (lowtide.runtimes) and after it from the ELF, the project written (lowtide.project) and built or
uploaded by the PlatformIO driver (lowtide.device.drivers.platformio), which only runs PlatformIO.

A model that cannot fit stops with its numbers rather than with a linker log, and one whose TFLM arena is still to be
sized stops before TFLM is built for the core (`FirmwareRuntime.estimate_before_sizing`).

TFLM's arenas go where the user asks (`ArenaRegions`: `--arena-region`, `--persistent-region`, names of the board's
[[memory]] tables): one arena in .bss by default; with a persistent region, TFLM's two arenas, each sized by the
sizer (lowtide.tflm.sizer) and placed by the project's linker fragment (lowtide.tflm.regions).

The host-tflm board's image is no firmware but its program (`host_program`): lowtide.pipeline.host_tflm, the host
TFLM behind the protocol, started with the model.
"""

from __future__ import annotations

import dataclasses
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from lowtide.compile.banks import DataRegion
from lowtide.compile.codegen import region_arenas
from lowtide.device.boards import Board, HostTflmBoard
from lowtide.device.drivers.platformio import (
    FirmwareImage,
    MemoryRegion,
    build_project,
    check_buildable,
    check_registry_reachable,
    elf_sections,
    read_firmware_image,
    shipped_linker_regions,
    shipped_linker_script,
    upload_image,
    upload_settings,
)
from lowtide.device.drivers.process import HostProgram
from lowtide.device.spec import BoardSpec, MemoryBank, MemorySpeed
from lowtide.errors import LowtideError
from lowtide.model.ir import Graph
from lowtide.pipeline import host_tflm
from lowtide.project import FirmwareProject, ProtocolDefines, cached_project_dir, project_files
from lowtide.resources import DATA_DIR
from lowtide.runtimes import (
    ARENA_SLACK_BYTES,
    ArenaLayout,
    CompiledArenaLayout,
    FirmwareRuntime,
    FootprintEstimate,
    runtime_for,
)
from lowtide.settings import Settings, settings_or_read
from lowtide.tflm.regions import ArenaPlace, TflmArenaLayout
from lowtide.tflm.sizer import Arena32
from lowtide.validation import load_model


@dataclass(frozen=True)
class ArenaRegions:
    """Where the user asks TFLM's arenas to be: names of the board's memories ([[memory]]), None for .bss."""

    arena: str | None = None  # the one arena, or with `persistent` the non-persistent one (`--arena-region`)
    persistent: str | None = None  # given: TFLM's two arenas, the persistent one here (`--persistent-region`)

    @property
    def split(self) -> bool:
        return self.persistent is not None

    @property
    def default(self) -> bool:
        return self.arena is None and self.persistent is None


IN_BSS = ArenaRegions()  # one arena, with the image's other static data


def requested_regions(spec: BoardSpec | None, runtime: FirmwareRuntime, regions: ArenaRegions) -> ArenaRegions:
    """Where TFLM's arenas go: `regions` where the user gave either, else the board file's defaults
    (`arena_region`, `persistent_region`) for a runtime of TFLM's; `regions` for the compiled runtime, which has
    none of TFLM's arenas. A region `spec` has no memory for is refused here, before anything is built or written."""
    if spec is None or runtime.kernels is None:
        return regions
    chosen = regions if not regions.default else ArenaRegions(spec.arena_region, spec.persistent_region)
    for name, option in ((chosen.arena, "--arena-region"), (chosen.persistent, "--persistent-region")):
        if name is not None:
            _place(spec, name, option)
    return chosen


def _place(spec: BoardSpec, name: str, option: str) -> ArenaPlace:
    bank = next((m for m in spec.memories if m.name == name), None)
    if bank is None:
        known = ", ".join(m.name for m in spec.memories) or "none: its board file has no [[memory]] tables"
        raise LowtideError(f"{option} {name}: {spec.name} has no memory by that name (its memories: {known})")
    regions = shipped_linker_regions(spec)
    if regions is None:
        raise LowtideError(f"{option}: {spec.name}'s env links with a linker script lowtide does not ship")
    inside = [r for r in regions if bank.address <= r.origin and r.origin + r.length <= bank.end]
    if inside:
        return ArenaPlace(name, inside[0].name, None)
    if any(r.origin < bank.end and bank.address < r.origin + r.length for r in regions):
        raise LowtideError(f"{option} {name}: the linker script's regions cover only part of that memory")
    return ArenaPlace(name, f"LT_{re.sub(r'[^0-9A-Za-z_]', '_', name).upper()}", (bank.address, bank.size_bytes))


def tflm_arena_layout(spec: BoardSpec, arena: Arena32, regions: ArenaRegions) -> TflmArenaLayout:
    """The arenas `spec`'s image declares for `arena` (the sizer's figures) where `regions` asks."""
    if regions.split:
        if arena.split is None:
            raise LowtideError("TFLM's two arenas could not be sized for this model: the sizer's RAM cannot hold them")
        arena_bytes, persistent_bytes = arena.split.non_persistent_arena_bytes, arena.split.persistent_arena_bytes
    else:
        arena_bytes, persistent_bytes = arena.arena_bytes, None
    layout = TflmArenaLayout(
        arena_bytes,
        persistent_bytes,
        _place(spec, regions.arena, "--arena-region") if regions.arena else None,
        _place(spec, regions.persistent, "--persistent-region") if regions.persistent else None,
    )
    declared: dict[str, int] = {}
    for place, nbytes in ((layout.arena_place, arena_bytes), (layout.persistent_place, persistent_bytes)):
        if place is not None and place.declared is not None and nbytes is not None:
            declared[place.memory] = declared.get(place.memory, 0) + nbytes
    for memory, nbytes in declared.items():
        size = next(m.size_bytes for m in spec.memories if m.name == memory)
        if nbytes > size:
            raise LowtideError(f"TFLM's arenas in {memory}: {nbytes:,} B > {capacity(spec, memory, size)}")
    return layout


def _stack(spec: BoardSpec) -> tuple[str | None, int]:
    """The linker script region that holds the stack (its STACK_RAM, else RAM) and the stack's bytes
    (STACK_SIZE); (None, 0) where lowtide does not ship the script."""
    script = shipped_linker_script(spec)
    if script is None:
        return None, 0
    text = (DATA_DIR / script).read_text()
    size = re.search(r"STACK_SIZE\s*=\s*(0x[0-9A-Fa-f]+|\d+)\s*;", text)
    alias = re.search(r'REGION_ALIAS\(\s*"STACK_RAM"\s*,\s*(\w+)\s*\)', text)
    return (alias.group(1) if alias else "RAM"), int(size.group(1), 0) if size else 0


def arena_layout(
    spec: BoardSpec, graph: Graph, tflm_arena: Arena32 | None, regions: ArenaRegions, estimate: FootprintEstimate
) -> ArenaLayout | None:
    """The arenas `spec`'s image declares for `graph`: TFLM's where its runtime sized them (`tflm_arena`), placed where
    `regions` asks; else the compiled runtime's across the board's memories (`compiled_arena_layout`)."""
    if tflm_arena is not None:
        return tflm_arena_layout(spec, tflm_arena, regions)
    return compiled_arena_layout(spec, graph, estimate)


def _holds_bss(spec: BoardSpec, bank: MemoryBank, script: list[MemoryRegion]) -> bool:
    """Whether the linker script's region holding .bss (the image's RAM) starts in `bank`."""
    bss = _bss_region(spec, script)
    return any(r.name == bss and bank.address <= r.origin < bank.end for r in script)


def compiled_data_regions(spec: BoardSpec, estimate: FootprintEstimate) -> tuple[DataRegion, ...]:
    """The memories the compiled runtime's arena may use on `spec`, each with the bytes left there for it: only the
    memory of the image's RAM (.bss) where the one-arena plan fits it, as without memories; else every memory that
    holds no flash region of the linker script and has room, fastest first (the image's RAM first among equals,
    then by address). The image's RAM keeps room for the static RAM (a lower bound: `estimate`, the compiled
    runtime's), the stack's memory for the stack, and each memory for the slack painted past the arena the firmware
    passes to the model, wherever that goes; empty without [[memory]] tables or a linker script lowtide ships."""
    script = shipped_linker_regions(spec)
    if not spec.memories or script is None:
        return ()
    stack_region, stack_bytes = _stack(spec)
    regions: list[tuple[MemoryBank, DataRegion]] = []
    for bank in spec.memories:
        inside = [r for r in script if bank.address <= r.origin < bank.end]
        if any(not r.writable for r in inside):
            continue
        if any(r.origin < bank.address < r.origin + r.length for r in script):
            continue  # part of a region starting in a memory before it (the F746's one RAM over DTCM and SRAM1-2)
        nbytes = max([bank.size_bytes, *(r.length for r in inside)])
        nbytes -= stack_bytes if any(r.name == stack_region for r in inside) else 0
        nbytes -= estimate.static_ram_bytes if _holds_bss(spec, bank, script) else 0
        # whichever region's arena the firmware passes to the model has the painted slack after it
        regions.append((bank, DataRegion(bank.name, nbytes - ARENA_SLACK_BYTES)))
    home = next((region for bank, region in regions if _holds_bss(spec, bank, script)), None)
    if home is not None and estimate.arena_bytes - ARENA_SLACK_BYTES <= home.capacity_bytes:  # the plan's head
        return (home,)
    speeds = list(MemorySpeed)
    regions.sort(key=lambda pair: (speeds.index(pair[0].speed), pair[1] is not home, pair[0].address))
    return tuple(region for _, region in regions if region.capacity_bytes > 0)


def compiled_arena_layout(spec: BoardSpec, graph: Graph, estimate: FootprintEstimate) -> CompiledArenaLayout | None:
    """Where the compiled runtime's arenas go on `spec` (`compiled_data_regions`): the first region's in .bss where
    that is the image's RAM, every other one in its memory's section; None where the one arena stays in .bss (the
    image is the one a board without memory regions gets)."""
    regions = compiled_data_regions(spec, estimate)
    if sum(r.capacity_bytes for r in regions) < estimate.arena_bytes - ARENA_SLACK_BYTES:
        return None  # no split holds the plan's head: the fit check says what does not fit, in the image's terms
    script = shipped_linker_regions(spec) or []
    banks = {m.name: m for m in spec.memories}
    places = tuple(
        None if i == 0 and _holds_bss(spec, banks[r.name], script) else _place(spec, r.name, "the compiled arena:")
        for i, r in enumerate(regions)
    )
    if places in ((), (None,)):
        return None
    return CompiledArenaLayout(regions, places, region_arenas(graph, regions))


def _placed(layout: ArenaLayout) -> list[tuple[ArenaPlace | None, str, int]]:
    """(place, what, bytes) of each arena `layout` declares; place None: in .bss."""
    if isinstance(layout, CompiledArenaLayout):
        return layout.placed()
    split = layout.persistent_bytes is not None
    placed = [(layout.arena_place, "TFLM's non-persistent arena" if split else "arena", layout.arena_bytes)]
    if layout.persistent_bytes is not None:
        placed.append((layout.persistent_place, "TFLM's persistent arena", layout.persistent_bytes))
    return placed


def _script_ram_arena_bytes(layout: ArenaLayout) -> int:
    """The arena bytes in the linker script's own regions (.bss, or a script region): those sram_bytes counts."""
    return sum(nbytes for place, _, nbytes in _placed(layout) if place is None or place.declared is None)


@dataclass(frozen=True)
class MemoryUse:
    """What lives in one of a board's memories for a model's firmware, known before building it."""

    memory: str
    address: int
    size_bytes: int
    contents: tuple[tuple[str, int], ...]  # (what, bytes); the stack region is not counted

    @property
    def used_bytes(self) -> int:
        return sum(nbytes for _, nbytes in self.contents)

    @property
    def fits(self) -> bool:
        return self.used_bytes <= self.size_bytes

    def to_json(self) -> dict:
        return {
            "memory": self.memory,
            "address": self.address,
            "size_bytes": self.size_bytes,
            "contents": [{"what": what, "bytes": nbytes} for what, nbytes in self.contents],
            "used_bytes": self.used_bytes,
            "fits": self.fits,
        }


def memory_use(spec: BoardSpec, estimate: FootprintEstimate, layout: ArenaLayout | None) -> list[MemoryUse]:
    """Per memory of `spec` ([[memory]]), what its firmware puts there: code and constants in the linker script's
    flash region, static RAM (and the arenas in .bss) in its RAM region, each placed arena in its memory."""
    regions = shipped_linker_regions(spec) or []
    placed = _placed(layout) if layout else []
    in_bss = [(what, nbytes) for place, what, nbytes in placed if place is None]
    if layout is None:
        in_bss = [("arena", estimate.arena_bytes)]
    uses = []
    for bank in spec.memories:
        contents: list[tuple[str, int]] = []
        for region in regions:
            if bank.address <= region.origin < bank.end:
                if not region.writable:
                    contents.append(("code and constants", estimate.image_bytes))
                elif region.name == _bss_region(spec, regions):
                    contents += [("static RAM", estimate.static_ram_bytes), *in_bss]
        contents += [
            (what, nbytes) for place, what, nbytes in placed if place is not None and place.memory == bank.name
        ]
        uses.append(MemoryUse(bank.name, bank.address, bank.size_bytes, tuple(contents)))
    return uses


def arena_memories(spec: BoardSpec, regions: ArenaRegions) -> tuple[str | None, str | None]:
    """The memories ([[memory]] names) that hold TFLM's arena (the non-persistent one with `regions.split`) and its
    persistent one for `regions`: the one asked for, or for an arena left in .bss the memory of the linker script's
    RAM region; None where the board file names none there (or, for the persistent one, with one arena)."""
    if regions.arena is not None:
        arena: str | None = regions.arena
    else:
        script = shipped_linker_regions(spec) or []
        ram = next((r for r in script if r.name == _bss_region(spec, script)), None)
        arena = next((m.name for m in spec.memories if ram and m.address <= ram.origin < m.end), None)
    return arena, regions.persistent


def _bss_region(spec: BoardSpec, regions: list[MemoryRegion]) -> str | None:
    """The linker script's region that holds .bss: its RAM, or the region RAM is an alias of (REGION_ALIAS)."""
    script = shipped_linker_script(spec)
    alias = re.search(r'REGION_ALIAS\(\s*"RAM"\s*,\s*(\w+)\s*\)', (DATA_DIR / script).read_text()) if script else None
    return alias.group(1) if alias else next((r.name for r in regions if r.name == "RAM"), None)


def capacity(spec: BoardSpec, what: str, nbytes: int) -> str:
    return f"{what} of {spec.name} ({nbytes:,} B = {nbytes / 1024:,.0f} KiB)"


def check_estimate_fits(spec: BoardSpec, estimate: FootprintEstimate) -> None:
    """Refuses, with the numbers, a model whose firmware cannot fit `spec`'s SRAM or flash."""
    problems = []
    if estimate.arena_bytes + estimate.static_ram_bytes > spec.sram_bytes:
        problems.append(
            f"arena {estimate.arena_bytes:,} B + static RAM {estimate.static_ram_bytes:,} B > "
            + capacity(spec, "SRAM", spec.sram_bytes)
        )
    if estimate.image_bytes > spec.flash_bytes:
        problems.append(
            f"constant data and code {estimate.image_bytes:,} B > " + capacity(spec, "flash", spec.flash_bytes)
        )
    if problems:
        raise LowtideError(f"{estimate.model}: {'; '.join(problems)}")


def check_memories_fit(spec: BoardSpec, estimate: FootprintEstimate, layout: ArenaLayout | None) -> None:
    """Refuses, with the numbers, a model whose firmware overflows one of `spec`'s memories ([[memory]]) though the
    sum fits (the STM32H743's one arena in its 512 KiB AXI SRAM), before building: each memory as memory_use counts
    it, against the memory or the linker script's region starting there if that is longer (one region over banks
    that follow each other: the F446RE's SRAM1 and SRAM2)."""
    script = shipped_linker_regions(spec) or []
    problems = []
    for use in memory_use(spec, estimate, layout):
        room = max(
            [use.size_bytes, *(r.length for r in script if use.address <= r.origin < use.address + use.size_bytes)]
        )
        if use.used_bytes > room:
            contents = " + ".join(f"{what} {nbytes:,} B" for what, nbytes in use.contents)
            problems.append(f"{contents} > {capacity(spec, use.memory, room)}")
    if problems:
        raise LowtideError(f"{estimate.model}: {'; '.join(problems)}")


def check_image_fits(spec: BoardSpec, image: FirmwareImage, model: str) -> None:
    """Refuses, with the numbers, a built image whose sections do not fit `spec`'s SRAM or flash."""
    problems = []
    if image.ram_bytes > spec.sram_bytes:
        problems.append(
            f"static RAM {image.static_ram_bytes:,} B + stack {image.stack_bytes:,} B > "
            + capacity(spec, "SRAM", spec.sram_bytes)
        )
    if image.flash_bytes > spec.flash_bytes:
        problems.append(f"image {image.flash_bytes:,} B > " + capacity(spec, "flash", spec.flash_bytes))
    if problems:
        raise LowtideError(f"{model}: the built firmware does not fit: {'; '.join(problems)}", image.elf)


def check_arenas_placed(spec: BoardSpec, elf: Path, layout: ArenaLayout, settings: Settings) -> None:
    """Refuses a built image whose arena sections are not inside the memories they were placed in (a linker script
    of the user's that drops or moves lowtide's sections)."""
    sections = {section.name: section for section in elf_sections(elf, settings)}
    for place in (p for p, _, _ in _placed(layout) if p is not None):
        section = sections.get(place.section)
        bank = next(m for m in spec.memories if m.name == place.memory)
        if section is None or not (bank.address <= section.address and section.address + section.size <= bank.end):
            where = f"at 0x{section.address:08X}" if section else "missing"
            raise LowtideError(f"the built firmware's {place.section} is {where}, not in {place.memory}", elf)


def firmware_project(
    spec: BoardSpec,
    model: Graph | None,
    runtime: FirmwareRuntime,
    arenas: ArenaLayout | None = None,
    project_dir: Path | None = None,
    protocol: ProtocolDefines | None = None,
    *,
    settings: Settings,
) -> FirmwareProject:
    """The project for `spec` with `model` in it (none: a model-less image; validated for what `runtime` relies on)
    run by `runtime`, built: in the user
    cache unless `project_dir` names a folder of the user's. Runs for the same content wait for one build. `protocol`:
    the image answers that protocol instead of lowtide's own (MLPerf Tiny's grammar: lowtide.mlperf)."""
    check_buildable(spec, settings)
    # The project names its env, not the board: boards that run one image (nucleo-f446re and qemu-nucleo-f446re)
    # then share one project in the cache, built once.
    files = project_files(
        spec.platformio_env,
        spec.platformio_config,
        f"PlatformIO env {spec.platformio_env}",
        model,
        runtime,
        spec.core,
        arenas,
        settings,
        protocol,
    )
    directory = (
        project_dir.resolve()
        if project_dir
        else cached_project_dir(spec.platformio_env, runtime.name, model, files, settings)
    )
    project = FirmwareProject(directory, spec.platformio_env, runtime.name, model.name if model else None)
    what = f"building the {spec.platformio_env} firmware" + (f" for {model.name}" if model else "")
    build_project(project, files, reuse_built=project_dir is None, what=what, settings=settings)
    return project


def build_board_firmware(
    spec: BoardSpec,
    model_path: Path,
    runtime: FirmwareRuntime | None = None,
    project_dir: Path | None = None,
    protocol: ProtocolDefines | None = None,
    graph: Graph | None = None,
    settings: Settings | None = None,
    regions: ArenaRegions = IN_BSS,
) -> FirmwareImage:
    """The firmware for `spec` with the model in it, run by `runtime` (default: the board's), TFLM's arenas where
    `regions` asks: refused before building if the model cannot fit the board, built (or found built), and checked
    against the board's memory from its ELF. `graph`: the model at `model_path`, when the caller has already read
    and validated it."""
    settings = settings_or_read(settings)
    runtime = runtime_for(spec.runtime, runtime)
    graph = graph if graph is not None else load_model(model_path, settings, runtime.relies_on)
    regions = requested_regions(spec, runtime, regions)
    if runtime.kernels is None and not regions.default:
        raise LowtideError(
            f"--arena-region and --persistent-region place TFLM's arenas: the {runtime} runtime has none"
        )
    early = runtime.estimate_before_sizing(graph)
    if early is not None and regions.default:
        # Before TFLM is built to size the arena: the head alone and the model file must fit.
        check_estimate_fits(spec, early)
        check_registry_reachable(spec, settings)
    tflm_arena = runtime.predict_arena(graph, spec.core, settings)
    estimate = runtime.estimate_footprint(graph, tflm_arena)
    layout = arena_layout(spec, graph, tflm_arena, regions, estimate)
    if layout is not None:
        estimate = dataclasses.replace(estimate, arena_bytes=_script_ram_arena_bytes(layout))
    check_estimate_fits(spec, estimate)
    check_memories_fit(spec, estimate, layout)
    project = firmware_project(spec, graph, runtime, layout, project_dir, protocol, settings=settings)
    built = read_firmware_image(project.elf, spec.platformio_env, settings)
    image = dataclasses.replace(built, project_dir=project.directory)
    check_image_fits(spec, image, model_path.stem)
    if layout is not None:
        check_arenas_placed(spec, image.elf, layout, settings)
    return image


def upload_firmware(
    spec: BoardSpec,
    model_path: Path,
    port: str,
    runtime: FirmwareRuntime | None = None,
    protocol: ProtocolDefines | None = None,
    *,
    settings: Settings,
) -> None:
    """The firmware for `spec` (built, or found built) uploaded to the board on `port` by the env's own uploader;
    for an ST board, OpenOCD on that board's ST-LINK (lowtide.device.drivers.platformio.upload_probe), which is
    checked before building."""
    variables = upload_settings(spec, port, settings)
    image = build_board_firmware(spec, model_path, runtime, protocol=protocol, settings=settings)
    upload_image(spec, image, port, variables, model_path.name, settings)


def board_firmware(
    board: Board,
    model_path: Path,
    graph: Graph,
    runtime: FirmwareRuntime | None,
    settings: Settings,
    port: str | None = None,
    regions: ArenaRegions = IN_BSS,
) -> FirmwareImage | HostProgram | None:
    """What `board` runs for `model_path`: the firmware built with `runtime` (None: the board file's) and checked
    against the board's memory; the host-tflm board's program, serving on `port` (None: its default); None for a
    board flashed beforehand."""
    if board.spec is None:
        if runtime is not None or not regions.default:
            raise LowtideError(
                f"--board {board.name} runs whatever it runs: --runtime and the arenas' regions apply to boards "
                "lowtide builds firmware for"
            )
        return host_program(model_path, port) if isinstance(board, HostTflmBoard) else None
    return build_board_firmware(board.spec, Path(model_path), runtime, graph=graph, settings=settings, regions=regions)


def host_program(model_path: Path, port: str | None) -> HostProgram:
    """The host-tflm board's process: lowtide.pipeline.host_tflm with the model, on `port` (None: its default)."""
    serve_on = ("--port", port) if port else ()
    return HostProgram((sys.executable, "-m", host_tflm.__name__, "--model", str(model_path), *serve_on))


def predicted_head_and_used(arena: Arena32, regions: ArenaRegions) -> tuple[int, int]:
    """The head and arena_used_bytes() the firmware reports for `arena` with `regions`: TFLM's two arenas hold
    the two allocators in the persistent one, so their figures are the split's."""
    if regions.split:
        assert arena.split is not None  # tflm_arena_layout refused the build otherwise
        return (
            arena.split.non_persistent_used_bytes,
            arena.split.non_persistent_used_bytes + arena.split.persistent_used_bytes,
        )
    return arena.head_bytes, arena.used_bytes


def predicted_arena(board: Board, graph: Graph, runtime: FirmwareRuntime | None, settings: Settings) -> Arena32 | None:
    """lowtide's prediction of the TFLM arena `board`'s firmware will report for `graph`; None where it runs no TFLM
    built by lowtide."""
    if board.spec is None:
        return None
    return runtime_for(board.spec.runtime, runtime).predict_arena(graph, board.spec.core, settings)
