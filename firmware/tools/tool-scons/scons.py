"""Entry point PlatformIO runs as `python <tool-scons>/scons.py ...`: hands over to the SCons that pip installed.

PlatformIO 6.2 looks up its core package `tool-scons` (owner platformio, ~4.41101.0) and would fetch it from the
registry; this folder, registered with `pio pkg install -g -t symlink://...`, satisfies that lookup offline.
"""

import sys

try:
    from SCons.Script.Main import main
except ImportError:
    sys.exit("tool-scons shim: SCons is not installed for this Python; run `pip install scons`")

if __name__ == "__main__":
    main()
