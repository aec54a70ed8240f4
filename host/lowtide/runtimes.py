"""What runs a model in lowtide's firmware, and what each runtime needs of a board, known before any board is
involved: lowtide's compiled C (`compiled`, lowtide.compile, with its own arena plan), or TFLM's interpreter with
its reference or CMSIS-NN kernels (`tflm`, `tflm-cmsis-nn`), whose arena TFLM allocates itself (lowtide.tflm.sizer
predicts it on the core's emulator).

A runtime is named by a `Runtime` (lowtide.project's: the string the CLI, board files, the pytest plugin and JSON
use; a board file holds the name, so the device layer needs nothing of this module) and is one
`FirmwareRuntime` object (`RUNTIMES`, `runtime_named`) owning everything that differs between runtimes: its TFLM
kernel set (or none), its arena prediction, its footprint estimate, the slack painted past its arena, the cores it
runs on, and the sources, defines and libraries it adds to a firmware project (lowtide.project). The stages after
this one hold a `FirmwareRuntime` and ask it; none compares runtime names.

The figures here (the predicted arena, the footprint estimate) are computed from the model alone; lowtide.pipeline
checks them against a board and builds nothing it cannot hold, and hands the device layer the image and the
predictions: the device layer runs no planner of its own. Which outputs may share their input's bytes is the memory
stage's (`lowtide.memory.in_place`, by `Executor`): lowtide.compile, an earlier stage, plans the compiled runtime's
arena with those rules.
"""

from __future__ import annotations

import tempfile
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from lowtide.compile.banks import DataRegion, RegionArena
from lowtide.compile.codegen import arena_plan, compile_model
from lowtide.errors import LowtideError
from lowtide.library import LibraryArena, LibraryPart, c_byte_rows, compiled_api_source, tflm_api_source
from lowtide.memory import tflm_plan
from lowtide.model.ir import Graph, TensorKind
from lowtide.model.validate import EVERY_RELIANCE, Reliance
from lowtide.project import ModelBuild, Runtime, SourceFolder
from lowtide.resources import RUNTIME_DIR, shipped_files
from lowtide.settings import Settings
from lowtide.tflm.build import (
    CORES,
    DEBIAN_ARM_TOOLCHAIN,
    build_library,
    check_kernels_fit_core,
    core_named,
    cxx_flags,
    resolver_calls,
)
from lowtide.tflm.regions import REGIONS_SCRIPT, ArenaPlace, TflmArenaLayout, linker_fragment
from lowtide.tflm.sizer import Arena32, predict_arena32, resource_variable_count, write_resolver_include
from lowtide.tflm.tree import KernelSet

# What the firmware adds to the model, for the size check before building. Both are lower bounds taken from the
# qemu-m4 images of the compiled runtime, so the estimate never refuses a model that would fit; the ELF is checked
# exactly after the build.
ARENA_SLACK_BYTES = 1024  # painted beyond the plan (LT_ARENA_SLACK_BYTES in lt_model_compiled.c)
RUNTIME_STATIC_RAM_BYTES = 13_000  # protocol buffers and per-invocation samples: 13,360 B with any model
RUNTIME_CODE_BYTES = 8_000  # protocol core and the fewest kernels: 9,112 B of code for tflm_hello_world_int8
TFLM_CODE_BYTES = 60_000  # TFLM's framework with the fewest kernels: 64,752 B of code for tflm_hello_world_int8


@dataclass(frozen=True)
class FootprintEstimate:
    """What a model's firmware needs, known before building it."""

    model: str  # the model's name without .tflite, for messages
    arena_bytes: int  # the arena the image declares: the planned head plus the painted slack, or TFLM's arena
    static_ram_bytes: int  # everything else in RAM: the input staging buffer and the runtime's own state
    image_bytes: int  # the model's constant data plus the runtime's code


@dataclass(frozen=True)
class CompiledArenaLayout:
    """Where the compiled runtime's arenas go on a board with memory regions: the regions its plan may use, fastest
    first (lowtide.compile.banks), and the place of each one's arena; None: the first region's arena, the one the
    firmware passes to the model, in .bss."""

    regions: tuple[DataRegion, ...]
    places: tuple[ArenaPlace | None, ...]  # one per region
    arenas: tuple[RegionArena, ...]  # the arena of each region the plan uses (lowtide.compile.codegen.region_arenas)

    def placed(self) -> list[tuple[ArenaPlace | None, str, int]]:
        """(place, what, bytes) of each arena the image declares: the first with the slack painted past it."""
        place = dict(zip((r.name for r in self.regions), self.places))
        return [
            (place[a.region], f"compiled arena ({a.region})", a.head_bytes + (ARENA_SLACK_BYTES if i == 0 else 0))
            for i, a in enumerate(self.arenas)
        ]


