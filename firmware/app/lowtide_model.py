"""PlatformIO pre-script: puts the model into the firmware.

Which model: the LOWTIDE_MODEL environment variable, else the env's `custom_lowtide_model` option (a .tflite
path, relative to the project). With neither, the firmware is built without a model (lt_model_none.c) and says so
in its HELLO. Which runtime: the LOWTIDE_RUNTIME environment variable (lowtide's --runtime), else the env's
`custom_lowtide_runtime`:
  compiled        `lowtide compile` turns the model into C99 (model.c/model.h) in .pio/lowtide-model/<sha>/,
                  built here with the kernels in firmware/runtime/.
  tflm            TensorFlow Lite Micro's interpreter (lt_model_tflm.cc) runs the .tflite bytes, embedded as a C
  tflm-cmsis-nn   array, with TFLM's reference or Arm's CMSIS-NN kernels. The TFLM library comes from the pinned tree
                  LOWTIDE_TFLM_DIR names, built once per core and kernel set by lowtide.tflm with this env's
                  compiler (emulated and real boards alike), and the arena is sized by lowtide's 32-bit prediction
                  (LOWTIDE_TFLM_ARENA_BYTES when lowtide passes it, else computed here).
Either way the firmware gets the model file's SHA-256 and size for its HELLO (LT_MODEL_SHA256, LT_MODEL_SIZE).
"""

import hashlib
import os
import sys
from pathlib import Path

Import("env")  # noqa: F821 (SCons injects Import)

RUNTIMES = ("compiled", "tflm", "tflm-cmsis-nn")
# PlatformIO's board `build.cpu` -> lowtide.tflm's core name.
TFLM_CORES = {"cortex-m4": "cortex-m4f", "cortex-m7": "cortex-m7", "cortex-m0plus": "cortex-m0plus",
              "esp32s3": "xtensa-lx7"}
project_dir = Path(env.subst("$PROJECT_DIR"))  # noqa: F821
runtime_dir = project_dir / "firmware" / "runtime"


def option(name, default=""):
    return env.GetProjectOption(name, default).strip()  # noqa: F821


def fail(message):
    sys.stderr.write(f"lowtide: error: {message}\n")
    env.Exit(2)  # noqa: F821


def model_path():
    configured = os.environ.get("LOWTIDE_MODEL") or option("custom_lowtide_model")
    if not configured:
        return None
    path = (project_dir / configured).resolve()
    if not path.is_file():
        fail(f"model {configured} not found")
    return path


def import_lowtide():
    try:
        import lowtide  # noqa: F401
    except ImportError:  # a checkout whose package is not installed: use its sources
        sys.path.insert(0, str(project_dir / "host"))


def compile_with_lowtide(path, out_dir):
    """Generates model.c/model.h with `lowtide compile`; returns the total bytes of the model's inputs."""
    import_lowtide()
    from lowtide.compile.codegen import compile_model
    from lowtide.errors import LowtideError

    try:
        compiled = compile_model(path)
    except LowtideError as exc:
        fail(str(exc))
    compiled.write(out_dir)
    return sum(t.nbytes for t in compiled.inputs)


def env_toolchain(core):
    """This env's compiler: the platform's toolchain package where it has one (real boards), else the one on PATH
    (the emulated boards use Debian's). The pre-script runs before the platform sets $CC, so it is looked up here."""
    from lowtide.tflm.build import Toolchain

    prefix = "arm-none-eabi-" if core.arm else "xtensa-esp32s3-elf-"
    bin_dirs = []
    platform = env.PioPlatform()  # noqa: F821
    for name in platform.packages:
        directory = platform.get_package_dir(name) if name.startswith("toolchain-") else None
        if directory:
            bin_dirs.append(str(Path(directory) / "bin"))
    path = os.pathsep.join(bin_dirs + [os.environ.get("PATH", "")])
    return Toolchain(*(env.WhereIs(prefix + tool, path) or prefix + tool for tool in ("gcc", "g++", "gcc-ar")))  # noqa: F821


