"""`lowtide export MODEL --library DIR`: the model as a library of the user's own firmware, for each runtime.

A user's own PlatformIO project (its own startup, UART output and main, in a folder outside the checkout, not
lowtide's harness) adds the exported library, builds for qemu-m4 and runs in QEMU: its outputs equal the host
TFLM's on the same inputs. The same libraries build for an ST board (PlatformIO's genuine ST platform, offline from
the archives) and with CMake and the Arm toolchain. Every build is of the libraries after they were moved from where
lowtide wrote them: no path of the exporting machine is in any file of them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from conftest import REPO, SHARED_MODELS, needs_firmware_tools, reference_figures
from lowtide import oracle
from lowtide.compile.codegen import arena_plan
from lowtide.platformio_archives import st_env_settings
from lowtide.project import ensure_tool_scons, local_platform_uri, platformio_environment
from lowtide.resources import BSP_DIR
from lowtide.runtimes import runtime_named
from lowtide.settings import read_settings
from lowtide.storage import cache_root
from lowtide.validation import load_model
from support.cli import lowtide_cli
from support.models import unsupported_model

MODEL = SHARED_MODELS / "mlperf_kws_dscnn_int8.tflite"  # convolutions, pooling, softmax: a 16 KB arena
ARCHIVES = SHARED_MODELS.parent / "platformio"
PREFIXES = {"compiled": "kws_compiled", "tflm": "kws_tflm", "tflm-cmsis-nn": "kws_cmsis"}
KERNELS = {"tflm": "reference", "tflm-cmsis-nn": "cmsis-nn"}  # the TFLM library each TFLM runtime's links
ROUNDS = 8  # invocations, each on its own input pattern
QEMU = [
    "qemu-system-arm", "-machine", "mps2-an386", "-display", "none", "-monitor", "none", "-serial", "stdio",
    "-semihosting-config", "enable=on,target=native", "-kernel",
]  # fmt: skip

pytestmark = needs_firmware_tools

# The user's application on QEMU's mps2-an386: its own vector table and reset (the entry point the board's linker
# script names), its own UART0 output; it fills every input with a fixed pattern per round, invokes, prints each
# output's bytes in hex.
MAIN_C = """\
#include <stdint.h>
#include <string.h>

#include "@PREFIX@.h"

#define UART0 0x40004000u
#define REG(address) (*(volatile uint32_t *)(address))

extern uint32_t __data_start[], __data_end[], __data_load[], __bss_start[], __bss_end[], __stack_top[];
typedef void (*function)(void);
extern function __init_array_start[], __init_array_end[];
int main(void);
void lt_reset_handler(void);

static void put(char c) {
  while (REG(UART0 + 4u) & 1u) {
  }
  REG(UART0) = (uint8_t)c;
}

static void print(const char *text) {
  while (*text) put(*text++);
}

static void exit_qemu(int status) {
  volatile uint32_t block[2] = {0x20026u, (uint32_t)status};
  register uint32_t r0 __asm__("r0") = 0x20u;
  register volatile uint32_t *r1 __asm__("r1") = block;
  __asm__ volatile("bkpt 0xAB" : "+r"(r0) : "r"(r1) : "memory");
  for (;;) {
  }
}

static void fault(void) { exit_qemu(0xFA); }

__attribute__((section(".vectors"), used)) const function vectors[16] = {
    (function)(uintptr_t)__stack_top, lt_reset_handler, fault, fault, fault, fault, fault, 0, 0, 0, 0, fault, fault,
    0, fault, fault};

void lt_reset_handler(void) {
  REG(0xE000ED88u) |= 0xFu << 20; /* the FPU on */
  __asm__ volatile("dsb\\n isb" ::: "memory");
  memcpy(__data_start, __data_load, (size_t)((uintptr_t)__data_end - (uintptr_t)__data_start));
  memset(__bss_start, 0, (size_t)((uintptr_t)__bss_end - (uintptr_t)__bss_start));
  for (function *constructor = __init_array_start; constructor < __init_array_end; constructor++) (*constructor)();
  exit_qemu(main());
}