ArenaLayout = TflmArenaLayout | CompiledArenaLayout  # what a runtime's image declares for its arenas


class FirmwareRuntime(ABC):
    """One runtime of the firmware and what it needs of a board (module docstring)."""

    name: Runtime
    kernels: KernelSet | None  # TFLM's kernel set in the firmware; None: no TFLM there
    arena_slack_bytes: ClassVar[int]  # painted past the arena to catch overruns: the harness's, not the model's
    relies_on: ClassVar[frozenset[Reliance]]  # what of a model it relies on beyond what TFLM runs

    def __str__(self) -> str:
        return self.name.value

    @abstractmethod
    def runs_on(self, core: str) -> bool:
        """Whether this runtime can be built for `core` (a board file's `core`)."""

    @abstractmethod
    def predict_arena(self, graph: Graph, core: str, settings: Settings) -> Arena32 | None:
        """TFLM's arena for the model on `core` with this runtime's kernels; None where no TFLM allocates one."""

    @abstractmethod
    def estimate_footprint(self, graph: Graph, tflm_arena: Arena32 | None = None) -> FootprintEstimate:
        """The firmware's footprint with `tflm_arena`, the arena `predict_arena` returned."""

    @abstractmethod
    def estimate_before_sizing(self, graph: Graph) -> FootprintEstimate | None:
        """A lower bound of the footprint known before `predict_arena`, where that builds TFLM first; None where
        predicting costs nothing."""

    @abstractmethod
    def model_build(
        self,
        graph: Graph,
        core: str,
        arenas: ArenaLayout | None,
        files: dict[str, bytes],
        settings: Settings,
    ) -> ModelBuild:
        """The model's sources, defines and libraries in a firmware project run by this runtime, its files written
        into `files` (lowtide.project adds what every runtime's has)."""

    @abstractmethod
    def library_part(self, graph: Graph, prefix: str, core: str, settings: Settings) -> LibraryPart:
        """The model's part of a library for the user's own firmware (lowtide.library): its sources, the API's
        implementation on this runtime (prefix `prefix`), the arena figures for `core`, what it links."""


def _footprint(graph: Graph, arena_bytes: int, image_bytes: int) -> FootprintEstimate:
    staging = sum(graph.main.tensors[i].nbytes for i in graph.main.inputs)
    return FootprintEstimate(
        model=Path(graph.name).stem,
        arena_bytes=arena_bytes,
        static_ram_bytes=staging + RUNTIME_STATIC_RAM_BYTES,
        image_bytes=image_bytes,
    )