def build_tflm(path, data, out_dir, runtime):
    """Links TFLM (the library for this env's core and kernel set), embeds the .tflite bytes and lists the
    resolver's operators; returns the defines the glue needs."""
    import_lowtide()
    from lowtide.errors import LowtideError
    from lowtide.model import load_model
    from lowtide.tflm.build import build_library, core_named, cxx_flags, resolver_calls
    from lowtide.tflm.sizer import predict_arena32, resource_variable_count, write_resolver_include
    from lowtide.tflm.tree import KernelSet

    kernels = KernelSet.CMSIS_NN if runtime == "tflm-cmsis-nn" else KernelSet.REFERENCE
    cpu = env.BoardConfig().get("build.cpu", "")  # noqa: F821
    try:
        graph = load_model(path)
        core = core_named(TFLM_CORES.get(cpu, cpu))
        opcodes = sorted({op.opcode for sg in graph.subgraphs for op in sg.operators})
        toolchain = env_toolchain(core)
        library = build_library(kernels, core, opcodes, toolchain)
        calls = resolver_calls(library.tree, opcodes)
        arena_bytes = os.environ.get("LOWTIDE_TFLM_ARENA_BYTES") or option("custom_lowtide_tflm_arena_bytes")
        if not arena_bytes:
            arena_bytes = str(predict_arena32(data, graph, kernels, core.name).arena_bytes)
    except LowtideError as exc:
        fail(str(exc))
    embed_tflite(data, out_dir)
    write_resolver_include(out_dir / "lt_model_ops.inc", calls)
    env.Append(  # noqa: F821
        CCFLAGS=list(library.compile_flags),
        CXXFLAGS=cxx_flags(),
        CPPPATH=[str(out_dir), str(project_dir / "firmware" / "tflm")],
        CPPDEFINES=["LT_RUNTIME_TFLM", ("LT_TFLM_ARENA_BYTES", f"{int(arena_bytes)}u"),
                    ("LT_TFLM_OP_TYPES", max(1, len(calls))),
                    ("LT_TFLM_RESOURCE_VARIABLES", resource_variable_count(graph)), ("LT_MODEL_OPERATOR_COUNT", len(graph.main.operators)),
                    ("LT_TFLM_RUNTIME_NAME", env.StringifyMacro(runtime))],  # noqa: F821
        LIBPATH=[str(library.archive.parent)],
    )
    env.Prepend(LIBS=["tflm"])  # noqa: F821
    env.BuildSources(str(Path("$BUILD_DIR") / "lowtide_tflm"), str(project_dir / "firmware" / "tflm"),  # noqa: F821
                     src_filter="+<lt_tflm_platform.cc>")
    return sum(graph.main.tensors[i].nbytes for i in graph.main.inputs)


def write_if_changed(target, text):
    """Leaves an unchanged file alone, so SCons does not rebuild what depends on it."""
    target.parent.mkdir(parents=True, exist_ok=True)
    if not target.is_file() or target.read_text() != text:
        target.write_text(text)


def embed_tflite(data, out_dir):
    rows = ",\n".join(
        "  " + ", ".join(f"0x{b:02x}" for b in data[i : i + 16]) for i in range(0, len(data), 16)
    )
    text = (
        "/* Generated by firmware/app/lowtide_model.py: the .tflite bytes for TFLM. */\n"
        "#include <stdint.h>\n"
        f"const uint32_t lt_model_tflite_size = {len(data)}u;\n"
        f"const uint8_t lt_model_tflite[{len(data)}] __attribute__((aligned(16))) = {{\n{rows}\n}};\n"
    )
    write_if_changed(out_dir / "lt_model_tflite.c", text)


def main():
    runtime = os.environ.get("LOWTIDE_RUNTIME") or option("custom_lowtide_runtime", "compiled")
    if runtime not in RUNTIMES:
        fail(f"custom_lowtide_runtime = {runtime}: expected one of {', '.join(RUNTIMES)}")
    path = model_path()
    if path is None:
        return
    data = path.read_bytes()
    sha256 = hashlib.sha256(data).hexdigest()
    out_dir = project_dir / ".pio" / "lowtide-model" / f"{runtime}-{sha256[:16]}"
    env.Append(  # noqa: F821
        CPPDEFINES=[("LT_MODEL_SHA256", env.StringifyMacro(sha256)), ("LT_MODEL_SIZE", f"{len(data)}u")],  # noqa: F821
    )
    if runtime == "compiled":
        input_bytes = compile_with_lowtide(path, out_dir)
        env.Append(  # noqa: F821
            CPPDEFINES=["LT_RUNTIME_COMPILED", ("LT_MODEL_INPUT_BYTES_TOTAL", f"{input_bytes}u")],
            CPPPATH=[str(out_dir), str(runtime_dir)],
        )
        env.BuildSources(  # noqa: F821
            str(Path("$BUILD_DIR") / "lowtide_runtime"), str(runtime_dir), src_filter="+<*.c>"
        )
        env.BuildSources(str(Path("$BUILD_DIR") / "lowtide_model"), str(out_dir), src_filter="+<*.c>")  # noqa: F821
    else:
        input_bytes = build_tflm(path, data, out_dir, runtime)
        env.Append(CPPDEFINES=[("LT_MODEL_INPUT_BYTES_TOTAL", f"{input_bytes}u")])  # noqa: F821
        env.BuildSources(str(Path("$BUILD_DIR") / "lowtide_model"), str(out_dir), src_filter="+<*.c>")  # noqa: F821

main()
