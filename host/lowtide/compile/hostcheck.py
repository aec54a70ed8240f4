"""Build generated code with the host C compiler and compare its outputs with the host TFLM interpreter.

The harness fills the arena with a junk pattern (so code that relies on zeroed memory fails), reads the inputs
from one binary file into their arena offsets, runs `invoke` with a hook that counts calls, and writes the
outputs to another file. For stateful models it repeats this for several invocations in one process, painting
the arena again before each one: state that must persist has to live outside the arena.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lowtide import oracle
from lowtide.compile.banks import DataRegion
from lowtide.compile.codegen import CompiledModel, compile_model
from lowtide.compile.lowering import NUMPY_TYPES
from lowtide.compile.rows import DEFAULT_MAX_ROW_OVERHEAD
from lowtide.errors import LowtideError
from lowtide.model.edit import with_outputs
from lowtide.model.ir import Graph
from lowtide.resources import RUNTIME_DIR, tree_digest
from lowtide.settings import Settings, settings_or_read
from lowtide.storage import cache_dir, cached_folder

CFLAGS = ("-O2", "-std=c99", "-Wall", "-Wextra", "-Werror")
# Any out-of-bounds access or undefined arithmetic in a kernel aborts the run instead of passing unnoticed.
SANITIZE_FLAGS = ("-g", "-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer")
FLOAT_RELATIVE_TOLERANCE = 1e-5

_HARNESS = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "{prefix}.h"

static uint8_t arena[{PREFIX}_ARENA_SIZE + 16] __attribute__((aligned(16)));
#ifdef {PREFIX}_REGION_ARENAS /* the arena split across memory regions: the others' parts */
#define LT_REGION_ARENA(region, bytes) uint8_t {prefix}_arena_##region[bytes] __attribute__((aligned(16)));
#define LT_JUNK(region, bytes) memset({prefix}_arena_##region, 0x5A ^ n, bytes);
{PREFIX}_REGION_ARENAS(LT_REGION_ARENA)
#endif

/* Counts before/after pairs; any call out of order marks the run as broken. */
static void count_calls(int op_index, int after, void *user) {{
    int *state = (int *)user; /* pairs, next op, expecting after, broken */
    if (op_index != state[1] || after != state[2]) state[3] = 1;
    if (after) {{
        state[0]++;
        state[1] = op_index + 1;
    }}
    state[2] = !after;
}}

/* argv: inputs file, outputs file, invocation count: the inputs of each invocation one after another, and
 * likewise the outputs. */
int main(int argc, char **argv) {{
    if (argc != 4) return 2;
    const int invocations = atoi(argv[3]);
    FILE *in = fopen(argv[1], "rb");
    FILE *out = fopen(argv[2], "wb");
    if (!in || !out) return 3;
    int calls[4] = {{0, 0, 0, 0}};
    for (int n = 0; n < invocations; ++n) {{
        memset(arena, 0xA5 ^ n, sizeof arena);
#ifdef {PREFIX}_REGION_ARENAS
        {PREFIX}_REGION_ARENAS(LT_JUNK)
#endif
        for (int i = 0; i < {PREFIX}_INPUT_COUNT; ++i) {{
            if (fread({prefix}_input(arena, i), 1, {prefix}_inputs[i].bytes, in) != {prefix}_inputs[i].bytes) return 4;
        }}
        calls[1] = 0;
        calls[2] = 0;
        if ({prefix}_invoke(arena, count_calls, calls) != 0) return 5;
        for (int i = 0; i < {PREFIX}_OUTPUT_COUNT; ++i) {{
            fwrite({prefix}_output(arena, i), 1, {prefix}_outputs[i].bytes, out);
        }}
    }}
    fclose(in);
    fclose(out);
    printf("hook_pairs %d\n", calls[3] ? -1 : calls[0]);
    return 0;
}}
"""


@dataclass(frozen=True)
class OutputComparison:
    index: int  # model output
    dtype: str
    elements: int
    mismatches: int  # elements that differ (beyond tolerance for float32)
    max_abs_diff: float
    max_rel_diff: float
    invocation: int = 0  # which of successive invocations (stateful models carry state from one to the next)

    @property
    def passed(self) -> bool:
        return self.mismatches == 0


