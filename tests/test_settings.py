"""The environment is read in one place, `lowtide.settings.read_settings`: every other module is handed the
settings (or the values it needs) by the command, the plugin or the public entry point that read them."""

from __future__ import annotations

import ast
from pathlib import Path

from lowtide.settings import DEFAULT_LOCK_DIR, DEFAULT_MAX_TENSOR_BYTES, DEFAULT_TIMEOUT_S, read_settings

PACKAGE = Path(__file__).resolve().parents[1] / "host" / "lowtide"
# Not a setting read: the whole environment handed on to the PlatformIO processes lowtide starts.
PASSED_ON = {("project.py", "platformio_environment")}


def environment_reads(path: Path) -> list[tuple[str, int]]:
    """Each `os.environ` or `os.getenv` in `path`, with the function it is in and its line."""
    found = []

    def visit(node: ast.AST, function: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                visit(child, child.name)
                continue
            if (
                isinstance(child, ast.Attribute)
                and child.attr in ("environ", "getenv")
                and isinstance(child.value, ast.Name)
                and child.value.id == "os"
            ):
                found.append((function, child.lineno))
            visit(child, function)

    visit(ast.parse(path.read_text(), str(path)), "<module>")
    return found


def test_only_the_settings_read_the_environment():
    reads = [
        f"{path.relative_to(PACKAGE)}:{line} ({function})"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.name != "settings.py"
        for function, line in environment_reads(path)
        if (str(path.relative_to(PACKAGE)), function) not in PASSED_ON
    ]
    assert reads == []


def test_unset_and_empty_variables_give_the_defaults():
    for environ in (
        {},
        dict.fromkeys(
            (
                "LOWTIDE_TFLM_DIR",
                "LOWTIDE_CACHE_DIR",
                "LOWTIDE_LOCK_DIR",
                "LOWTIDE_PLATFORMIO_ARCHIVES",
                "LOWTIDE_MLPERF_RUNNER",
                "LG_COORDINATOR",
                "HTTPS_PROXY",
            ),
            "",
        ),
    ):
        settings = read_settings(environ)
        assert settings.max_tensor_bytes == DEFAULT_MAX_TENSOR_BYTES and settings.tflm_timeout_s == DEFAULT_TIMEOUT_S
        assert settings.lock_dir == DEFAULT_LOCK_DIR and settings.compiler == "gcc" and not settings.behind_proxy
        assert (
            settings.tflm_dir,
            settings.cache_dir,
            settings.platformio_archives,
            settings.mlperf_runner,
            settings.labgrid_coordinator,
        ) == (None,) * 5


def test_variables_are_read_by_their_documented_names():
    settings = read_settings(
        {
            "LOWTIDE_MAX_TENSOR_BYTES": "4096",
            "LOWTIDE_TFLM_TIMEOUT": "2.5",
            "LOWTIDE_TFLM_DIR": "/t",
            "LOWTIDE_CACHE_DIR": "/c",
            "LOWTIDE_LOCK_DIR": "/l",
            "LOWTIDE_PLATFORMIO_ARCHIVES": "/a",
            "LOWTIDE_MLPERF_RUNNER": "/r",
            "CC": "clang",
            "LG_COORDINATOR": "farm:20408",
            "all_proxy": "http://proxy:3128",
        }
    )
    assert (
        settings.max_tensor_bytes,
        settings.tflm_timeout_s,
        settings.tflm_dir,
        settings.cache_dir,
        settings.lock_dir,
        settings.platformio_archives,
        settings.mlperf_runner,
        settings.compiler,
        settings.labgrid_coordinator,
        settings.behind_proxy,
    ) == (4096, 2.5, "/t", "/c", Path("/l"), "/a", "/r", "clang", "farm:20408", True)
