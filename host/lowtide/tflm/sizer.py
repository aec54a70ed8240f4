"""TFLM's arena on a 32-bit MCU, to the byte: TFLM's own allocator, built for the core, run on the model in QEMU.

lowtide's replica of TFLM's planner predicts the head (activations) exactly on any machine, but the tail
(persistent per-tensor and per-operator structs, kernel data, CMSIS-NN's scratch requests) depends on struct
layouts and kernel code for the target: the host's 64-bit figures are 0.5 to 2.3 KB off. So the 32-bit figure comes
from the code that will run: firmware/tflm/lt_tflm_sizer.cc, linked with the same TFLM objects as the measurement
firmware, AllocateTensors on the model, one line of figures back. It needs the Arm toolchain, QEMU and the pinned
TFLM tree (`lowtide tflm-get`); the library build is shared with the firmware. The sizer images and their results
are kept in the user cache, per model, kernel set and core.

The same run sizes TFLM's two arenas, where the application gives TFLM a persistent and a non-persistent buffer
(`MicroAllocator::Create(persistent, size, non_persistent, size)`, so each can live in its own RAM bank): the
persistent one then also holds the two allocators, so its figure is read from that set-up, not derived.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import tempfile
from dataclasses import asdict, dataclass
from functools import cache, cached_property
from pathlib import Path

from lowtide.errors import LowtideError, missing_tool
from lowtide.model.ir import Graph
from lowtide.resources import BSP_DIR, LOCAL_PLATFORM_DIR, MPS_LINKER_SCRIPTS, PROTOCOL_DIR, TFLM_GLUE_DIR
from lowtide.settings import Settings
from lowtide.storage import cache_dir, cache_error, exclusive_lock, replacing, write_atomically
from lowtide.tflm.build import (
    DEBIAN_ARM_TOOLCHAIN,
    Core,
    ProgressCallback,
    TflmLibrary,
    build_library,
    compile_source,
    core_named,
    resolver_calls,
)
from lowtide.tflm.tree import KernelSet

# AllocateTensors of the largest shared model (mobilenet_v2, 3.9 MB) takes about a second under QEMU; a model on which
# TFLM loops (it can, on hostile input) is stopped here rather than holding up inspect or optimize.
QEMU_TIMEOUT_S = 30.0
MODEL_LIMIT_BYTES = (8 << 20) - 16  # the model and the arena share the board's 16 MiB RAM; one word of parameters
PARAMETERS_OFFSET = (8 << 20) - 4  # LT_SIZER_RESOURCE_VARIABLES
ARENA_ALIGNMENT = 16  # MicroArenaBufferAlignment()
_FIGURES = re.compile(r"lowtide-sizer((?: \w+=\d+)+)")
_ERROR = re.compile(r"lowtide-sizer error (.*)")


@dataclass(frozen=True)
class SizerMachine:
    """An emulated board the sizer runs on: its dev-platform board JSON (QEMU machine, UART0, SYSCLK, memory map)."""

    platform_board: str  # firmware/platform/boards/<platform_board>.json
    ram_base: int  # 16 MiB of RAM beside the firmware's own: the model and the sizer's arena go there

    @cached_property
    def build(self) -> dict[str, str]:
        return json.loads((LOCAL_PLATFORM_DIR / "boards" / f"{self.platform_board}.json").read_text())["build"]

    @property
    def qemu_machine(self) -> str:
        return self.build["qemu_machine"]


# Every Armv6-M and Armv7-M core's code runs on the Cortex-M4 image; the M7, M33 and M55 have their own.
SIZER_MACHINES = {
    "cortex-m4f": SizerMachine("qemu_mps2_an386", 0x21000000),
    "cortex-m0plus": SizerMachine("qemu_mps2_an386", 0x21000000),
    "cortex-m7": SizerMachine("qemu_mps2_an500", 0x60000000),
    "cortex-m7-sp": SizerMachine("qemu_mps2_an500", 0x60000000),  # QEMU's M7 has a double-precision FPU: a superset
    "cortex-m33": SizerMachine("qemu_mps2_an505", 0x80000000),
    "cortex-m55": SizerMachine("qemu_mps3_an547", 0x60000000),
}


def _aligned(nbytes: int) -> int:
    return -(-nbytes // ARENA_ALIGNMENT) * ARENA_ALIGNMENT


@dataclass(frozen=True)
class SplitArena32:
    """TFLM's two arenas for one model on a 32-bit core: what each holds after AllocateTensors, as TFLM allocates
    them (lt_tflm_create_split)."""

    non_persistent_used_bytes: int  # the head: planned activations and kernel scratch buffers
    persistent_used_bytes: int  # the tail: TFLM's and the kernels' structs, and the two allocators
    non_persistent_minimum_bytes: int  # the smallest non-persistent arena AllocateTensors accepts

    @property
    def non_persistent_arena_bytes(self) -> int:
        """What to declare for the non-persistent arena (16-byte aligned): enough for AllocateTensors."""
        return _aligned(max(self.non_persistent_used_bytes, self.non_persistent_minimum_bytes))

    @property
    def persistent_arena_bytes(self) -> int:
        """What to declare for the persistent arena (16-byte aligned: TFLM uses it from its aligned top down)."""
        return _aligned(self.persistent_used_bytes)


@dataclass(frozen=True)
class Arena32:
    """TFLM's arena for one model on a 32-bit core, as TFLM itself allocates it."""

    kernels: str  # KernelSet value
    core: str
    used_bytes: int  # MicroInterpreter::arena_used_bytes() after AllocateTensors
    head_bytes: int  # non-persistent: planned activations and kernel scratch buffers
    tail_bytes: int  # persistent: TFLM's and the kernels' structs
    minimum_arena_bytes: int  # the smallest arena AllocateTensors accepts (planning needs room of its own)
    split: SplitArena32 | None  # on TFLM's two arenas; None where the sizer's split of its RAM could not hold them

    @property
    def arena_bytes(self) -> int:
        """What to declare: enough for AllocateTensors, a multiple of the arena alignment."""
        return _aligned(max(self.used_bytes, self.minimum_arena_bytes))

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> Arena32:
        split = data.pop("split")
        return cls(**data, split=SplitArena32(**split) if split else None)