class CompiledRuntime(FirmwareRuntime):
    """lowtide's compiled C: the generated code declares its arena from lowtide's plan for it (in place, fused PADs,
    the fast kernels' scratch), which can be below TFLM's head, and paints a slack past it."""

    name = Runtime.COMPILED
    kernels = None
    arena_slack_bytes = ARENA_SLACK_BYTES
    relies_on = EVERY_RELIANCE  # lowered from the shapes operators compute

    def runs_on(self, core: str) -> bool:
        return True  # plain C99

    def predict_arena(self, graph: Graph, core: str, settings: Settings) -> Arena32 | None:
        return None

    def estimate_footprint(self, graph: Graph, tflm_arena: Arena32 | None = None) -> FootprintEstimate:
        constant_buffers = {
            t.buffer: t.nbytes for sg in graph.subgraphs for t in sg.tensors if t.kind is TensorKind.CONSTANT
        }
        plan = arena_plan(graph)
        return _footprint(
            graph,
            plan.head_bytes + self.arena_slack_bytes,
            sum(constant_buffers.values()) + plan.wide_weight_bytes + RUNTIME_CODE_BYTES,
        )

    def estimate_before_sizing(self, graph: Graph) -> FootprintEstimate | None:
        return None

    def model_build(
        self,
        graph: Graph,
        core: str,
        arenas: ArenaLayout | None,
        files: dict[str, bytes],
        settings: Settings,
    ) -> ModelBuild:
        assert arenas is None or isinstance(arenas, CompiledArenaLayout)
        compiled = compile_model(graph, regions=arenas.regions if arenas else (), wide_weights=widens_filters(core))
        for name, text in compiled.files.items():
            files[f"model/{name}"] = text.encode()
        build = ModelBuild(graph.name, self.name)
        if arenas is not None:
            place = dict(zip((r.name for r in arenas.regions), arenas.places))
            used = [place[a.region] for a in compiled.region_arenas]
            if used[0] is not None:
                build.string_defines.append(("LT_COMPILED_ARENA_SECTION", used[0].section))
            fragment = linker_fragment([p for p in used if p is not None])
            if fragment is not None:
                files[REGIONS_SCRIPT] = fragment.encode()
                build.link_scripts.append(REGIONS_SCRIPT)
        build.defines += [
            ("LT_RUNTIME_COMPILED", None),
            ("LT_MODEL_INPUT_BYTES_TOTAL", f"{sum(t.nbytes for t in compiled.inputs)}u"),
        ]
        build.include_dirs += ["model", "firmware/runtime"]
        build.sources += [
            SourceFolder("lowtide_runtime", "firmware/runtime", "+<*.c>"),
            SourceFolder("lowtide_model", "model", "+<*.c>"),
        ]
        return build

    def library_part(self, graph: Graph, prefix: str, core: str, settings: Settings) -> LibraryPart:
        net = f"{prefix}_net"
        compiled = compile_model(graph, net, wide_weights=widens_filters(core))
        sources = dict(compiled.files)
        for source in shipped_files(RUNTIME_DIR):
            if source.suffix in (".c", ".h"):
                sources[source.name] = source.read_text()
        sources[f"{prefix}.c"] = compiled_api_source(prefix, net, graph)
        arena = LibraryArena(compiled.arena_bytes, compiled.arena_bytes, 0, compiled.fixed_state_bytes)
        # No FMA contraction: the float kernels compute what TFLM computes, to the bit (as in the firmware).
        return LibraryPart(sources, arena, None, None, ("-ffp-contract=off",))


def widens_filters(core: str) -> bool:
    """Whether the compiled runtime's filters go int16 on `core` (`compile_model`'s wide_weights): they speed the
    DSP kernels up and slow the Helium ones down (firmware/runtime/lt_mve_conv.h)."""
    return not (core in CORES and CORES[core].mve)


