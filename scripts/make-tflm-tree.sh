#!/usr/bin/env bash
# Makes the TFLite Micro source trees lowtide's `tflm` runtimes build against, with TFLM's own exporter, at the
# commit lowtide is pinned to (host/lowtide/tflm/tree.py: TFLM_COMMIT). Needs internet (GitHub, and the third-party
# downloads TFLM's scripts make), git and Python 3 with pip.
#
#   scripts/make-tflm-tree.sh ~/tflm          # then: export LOWTIDE_TFLM_DIR=~/tflm
#
# It writes OUT/tflm-ref (reference kernels) and OUT/tflm-cmsis-nn (Arm's CMSIS-NN kernels), the same trees as the
# archives lowtide's CI uses; lowtide checks each tree's content against the pinned export before building.
set -euo pipefail
out="${1:?usage: $0 OUT_DIR}"
commit="90b983c2b3f1480642e040bbd2ddb37b998f3424"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

git clone --quiet https://github.com/tensorflow/tflite-micro "$work/tflite-micro"
cd "$work/tflite-micro"
git checkout --quiet "$commit"
python3 -m pip install --quiet pillow  # the exporter runs the examples' generate_cc_arrays.py
python3 tensorflow/lite/micro/tools/project_generation/create_tflm_tree.py "$out/tflm-ref"
python3 tensorflow/lite/micro/tools/project_generation/create_tflm_tree.py \
    --makefile_options="OPTIMIZED_KERNEL_DIR=cmsis_nn" "$out/tflm-cmsis-nn"
echo "TFLM trees at $out (commit ${commit:0:7}): export LOWTIDE_TFLM_DIR=$out"
