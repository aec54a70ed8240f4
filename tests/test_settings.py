"""The environment is read in one place, `lowtide.settings.read_settings`, and only where a process starts its work:
the commands, the pytest plugin and the host-tflm board's process. Every other module is handed the settings (or the
values it needs); a public entry point a user may call from Python without them reads them through the one default,
`settings_or_read`, and hands them down from there."""

from __future__ import annotations

import ast
from pathlib import Path

from lowtide.settings import DEFAULT_LOCK_DIR, DEFAULT_MAX_TENSOR_BYTES, DEFAULT_TIMEOUT_S, read_settings

PACKAGE = Path(__file__).resolve().parents[1] / "host" / "lowtide"
# Not a setting read: the whole environment handed on to the PlatformIO processes lowtide starts.
PASSED_ON = {("project.py", "platformio_environment")}
# Where a process starts: the commands, the pytest plugin, the host-tflm board's process (its parent's environment).
EDGES = ("cli/", "hil/plugin.py", "pipeline/host_tflm.py")
# The public entry points that read the settings when a caller from Python gives them none.
DEFAULTING_ENTRY_POINTS = {
    ("validation.py", "model_problems"),
    ("oracle.py", "allocate"),
    ("oracle.py", "run"),
    ("oracle.py", "refusal"),
    ("oracle.py", "run_sequence"),
    ("tflm/tree.py", "locate_tree"),
    ("compile/hostcheck.py", "build_host_binary"),
    ("compile/hostcheck.py", "verify_compiled"),
    ("compile/hostcheck.py", "first_divergence"),
    ("rewrite/search.py", "rewrite_auto"),
    ("stale/report.py", "check_stale"),
    ("export/offline_plan.py", "export_optimized"),
    ("pipeline/optimize.py", "optimize_model"),
    ("pipeline/firmware.py", "build_board_firmware"),
    ("pipeline/measure.py", "measure"),
    ("mlperf/runner.py", "run_mlperf"),
}


def _sources() -> dict[str, ast.Module]:
    return {
        str(path.relative_to(PACKAGE)): ast.parse(path.read_text(), str(path)) for path in sorted(PACKAGE.rglob("*.py"))
    }


def _by_function(tree: ast.Module):
    """Each node of `tree` with the name of the (outermost) function it is in, "<module>" outside any."""

    def visit(node: ast.AST, function: str):
        for child in ast.iter_child_nodes(node):
            inner = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else function
            yield child, function if function != "<module>" else inner
            yield from visit(child, function if function != "<module>" else inner)

    return visit(tree, "<module>")


def _called_name(call: ast.Call) -> str | None:
    func = call.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None


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


def test_settings_are_read_at_the_edges_and_defaulted_only_at_the_public_entry_points():
    misplaced = []
    defaulting = set()
    for module, tree in _sources().items():
        if module == "settings.py":
            continue
        for node, function in _by_function(tree):
            if not isinstance(node, ast.Call):
                continue
            called = _called_name(node)
            if called == "read_settings" and not module.startswith(EDGES):
                misplaced.append(f"{module}:{node.lineno} ({function}) reads the settings")
            if called == "settings_or_read":
                defaulting.add((module, function))
                if (module, function) not in DEFAULTING_ENTRY_POINTS:
                    misplaced.append(f"{module}:{node.lineno} ({function}) defaults the settings")
    assert misplaced == []
    assert defaulting == DEFAULTING_ENTRY_POINTS  # the list names no entry point that has stopped defaulting


def _dotted(module: str) -> str:
    parts = ["lowtide", *Path(module).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


class _Definitions:
    """The package's top-level functions, and what each module's names refer to (its own functions, the names it
    imports, followed through a package's re-exports)."""

    def __init__(self, sources: dict[str, ast.Module]):
        self.modules = {_dotted(module): tree for module, tree in sources.items()}
        self.functions = {
            (name, node.name): node
            for name, tree in self.modules.items()
            for node in tree.body
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        }
        self.names = {name: self._imported(name) for name in self.modules}

    def _imported(self, module: str) -> dict[str, str]:
        """`module`'s names bound by `from ... import`: each to the dotted module or `module:name` it names."""
        names = {}
        for node in ast.walk(self.modules[module]):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("lowtide"):
                for alias in node.names:
                    target = f"{node.module}.{alias.name}"
                    names[alias.asname or alias.name] = (
                        target if target in self.modules else f"{node.module}:{alias.name}"
                    )
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname and alias.name in self.modules:
                        names[alias.asname] = alias.name
        return names

    def resolve(self, module: str, name: str) -> tuple[str, str] | None:
        """The function `name` is in `module` (defined there, or imported into it), if it is one of the package's."""
        if (module, name) in self.functions:
            return module, name
        target = self.names[module].get(name, "") if module in self.modules else ""
        if ":" in target:
            return self.resolve(*target.split(":"))
        return None

    def callee(self, module: str, call: ast.Call) -> tuple[str, str] | None:
        func = call.func
        if isinstance(func, ast.Name):
            return self.resolve(module, func.id)
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            target = self.names[module].get(func.value.id, "")
            return self.resolve(target, func.attr) if target in self.modules else None
        return None


def _defaults_its_settings(function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Whether `function` takes `settings: Settings | None`: given none, it (or what it hands them to) reads them."""
    args = function.args
    return any(
        a.arg == "settings" and a.annotation is not None and "None" in ast.unparse(a.annotation)
        for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]
    )


def test_the_package_hands_its_settings_to_every_entry_point_it_calls():
    """A call inside the package to a function that would read the settings itself when given none always gives
    them: the settings are read once, where the process started, and every stage below gets those."""
    definitions = _Definitions(_sources())
    defaulting = {key: node for key, node in definitions.functions.items() if _defaults_its_settings(node)}
    assert {("lowtide.validation", "load_model"), ("lowtide.oracle", "run")} <= set(defaulting)
    ungiven = []
    for module, tree in definitions.modules.items():
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call) or (callee := definitions.callee(module, node)) not in defaulting:
                continue
            args = defaulting[callee].args
            positional = [a.arg for a in [*args.posonlyargs, *args.args]][: len(node.args)]
            if "settings" not in positional and "settings" not in {k.arg for k in node.keywords}:
                ungiven.append(f"{module}:{node.lineno} {callee[1]}(...)")
    assert ungiven == []


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
