"""Building TFLite Micro for a Cortex-M core: one object cache per core and kernel set, reused by every model.

The same code serves every board's firmware project (lowtide.project links the library into it) and the arena sizer
(lowtide.tflm.sizer). Objects live in the user cache (lowtide.storage), so TFLM is compiled once per machine. Flags are the ones TFLM's own
`cortex_m_generic` target uses: `-Os` for the framework, `-O2` for the kernels and CMSIS-NN.

Compiling all ~200 (reference) or ~315 (CMSIS-NN) sources takes about ten minutes on two cores, so only what a
model can link is compiled: the framework, the kernels' shared helpers, and the files that define the registration
function of each operator the model uses. Objects are kept per core and kernel set and never compiled twice; a
model whose operators were all seen before builds in seconds.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from lowtide.errors import LowtideError, missing_tool
from lowtide.settings import Settings
from lowtide.storage import cache_dir, cache_error, exclusive_lock, replacing
from lowtide.tflm.tree import TREE_FINGERPRINTS, KernelSet, TflmTree, locate_tree

COMPILE_TIMEOUT_S = 600.0
# The two files of the tree that the application replaces (firmware/tflm/lt_tflm_platform.cc), and TFLM's test
# scaffolding, which no application links.
_PLATFORM_FILES = ("tensorflow/lite/micro/debug_log.cc", "tensorflow/lite/micro/micro_time.cc")
_TEST_SCAFFOLDING = (
    "test_helpers.cc",
    "test_helper_custom_ops.cc",
    "fake_micro_context.cc",
    "mock_micro_graph.cc",
    "kernel_runner.cc",
)
_CMSIS_NN_CALL = re.compile(r"\b(arm_\w+)\s*\(")
_CMSIS_NN_DEFINITION = re.compile(r"^[\w \t*]*?\b(arm_\w+)\s*\([^;{]*\)\s*\{", re.M)
# CMSIS-NN's lookup tables (e.g. sigmoid_table_uint16, which the int16 activations read): data, not calls.
_CMSIS_NN_TABLE = re.compile(r"^const\s+[\w ]+?\b(\w+)\s*\[[^\]]*\]\s*=", re.M)
_KERNEL_DIRS = ("tensorflow/lite/micro/kernels", "tensorflow/lite/micro/kernels/cmsis_nn")
_REGISTRATION = re.compile(r"^TFLMRegistration\*?\s+(Register_\w+)\s*\(\s*\)\s*\{", re.M)
# A MicroMutableOpResolver method starts here; within it, the registration it defaults to and the builtin it adds.
_RESOLVER_METHOD_START = re.compile(r"TfLiteStatus (?=Add\w+\()")
_REGISTRATION_CALL = re.compile(r"(Register_\w+)\(\)")
_ADD_BUILTIN = re.compile(r"AddBuiltin\(\s*BuiltinOperator_(\w+),")

ProgressCallback = Callable[[int, int], None]  # (objects compiled, objects to compile)


@dataclass(frozen=True)
class Core:
    """A CPU TFLM is compiled for. `dsp`: the core has Armv7E-M's DSP extension (CMSIS-NN's fast paths); `mve`:
    Armv8.1-M's vector extension, Helium (CMSIS-NN's and the compiled runtime's MVE kernels)."""

    name: str
    cpu_flags: tuple[str, ...]
    dsp: bool
    arm: bool = True
    mve: bool = False


CORES = {
    core.name: core
    for core in (
        Core("cortex-m4f", ("-mcpu=cortex-m4", "-mthumb", "-mfloat-abi=hard", "-mfpu=fpv4-sp-d16"), dsp=True),
        Core("cortex-m7", ("-mcpu=cortex-m7", "-mthumb", "-mfloat-abi=hard", "-mfpu=fpv5-d16"), dsp=True),
        # A Cortex-M7 whose FPU has single precision only (STM32F7x6): TFLM's doubles must stay in software.
        Core("cortex-m7-sp", ("-mcpu=cortex-m7", "-mthumb", "-mfloat-abi=hard", "-mfpu=fpv5-sp-d16"), dsp=True),
        Core("cortex-m33", ("-mcpu=cortex-m33", "-mthumb", "-mfloat-abi=hard", "-mfpu=fpv5-sp-d16"), dsp=True),
        # -mfpu=auto: the FPU and Helium (MVE) the M55 has; CMSIS-NN then compiles its MVE kernels.
        Core("cortex-m55", ("-mcpu=cortex-m55", "-mthumb", "-mfloat-abi=hard", "-mfpu=auto"), dsp=True, mve=True),
        Core("cortex-m0plus", ("-mcpu=cortex-m0plus", "-mthumb", "-mfloat-abi=soft"), dsp=False),
        Core("xtensa-lx7", (), dsp=False, arm=False),
    )
}

