# lowtide's two entry points: `make demo` (the main job on the project's own example) and `make test`.
PYTHON ?= python3
BUILD ?= build
# QEMU's TCG plugin header, for the emulated boards' cycle model (docs/firmware.md, "Cycles"): ../shared holds the
# one Debian's QEMU 7.2 was built from. Every recipe (the tests, demo-board) sees it.
export LOWTIDE_QEMU_PLUGIN_HEADER ?= $(abspath ../shared/qemu-plugin)

.PHONY: install firmware-deps tflm-lib demo demo-board test sweeps bench fuzz

install:
	$(PYTHON) -m pip install --quiet -e '.[test,labgrid,firmware,mlperf]'

# The Arm toolchain, QEMU and offline PlatformIO that the emulated boards' tests need (apt needs root).
firmware-deps: install
	PYTHON=$(PYTHON) scripts/install-firmware-deps.sh

# TFLite Micro for the emulated boards: the pinned sources from the archives in ../shared/tflm (offline; with internet
# `lowtide tflm-get` exports them), then built once per machine into the user cache before the tests: the framework,
# and for the Cortex-M4's reference kernels those of every shared model's operators, which inspect and optimize size
# arenas with. Any other model then adds only its own operators' kernels.
TFLM_ARCHIVES ?= ../shared/tflm
tflm-lib: install firmware-deps
	lowtide tflm-get --archive $(TFLM_ARCHIVES)
	lowtide tflm-build --core cortex-m4f --kernels reference --ops-from ../shared/models
	lowtide tflm-build --core cortex-m4f --kernels cmsis-nn
	lowtide tflm-build --core cortex-m7 --kernels reference

# Build the irregularly wired demo model, show what stock TFLM would allocate, then optimise and verify it.
demo: install
	mkdir -p $(BUILD)
	lowtide demo-model $(BUILD)/demo.tflite
	lowtide inspect $(BUILD)/demo.tflite --plot $(BUILD)/demo_live.png
	lowtide optimize $(BUILD)/demo.tflite -o $(BUILD)/demo_optimized.tflite --verify

# The demo continued on an emulated Cortex-M4: compiled firmware, painted arena, instruction count.
demo-board: demo firmware-deps
	lowtide measure $(BUILD)/demo.tflite --board qemu-m4
	lowtide measure $(BUILD)/demo_optimized.tflite --board qemu-m4

# Two workers, one test file each at a time (a file's tests share its fixtures and folders); the user cache's
# builds are locked, so workers building the same thing build it once. The 30 slowest tests are printed, so a
# CI log says where the time went (tests/conftest.py's LONG_FILES_FIRST orders the files by it). The sweeps over every
# shared model (marked `slow`) are a benchmark: `make sweeps` (benchmarks/sweeps_bench.py, docs/benchmarks.md).
test: install firmware-deps tflm-lib
	$(PYTHON) -m ruff check host tests benchmarks scripts firmware
	$(PYTHON) -m ruff format --check host tests benchmarks scripts firmware
	$(PYTHON) -m mypy
	$(PYTHON) -m pytest -q -n 2 --dist loadfile --durations=30 -m "not slow" --lowtide-board host-tflm --lowtide-board qemu-m4

sweeps: install firmware-deps tflm-lib
	$(PYTHON) benchmarks/sweeps_bench.py

bench: install
	$(PYTHON) benchmarks/optimize_bench.py

# The structured fuzzer for longer than CI runs it: FUZZ_EXAMPLES mutated models, at most FUZZ_MINUTES in all.
FUZZ_EXAMPLES ?= 2000
FUZZ_MINUTES ?= 30
fuzz: install
	LOWTIDE_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) LOWTIDE_FUZZ_SUBPROCESS_EXAMPLES=$$(( $(FUZZ_EXAMPLES) / 50 )) \
	LOWTIDE_FUZZ_MINUTES=$(FUZZ_MINUTES) $(PYTHON) -m pytest -q -p no:cacheprovider --hypothesis-show-statistics tests/test_fuzz_models.py
