"""A model as a library of the user's own firmware: `lowtide export MODEL --library DIR`.

What a user ships is their application, not lowtide's measuring harness. The exported folder holds the model's code
for one runtime (each runtime object in lowtide.runtimes makes its part: `library_part`), one small C API, and the
manifests of the build systems users have; it names no path of the machine that wrote it, so it can be moved,
copied or committed:

    src/PREFIX.h            the API (init, input and output pointers with shapes and quantization, invoke, reset,
                            the arena figures), documented in the header itself and in docs/firmware.md
    src/...                 the runtime's part: the generated C and lowtide's kernel runtime (compiled), or the
                            .tflite bytes as a C array and the interpreter with the model's operators (TFLM)
    library.json            a PlatformIO library (`lib_deps = symlink://DIR`, or DIR under lib_extra_dirs)
    library.properties      an Arduino library
    CMakeLists.txt          CMake (`add_subdirectory(DIR)`, target PREFIX) and, with zephyr/module.yml and
                            Kconfig, a Zephyr module (CONFIG_LOWTIDE_PREFIX)
    lowtide.json            what was exported: the model's digest, the runtime, the core, the arena figures

The arena is declared inside the library, a static array of exactly the size lowtide predicts (TFLM's 32-bit
arena for the core, or the compiled runtime's plan). TFLM itself is not copied into a model's library: its
manifests name it as a dependency (`tflite-micro`: the PlatformIO library and the CMake target of that name), which
the user's TFLM or the one lowtide builds provides; `tflm_library_files` writes the latter from the static library
and headers lowtide.tflm.build keeps in the user cache (`lowtide tflm-library DIR`).
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from lowtide import __version__
from lowtide.compile.lowering import c_float
from lowtide.errors import LowtideError
from lowtide.model.ir import Graph
from lowtide.resources import FIRMWARE_DIR
from lowtide.settings import Settings
from lowtide.storage import replacing
from lowtide.tflm.build import TflmLibrary, include_dirs
from lowtide.tflm.tree import TFLM_COMMIT

if TYPE_CHECKING:  # lowtide.runtimes makes each runtime's part of a library from this module's LibraryPart
    from lowtide.runtimes import FirmwareRuntime

LIBRARY_SPEC = "lowtide.json"
TFLM_DEPENDENCY = "tflite-micro"  # the PlatformIO library and the CMake target a TFLM runtime's library links
TFLM_PLATFORM_SOURCE = FIRMWARE_DIR / "library" / "lowtide_tflm_platform.cc"


@dataclass(frozen=True)
class LibraryTensor:
    """A model input or output as the API header describes it."""

    name: str
    dtype: str  # TFLite's type name: "int8", "float32", ...
    shape: tuple[int, ...]
    nbytes: int
    scale: float  # 0 where the tensor is not quantized
    zero_point: int


@dataclass(frozen=True)
class LibraryArena:
    """The RAM the library declares, as lowtide predicts it."""

    arena_bytes: int  # the static arena inside the library (TFLM: the smallest AllocateTensors accepts, which
    # is more than head and tail: TFLM plans in the arena's free part)
    head_bytes: int  # of which the planned activations and kernel scratch
    tail_bytes: int  # of which TFLM's persistent structures (0 for the compiled runtime)
    state_bytes: int  # static state outside the arena (the compiled runtime's variable tensors)


@dataclass(frozen=True)
class LibraryPart:
    """What a runtime puts into a model's library."""

    sources: dict[str, str]  # file name in src/ -> text: the model, its runtime, the API's implementation
    arena: LibraryArena
    core: str | None  # the core the arena figures are TFLM's for; None: any core (plain C99)
    tflm_kernels: str | None  # the TFLM kernel set the library links (`tflite-micro`); None: no TFLM
    compile_flags: tuple[str, ...]  # what the library's own sources compile with (no paths)


def default_prefix(graph: Graph) -> str:
    """The API's prefix from the model's name: a C identifier."""
    prefix = re.sub(r"\W", "_", Path(graph.name).stem).strip("_").lower() or "model"
    return prefix if not prefix[0].isdigit() else f"model_{prefix}"


def check_prefix(prefix: str) -> None:
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", prefix):
        raise LowtideError(f"prefix {prefix!r} is not a C identifier")