@dataclass(frozen=True)
class VerifyResult:
    model: str  # the verified model's source, for messages (`Graph.source`)
    seed: int
    outputs: tuple[OutputComparison, ...]  # every output of every invocation
    hook_pairs: int  # before/after hook pairs seen in order, over all invocations
    operator_count: int
    arena_bytes: int  # arena head of the compiled model
    fixed_state_bytes: int  # .data + .bss of the generated code and runtime, measured on the host objects
    tflm_total_bytes: int  # TFLM's arena total (head + tail) on the host interpreter
    tflm_head_bytes: int
    invocations: int = 1

    @property
    def ram_bytes(self) -> int:
        return self.arena_bytes + self.fixed_state_bytes

    @property
    def passed(self) -> bool:
        return all(o.passed for o in self.outputs) and self.hook_pairs == self.operator_count * self.invocations


def _compiler(cc: str) -> str:
    if shutil.which(cc) is None:
        raise LowtideError(f"host C compiler '{cc}' not found (set CC)")
    return cc


def build_host_binary(
    compiled: CompiledModel, workdir: Path, sanitize: bool = False, settings: Settings | None = None
) -> Path:
    """Compile the generated sources, the runtime and the harness into one host executable."""
    settings = settings_or_read(settings)
    cc = _compiler(settings.compiler)
    flags = [*CFLAGS, *(SANITIZE_FLAGS if sanitize else ())]
    compiled.write(workdir)
    harness = workdir / "lowtide_harness.c"
    harness.write_text(_HARNESS.format(prefix=compiled.prefix, PREFIX=compiled.prefix.upper()))
    objects = []
    for src in (workdir / f"{compiled.prefix}.c", harness):
        obj = workdir / (src.stem + ".o")
        _run(
            [cc, *flags, "-I", str(RUNTIME_DIR), "-I", str(workdir), "-c", str(src), "-o", str(obj)],
            f"compiling {src.name}",
        )
        objects.append(obj)
    for obj in _runtime_objects(cc, flags, settings):
        # Beside the model's own objects, where fixed_state_bytes counts every object's static data.
        local = workdir / obj.name
        local.unlink(missing_ok=True)
        try:
            os.link(obj, local)
        except OSError:  # another file system than the cache's
            shutil.copyfile(obj, local)
        objects.append(local)
    binary = workdir / "lowtide_check"
    _run([cc, *(SANITIZE_FLAGS if sanitize else ()), *[str(o) for o in objects], "-lm", "-o", str(binary)], "linking")
    return binary


def _runtime_objects(cc: str, flags: list[str], settings: Settings) -> list[Path]:
    """The runtime's objects for this compiler and these flags, compiled once per machine into the user cache: the
    runtime includes only its own headers, so every model links the same objects (a check that compiled them per
    model spent most of its time there, under the sanitizers most of all)."""
    version = _run([cc, "--version"], "asking the host C compiler its version").stdout
    key = hashlib.sha256("\0".join([tree_digest(RUNTIME_DIR), version, *flags]).encode()).hexdigest()[:16]

    def fill(staging: Path) -> None:
        for src in sorted(RUNTIME_DIR.glob("*.c")):
            _run(
                [cc, *flags, "-I", str(RUNTIME_DIR), "-c", str(src), "-o", str(staging / (src.stem + ".o"))],
                f"compiling {src.name}",
            )

    return sorted(cached_folder(cache_dir(settings, "runtime-objects") / key, fill).glob("*.o"))


def _run(cmd: list[str], what: str) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        detail = (result.stderr or result.stdout).strip().splitlines()
        raise LowtideError(f"{what} failed: {detail[0] if detail else f'exit {result.returncode}'}")
    return result


def _writable_section(name: str) -> bool:
    # .data.rel.ro holds const tables with relocations on a PIC host: read-only after loading, flash on an MCU
    return name in (".data", ".bss") or (name.startswith((".data.", ".bss.")) and not name.startswith(".data.rel.ro"))


