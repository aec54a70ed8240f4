"""No import cycles in host/lowtide: every module's imports at load time (module level, outside `if TYPE_CHECKING`;
imports inside functions run later) form a graph without a cycle. `from pkg import sub`, where pkg.sub is a module,
is an edge to pkg.sub alone: a package's __init__ importing its own submodules is not a cycle."""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

PACKAGE = Path(__file__).resolve().parents[1] / "host" / "lowtide"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def load_time_imports(tree: ast.Module, name: str, is_package: bool, modules: set[str]) -> set[str]:
    """What importing module `name` imports: `import a.b`, and `from a import b`: a.b if that is one of `modules`,
    else a."""
    found: set[str] = set()

    def visit(statements: list[ast.stmt]) -> None:
        for node in statements:
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                visit(node.orelse)
                continue
            if isinstance(node, (ast.If, ast.Try, ast.With)):
                visit(node.body)
                for handler in getattr(node, "handlers", []):
                    visit(handler.body)
                visit(getattr(node, "orelse", []))
                visit(getattr(node, "finalbody", []))
            elif isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = name.split(".") if is_package else name.split(".")[:-1]
                    anchor = anchor[: len(anchor) - node.level + 1]
                    base = ".".join(anchor + ([node.module] if node.module else []))
                for alias in node.names:
                    found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base)

    visit(tree.body)
    return found


def import_graph() -> nx.DiGraph:
    modules = {module_name(path): path for path in PACKAGE.rglob("*.py")}
    graph = nx.DiGraph()
    graph.add_nodes_from(modules)
    for name, path in modules.items():
        imports = load_time_imports(ast.parse(path.read_text()), name, path.name == "__init__.py", set(modules))
        graph.add_edges_from((name, target) for target in imports if target in modules and target != name)
    return graph


def test_host_lowtide_has_no_import_cycle():
    graph = import_graph()
    assert graph.number_of_nodes() > 50 and graph.number_of_edges() > 100  # the walk found the package
    cycles = list(nx.simple_cycles(graph))
    assert not cycles, "import cycles: " + "; ".join(" -> ".join([*cycle, cycle[0]]) for cycle in cycles[:5])


def test_the_walk_sees_what_a_module_imports():
    modules = {"lowtide.x", "lowtide.x.a", "lowtide.x.b"}
    code = "from lowtide.x import b, VALUE\nfrom . import a\nif TYPE_CHECKING:\n    import lowtide.y\n"
    assert load_time_imports(ast.parse(code), "lowtide.x.c", False, modules) == {"lowtide.x.b", "lowtide.x",
                                                                                  "lowtide.x.a"}
    # the cycle the cli had: the package imports its command modules, which import `app` from the package
    assert load_time_imports(ast.parse("from lowtide.x import app\n"), "lowtide.x.a", False, modules) == {"lowtide.x"}
