"""No import cycles in host/lowtide: every module's imports at load time (module level, outside `if TYPE_CHECKING`;
imports inside functions run later) form a graph without a cycle. `from pkg import sub`, where pkg.sub is a module,
is an edge to pkg.sub alone: a package's __init__ importing its own submodules is not a cycle."""

from __future__ import annotations

import ast

import networkx as nx

from support.package_imports import module_imports, package_imports, package_modules


def import_graph() -> nx.DiGraph:
    graph = nx.DiGraph()
    graph.add_nodes_from(package_modules())
    graph.add_edges_from((i.source, i.target) for i in package_imports() if i.at_load)
    return graph


def test_host_lowtide_has_no_import_cycle():
    graph = import_graph()
    assert graph.number_of_nodes() > 50 and graph.number_of_edges() > 100  # the walk found the package
    cycles = list(nx.simple_cycles(graph))
    assert not cycles, "import cycles: " + "; ".join(" -> ".join([*cycle, cycle[0]]) for cycle in cycles[:5])


def test_the_walk_sees_what_a_module_imports():
    modules = {"lowtide.x", "lowtide.x.a", "lowtide.x.b"}
    code = (
        "from lowtide.x import b, VALUE\nfrom . import a\nif TYPE_CHECKING:\n    import lowtide.y\n"
        "def later():\n    import lowtide.z\n"
    )
    imports = module_imports(ast.parse(code), "lowtide.x.c", False, modules)
    assert {i.target for i in imports if i.at_load} == {"lowtide.x.b", "lowtide.x", "lowtide.x.a"}
    assert [(i.target, i.line) for i in imports if not i.at_load] == [("lowtide.y", 4), ("lowtide.z", 6)]
    # the cycle the cli had: the package imports its command modules, which import `app` from the package
    assert [
        i.target for i in module_imports(ast.parse("from lowtide.x import app\n"), "lowtide.x.a", False, modules)
    ] == ["lowtide.x"]