def library_tensors(graph: Graph, indices: tuple[int, ...]) -> tuple[LibraryTensor, ...]:
    """The main subgraph's tensors at `indices`, with their (first) scale and zero point."""
    tensors = []
    for index in indices:
        tensor = graph.main.tensors[index]
        qp = tensor.quantization
        quantized = qp is not None and len(qp.scales) > 0
        scale, zero_point = (qp.scale, qp.zero_point) if qp is not None and quantized else (0.0, 0)
        tensors.append(LibraryTensor(tensor.name, tensor.dtype, tensor.shape, tensor.nbytes, scale, zero_point))
    return tuple(tensors)


# --- the API -------------------------------------------------------------------------------------------------------


def _c_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _tensor_initializer(tensor: LibraryTensor) -> str:
    shape = ", ".join(str(d) for d in tensor.shape) or "0"
    return (
        f"{{{_c_string(tensor.name)}, {_c_string(tensor.dtype)}, {len(tensor.shape)}, {{{shape}}}, "
        f"{tensor.nbytes}u, {c_float(tensor.scale)}, {tensor.zero_point}}}"
    )


def api_header(
    prefix: str,
    model: str,
    model_sha256: str,
    runtime: str,
    part: LibraryPart,
    inputs: tuple[LibraryTensor, ...],
    outputs: tuple[LibraryTensor, ...],
) -> str:
    up = prefix.upper()
    arena = part.arena
    core = f"TFLM's arena on {part.core}, read from TFLM itself" if part.core else "any core"
    lines = [
        f"/* {prefix}.h: {model} as a library of your firmware, exported by lowtide {__version__} for the",
        f" * `{runtime}` runtime ({core}). Generated: do not edit; export again instead.",
        " *",
        f" *   int   {prefix}_init(void)        once, before anything else: sets the model up in its arena; 0 on success",
        f" *   void *{prefix}_input(int i)      input i's bytes: fill them before every invoke (NULL: no input i)",
        f" *   int   {prefix}_invoke(void)      runs the model once on the inputs; 0 on success",
        f" *   void *{prefix}_output(int i)     output i's bytes, valid until the next invoke (NULL: no output i)",
        f" *   void  {prefix}_reset(void)       variable tensors (a stateful model's memory) back to their start",
        f" *   {prefix}_inputs[i], {prefix}_outputs[i]: name, TFLite type, shape, bytes, scale and zero point",
        " *     (real value = scale * (q - zero_point); scale 0: not quantized)",
        " *",
        f" * The arena is inside the library: a static, 16-byte aligned array of {up}_ARENA_BYTES, the size lowtide",
        " * predicts, so nothing is allocated at run time. Inputs may share the arena with what the model computes:",
        " * write them again before each invoke. Not reentrant: one caller at a time. */",
        f"#ifndef {up}_H",
        f"#define {up}_H",
        "",
        "#include <stdint.h>",
        "",
        f'#define {up}_RUNTIME "{runtime}"',
        f'#define {up}_MODEL_SHA256 "{model_sha256}"',
        f"#define {up}_ARENA_BYTES {arena.arena_bytes}u /* the arena the library declares */",
        f"#define {up}_ARENA_HEAD_BYTES {arena.head_bytes}u /* of it: activations and kernel scratch */",
        f"#define {up}_ARENA_TAIL_BYTES {arena.tail_bytes}u /* of it: TFLM's persistent structures */",
        f"#define {up}_STATE_BYTES {arena.state_bytes}u /* static state outside the arena */",
        f"#define {up}_INPUT_COUNT {len(inputs)}",
        f"#define {up}_OUTPUT_COUNT {len(outputs)}",
    ]
    for kind, tensors in (("INPUT", inputs), ("OUTPUT", outputs)):
        for i, tensor in enumerate(tensors):
            lines += [
                f"#define {up}_{kind}{i}_BYTES {tensor.nbytes}u",
                f"#define {up}_{kind}{i}_SCALE {c_float(tensor.scale)}",
                f"#define {up}_{kind}{i}_ZERO_POINT {tensor.zero_point}",
            ]
    lines += [
        "",
        "#ifdef __cplusplus",
        'extern "C" {',
        "#endif",
        "",
        "typedef struct {",
        "  const char *name;",
        '  const char *type; /* TFLite\'s tensor type: "int8", "float32", ... */',
        "  int rank;",
        "  int32_t shape[8];",
        "  uint32_t bytes;",
        "  float scale;",
        "  int32_t zero_point;",
        f"}} {prefix}_tensor;",
        "",
        f"extern const {prefix}_tensor {prefix}_inputs[{max(1, len(inputs))}];",
        f"extern const {prefix}_tensor {prefix}_outputs[{max(1, len(outputs))}];",
        "",
        f"int {prefix}_init(void);",
        f"void *{prefix}_input(int i);",
        f"int {prefix}_invoke(void);",
        f"void *{prefix}_output(int i);",
        f"void {prefix}_reset(void);",
        "",
        "#ifdef __cplusplus",
        "}",
        "#endif",
        "",
        f"#endif /* {up}_H */",
        "",
    ]
    return "\n".join(lines)