# TFLM's own flags, plus -ffp-contract=off: GCC would otherwise fuse a*b+c into one FMA instruction in the float
# kernels, whose results then differ in the last bit from TFLM's host build (the reference lowtide checks against).
_COMMON_FLAGS = (
    "-DTF_LITE_STATIC_MEMORY",
    "-DTF_LITE_DISABLE_X86_NEON",
    "-DTF_LITE_MCU_DEBUG_LOG",
    "-ffunction-sections",
    "-fdata-sections",
    "-funsigned-char",
    "-ffp-contract=off",
)
_CXX_FLAGS = (
    "-std=c++17",
    "-fno-rtti",
    "-fno-exceptions",
    "-fno-threadsafe-statics",
    "-fno-unwind-tables",
    "-fno-asynchronous-unwind-tables",
)
_CMSIS_NN_FLAGS = ("-DCMSIS_NN", "-DARM_NN_ENABLE_F16=0", "-DARM_NN_ENABLE_F32=0")


def core_named(name: str) -> Core:
    try:
        return CORES[name]
    except KeyError:
        raise LowtideError(f"no TFLM build for core {name!r}; cores: {', '.join(CORES)}") from None


def check_kernels_fit_core(kernels: KernelSet, core: Core) -> None:
    if kernels is KernelSet.CMSIS_NN and not core.arm:
        raise LowtideError(
            f"CMSIS-NN kernels are for Arm Cortex-M cores, and {core.name} is not one (use the reference kernels)"
        )


def include_dirs(tree: TflmTree) -> list[Path]:
    """Where TFLM's API headers and theirs are: what code using the interpreter includes."""
    dirs = [tree.root] + [tree.root / "third_party" / name for name in ("gemmlowp", "ruy", "kissfft")]
    dirs.append(tree.root / "third_party" / "flatbuffers" / "include")
    return dirs


def _kernel_include_dirs(tree: TflmTree) -> list[Path]:
    """What TFLM's CMSIS-NN kernels include besides: CMSIS-NN's and the CMSIS Core headers TFLM ships (CMSIS 6),
    which must not reach a framework that brings its own CMSIS (STM32Cube's HAL)."""
    if tree.kernels is not KernelSet.CMSIS_NN:
        return []
    return [
        tree.root / "third_party" / "cmsis_nn",
        tree.root / "third_party" / "cmsis_nn" / "Include",
        tree.root / "third_party" / "cmsis" / "CMSIS" / "Core" / "Include",
    ]


def compile_flags(tree: TflmTree, core: Core) -> list[str]:
    """Preprocessor and code-generation flags TFLM's own sources compile with."""
    flags = [*core.cpu_flags, *_COMMON_FLAGS, *(f"-I{d}" for d in include_dirs(tree) + _kernel_include_dirs(tree))]
    if tree.kernels is KernelSet.CMSIS_NN:
        flags += _CMSIS_NN_FLAGS
    return flags


def header_flags(tree: TflmTree, core: Core) -> list[str]:
    """The flags for code that includes TFLM's headers (the firmware's TFLM glue, the sizer): TFLM's own, without
    its kernels' include folders."""
    kernel_dirs = {f"-I{d}" for d in _kernel_include_dirs(tree)}
    return [flag for flag in compile_flags(tree, core) if flag not in kernel_dirs]


def cxx_flags() -> list[str]:
    return list(_CXX_FLAGS)


# --- which sources a model needs -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class OpResolverEntry:
    opcode: str  # BuiltinOperator name, e.g. CONV_2D
    method: str  # MicroMutableOpResolver method, e.g. AddConv2D
    registration: str  # e.g. Register_CONV_2D


@cache
def resolver_entries(root: Path) -> dict[str, OpResolverEntry]:
    """The builtin operators TFLM's MicroMutableOpResolver can register, read from its header."""
    header = (root / "tensorflow/lite/micro/micro_mutable_op_resolver.h").read_text()
    entries = {}
    for method_text in _RESOLVER_METHOD_START.split(header)[1:]:
        registration, builtin = _REGISTRATION_CALL.search(method_text), _ADD_BUILTIN.search(method_text)
        if registration and builtin:  # custom and signal-library operators are added by name, not as builtins
            method = method_text[: method_text.index("(")]
            entries[builtin.group(1)] = OpResolverEntry(builtin.group(1), method, registration.group(1))
    return entries


