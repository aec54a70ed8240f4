#!/usr/bin/env bash
# Installs the programs the emulated firmware envs need to build and run offline (PlatformIO and SCons come with
# lowtide's `firmware` extra: `make install`), then registers the local tool-scons shim in this checkout's own
# PlatformIO core dir (.pio-core) for a developer's bare `pio run` / `pio test` here; lowtide's own builds register
# it in the user cache themselves. Idempotent: safe to run again.
#   apt: the Debian Arm bare-metal toolchain + newlib, the C++ standard headers TFLM needs (headers only: the
#        library, libstdc++-arm-none-eabi-newlib, is 1.5 GB and TFLM links without it), QEMU's Arm system emulator,
#        and OpenOCD 0.12 (9 MB), which flashes the ST boards through lowtide's tool-openocd shim without
#        PlatformIO's registry (firmware/tools/tool-openocd).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
PYTHON="${PYTHON:-python3}"

# clang + its runtime: libFuzzer for the protocol frame codec (plain clang cannot link -fsanitize=fuzzer).
apt_packages=(gcc-arm-none-eabi libnewlib-arm-none-eabi libstdc++-arm-none-eabi-dev qemu-system-arm clang
              libclang-rt-14-dev openocd)
missing=()
for pkg in "${apt_packages[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
    sudo_cmd=()
    [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
    "${sudo_cmd[@]}" apt-get update
    DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y --no-install-recommends "${missing[@]}"
fi

# Every pio call in this checkout uses this core dir (platformio.ini sets core_dir to the same place), so another
# checkout's packages or platform symlink can never be picked up.
export PLATFORMIO_CORE_DIR="$root/.pio-core"
"$PYTHON" -m platformio pkg install -g -t "symlink://$root/firmware/tools/tool-scons"
