"""PlatformIO pre-script of a lowtide firmware project: adds the model that `lowtide` wrote into the project.

lowtide (`lowtide build`, `measure`, the pytest plugin) writes `lowtide_project.json` beside platformio.ini: the
model's sources (its generated C, or its .tflite bytes for TFLM), the defines and include folders they need, and for
the TFLM runtimes the TFLM library built for the board's core. This script only reads that file; it imports nothing
of lowtide's, so a project builds with PlatformIO alone. Without the file (a bare `pio run` in lowtide's own
checkout) the firmware is built without a model and says so in its HELLO.
"""

import json
import sys
from pathlib import Path

Import("env")  # noqa: F821 (SCons injects Import)

FORMAT = 2
project_dir = Path(env.subst("$PROJECT_DIR"))  # noqa: F821
spec_path = project_dir / "lowtide_project.json"


def fail(message):
    sys.stderr.write(f"lowtide: error: {message}\n")
    env.Exit(2)  # noqa: F821


def in_project(path):
    return str(project_dir / path)  # an absolute path stays as it is


def apply(spec):
    if spec.get("format") != FORMAT:
        fail(f"{spec_path} is format {spec.get('format')}, this script reads {FORMAT}: regenerate the project")
    env.Append(  # noqa: F821
        CPPDEFINES=[tuple(d) if d[1] is not None else d[0] for d in spec["defines"]]
        + [(name, env.StringifyMacro(value)) for name, value in spec["string_defines"]],  # noqa: F821
        CPPPATH=[in_project(d) for d in spec["include_dirs"]],
        CCFLAGS=spec["ccflags"],
        CXXFLAGS=spec["cxxflags"],
        LIBPATH=[in_project(d) for d in spec["lib_dirs"]],
    )
    # Linker fragments beside the board's own script (TFLM's arenas in the board's memories: lowtide.tflm.regions),
    # as --script=: PlatformIO leaves the board's script out where it finds "-Wl,-T" among the link flags.
    env.Append(LINKFLAGS=[f"-Wl,--script={in_project(script)}" for script in spec["link_scripts"]])  # noqa: F821
    # Before the C library the platform links: the TFLM library needs it, and static libraries resolve in order.
    env.Prepend(LIBS=spec["libs"])  # noqa: F821
    for source in spec["sources"]:
        env.BuildSources(  # noqa: F821
            str(Path("$BUILD_DIR") / source["name"]),
            in_project(source["dir"]),
            src_filter=source["filter"],
        )


if spec_path.is_file():
    try:
        apply(json.loads(spec_path.read_text()))
    except (OSError, ValueError, KeyError, TypeError, IndexError) as exc:
        fail(f"cannot read {spec_path}: {exc}")