int main(void) {
  static const char digits[] = "0123456789abcdef";
  REG(UART0 + 0x10u) = 25000000u / 115200u;
  REG(UART0 + 8u) = 1u;
  if (@PREFIX@_init() != 0) {
    print("init failed\\n");
    return 1;
  }
  for (int round = 0; round < @ROUNDS@; round++) {
    for (int i = 0; i < @UP@_INPUT_COUNT; i++) {
      uint8_t *input = @PREFIX@_input(i);
      for (uint32_t j = 0; j < @PREFIX@_inputs[i].bytes; j++) input[j] = (uint8_t)(round * 37 + i * 101 + j * 11);
    }
    if (@PREFIX@_invoke() != 0) {
      print("invoke failed\\n");
      return 1;
    }
    for (int o = 0; o < @UP@_OUTPUT_COUNT; o++) {
      const uint8_t *output = @PREFIX@_output(o);
      print("output ");
      for (uint32_t j = 0; j < @PREFIX@_outputs[o].bytes; j++) {
        put(digits[output[j] >> 4]);
        put(digits[output[j] & 15]);
      }
      put('\\n');
    }
  }
  print("done\\n");
  return 0;
}
"""


def _main_c(prefix: str) -> str:
    return MAIN_C.replace("@PREFIX@", prefix).replace("@UP@", prefix.upper()).replace("@ROUNDS@", str(ROUNDS))


def expected_lines(model: Path) -> list[str]:
    """What the application prints, from one host TFLM interpreter on the same inputs (a stateful model's state
    carries over from one invocation to the next, as in the application)."""
    graph = load_model(model)
    input_sets = []
    for round_ in range(ROUNDS):
        inputs = []
        for i, index in enumerate(graph.main.inputs):
            tensor = graph.main.tensors[index]
            pattern = bytes((round_ * 37 + i * 101 + j * 11) & 0xFF for j in range(tensor.nbytes))
            inputs.append(np.frombuffer(pattern, dtype=tensor.dtype).reshape(tensor.shape))
        input_sets.append(inputs)
    outputs = oracle.run_sequence(model.read_bytes(), input_sets)
    return [*(f"output {output.tobytes().hex()}" for round_ in outputs for output in round_), "done"]


def export(model: Path, library: Path, runtime: str, prefix: str, *more: str) -> subprocess.CompletedProcess:
    return lowtide_cli(
        "export", str(model), "--library", str(library), "--runtime", runtime, "--prefix", prefix, "--json", *more
    )


def pio_run(project: Path, *envs: str) -> None:
    argv = [sys.executable, "-m", "platformio", "run", "-d", str(project), *(a for e in envs for a in ("-e", e))]
    done = subprocess.run(
        argv, env=platformio_environment(read_settings()), capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]


def run_in_qemu(elf: Path) -> list[str]:
    done = subprocess.run([*QEMU, str(elf)], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.splitlines()


def qemu_project(project: Path, envs: dict[str, tuple[str, list[Path]]]) -> None:
    """The user's project: per env, the prefix its main includes and the libraries it depends on (lowtide's
    emulated board's platform, as lowtide's own projects name it in the user cache)."""
    settings = read_settings()
    ensure_tool_scons(settings)
    (project / "src").mkdir(parents=True, exist_ok=True)
    ini = []
    for env, (prefix, libraries) in envs.items():
        (project / "src" / f"main_{prefix}.c").write_text(_main_c(prefix))
        ini += [
            f"[env:{env}]",
            f"platform = {local_platform_uri(settings)}",
            "board = qemu_mps2_an386",
            f"build_src_filter = +<main_{prefix}.c>",
            "lib_deps =",
            *(f"    symlink://{library}" for library in libraries),
            "",
        ]
    (project / "platformio.ini").write_text("\n".join(ini))


@dataclass(frozen=True)
class Exported:
    libraries: dict[str, Path]  # runtime -> the model's library
    tflm: dict[str, Path]  # kernel set -> the `tflite-micro` library
    reports: dict[str, dict]  # runtime -> export's --json
    written: Path  # where they were written, before they were moved


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> Exported:
    """Each runtime's library and the two TFLM libraries, written by the CLI, then moved elsewhere (shutil.move):
    every build below uses the moved folders."""
    written, moved = tmp_path_factory.mktemp("written"), tmp_path_factory.mktemp("moved") / "deeper"
    reports = {}
    for runtime, prefix in PREFIXES.items():
        done = export(MODEL, written / prefix, runtime, prefix)
        assert done.returncode == 0, done.stderr
        reports[runtime] = json.loads(done.stdout)
    for kernels in KERNELS.values():
        done = lowtide_cli("tflm-library", str(written / kernels), "--kernels", kernels, "--ops-from", str(MODEL))
        assert done.returncode == 0, done.stderr
    moved.mkdir()
    for folder in list(written.iterdir()):
        shutil.move(folder, moved / folder.name)
    assert not any(written.iterdir())
    return Exported(
        {runtime: moved / prefix for runtime, prefix in PREFIXES.items()},
        {kernels: moved / kernels for kernels in KERNELS.values()},
        reports,
        written,
    )


def _dependencies(exported: Exported, runtime: str) -> list[Path]:
    tflm = [exported.tflm[KERNELS[runtime]]] if runtime in KERNELS else []
    return [*tflm, exported.libraries[runtime]]


def test_each_runtime_exports_one_api_and_every_build_systems_manifest(exported):
    for runtime, library in exported.libraries.items():
        prefix = PREFIXES[runtime]
        files = {p.relative_to(library).as_posix() for p in library.rglob("*") if p.is_file()}
        manifests = {"library.json", "library.properties", "CMakeLists.txt", "zephyr/module.yml", "Kconfig"}
        assert manifests | {f"src/{prefix}.h", "lowtide.json"} <= files, runtime
        assert sorted(files) == exported.reports[runtime]["files"]
        assert exported.reports[runtime]["library"] == str(exported.written / prefix)
        header = (library / "src" / f"{prefix}.h").read_text()
        for function in ("init(void)", "invoke(void)", "*%s_input(int i)", "*%s_output(int i)"):
            assert (function % prefix if "%" in function else f"{prefix}_{function}") in header
        arena = exported.reports[runtime]["arena"]
        assert f"#define {prefix.upper()}_ARENA_BYTES {arena['arena_bytes']}u" in header
        manifest = json.loads((library / "library.json").read_text())
        names_tflm = [{"name": "tflite-micro"}] if runtime in KERNELS else None
        assert manifest.get("dependencies") == names_tflm
        # TFLM is a dependency, not a copy: no TFLM source or header in the model's library
        assert not any(name.startswith(("src/tensorflow", "src/third_party")) for name in files)
    # the compiled runtime's arena is its plan; TFLM's is the 32-bit sizer's, whose head is the host TFLM's
    graph = load_model(MODEL)
    plan = arena_plan(graph)
    assert exported.reports["compiled"]["arena"] == {
        "arena_bytes": plan.head_bytes, "head_bytes": plan.head_bytes, "tail_bytes": 0, "state_bytes": 0
    }  # fmt: skip
    for runtime in KERNELS:
        arena = exported.reports[runtime]["arena"]
        sized = runtime_named(runtime).predict_arena(graph, "cortex-m4f", read_settings())
        assert sized is not None and exported.reports[runtime]["core"] == "cortex-m4f"
        assert arena["head_bytes"] == int(reference_figures()[MODEL.stem]["tflm_head"]) == 16_000
        assert (arena["arena_bytes"], arena["tail_bytes"]) == (sized.arena_bytes, sized.tail_bytes)
        assert arena["head_bytes"] + arena["tail_bytes"] <= arena["arena_bytes"]


def test_no_path_of_the_exporting_machine_is_in_a_library(exported):
    settings = read_settings()
    machine = {str(REPO), str(Path.home()), str(cache_root(settings)), str(SHARED_MODELS.resolve())}
    machine |= {str(exported.written), str(exported.libraries["compiled"].parent)}
    for library in exported.libraries.values():
        for path in (p for p in library.rglob("*") if p.is_file()):
            data = path.read_bytes()
            assert not [m for m in machine if m.encode() in data], path


def test_a_users_own_firmware_runs_each_runtimes_library_on_qemu_as_the_host_tflm(exported, tmp_path):
    project = tmp_path / "my-app"
    qemu_project(
        project, {runtime: (PREFIXES[runtime], _dependencies(exported, runtime)) for runtime in exported.libraries}
    )
    pio_run(project)
    expected = expected_lines(MODEL)
    for runtime in exported.libraries:
        assert run_in_qemu(project / ".pio" / "build" / runtime / "firmware.elf") == expected, runtime


def test_an_optimized_stateful_model_runs_as_the_host_tflm(tmp_path):
    """`optimize`'s output (its operator order and offline plan) of a model with CALL_ONCE and resource variables:
    the state carries over the application's invocations as in one host TFLM interpreter."""
    optimized = tmp_path / "mww_opt.tflite"
    done = lowtide_cli("optimize", str(SHARED_MODELS / "mww_v1_okay_nabu.tflite"), "-o", str(optimized))
    assert done.returncode == 0, done.stderr
    tflm = tmp_path / "tflite-micro"
    assert lowtide_cli("tflm-library", str(tflm), "--ops-from", str(optimized)).returncode == 0
    envs = {}
    for runtime in ("compiled", "tflm"):
        done = export(optimized, tmp_path / runtime, runtime, f"mww_{runtime}")
        assert done.returncode == 0, done.stderr
        envs[runtime] = (f"mww_{runtime}", [tflm, tmp_path / runtime] if runtime in KERNELS else [tmp_path / runtime])
    # TFLM's arena is the one optimize declares for the optimized model (38,544 B on cortex-m4f)
    declared = json.loads(optimized.with_suffix(".json").read_text())
    arena = json.loads((tmp_path / "tflm" / "lowtide.json").read_text())["arena"]
    assert (
        arena["arena_bytes"] == declared["arena_size_bytes"] and arena["head_bytes"] == declared["planned_head_bytes"]
    )
    project = tmp_path / "app"
    qemu_project(project, envs)
    pio_run(project)
    expected = expected_lines(optimized)
    assert len(set(expected)) > 2  # the outputs change with the state
    for runtime in envs:
        assert run_in_qemu(project / ".pio" / "build" / runtime / "firmware.elf") == expected, runtime