def _machine(core: Core) -> SizerMachine:
    try:
        return SIZER_MACHINES[core.name]
    except KeyError:
        raise LowtideError(f"no emulated board runs {core.name} code, so its TFLM arena cannot be sized here") from None


def _opcodes(graph: Graph) -> list[str]:
    return sorted({op.opcode for sg in graph.subgraphs for op in sg.operators})


def resource_variable_count(graph: Graph) -> int:
    """Slots of MicroResourceVariables the application creates: one per VAR_HANDLE operator (TFLM has no default;
    the slots take arena bytes, so the sizer and the firmware must create the same number)."""
    return sum(op.opcode == "VAR_HANDLE" for sg in graph.subgraphs for op in sg.operators)


@cache
def _sources_digest() -> str:
    """Of the firmware sources the sizer and the measurement firmware share: a change invalidates cached figures.
    (lt_protocol.h is among them: the board support reads the protocol's limits.)"""
    digest = hashlib.sha256()
    for path in sorted(
        [
            *TFLM_GLUE_DIR.glob("*"),
            *MPS_LINKER_SCRIPTS.glob("*.ld"),
            *BSP_DIR.rglob("*.[ch]"),
            PROTOCOL_DIR / "lt_protocol.h",
        ]
    ):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:12]


def write_resolver_include(path: Path, calls: list[str]) -> None:
    text = "/* Generated by lowtide: the operators the model uses. */\n" + "".join(f"  {c}\n" for c in calls)
    if not path.is_file() or path.read_text() != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def build_sizer(
    kernels: KernelSet, core: Core, opcodes: list[str], settings: Settings, progress: ProgressCallback | None = None
) -> Path:
    """The sizer image for a model with `opcodes` (linked with just those kernels); built once per operator set."""
    library = build_library(kernels, core, opcodes, settings, progress=progress)
    calls = resolver_calls(library.tree, opcodes)
    key = hashlib.sha256("\0".join([str(library.archive), _sources_digest(), *calls]).encode()).hexdigest()[:16]
    out = cache_dir(settings, "tflm", "sizer") / f"{kernels.value}-{core.name}-{key}"
    elf = out / "sizer.elf"
    with exclusive_lock(out.with_name(out.name + ".lock")):
        if not (elf.is_file() and elf.stat().st_mtime >= library.archive.stat().st_mtime):
            _link_sizer(library, core, calls, out, elf)
    return elf