def tensor_tables(prefix: str, inputs: tuple[LibraryTensor, ...], outputs: tuple[LibraryTensor, ...]) -> str:
    """The definitions of `PREFIX_inputs` and `PREFIX_outputs`, for the runtime's API source (C and C++ alike)."""
    return "\n".join(
        f"const {prefix}_tensor {prefix}_{kind}[{max(1, len(tensors))}] = "
        f"{{{', '.join(_tensor_initializer(t) for t in tensors) or '{0}'}}};"
        for kind, tensors in (("inputs", inputs), ("outputs", outputs))
    )


def c_byte_rows(data: bytes) -> str:
    """`data` as the rows of a C array initializer, 16 bytes a row."""
    return ",\n".join("  " + ", ".join(f"0x{b:02x}" for b in data[i : i + 16]) for i in range(0, len(data), 16))


def compiled_api_source(prefix: str, net: str, graph: Graph) -> str:
    """The API on the C `lowtide compile` generates with the prefix `net` (C99)."""
    up, net_up = prefix.upper(), net.upper()
    tables = tensor_tables(
        prefix, library_tensors(graph, graph.main.inputs), library_tensors(graph, graph.main.outputs)
    )
    return f"""/* {prefix}.h on lowtide's compiled runtime: {net}.c is the model, lt_*.c its kernels. Generated. */
#include <stddef.h>

#include "{prefix}.h"
#include "{net}.h"

static uint8_t arena[{up}_ARENA_BYTES > 0 ? {up}_ARENA_BYTES : 1] __attribute__((aligned({net_up}_ARENA_ALIGNMENT)));

{tables}

int {prefix}_init(void) {{
  {net}_reset();
  return 0;
}}

void *{prefix}_input(int i) {{ return i >= 0 && i < {net_up}_INPUT_COUNT ? {net}_input(arena, i) : NULL; }}

int {prefix}_invoke(void) {{ return {net}_invoke(arena, NULL, NULL); }}

void *{prefix}_output(int i) {{ return i >= 0 && i < {net_up}_OUTPUT_COUNT ? {net}_output(arena, i) : NULL; }}

void {prefix}_reset(void) {{ {net}_reset(); }}
"""