CMAKE_APP = """\
cmake_minimum_required(VERSION 3.13)
project(app C CXX)
add_subdirectory(${MODEL_LIBRARY} model)
add_executable(app main.c)
target_link_libraries(app PRIVATE ${MODEL_TARGET})
set_target_properties(app PROPERTIES LINKER_LANGUAGE C)  # Debian's arm-none-eabi has no libstdc++: TFLM needs none
"""

CMAKE_MAIN = """\
#include <stdint.h>
#include "@PREFIX@.h"
int main(void) {
  if (@PREFIX@_init() != 0) return 1;
  *(int8_t *)@PREFIX@_input(0) = 17;
  return @PREFIX@_invoke() != 0 ? 1 : *(int8_t *)@PREFIX@_output(0);
}
"""


@pytest.mark.skipif(shutil.which("cmake") is None, reason="no cmake")
def test_each_library_builds_with_cmake_for_the_m4_with_the_arm_toolchain(exported, tmp_path):
    cpu = "-mcpu=cortex-m4 -mthumb -mfloat-abi=hard -mfpu=fpv4-sp-d16 -ffunction-sections -fdata-sections"
    for runtime, library in exported.libraries.items():
        prefix = PREFIXES[runtime]
        app = tmp_path / runtime
        app.mkdir()
        (app / "CMakeLists.txt").write_text(CMAKE_APP)
        (app / "main.c").write_text(CMAKE_MAIN.replace("@PREFIX@", prefix))
        tflm = [f"-DLOWTIDE_TFLM_DIR={exported.tflm[KERNELS[runtime]]}"] if runtime in KERNELS else []
        configure = [
            "cmake", "-S", str(app), "-B", str(app / "build"), "-DCMAKE_BUILD_TYPE=MinSizeRel",
            "-DCMAKE_SYSTEM_NAME=Generic", "-DCMAKE_SYSTEM_PROCESSOR=arm", "-DCMAKE_TRY_COMPILE_TARGET_TYPE=STATIC_LIBRARY",
            "-DCMAKE_C_COMPILER=arm-none-eabi-gcc", "-DCMAKE_CXX_COMPILER=arm-none-eabi-g++",
            f"-DCMAKE_C_FLAGS={cpu}", f"-DCMAKE_CXX_FLAGS={cpu}",
            "-DCMAKE_EXE_LINKER_FLAGS=--specs=nano.specs --specs=nosys.specs -Wl,--gc-sections",
            f"-DMODEL_LIBRARY={library}", f"-DMODEL_TARGET={prefix}", *tflm,
        ]  # fmt: skip
        for argv in (configure, ["cmake", "--build", str(app / "build")]):
            done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
            assert done.returncode == 0, runtime + (done.stdout + done.stderr)[-3000:]
        assert (app / "build" / "app").is_file()