def resolver_calls(tree: TflmTree, opcodes: Iterable[str]) -> list[str]:
    """`resolver.AddXxx();` for each operator, in a stable order; refused for an operator TFLM lacks."""
    entries = resolver_entries(tree.root)
    missing = sorted(set(opcodes) - set(entries))
    if missing:
        raise LowtideError(f"TFLite Micro has no kernel for {', '.join(missing)}")
    return [f"resolver.{entries[op].method}();" for op in sorted(set(opcodes))]


@cache
def _kernel_sources(root: Path) -> tuple[tuple[Path, frozenset[str]], ...]:
    """Each kernel source with the registration functions it defines (none: a helper every kernel may use)."""
    found = []
    for directory in _KERNEL_DIRS:
        for path in sorted((root / directory).glob("*.cc")):
            found.append((path, frozenset(_REGISTRATION.findall(path.read_text(errors="replace")))))
    return tuple(found)


def _framework_sources(root: Path) -> list[Path]:
    skip = {root / name for name in _PLATFORM_FILES}
    kernel_dirs = {root / d for d in _KERNEL_DIRS}
    sources = []
    for path in sorted((root / "tensorflow").rglob("*.cc")):
        if path in skip or path.parent in kernel_dirs or path.name in _TEST_SCAFFOLDING:
            continue
        sources.append(path)
    return sources


def sources_for(tree: TflmTree, opcodes: Iterable[str]) -> list[Path]:
    """The sources a model with these operators links: framework, kernel helpers, its operators' kernels, and (for
    CMSIS-NN) Arm's library, whose unused functions the linker drops."""
    entries = resolver_entries(tree.root)
    wanted = {entries[op].registration for op in opcodes if op in entries}
    sources = _framework_sources(tree.root)
    kernels = [
        path
        for path, defined in _kernel_sources(tree.root)
        if (not defined or defined & wanted) and path.name not in _TEST_SCAFFOLDING
    ]
    sources += kernels
    if tree.kernels is KernelSet.CMSIS_NN:
        sources += _cmsis_nn_sources(tree.root, kernels)
    return sources


@cache
def _cmsis_nn_definitions(root: Path) -> tuple[dict[str, Path], dict[str, Path]]:
    """CMSIS-NN's functions and the source defining each (mostly one function per file, named after it), and its
    lookup tables and the source defining each."""
    functions: dict[str, Path] = {}
    tables: dict[str, Path] = {}
    for path in sorted((root / "third_party" / "cmsis_nn" / "Source").rglob("*.c")):
        text = path.read_text(errors="replace")
        for name in _CMSIS_NN_DEFINITION.findall(text):
            functions.setdefault(name, path)
        for name in _CMSIS_NN_TABLE.findall(text):
            tables.setdefault(name, path)
    return functions, tables


def _cmsis_nn_sources(root: Path, kernels: list[Path]) -> list[Path]:
    """The CMSIS-NN sources these kernels reach: every arm_* function they call and table they read, and what
    those reach in turn."""
    functions, tables = _cmsis_nn_definitions(root)
    needed: set[Path] = set()
    pending = list(kernels)
    while pending:
        text = pending.pop().read_text(errors="replace")
        used = {functions.get(name) for name in _CMSIS_NN_CALL.findall(text)}
        used |= {source for name, source in tables.items() if re.search(rf"\b{name}\b", text)}
        for source in used:
            if source is not None and source not in needed:
                needed.add(source)
                pending.append(source)
    return sorted(needed)


# --- compiling -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Toolchain:
    cc: str  # C compiler driver, also used to link (g++ would add -lstdc++, which newlib-only setups lack)
    cxx: str
    ar: str


DEBIAN_ARM_TOOLCHAIN = Toolchain("arm-none-eabi-gcc", "arm-none-eabi-g++", "arm-none-eabi-gcc-ar")


@dataclass(frozen=True)
class TflmLibrary:
    """A static library of TFLM objects for one core and kernel set."""

    tree: TflmTree
    core: Core
    archive: Path
    compile_flags: tuple[str, ...]  # for code that includes TFLM's headers


