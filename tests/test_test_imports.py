"""Test files share helpers through the test package `tests/support` (and the fixtures of conftest), never by
importing one another: a test file imported by another is collected twice over and ties the two together."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def imported_modules(path: Path) -> list[tuple[str, int]]:
    """Every module `path` imports, wherever the import is, with its line."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.module, node.lineno))
    return found


def test_files_import_no_other_test_file():
    test_modules = {path.stem for path in TESTS.rglob("test_*.py")}
    imports = [
        f"{path.relative_to(TESTS)}:{line} imports {module}"
        for path in sorted(TESTS.rglob("*.py"))
        for module, line in imported_modules(path)
        if module.split(".")[0] in test_modules
    ]
    assert imports == []