ST_MAIN = """\
#include <stdint.h>
@INCLUDES@
volatile uint8_t seen;
int main(void) {
@CALLS@
  for (;;) {
  }
}
"""


def _st_main(prefixes: list[str]) -> str:
    calls = []
    for prefix in prefixes:
        calls += [
            f"  if ({prefix}_init() != 0) return 1;",
            f"  for (uint32_t j = 0; j < {prefix}_inputs[0].bytes; j++) ((int8_t *){prefix}_input(0))[j] = (int8_t)j;",
            f"  if ({prefix}_invoke() != 0) return 1;",
            f"  seen ^= *(uint8_t *){prefix}_output(0);",
        ]
    includes = "\n".join(f'#include "{prefix}.h"' for prefix in prefixes)
    return ST_MAIN.replace("@INCLUDES@", includes).replace("@CALLS@", "\n".join(calls))


@pytest.mark.skipif(
    not (ARCHIVES / "platform-ststm32.tar.gz").is_file(), reason=f"no PlatformIO archives in {ARCHIVES}"
)
def test_each_library_builds_for_an_st_board(exported, tmp_path):
    """nucleo-f446re with PlatformIO's genuine ST platform and the STM32Cube framework, offline from the archives:
    the compiled and the CMSIS-NN libraries in one image, the reference TFLM one in another (two TFLM libraries
    cannot share an image)."""
    settings = read_settings({**os.environ, "LOWTIDE_PLATFORMIO_ARCHIVES": str(ARCHIVES)})
    packages = st_env_settings("nucleo_f446re", settings)
    assert packages is not None
    project = tmp_path / "my-st-app"
    (project / "src").mkdir(parents=True)
    # What this Debian toolchain needs of an stm32cube project: no libstdc++ (none here), the FPU ABI at link time.
    (project / "no_libstdcxx.py").write_text(
        'Import("env")\nenv.Replace(LINK="$CC", LIBS=[lib for lib in env["LIBS"] if str(lib) != "stdc++"])\n'
        'floats = [f for f in env["CCFLAGS"] if str(f).startswith(("-mfloat-abi=", "-mfpu="))]\n'
        "env.Append(ASFLAGS=floats, ASPPFLAGS=floats, LINKFLAGS=floats)\n"
    )
    # Offline, ST's linker scripts package is a placeholder: the application brings its own (lowtide's, inlined).
    script = (BSP_DIR / "stm32" / "ld" / "stm32f446re.ld").read_text()
    sections = (BSP_DIR / "stm32" / "ld" / "lt_stm32_sections.ld").read_text()
    (project / "f446re.ld").write_text(script.replace("INCLUDE firmware/bsp/stm32/ld/lt_stm32_sections.ld", sections))
    envs = {"compiled-cmsis": ["compiled", "tflm-cmsis-nn"], "tflm": ["tflm"]}
    ini = []
    for env, runtimes in envs.items():
        (project / "src" / f"main_{env}.c").write_text(_st_main([PREFIXES[runtime] for runtime in runtimes]))
        libraries = [library for runtime in runtimes for library in _dependencies(exported, runtime)]
        ini += [
            f"[env:{env}]",
            f"platform = {packages['platform']}",
            "platform_packages =",
            *(f"    {line}" for line in packages["platform_packages"].split("\n") if line),
            "framework = stm32cube",
            "board = nucleo_f446re",
            "board_build.ldscript = f446re.ld",
            "build_flags = -mfloat-abi=hard -mfpu=fpv4-sp-d16",
            f"build_src_filter = +<main_{env}.c>",
            "extra_scripts = post:no_libstdcxx.py",
            "lib_deps =",
            *(f"    symlink://{library}" for library in libraries),  # a TFLM library before its model's
            "",
        ]
    (project / "platformio.ini").write_text("\n".join(ini))
    pio_run(project)
    for env, runtimes in envs.items():
        elf = project / ".pio" / "build" / env / "firmware.elf"
        symbols = subprocess.run(["arm-none-eabi-nm", str(elf)], capture_output=True, text=True, check=True).stdout
        for runtime in runtimes:
            assert f" T {PREFIXES[runtime]}_invoke" in symbols, (env, runtime)
        # TFLM's interpreter in both images, CMSIS-NN's convolution only where its library is linked
        assert "16MicroInterpreter" in symbols
        assert ("arm_convolve_s8" in symbols) == ("tflm-cmsis-nn" in runtimes)