def tflm_api_source(prefix: str, graph: Graph, calls: list[str], resource_variables: int, defines: list[str]) -> str:
    """The API on TFLM's MicroInterpreter (C++): the .tflite bytes, a resolver of the model's operators (`calls`),
    the arena, and the defines TFLM's headers must see as the TFLM library was compiled (`defines`, -D flags)."""
    up = prefix.upper()
    data = graph.data
    tables = tensor_tables(
        prefix, library_tensors(graph, graph.main.inputs), library_tensors(graph, graph.main.outputs)
    )
    guarded = "\n".join(
        f"#ifndef {name}\n#define {name}{' ' + value if value else ''}\n#endif"
        for name, _, value in (flag[2:].partition("=") for flag in defines)
    )
    variables = (
        f"tflite::MicroResourceVariables::Create(allocator, {resource_variables})" if resource_variables else "nullptr"
    )
    adds = "\n".join(f"  {call}" for call in calls)
    return f"""/* {prefix}.h on TFLM's MicroInterpreter: the .tflite bytes, the model's operators, and the arena of the size
 * lowtide predicts (TFLM's own allocator, run for the core). TFLM is linked from the `tflite-micro` library. Generated. */
{guarded}

#include <new>

#include "{prefix}.h"
#include "tensorflow/lite/micro/micro_allocator.h"
#include "tensorflow/lite/micro/micro_interpreter.h"
#include "tensorflow/lite/micro/micro_mutable_op_resolver.h"
#include "tensorflow/lite/micro/micro_resource_variable.h"
#include "tensorflow/lite/schema/schema_generated.h"

namespace {{

alignas(16) const uint8_t model_tflite[{len(data)}] = {{
{c_byte_rows(data)}
}};

using Resolver = tflite::MicroMutableOpResolver<{max(1, len(calls))}>;

/* Static storage, the objects built in {prefix}_init: a static object would register its destructor with atexit. */
alignas(16) uint8_t arena[{up}_ARENA_BYTES];
alignas(Resolver) uint8_t resolver_storage[sizeof(Resolver)];
alignas(tflite::MicroInterpreter) uint8_t interpreter_storage[sizeof(tflite::MicroInterpreter)];
tflite::MicroInterpreter *interpreter;

}}  // namespace

{tables}

int {prefix}_init(void) {{
  Resolver &resolver = *new (resolver_storage) Resolver();
{adds}
  /* As MicroInterpreter(model, resolver, arena, bytes) allocates, with room for the model's resource variables. */
  tflite::MicroAllocator *allocator = tflite::MicroAllocator::Create(arena, sizeof arena);
  if (allocator == nullptr) return 1;
  tflite::MicroResourceVariables *variables = {variables};
  interpreter = new (interpreter_storage)
      tflite::MicroInterpreter(tflite::GetModel(model_tflite), resolver, allocator, variables);
  if (interpreter->AllocateTensors() != kTfLiteOk) {{
    interpreter = nullptr;
    return 1;
  }}
  return 0;
}}

void *{prefix}_input(int i) {{
  return interpreter && i >= 0 && i < (int)interpreter->inputs_size() ? interpreter->input(i)->data.raw : nullptr;
}}

int {prefix}_invoke(void) {{ return interpreter && interpreter->Invoke() == kTfLiteOk ? 0 : 1; }}

void *{prefix}_output(int i) {{
  return interpreter && i >= 0 && i < (int)interpreter->outputs_size() ? interpreter->output(i)->data.raw : nullptr;
}}

void {prefix}_reset(void) {{
  if (interpreter) interpreter->Reset();
}}
"""


# --- the manifests -------------------------------------------------------------------------------------------------


def _library_json(prefix: str, model: str, runtime: str, part: LibraryPart) -> str:
    manifest: dict = {
        "name": prefix,
        "version": "1.0.0",
        "description": f"{model} on lowtide's {runtime} runtime, exported by lowtide {__version__}",
        "keywords": ["tinyml", "lowtide"],
        "frameworks": "*",
        "platforms": "*",
        # Objects, not an archive: the API's symbols are linked whatever order the linker meets the libraries in.
        "build": {"srcDir": "src", "includeDir": "src", "libArchive": False, "flags": list(part.compile_flags)},
    }
    if part.tflm_kernels is not None:
        manifest["dependencies"] = [{"name": TFLM_DEPENDENCY}]
    return json.dumps(manifest, indent=2) + "\n"


def _library_properties(prefix: str, model: str, runtime: str, part: LibraryPart) -> str:
    lines = [
        f"name={prefix}",
        "version=1.0.0",
        "author=lowtide",
        "maintainer=lowtide",
        f"sentence={model} on lowtide's {runtime} runtime.",
        f"paragraph=Exported by lowtide {__version__}: init, inputs, invoke, outputs; the arena inside.",
        "category=Data Processing",
        "architectures=*",
        f"includes={prefix}.h",
    ]
    if part.tflm_kernels is not None:
        lines.append(f"depends={TFLM_DEPENDENCY}")
    return "\n".join(lines) + "\n"