def fixed_state_bytes(workdir: Path, prefix: str) -> int:
    """Writable static data (.data + .bss) of the generated code and runtime objects; the harness is excluded."""
    total = 0
    for obj in workdir.glob("*.o"):
        if obj.stem == "lowtide_harness":
            continue
        result = _run(["size", "-A", str(obj)], "measuring static data")
        for line in result.stdout.splitlines():
            parts = line.split()
            if len(parts) >= 2 and _writable_section(parts[0]):
                total += int(parts[1])
    return total


def compare_outputs(
    expected: list[np.ndarray], actual: list[np.ndarray], invocation: int = 0
) -> tuple[OutputComparison, ...]:
    comparisons = []
    for i, (want, got) in enumerate(zip(expected, actual)):
        want = np.asarray(want).reshape(-1)
        got = got.reshape(-1)
        if want.dtype.kind == "f":
            w, g = want.astype(np.float64), got.astype(np.float64)
            abs_diff = np.abs(w - g)
            rel_diff = abs_diff / np.maximum(np.abs(w), np.finfo(np.float32).tiny)
            bad = int(np.count_nonzero((rel_diff > FLOAT_RELATIVE_TOLERANCE) & (abs_diff > 0)))
        else:
            abs_diff = np.abs(want.astype(np.int64) - got.astype(np.int64)).astype(np.float64)
            rel_diff = abs_diff / np.maximum(np.abs(want.astype(np.float64)), 1.0)
            bad = int(np.count_nonzero(abs_diff))
        comparisons.append(
            OutputComparison(
                index=i,
                dtype=str(want.dtype),
                elements=int(want.size),
                mismatches=bad,
                max_abs_diff=float(abs_diff.max(initial=0.0)),
                max_rel_diff=float(rel_diff.max(initial=0.0)),
                invocation=invocation,
            )
        )
    return tuple(comparisons)


def run_compiled(
    compiled: CompiledModel,
    inputs: list[np.ndarray],
    workdir: Path,
    binary: Path | None = None,
    sanitize: bool = False,
    settings: Settings | None = None,
) -> tuple[list[np.ndarray], int]:
    """Run the host build on `inputs`; returns the outputs and the count of hook pairs seen."""
    outputs, hook_pairs = run_compiled_invocations(compiled, [inputs], workdir, binary, sanitize, settings)
    return outputs[0], hook_pairs


