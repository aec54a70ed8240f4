"""What every module of host/lowtide imports, read from its source: the one walk the import-cycle test
(tests/test_import_cycles.py) and the layer contract (tests/test_layers.py) share.

Each import is recorded with its line and whether it runs when the module is imported (`at_load`): module level and
class bodies, outside `if TYPE_CHECKING`. Imports inside functions run later and `if TYPE_CHECKING` ones never, but
both are dependencies of the design, so the walk sees them too. `from pkg import sub`, where pkg.sub is a module, is
an import of pkg.sub alone; `from pkg import name` of anything else is an import of pkg.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "host" / "lowtide"


@dataclass(frozen=True)
class Import:
    source: str  # the importing module, dotted
    target: str  # the imported module (or the package a name is imported from)
    line: int
    at_load: bool  # runs when `source` is imported


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def module_imports(tree: ast.Module, name: str, is_package: bool, modules: set[str]) -> list[Import]:
    """Every import statement of module `name` (a package's __init__ when `is_package`), each target once per
    line, in source order. Targets are `import a.b`'s a.b, and `from a import b`'s a.b if that is one of
    `modules`, else a."""
    found: dict[tuple[str, int, bool], None] = {}

    def targets(node: ast.Import | ast.ImportFrom) -> list[str]:
        if isinstance(node, ast.Import):
            return [alias.name for alias in node.names]
        base = node.module or ""
        if node.level:
            anchor = name.split(".") if is_package else name.split(".")[:-1]
            anchor = anchor[: len(anchor) - node.level + 1]
            base = ".".join(anchor + ([node.module] if node.module else []))
        return [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]

    def walk(node: ast.AST, at_load: bool) -> None:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.update(((target, node.lineno, at_load), None) for target in targets(node))
            return
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            at_load = False  # the body runs when it is called
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for statement in node.body:
                walk(statement, False)
            for statement in node.orelse:
                walk(statement, at_load)
            return
        for child in ast.iter_child_nodes(node):
            walk(child, at_load)

    walk(tree, True)
    return [Import(name, target, line, at_load) for target, line, at_load in found]


def package_modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def package_imports() -> list[Import]:
    """Every import, by every module of host/lowtide, of another of its modules."""
    modules = package_modules()
    names = set(modules)
    found = []
    for name, path in modules.items():
        imports = module_imports(ast.parse(path.read_text()), name, path.name == "__init__.py", names)
        found += [i for i in imports if i.target in names and i.target != name]
    return found