def _cmake_lists(prefix: str, model: str, part: LibraryPart) -> str:
    sources = " ".join(f"src/{name}" for name in sorted(part.sources))
    flags = " ".join(part.compile_flags)
    tflm = part.tflm_kernels is not None
    up = prefix.upper()
    lines = [
        f"# {prefix}: {model} as a library (exported by lowtide {__version__}).",
        f"#   CMake:  add_subdirectory(path/to/this/folder) and target_link_libraries(app PRIVATE {prefix})",
        f"#   Zephyr: this folder as a module (ZEPHYR_EXTRA_MODULES), CONFIG_LOWTIDE_{up}=y",
    ]
    if tflm:
        lines += [
            f"# TFLM is not in here: a target `{TFLM_DEPENDENCY}` must exist (your TFLM, or the folder",
            "# `lowtide tflm-library DIR` writes, given as LOWTIDE_TFLM_DIR); in Zephyr, its TFLM module's.",
        ]
    lines += ["cmake_minimum_required(VERSION 3.13)", "", "if(COMMAND zephyr_library)", f"  if(CONFIG_LOWTIDE_{up})"]
    lines += ["    zephyr_library()", f"    zephyr_library_sources({sources})", "    zephyr_include_directories(src)"]
    if flags:
        lines.append(f"    zephyr_library_compile_options({flags})")
    if tflm:
        # Zephyr's TFLM module (CONFIG_TENSORFLOW_LITE_MICRO) puts its headers on every library's path itself
        lines += [
            f"    if(TARGET {TFLM_DEPENDENCY})",
            f"      zephyr_library_link_libraries({TFLM_DEPENDENCY})",
            "    endif()",
        ]
    lines += ["  endif()", "  return()", "endif()", ""]
    if tflm:
        lines += [
            "enable_language(CXX)",
            f"if(NOT TARGET {TFLM_DEPENDENCY})",
            "  if(NOT LOWTIDE_TFLM_DIR)",
            f'    message(FATAL_ERROR "{prefix} links TFLM: define a target {TFLM_DEPENDENCY} or set LOWTIDE_TFLM_DIR '
            '(lowtide tflm-library DIR)")',
            "  endif()",
            f"  add_subdirectory(${{LOWTIDE_TFLM_DIR}} {TFLM_DEPENDENCY})",
            "endif()",
        ]
    lines += [
        f"add_library({prefix} STATIC {sources})",
        f"target_include_directories({prefix} PUBLIC ${{CMAKE_CURRENT_SOURCE_DIR}}/src)",
    ]
    if flags:
        lines.append(f"target_compile_options({prefix} PRIVATE {flags})")
    if tflm:
        lines.append(f"target_link_libraries({prefix} PUBLIC {TFLM_DEPENDENCY})")
    return "\n".join(lines) + "\n"


def _zephyr_files(prefix: str, model: str, part: LibraryPart) -> dict[str, str]:
    up = prefix.upper()
    kconfig = [
        f"config LOWTIDE_{up}",
        f'\tbool "{model} (lowtide {__version__})"',
    ]
    if part.tflm_kernels is not None:
        kconfig.append("\tdepends on TENSORFLOW_LITE_MICRO")
    kconfig.append(f"\thelp\n\t  {prefix}_init, {prefix}_input, {prefix}_invoke, {prefix}_output: src/{prefix}.h.")
    return {
        "zephyr/module.yml": f"name: {prefix}\nbuild:\n  cmake: .\n  kconfig: Kconfig\n",
        "Kconfig": "\n".join(kconfig) + "\n",
    }


# --- writing -------------------------------------------------------------------------------------------------------


def library_files(
    graph: Graph, runtime: FirmwareRuntime, prefix: str, core: str, settings: Settings
) -> dict[str, bytes]:
    """Every file of the library of `graph` on `runtime`, by its path in the folder."""
    check_prefix(prefix)
    part = runtime.library_part(graph, prefix, core, settings)
    inputs = library_tensors(graph, graph.main.inputs)
    outputs = library_tensors(graph, graph.main.outputs)
    digest = graph.sha256
    files = {f"src/{name}": text for name, text in part.sources.items()}
    files[f"src/{prefix}.h"] = api_header(prefix, graph.name, digest, runtime.name, part, inputs, outputs)
    files["library.json"] = _library_json(prefix, graph.name, runtime.name, part)
    files["library.properties"] = _library_properties(prefix, graph.name, runtime.name, part)
    files["CMakeLists.txt"] = _cmake_lists(prefix, graph.name, part)
    files.update(_zephyr_files(prefix, graph.name, part))
    files[LIBRARY_SPEC] = (
        json.dumps(
            {
                "lowtide": __version__,
                "model": graph.name,
                "model_sha256": digest,
                "runtime": runtime.name,
                "core": part.core,
                "tflm_kernels": part.tflm_kernels,
                "prefix": prefix,
                "arena": asdict(part.arena),
                "inputs": [asdict(t) for t in inputs],
                "outputs": [asdict(t) for t in outputs],
            },
            indent=2,
        )
        + "\n"
    )
    return {name: text.encode() for name, text in files.items()}


