"""PlatformIO dev-platform class for the emulated boards; PlatformIO derives its name from platform.json's "name".
Nothing to customise: the build is builder/main.py, and it needs no packages (the toolchain is Debian's
arm-none-eabi on PATH)."""

from platformio.public import PlatformBase


class LowtideqemuPlatform(PlatformBase):
    pass