def _object_dir(tree: TflmTree, core: Core, toolchain: Toolchain, settings: Settings) -> Path:
    compiler = os.path.realpath(shutil.which(toolchain.cxx) or toolchain.cxx)  # one cache whichever way it is named
    # The tree by its content, not its place: the same sources unpacked elsewhere compile to the same objects.
    flags = [flag.replace(str(tree.root), "<tree>") for flag in compile_flags(tree, core)]
    key = hashlib.sha256("\0".join([TREE_FINGERPRINTS[tree.kernels], compiler, *flags]).encode())
    return cache_dir(settings, "tflm", "obj") / f"{tree.kernels.value}-{core.name}-{key.hexdigest()[:12]}"


class _CompileError(Exception):
    """The compiler's first error line: raised out of the object's `replacing`, so that no temporary is left."""


def compile_source(toolchain: Toolchain, flags: list[str], source: Path, obj: Path, optimize: str) -> str | None:
    """Compiles `source`; None on success, else the compiler's first error line."""
    obj.parent.mkdir(parents=True, exist_ok=True)
    cpp = source.suffix == ".cc"
    try:
        with replacing(obj) as compiled:
            argv = [
                toolchain.cxx if cpp else toolchain.cc,
                *flags,
                *(cxx_flags() if cpp else ["-std=c11"]),
                optimize,
                "-c",
                str(source),
                "-o",
                str(compiled),
            ]
            try:
                done = subprocess.run(argv, capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S, check=False)
            except OSError as exc:
                raise _CompileError(f"cannot run {argv[0]}: {exc.strerror or exc}") from None
            except subprocess.TimeoutExpired:
                raise _CompileError(f"compiling {source.name} took longer than {COMPILE_TIMEOUT_S:g} s") from None
            if done.returncode != 0:
                stderr = done.stderr.splitlines()
                raise _CompileError(([line for line in stderr if "error" in line] or stderr or ["?"])[0])
    except _CompileError as error:
        return str(error)
    return None


def _optimization(tree: TflmTree, source: Path) -> str:
    relative = source.relative_to(tree.root).as_posix()
    return "-O2" if relative.startswith(("tensorflow/lite/micro/kernels/", "third_party/cmsis_nn/")) else "-Os"


def build_library(
    kernels: KernelSet,
    core: Core,
    opcodes: Iterable[str],
    settings: Settings,
    toolchain: Toolchain = DEBIAN_ARM_TOOLCHAIN,
    progress: ProgressCallback | None = None,
    jobs: int | None = None,
) -> TflmLibrary:
    """The TFLM library for `core` and `kernels` with (at least) what `opcodes` need, compiling only the objects
    not already in the cache. Concurrent builds of the same library wait for each other."""
    check_kernels_fit_core(kernels, core)
    tree = locate_tree(kernels, settings)
    opcodes = list(opcodes)
    resolver_calls(tree, opcodes)  # refuses an operator TFLM lacks before compiling anything
    if shutil.which(toolchain.cxx) is None:
        raise missing_tool(toolchain.cxx)
    flags = compile_flags(tree, core)
    out = _object_dir(tree, core, toolchain, settings)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise cache_error(exc, out) from None
    archive = out / "libtflm.a"
    with exclusive_lock(out / ".lock"):
        objects = {
            source: out / (source.relative_to(tree.root).as_posix().replace("/", "__") + ".o")
            for source in sources_for(tree, opcodes)
        }
        todo = [source for source, obj in objects.items() if not obj.is_file()]
        if todo:
            _compile_all(toolchain, flags, tree, todo, objects, progress, jobs)
            members = sorted(str(obj) for obj in out.glob("*.o"))
            # Written beside it and renamed: a build linking the previous archive meanwhile reads a whole file.
            with replacing(archive) as staging:
                done = subprocess.run(
                    [toolchain.ar, "rcs", str(staging), *members], capture_output=True, text=True, check=False
                )
                if done.returncode != 0:
                    raise LowtideError(f"{toolchain.ar} failed: {done.stderr.strip()}", archive)
    return TflmLibrary(tree, core, archive, tuple(header_flags(tree, core)))


def _compile_all(
    toolchain: Toolchain,
    flags: list[str],
    tree: TflmTree,
    todo: list[Path],
    objects: dict[Path, Path],
    progress: ProgressCallback | None,
    jobs: int | None,
) -> None:
    workers = jobs or os.cpu_count() or 1
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        futures = {
            pool.submit(compile_source, toolchain, flags, source, objects[source], _optimization(tree, source)): source
            for source in todo
        }
        for done_count, future in enumerate(concurrent.futures.as_completed(futures), start=1):
            error = future.result()
            if error is not None:
                for pending in futures:
                    pending.cancel()
                raise LowtideError(f"compiling TFLM failed: {error}", futures[future])
            if progress:
                progress(done_count, len(todo))
