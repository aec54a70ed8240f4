"""SCons build for the emulated MPS2 boards: Debian's arm-none-eabi GCC from PATH, newlib-nano, no C++ runtime.

`pio run` builds .pio/build/<env>/firmware.elf; `pio run -t upload` boots it in QEMU (the emulator *is* the board:
UART0 on stdio, semihosting exit code back to the shell). `pio test` runs `test_testing_command` from
platformio.ini instead, since this platform has no uploader package and so counts as native for testing.
"""

from os.path import join

from SCons.Script import AlwaysBuild, Builder, Default, DefaultEnvironment

env = DefaultEnvironment()
board = env.BoardConfig()
platform_dir = env.PioPlatform().get_dir()

env.Replace(
    AR="arm-none-eabi-gcc-ar",
    AS="arm-none-eabi-as",
    CC="arm-none-eabi-gcc",
    CXX="arm-none-eabi-g++",
    # The C driver links, C++ objects too (TFLM's runtimes): SCons would pick g++, which asks for libstdc++, and
    # Debian ships only its headers for arm-none-eabi. TFLM built without RTTI and exceptions needs none of it.
    LINK="arm-none-eabi-gcc",
    GDB="arm-none-eabi-gdb",
    OBJCOPY="arm-none-eabi-objcopy",
    RANLIB="arm-none-eabi-gcc-ranlib",
    SIZETOOL="arm-none-eabi-size",
    ARFLAGS=["rc"],
    SIZEPROGREGEXP=r"^(?:\.text|\.data|\.rodata|\.ARM\.exidx|\.ARM\.extab)\s+(\d+).*",
    SIZEDATAREGEXP=r"^(?:\.data|\.bss|\.noinit|\.stack|\.heap)\s+(\d+).*",
    SIZECHECKCMD="$SIZETOOL -A -d $SOURCES",
    SIZEPRINTCMD="$SIZETOOL -B -d $SOURCES",
    PROGNAME="firmware",
    PROGSUFFIX=".elf",
)

cpu_flags = [
    f"-mcpu={board.get('build.cpu')}",
    "-mthumb",
    f"-mfpu={board.get('build.fpu')}",
    "-mfloat-abi=hard",
]

env.Append(
    ASFLAGS=cpu_flags,
    ASPPFLAGS=cpu_flags + ["-x", "assembler-with-cpp"],
    # C99 without GNU extensions: float kernels must not contract a*b+c into FMA, or they stop matching TFLM.
    CFLAGS=["-std=c99"],
    CCFLAGS=cpu_flags
    + [
        "-O2",
        "-ffunction-sections",
        "-fdata-sections",
        "-ffp-contract=off",
        "-Wall",
        "-Wextra",
    ],
    CPPDEFINES=[
        ("F_CPU", "$BOARD_F_CPU"),
        ("LT_QEMU_MACHINE", f'\\"{board.get("build.qemu_machine")}\\"'),
        # The machine's UART0 and SYSCLK, for firmware/bsp/mps2 (one BSP serves every MPS image).
        ("LT_MPS_UART0_BASE", f"{board.get('build.uart0_base')}u"),
        ("LT_MPS_SYSCLK_HZ", f"{board.get('build.f_cpu').rstrip('L')}u"),
    ],
    LINKFLAGS=cpu_flags
    + [
        "-O2",
        "--specs=nano.specs",
        "--specs=nosys.specs",
        "-nostartfiles",
        "-Wl,--gc-sections",
        "-Wl,--no-warn-rwx-segments",
        "-Wl,-Map,${BUILD_DIR}/firmware.map",
    ],
    LIBS=["c", "m", "gcc"],
)

# The machine's memory map, which includes the sections every MPS image shares (found through -L).
env.Replace(LDSCRIPT_PATH=join(platform_dir, "ldscripts", board.get("build.ldscript")))
env.Append(LIBPATH=[join(platform_dir, "ldscripts")])

env.Append(
    BUILDERS=dict(
        ElfToBin=Builder(
            action=env.VerboseAction(" ".join(["$OBJCOPY", "-O", "binary", "$SOURCES", "$TARGET"]), "Building $TARGET"),
            suffix=".bin",
        )
    )
)

target_elf = env.BuildProgram()
target_bin = env.ElfToBin(join("$BUILD_DIR", "${PROGNAME}"), target_elf)
env.Depends(target_bin, "checkprogsize")

AlwaysBuild(env.Alias("nobuild", target_elf))
target_buildprog = env.Alias("buildprog", target_bin, target_bin)

target_size = env.Alias("size", target_elf, env.VerboseAction("$SIZEPRINTCMD", "Calculating size $SOURCE"))
AlwaysBuild(target_size)

# "Uploading" to an emulated board means booting it: the same command line the host launcher uses, with UART0 on
# this terminal. Ctrl-A X quits QEMU. The board JSON says how the machine boots an ELF (qemu_boot): -kernel, or on
# the AN505 the loader device, which also sets PC (QEMU 7.2 cannot fetch its Secure vector table at reset).
env.Replace(
    UPLOADER="qemu-system-arm",
    UPLOADERFLAGS=[
        "-machine",
        board.get("build.qemu_machine"),
        "-display",
        "none",
        "-monitor",
        "none",
        "-serial",
        "mon:stdio",
        "-icount",
        "shift=0",
        "-semihosting-config",
        "enable=on,target=native",
    ],
    UPLOADCMD="$UPLOADER $UPLOADERFLAGS " + " ".join(board.get("build.qemu_boot")).replace("{elf}", "$SOURCE"),
)
AlwaysBuild(env.Alias("upload", target_elf, env.VerboseAction("$UPLOADCMD", "Booting $SOURCE in QEMU")))

Default([target_buildprog, target_size])