def _link_sizer(library: TflmLibrary, core: Core, calls: list[str], out: Path, elf: Path) -> None:
    machine = _machine(core)
    write_resolver_include(out / "lt_model_ops.inc", calls)
    toolchain = DEBIAN_ARM_TOOLCHAIN
    flags = [
        *library.compile_flags,
        f"-I{out}",
        f"-I{TFLM_GLUE_DIR}",
        f"-I{BSP_DIR}",
        f"-I{BSP_DIR / 'cortexm'}",
        f"-I{PROTOCOL_DIR}",
        f"-DLT_SIZER_RAM_BASE=0x{machine.ram_base:08x}u",
        f"-DLT_TFLM_OP_TYPES={max(1, len(calls))}",
        f'-DLT_QEMU_MACHINE="{machine.qemu_machine}"',
        "-DLT_QEMU_ICOUNT_SHIFT=0",
        f"-DLT_MPS_UART0_BASE={machine.build['uart0_base']}u",
        f"-DLT_MPS_SYSCLK_HZ={machine.build['f_cpu'].rstrip('L')}u",
    ]
    sources = [
        TFLM_GLUE_DIR / "lt_tflm_sizer.cc",
        TFLM_GLUE_DIR / "lt_tflm_platform.cc",
        BSP_DIR / "mps2" / "lt_startup.c",
        BSP_DIR / "mps2" / "lt_board_mps2.c",
        BSP_DIR / "cortexm" / "lt_semihosting.c",
        BSP_DIR / "cortexm" / "lt_systick.c",
    ]
    objects = []
    for source in sources:
        obj = out / (source.name + ".o")
        error = compile_source(toolchain, flags, source, obj, "-O2")
        if error is not None:
            raise LowtideError(f"compiling the TFLM arena sizer failed: {error}", source)
        objects.append(str(obj))
    link = [
        toolchain.cc,
        *core.cpu_flags,
        "--specs=nano.specs",
        "--specs=nosys.specs",
        "-nostartfiles",
        "-Wl,--gc-sections",
        "-Wl,--no-warn-rwx-segments",
        "-L",
        str(MPS_LINKER_SCRIPTS),
        "-T",
        str(MPS_LINKER_SCRIPTS / machine.build["ldscript"]),
        *objects,
        str(library.archive),
        "-lm",
        "-lc",
        "-lgcc",
        "-o",
    ]
    with replacing(elf) as linked:
        done = subprocess.run([*link, str(linked)], capture_output=True, text=True, check=False)
        if done.returncode != 0:
            lines = [line for line in done.stderr.splitlines() if line.strip()] or ["no output"]
            raise LowtideError(f"linking the TFLM arena sizer failed: {lines[-1]}", out)


def _run_sizer(elf: Path, core: Core, model: bytes, resource_variables: int, path: str) -> dict[str, int]:
    machine = _machine(core)
    with tempfile.NamedTemporaryFile(suffix=".tflite") as model_file:
        model_file.write(model)
        model_file.flush()
        argv = [
            "qemu-system-arm",
            "-machine",
            machine.qemu_machine,
            "-display",
            "none",
            "-monitor",
            "none",
            "-serial",
            "stdio",
            "-semihosting-config",
            "enable=on,target=native",
            *(arg.replace("{elf}", str(elf)) for arg in machine.build["qemu_boot"]),
            "-device",
            f"loader,file={model_file.name},addr=0x{machine.ram_base:08x},force-raw=on",
            "-device",
            f"loader,addr=0x{machine.ram_base + PARAMETERS_OFFSET:08x},data={resource_variables},data-len=4",
        ]
        try:
            done = subprocess.run(
                argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=QEMU_TIMEOUT_S, check=False
            )
        except FileNotFoundError:
            raise missing_tool("qemu-system-arm") from None
        except subprocess.TimeoutExpired:
            raise LowtideError(
                f"TFLite Micro on {core.name} did not finish allocating tensors within {QEMU_TIMEOUT_S:g} s (QEMU)",
                path,
            ) from None
    output = done.stdout.decode("utf-8", "replace")
    figures = _FIGURES.search(output)
    if figures is None:
        error = _ERROR.search(output)
        reason = error.group(1).strip() if error else f"exit status {done.returncode}"
        raise LowtideError(f"TFLite Micro on {core.name} rejected the model: {reason}", path)
    return {name: int(value) for name, value in (item.split("=") for item in figures.group(1).split())}


def predict_arena32(
    graph: Graph,
    kernels: KernelSet,
    settings: Settings,
    core_name: str = "cortex-m4f",
    progress: ProgressCallback | None = None,
) -> Arena32:
    """TFLM's arena for `graph` on `core_name` with `kernels`, from TFLM's allocator built for that core."""
    core = core_named(core_name)
    model = graph.data
    if len(model) > MODEL_LIMIT_BYTES:
        raise LowtideError(
            f"the model is {len(model):,} B; the arena sizer holds models up to {MODEL_LIMIT_BYTES:,} B", graph.source
        )
    figures_file = (
        cache_dir(settings, "tflm", "sizes")
        / f"{kernels.value}-{core.name}-{_sources_digest()}-{hashlib.sha256(model).hexdigest()[:24]}.json"
    )
    if figures_file.is_file():
        return Arena32.from_json(json.loads(figures_file.read_text()))
    elf = build_sizer(kernels, core, _opcodes(graph), settings, progress)
    figures = _run_sizer(elf, core, model, resource_variable_count(graph), graph.source)
    planning = figures["planner_start"] + figures["planner_bytes"] + figures["planner_tail"]
    split = (
        SplitArena32(
            figures["split_head"],
            figures["split_tail"],
            max(figures["split_peak"], figures["split_planner_start"] + figures["split_planner_bytes"]),
        )
        if "split_head" in figures
        else None
    )
    arena = Arena32(
        kernels.value,
        core.name,
        figures["used"],
        figures["head"],
        figures["tail"],
        max(figures["peak"], planning, figures["used"]),
        split,
    )
    try:
        write_atomically(figures_file, json.dumps(arena.to_json()))
    except OSError as exc:
        raise cache_error(exc, figures_file) from None
    return arena
