"""The compiled runtime's arena across a board's memory regions (lowtide.compile.banks): a model whose compiled arena
is larger than either of qemu-m4-banks' 80 KiB banks is split between them, built, and run on QEMU's mps2-an386,
with outputs identical to the host TFLM and each bank's arena the size predicted, to the byte; a model that fits no
split is refused in one line, before anything is written.

Real parts: the host TFLM (the oracle), PlatformIO and the Arm toolchain, QEMU."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import SHARED_MODELS, needs_firmware_tools
from lowtide.compile.banks import DataRegion, split_arena
from lowtide.compile.codegen import arena_plan
from lowtide.device.drivers.platformio import elf_sections
from lowtide.device.spec import get_board_spec
from lowtide.memory.placement import first_overlap, in_place_groups
from lowtide.model.builder import ModelBuilder
from lowtide.pipeline.measure import measure
from lowtide.settings import read_settings
from lowtide.validation import load_model
from support.cli import run_lowtide

BOARD = "qemu-m4-banks"


def branches_model(path: Path, filters: int) -> Path:
    """Three convolutions of one input, each transposed (whole tensors: no row chain runs them), then summed:
    the three transposed tensors (32 x 32 x `filters` int8 each) are live together."""
    b = ModelBuilder(seed=1, name=path.stem)
    x = b.input((1, 32, 32, 2))
    convs = [b.conv2d(x, filters=filters, kernel=k, activation="RELU") for k in (1, 3, 1)]
    first, second, third = (b.transpose(c, (0, 2, 1, 3)) for c in convs)
    summed = b.add(b.add(first, second), third)
    pooled = b.max_pool(summed, size=4)
    b.output(b.fully_connected(b.reshape(pooled, (1, 8 * 8 * filters)), units=10))
    path.write_bytes(b.build())
    return path


def test_the_split_places_every_buffer_once_within_its_regions_capacity(tmp_path):
    graph = load_model(branches_model(tmp_path / "branches.tflite", 32))
    plan = arena_plan(graph)
    regions = (DataRegion("fast", 48 * 1024), DataRegion("slow", 80 * 1024))
    split = split_arena(graph, plan.buffers, plan.head_bytes, regions)
    assert split == split_arena(graph, plan.buffers, plan.head_bytes, regions)  # deterministic
    assert split.offsets is not None and [a.region for a in split.arenas] == ["fast", "slow"]
    capacity = {r.name: r.capacity_bytes for r in regions}
    # Buffers the plan fixed inside each other (in place, row chains over a dying source) keep their distance...
    group_of = {}
    for g, ((root, _), *members) in enumerate(in_place_groups(plan.buffers)):
        group_of[id(plan.buffers[root])] = g
        for j, inside in members:
            group_of[id(plan.buffers[j])] = g
            assert split.offsets[j] - split.offsets[root] == inside
    # ...and no two others share bytes while both are live.
    assert first_overlap(plan.buffers, split.offsets, lambda a, b: group_of[id(a)] == group_of[id(b)]) is None
    for arena in split.arenas:
        inside = [i for i, o in enumerate(split.offsets) if arena.base <= o < arena.base + arena.head_bytes]
        assert 0 < arena.head_bytes <= capacity[arena.region]
        assert max(split.offsets[i] + plan.buffers[i].size for i in inside) - arena.base == arena.head_bytes
    assert sum(len([o for o in split.offsets if a.base <= o < a.base + a.head_bytes]) for a in split.arenas) == len(
        plan.buffers
    )
    # The model's input is in the first region: the arena the caller passes, where model_input() finds it.
    first = split.arenas[0]
    for i, b in enumerate(plan.buffers):
        if b.tensor in graph.main.inputs:
            assert split.offsets[i] < first.base + first.head_bytes
    # Where the first region holds the whole plan, the plan stays as it is.
    whole = split_arena(graph, plan.buffers, plan.head_bytes, (DataRegion("big", plan.head_bytes),))
    assert whole.offsets is None and whole.arenas[0].head_bytes == plan.head_bytes


def test_the_split_code_built_for_the_host_computes_what_tflm_computes(tmp_path):
    """The generated C with its arena in two parts (`--region`), built by the host compiler with each part junk-filled
    before every invocation: outputs bit-exact with the host TFLM's, two invocations in a row."""
    model = branches_model(tmp_path / "branches.tflite", 32)
    out = tmp_path / "generated"
    done = run_lowtide(
        "compile", str(model), "-o", str(out), "--region", "fast=49152", "--region", "slow=81920",
        "--verify", "--invocations", "2", "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert [a["region"] for a in report["arenas"]] == ["fast", "slow"] and report["verify"]["passed"]
    assert all(o["mismatches"] == 0 and o["max_abs_diff"] == 0 for o in report["verify"]["outputs"])


@needs_firmware_tools
def test_a_compiled_arena_over_either_bank_runs_across_both(tmp_path):
    model = branches_model(tmp_path / "branches.tflite", 32)
    spec = get_board_spec(BOARD)
    banks = {m.name: m for m in spec.memories}
    head = arena_plan(load_model(model)).head_bytes
    assert head > banks["sram1"].size_bytes == banks["sram2"].size_bytes == 80 * 1024

    out = tmp_path / "generated"
    done = run_lowtide("compile", str(model), "-o", str(out), "--board", BOARD, "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    arenas = {a["region"]: a["bytes"] for a in report["arenas"]}
    assert list(arenas) == ["sram1", "sram2"] and report["arena_bytes"] == arenas["sram1"]
    assert all(0 < nbytes <= 80 * 1024 for nbytes in arenas.values())
    header = (out / "model.h").read_text()
    assert f"#define MODEL_ARENA_SIZE {arenas['sram1']}u\n" in header
    assert f"#define MODEL_REGION_ARENAS(X) X(sram2, {arenas['sram2']}u)\n" in header
    assert f"extern uint8_t model_arena_sram2[{arenas['sram2']}u];" in header

    built = run_lowtide("build", str(model), "--board", BOARD, "--runtime", "compiled", "--json")
    assert built.returncode == 0, built.stderr
    built_report = json.loads(built.stdout)
    assert built_report["compiled_arenas"] == report["arenas"]
    assert built_report["arena_capacity_bytes"] == sum(arenas.values()) + 1024  # the painted slack after sram1's
    # The second bank's arena is its section at sram2's address, the size predicted; the stack still ends in sram1.
    sections = {s.name: s for s in elf_sections(Path(built_report["elf"]), read_settings())}
    placed = sections[".lt_arena.sram2"]
    assert (placed.address, placed.size) == (banks["sram2"].address, arenas["sram2"])
    assert sections[".stack"].address + sections[".stack"].size <= banks["sram1"].end

    result = measure(model, BOARD, runtime="compiled", iterations=1, timeout=120.0)
    assert result.outputs_match, f"outputs {result.mismatched_outputs} differ from the host TFLM"
    # The first bank's arena (in .bss, read from the ELF's symbols) and the sum the board planned and painted.
    assert result.static_ram is not None and result.static_ram.arena_bytes == arenas["sram1"]
    assert result.board_planned_bytes == arenas["sram1"] + arenas["sram2"]
    assert result.arena_high_water_bytes == arenas["sram1"] + arenas["sram2"]


@needs_firmware_tools
def test_an_arena_that_fits_only_the_second_bank_is_passed_from_there():
    """mlperf_vww_96: its 27 KiB input staging and the stack leave sram1 too little for the 28 KB compiled arena,
    which goes whole into sram2: the arena the firmware passes to the model (input and output inside it) is there,
    with its painted slack, and .bss holds none of it."""
    model = SHARED_MODELS / "mlperf_vww_96_int8.tflite"
    head = arena_plan(load_model(model)).head_bytes
    done = run_lowtide("build", str(model), "--board", BOARD, "--runtime", "compiled", "--json")
    assert done.returncode == 0, done.stderr
    sections = {s.name: s for s in elf_sections(Path(json.loads(done.stdout)["elf"]), read_settings())}
    placed = sections[".lt_arena.sram2"]
    sram2 = next(m for m in get_board_spec(BOARD).memories if m.name == "sram2")
    assert (placed.address, placed.size) == (sram2.address, head + 1024)
    result = measure(model, BOARD, runtime="compiled", iterations=1, timeout=120.0)
    assert result.outputs_match, f"outputs {result.mismatched_outputs} differ from the host TFLM"
    assert result.board_planned_bytes == head and result.arena_capacity_bytes == head + 1024
    assert result.static_ram is not None and result.static_ram.arena_bytes == 0


@pytest.mark.parametrize(
    "args",
    [
        ["--board", BOARD],  # three 64 KiB tensors live at once: no two fit one bank
        ["--region", "fast=40000", "--region", "slow=40000"],
    ],
)
def test_a_model_that_fits_no_split_is_one_line_and_writes_nothing(tmp_path, args):
    model = branches_model(tmp_path / "wide.tflite", 64 if "--board" in args else 32)
    out = tmp_path / "generated"
    done = run_lowtide("compile", str(model), "-o", str(out), *args, "--json")
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "fits no split across" in lines[0] and "Traceback" not in done.stderr, lines
    assert not out.exists() and not done.stdout


@needs_firmware_tools
def test_a_build_whose_compiled_arena_fits_no_split_is_refused_before_building(tmp_path):
    model = branches_model(tmp_path / "wide.tflite", 64)
    project = tmp_path / "fw"
    done = run_lowtide("build", str(model), "--board", BOARD, "--runtime", "compiled", "--project-dir", str(project))
    assert done.returncode == 2, done.stderr
    # more than both banks hold together: refused as any model too large for the image's RAM
    assert done.stderr.count("\n") == 1 and "> SRAM of qemu-m4-banks" in done.stderr, done.stderr
    assert not project.exists()


def test_a_board_file_names_tflms_default_regions_among_its_memories(tmp_path):
    banks = get_board_spec(BOARD)
    assert (banks.arena_region, banks.persistent_region) == (None, "sram2")
    h743 = get_board_spec("nucleo-h743zi")
    assert (h743.arena_region, h743.persistent_region) == ("axi_sram", "sram1")
    board = tmp_path / "bad.toml"
    board.write_text(banks.path.read_text().replace('persistent_region = "sram2"', 'persistent_region = "sram9"'))
    done = run_lowtide("boards", "--json")
    assert done.returncode == 0, done.stderr
    listed = {b["name"]: b for b in json.loads(done.stdout)["boards"]}
    assert (listed[BOARD]["arena_region"], listed[BOARD]["persistent_region"]) == (None, "sram2")
    refused = run_lowtide("build", str(tmp_path / "none.tflite"), "--board", str(board))
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
    assert "persistent_region = 'sram9' names no [[memory]] of the board" in refused.stderr