def _one_line_error(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("lowtide: error: "), done.stderr
    return lines[0]


def test_bad_input_is_one_line_and_writes_nothing(tmp_path):
    target = tmp_path / "library"
    assert "unknown runtime 'tvm'" in _one_line_error(export(MODEL, target, "tvm", "hello"))
    assert "'9lives' is not a C identifier" in _one_line_error(export(MODEL, target, "compiled", "9lives"))
    unsupported = unsupported_model(tmp_path / "l2_pool.tflite")
    message = _one_line_error(export(unsupported, target, "compiled", "l2"))
    assert "cannot compile operator 0 (L2_POOL_2D float32 -> float32)" in message
    assert not target.exists()
    target.mkdir()
    (target / "notes.txt").write_text("mine")
    assert "holds other files" in _one_line_error(export(MODEL, target, "compiled", "hello"))
    assert [p.name for p in target.iterdir()] == ["notes.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["l2_pool.tflite", "library"]  # no temporary left
    # a library lowtide wrote is replaced whole by the next export
    (target / "notes.txt").unlink()
    assert export(MODEL, target, "compiled", "first").returncode == 0
    assert export(MODEL, target, "compiled", "second").returncode == 0
    assert (target / "src" / "second.h").is_file() and not (target / "src" / "first.h").exists()