@dataclass(frozen=True)
class TflmRuntime(FirmwareRuntime):
    """TFLM's interpreter with one of its kernel sets, on the .tflite bytes in flash: TFLM allocates the arena itself,
    so its size is TFLM's own, read on the core's emulator (lowtide.tflm.sizer)."""

    name: Runtime
    kernels: KernelSet
    arena_slack_bytes: ClassVar[int] = 0
    relies_on: ClassVar[frozenset[Reliance]] = frozenset()  # TFLM allocates and runs the declared shapes

    def runs_on(self, core: str) -> bool:
        try:
            check_kernels_fit_core(self.kernels, CORES[core])
        except (KeyError, LowtideError):
            return False
        return True

    def predict_arena(self, graph: Graph, core: str, settings: Settings) -> Arena32 | None:
        return predict_arena32(graph, self.kernels, settings, core)

    def estimate_footprint(self, graph: Graph, tflm_arena: Arena32 | None = None) -> FootprintEstimate:
        """With no `tflm_arena`, the arena's head alone (lowtide's replica of TFLM's planner): a lower bound."""
        arena_bytes = tflm_arena.arena_bytes if tflm_arena else tflm_plan(graph).head_bytes
        return _footprint(graph, arena_bytes, graph.size_bytes + RUNTIME_CODE_BYTES + TFLM_CODE_BYTES)

    def estimate_before_sizing(self, graph: Graph) -> FootprintEstimate | None:
        return self.estimate_footprint(graph)  # sizing TFLM's arena builds TFLM for the core first

    def model_build(
        self,
        graph: Graph,
        core: str,
        arenas: ArenaLayout | None,
        files: dict[str, bytes],
        settings: Settings,
    ) -> ModelBuild:
        assert isinstance(arenas, TflmArenaLayout)  # a TFLM image's arenas are the ones predict_arena sized
        opcodes = sorted({op.opcode for sg in graph.subgraphs for op in sg.operators})
        library = build_library(self.kernels, core_named(core), opcodes, settings, DEBIAN_ARM_TOOLCHAIN)
        calls = resolver_calls(library.tree, opcodes)
        files["model/lt_model_tflite.c"] = _tflite_c_array(graph.data).encode()
        with tempfile.TemporaryDirectory() as scratch:
            include = Path(scratch) / "lt_model_ops.inc"
            write_resolver_include(include, calls)
            files["model/lt_model_ops.inc"] = include.read_bytes()
        build = ModelBuild(graph.name, self.name)
        build.defines += [
            ("LT_RUNTIME_TFLM", None),
            *arenas.defines(),
            ("LT_TFLM_OP_TYPES", str(max(1, len(calls)))),
            ("LT_TFLM_RESOURCE_VARIABLES", str(resource_variable_count(graph))),
            ("LT_MODEL_OPERATOR_COUNT", str(len(graph.main.operators))),
            ("LT_MODEL_INPUT_BYTES_TOTAL", f"{sum(graph.main.tensors[i].nbytes for i in graph.main.inputs)}u"),
        ]
        build.string_defines += [("LT_TFLM_RUNTIME_NAME", self.name), *arenas.string_defines()]
        fragment = arenas.linker_fragment()
        if fragment is not None:
            files[REGIONS_SCRIPT] = fragment.encode()
            build.link_scripts.append(REGIONS_SCRIPT)
        build.ccflags += list(library.compile_flags)
        build.cxxflags += cxx_flags()
        build.include_dirs += ["model", "firmware/tflm"]
        build.lib_dirs.append(str(library.archive.parent))
        build.libs.append("tflm")
        build.sources += [
            SourceFolder("lowtide_tflm", "firmware/tflm", "+<lt_tflm_platform.cc>"),
            SourceFolder("lowtide_model", "model", "+<*.c>"),
        ]
        return build

    def library_part(self, graph: Graph, prefix: str, core: str, settings: Settings) -> LibraryPart:
        arena = self.predict_arena(graph, core, settings)
        assert arena is not None  # TFLM's runtimes always size their arena
        opcodes = sorted({op.opcode for sg in graph.subgraphs for op in sg.operators})
        library = build_library(self.kernels, core_named(core), opcodes, settings, DEBIAN_ARM_TOOLCHAIN)
        defines = [flag for flag in library.compile_flags if flag.startswith("-D")]
        source = tflm_api_source(
            prefix,
            graph,
            resolver_calls(library.tree, opcodes),
            resource_variable_count(graph),
            defines,
        )
        figures = LibraryArena(arena.arena_bytes, arena.head_bytes, arena.tail_bytes, 0)
        return LibraryPart({f"{prefix}.cc": source}, figures, core, self.kernels.value, tuple(cxx_flags()))


def _tflite_c_array(data: bytes) -> str:
    rows = c_byte_rows(data)
    return (
        "/* Generated by lowtide: the .tflite bytes for TFLM. */\n#include <stdint.h>\n"
        f"const uint32_t lt_model_tflite_size = {len(data)}u;\n"
        f"const uint8_t lt_model_tflite[{len(data)}] __attribute__((aligned(16))) = {{\n{rows}\n}};\n"
    )


# Every runtime, in the order listings give them.
RUNTIMES: dict[Runtime, FirmwareRuntime] = {
    runtime.name: runtime
    for runtime in (
        CompiledRuntime(),
        TflmRuntime(Runtime.TFLM, KernelSet.REFERENCE),
        TflmRuntime(Runtime.TFLM_CMSIS_NN, KernelSet.CMSIS_NN),
    )
}


def runtime_named(name: str) -> FirmwareRuntime:
    """The runtime `name` names (`--runtime`, `--lowtide-runtime`)."""
    return RUNTIMES[Runtime.named(name)]


def runtime_for(name: Runtime, chosen: FirmwareRuntime | None = None) -> FirmwareRuntime:
    """`chosen` (`--runtime`), else the runtime `name` names: a board file's (`BoardSpec.runtime`)."""
    return chosen or RUNTIMES[name]


def planned_head_bytes(graph: Graph, tflm_arena: Arena32 | None) -> int:
    """TFLM's arena head as lowtide predicts it: the sizer's, where the runtime is TFLM's and it sized the arena
    (`tflm_arena`), else lowtide's replica of TFLM's planner."""
    return tflm_arena.head_bytes if tflm_arena else tflm_plan(graph).head_bytes