def write_library_folder(directory: Path, files: dict[str, bytes], previous_marker: str) -> None:
    """Writes `files` as the folder `directory`, whole or not at all: built beside it and renamed over it. A folder
    already there is replaced only if it is empty or one lowtide wrote (it holds `previous_marker`)."""
    if directory.exists():
        if not directory.is_dir():
            raise LowtideError("is not a folder", directory)
        if any(directory.iterdir()) and not (directory / previous_marker).is_file():
            raise LowtideError("holds other files: give an empty or new folder", directory)
    try:
        directory.parent.mkdir(parents=True, exist_ok=True)
        with replacing(directory) as staging:
            for name, content in files.items():
                (staging / name).parent.mkdir(parents=True, exist_ok=True)
                (staging / name).write_bytes(content)
    except OSError as exc:
        raise LowtideError(f"cannot write the library: {exc.strerror or exc}", directory) from None


# --- TFLM as a library ---------------------------------------------------------------------------------------------

TFLM_LIBRARY_SPEC = "lowtide-tflm.json"


def tflm_library_files(library: TflmLibrary, kernels: str) -> dict[str, bytes]:
    """The `tflite-micro` library a TFLM runtime's model library depends on, from the static library and the tree
    lowtide built: the archive, TFLM's headers, the platform hooks (weak), a PlatformIO manifest and a CMakeLists
    defining the `tflite-micro` target. It names no path of this machine either."""
    root = library.tree.root
    files: dict[str, bytes] = {"lib/libtflm.a": library.archive.read_bytes()}
    for header in sorted(root.rglob("*.h")):
        files[f"include/{header.relative_to(root).as_posix()}"] = header.read_bytes()
    files["src/lowtide_tflm_platform.cc"] = TFLM_PLATFORM_SOURCE.read_bytes()
    includes = ["include", *(f"include/{d.relative_to(root).as_posix()}" for d in include_dirs(library.tree)[1:])]
    defines = [flag for flag in library.compile_flags if flag.startswith("-D")]
    manifest = {
        "name": TFLM_DEPENDENCY,
        "version": f"0.0.0+{TFLM_COMMIT[:7]}",
        "description": f"TFLite Micro {TFLM_COMMIT[:7]}, {kernels} kernels, built by lowtide for {library.core.name}",
        "frameworks": "*",
        "platforms": "*",
        "build": {
            "srcDir": "src",
            "includeDir": "include",
            "libArchive": False,
            "flags": [*defines, *(f"-I {d}" for d in includes), "-L lib", "-l tflm"],
        },
    }
    cmake = [
        f"# TFLite Micro {TFLM_COMMIT[:7]} ({kernels} kernels) built by lowtide for {library.core.name}: the target",
        f"# `{TFLM_DEPENDENCY}` a model library exported by `lowtide export` links.",
        "cmake_minimum_required(VERSION 3.13)",
        "enable_language(CXX)",
        "# The weak platform hooks as objects, not an archive member: libtflm.a, linked after them, calls them.",
        f"add_library({TFLM_DEPENDENCY}-platform OBJECT src/lowtide_tflm_platform.cc)",
        f"target_include_directories({TFLM_DEPENDENCY}-platform PUBLIC "
        + " ".join(f"${{CMAKE_CURRENT_SOURCE_DIR}}/{d}" for d in includes)
        + ")",
        f"target_compile_definitions({TFLM_DEPENDENCY}-platform PUBLIC {' '.join(d[2:] for d in defines)})",
        f"add_library({TFLM_DEPENDENCY} INTERFACE)",
        f"target_link_libraries({TFLM_DEPENDENCY} INTERFACE {TFLM_DEPENDENCY}-platform "
        f"$<TARGET_OBJECTS:{TFLM_DEPENDENCY}-platform> ${{CMAKE_CURRENT_SOURCE_DIR}}/lib/libtflm.a m)",
    ]
    files["library.json"] = (json.dumps(manifest, indent=2) + "\n").encode()
    files["CMakeLists.txt"] = ("\n".join(cmake) + "\n").encode()
    files[TFLM_LIBRARY_SPEC] = (
        json.dumps({"lowtide": __version__, "tflm_commit": TFLM_COMMIT, "kernels": kernels, "core": library.core.name})
        + "\n"
    ).encode()
    return files
