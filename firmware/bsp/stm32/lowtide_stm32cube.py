"""PlatformIO post-script of lowtide's ST envs (`framework = stm32cube`): what the platform's stm32cube builder
leaves for the project to settle.

- It links `-lstdc++`, which newlib-nano's specs turn into libstdc++_nano; Debian's arm-none-eabi toolchain ships
  that only in a 1.5 GB package. Nothing of lowtide's needs it (TFLM is built without RTTI and exceptions and
  references no C++ runtime), so it goes, and the C driver links, as g++ would ask for libstdc++ again.
- It passes only -mcpu and -mthumb: the hard-float ABI the env's build_flags choose (and the TFLM library is built
  for) must reach the assembler and the linker too, or newlib's soft-float multilib is linked.
- It compiles with -Os and GNU C's default FP contraction. lowtide's firmware compiles as on the emulated boards
  (firmware/platform/builder/main.py): -O2, and no a*b+c fused into an FMA, which would make the compiled runtime's
  float kernels differ from TFLM in the last bit.
"""

Import("env")  # noqa: F821 (SCons injects Import)

env.Replace(LINK="$CC", LIBS=[lib for lib in env["LIBS"] if str(lib) != "stdc++"])  # noqa: F821
for flags in ("CCFLAGS", "LINKFLAGS"):
    env.Replace(**{flags: ["-O2" if str(flag) == "-Os" else flag for flag in env[flags]]})  # noqa: F821
env.Append(CCFLAGS=["-ffp-contract=off"])  # noqa: F821
float_flags = [flag for flag in env["CCFLAGS"] if str(flag).startswith(("-mfloat-abi=", "-mfpu="))]  # noqa: F821
env.Append(ASFLAGS=float_flags, ASPPFLAGS=float_flags, LINKFLAGS=float_flags)  # noqa: F821