def run_compiled_invocations(
    compiled: CompiledModel,
    input_sets: list[list[np.ndarray]],
    workdir: Path,
    binary: Path | None = None,
    sanitize: bool = False,
    settings: Settings | None = None,
) -> tuple[list[list[np.ndarray]], int]:
    """Invoke the host build once per input set, in one process (state carries over); returns each
    invocation's outputs and the count of hook pairs seen over all of them."""
    binary = binary or build_host_binary(compiled, workdir, sanitize, settings)
    in_path, out_path = workdir / "inputs.bin", workdir / "outputs.bin"
    in_path.write_bytes(b"".join(np.ascontiguousarray(a).tobytes() for inputs in input_sets for a in inputs))
    result = subprocess.run(
        [str(binary), str(in_path), str(out_path), str(len(input_sets))], capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        report = [line for line in result.stderr.splitlines() if "runtime error" in line or "ERROR:" in line]
        detail = f": {report[0].strip()}" if report else ""
        raise LowtideError(f"compiled model exited with status {result.returncode}{detail}", compiled.model)
    raw = out_path.read_bytes()
    sequence, position = [], 0
    for _ in input_sets:
        outputs: list[np.ndarray] = []
        for t in compiled.outputs:
            chunk = raw[position : position + t.nbytes]
            outputs.append(np.frombuffer(chunk, dtype=NUMPY_TYPES[t.dtype]).reshape(t.shape))
            position += t.nbytes
        sequence.append(outputs)
    hook_pairs = int(result.stdout.split()[-1]) if result.stdout.startswith("hook_pairs") else 0
    return sequence, hook_pairs


def verify_compiled(
    graph: Graph,
    seed: int = 0,
    workdir: str | Path | None = None,
    prefix: str = "model",
    sanitize: bool = False,
    invocations: int = 1,
    keep_model_plan: bool = False,
    settings: Settings | None = None,
    row_chains: bool = True,
    max_row_overhead: float = DEFAULT_MAX_ROW_OVERHEAD,
    wide_weights: bool = True,
    regions: Sequence[DataRegion] = (),
) -> VerifyResult:
    """Compile `graph`, build it with the host compiler, and compare with TFLM on `oracle.random_inputs`.
    `workdir` keeps the build (sources, objects, binary) for inspection; by default a temporary one is used.
    `sanitize` builds with AddressSanitizer and UBSan: any memory or arithmetic fault fails the check.
    `invocations` > 1 invokes both sides that many times in a row (inputs from seeds seed, seed + 1, ...), so the
    state a model keeps between invocations is compared too. `keep_model_plan`, `row_chains`, `max_row_overhead`,
    `regions`, `wide_weights`: as `compile_model`'s."""
    settings = settings_or_read(settings)
    compiled = compile_model(
        graph, prefix, keep_model_plan, row_chains, max_row_overhead, regions, wide_weights=wide_weights
    )
    input_sets = [oracle.random_inputs(graph, seed + n) for n in range(invocations)]
    figures = oracle.allocate(graph.data, path=graph.source, settings=settings)
    reference = oracle.run_sequence(graph.data, input_sets, path=graph.source, settings=settings)
    with tempfile.TemporaryDirectory(prefix="lowtide-compile-") as tmp:
        build_dir = Path(workdir) if workdir is not None else Path(tmp)
        build_dir.mkdir(parents=True, exist_ok=True)
        outputs, hook_pairs = run_compiled_invocations(
            compiled, input_sets, build_dir, sanitize=sanitize, settings=settings
        )
        state = fixed_state_bytes(build_dir, compiled.prefix)
    comparisons = tuple(
        c
        for n, (want, got) in enumerate(zip(reference, outputs))
        for c in compare_outputs(list(want), got, invocation=n)
    )
    return VerifyResult(
        model=graph.source,
        seed=seed,
        outputs=comparisons,
        hook_pairs=hook_pairs,
        operator_count=compiled.operator_count,
        arena_bytes=compiled.arena_bytes,
        fixed_state_bytes=state,
        tflm_total_bytes=figures.total_bytes,
        tflm_head_bytes=figures.head_bytes,
        invocations=invocations,
    )


@dataclass(frozen=True)
class OperatorDivergence:
    """The first operator whose output differs from TFLM's, found by exposing every operator output."""

    op_index: int
    opcode: str
    tensor: int
    comparison: OutputComparison
    invocation: int = 0


def expose_operator_outputs(graph: Graph) -> tuple[Graph, list[int]]:
    """`graph` rewritten so that every main-subgraph operator output is also a model output, and the tensor index
    of each model output in order (the original outputs first). Resource handles are left out: TFLM cannot return
    them."""
    op_outputs = [t for op in graph.main.operators for t in op.outputs if graph.main.tensors[t].dtype in NUMPY_TYPES]
    added = [t for t in dict.fromkeys(op_outputs) if t not in graph.main.outputs]
    return with_outputs(graph, added), list(graph.main.outputs) + added


def first_divergence(
    graph: Graph, seed: int = 0, invocations: int = 1, settings: Settings | None = None
) -> OperatorDivergence | None:
    """Rewrite the model so that every operator's output is a model output (TFLM then keeps them all live, which
    changes the plan but not the values), run both sides `invocations` times in a row, and return the first
    operator that differs, earliest invocation first."""
    settings = settings_or_read(settings)
    traced, exposed = expose_operator_outputs(graph)
    input_sets = [oracle.random_inputs(graph, seed + n) for n in range(invocations)]
    reference = oracle.run_sequence(traced.data, input_sets, path=graph.source, settings=settings)
    with tempfile.TemporaryDirectory(prefix="lowtide-trace-") as tmp:
        outputs, _ = run_compiled_invocations(compile_model(traced), input_sets, Path(tmp), settings=settings)
    for n, (want, got) in enumerate(zip(reference, outputs)):
        comparisons = dict(zip(exposed, compare_outputs(list(want), got, invocation=n)))
        for op in graph.main.operators:
            for t in op.outputs:
                if t in comparisons and not comparisons[t].passed:
                    return OperatorDivergence(op.index, op.opcode, t, comparisons[t], n)
    return None
