"""The import graph has no cycles: in the runtime (a module's imports, including those inside
functions and under ``TYPE_CHECKING``) and in the whole fstate package; and the runtime's
``graph`` and ``events`` modules sit below both the DataStream API and execution."""

from __future__ import annotations

import ast
import importlib.util
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def package_dirs(prefix: str) -> dict[str, Path]:
    """The installed packages named ``prefix`` or below it, with their directories (the repository
    maps them to top-level folders, see pyproject.toml)."""
    with open(REPO / "pyproject.toml", "rb") as f:
        names = tomllib.load(f)["tool"]["setuptools"]["packages"]
    out = {}
    for name in names:
        if name == prefix or name.startswith(prefix + "."):
            spec = importlib.util.find_spec(name)
            out[name] = Path(next(iter(spec.submodule_search_locations)))
    return out


def module_files(prefix: str) -> dict[str, tuple[Path, bool]]:
    """Module name -> (file, is a package's ``__init__``)."""
    out = {}
    for package, directory in package_dirs(prefix).items():
        for path in sorted(directory.glob("*.py")):
            if path.stem == "__init__":
                out[package] = (path, True)
            else:
                out[f"{package}.{path.stem}"] = (path, False)
    return out


def import_graph(prefix: str) -> dict[str, set[str]]:
    """Module -> the modules of the same package tree it imports (anywhere in its source)."""
    modules = module_files(prefix)
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, (path, is_package) in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base_parts = name.split(".") if is_package else name.split(".")[:-1]
                    base_parts = base_parts[:len(base_parts) - (node.level - 1)]
                    base = ".".join(base_parts + ([node.module] if node.module else []))
                else:
                    base = node.module
                # `from package import module` imports the module; `from module import name` the module
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                           for alias in node.names]
            else:
                continue
            for target in targets:
                while target and target not in modules:  # `import a.b.c` of a non-module: nearest module
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph[name].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for target in sorted(graph[module]):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in on_stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def test_the_cycle_finder_finds_cycles():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_runtime_imports_no_cycle():
    graph = import_graph("fstate.runtime")
    assert "fstate.runtime.task" in graph and "fstate.runtime.graph" in graph["fstate.runtime.task"]
    found = cycles(graph)
    assert not found, f"import cycles: {found}"


def test_graph_and_events_are_below_the_api_and_execution():
    graph = import_graph("fstate.runtime")
    assert {m for m in graph["fstate.runtime.events"] if m.startswith("fstate.runtime")} == set()
    assert {m for m in graph["fstate.runtime.graph"] if m.startswith("fstate.runtime")} == set()
    above = {"fstate.runtime.api.datastream", "fstate.runtime.api.environment", "fstate.runtime.task",
             "fstate.runtime.job", "fstate.runtime.checkpointing.coordinator"}
    for module in above - {"fstate.runtime.checkpointing.coordinator"}:
        assert graph[module] & {"fstate.runtime.graph", "fstate.runtime.events"}, module
    # execution does not reach into the user API for graph, partitioning or event types
    assert "fstate.runtime.api.datastream" not in graph["fstate.runtime.task"] | graph["fstate.runtime.job"]
    assert "fstate.runtime.task" not in graph["fstate.runtime.checkpointing.coordinator"]


def test_the_runtime_has_rooms():
    """runtime/ is four rooms and a few modules every room stands on; an operator module is named as
    the API module it runs; no runtime module is named as a format-core one (types, errors)."""
    runtime = REPO / "runtime"
    rooms = {p.name for p in runtime.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert rooms == {"api", "operators", "state", "checkpointing"}
    top = {p.stem for p in runtime.glob("*.py")} - {"__init__"}
    assert top <= {"graph", "events", "clock", "exceptions", "config_values", "configuration", "task", "job"}, top
    operators = {p.stem for p in (runtime / "operators").glob("*.py")} - {"__init__"}
    assert operators and operators <= {p.stem for p in (runtime / "api").glob("*.py")}, operators
    core = ({p.stem for p in (REPO / "savepoint").glob("*.py")} | {"types"}) - {"__init__"}
    assert not {p.stem for p in runtime.rglob("*.py")} & core


def test_the_fstate_package_imports_no_cycle():
    graph = import_graph("fstate")
    assert "fstate.savepoint.loader" in graph and "fstate.runtime.job" in graph
    found = cycles(graph)
    assert not found, f"import cycles: {found}"


def all_imports(prefix: str) -> dict[str, set[str]]:
    """Module -> every absolute module name it imports (relative imports resolved), anywhere in it."""
    modules = module_files(prefix)
    out: dict[str, set[str]] = {}
    for name, (path, is_package) in modules.items():
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    parts = name.split(".") if is_package else name.split(".")[:-1]
                    parts = parts[:len(parts) - (node.level - 1)]
                    found.add(".".join(parts + ([node.module] if node.module else [])))
                else:
                    found.add(node.module or "")
        out[name] = found
    return out


def test_the_format_core_imports_no_spark_and_no_upper_room():
    """savepoint/ is the format core: no Spark, nothing from readers/, writers/, cli/ or runtime/."""
    upper = ("fstate.readers", "fstate.writers", "fstate.cli", "fstate.runtime")
    bad = {name: sorted(m for m in imported if m.split(".")[0] == "pyspark" or m.startswith(upper))
           for name, imported in all_imports("fstate.savepoint").items()}
    assert not {name: found for name, found in bad.items() if found}


def test_one_keyed_state_seam():
    """Layout and decoder of keyed state are chosen in one place, savepoint/keyed_state.py: the
    format (keyed) and the compiled scanner (_fastpath) do not import each other, and nothing above
    the format core reaches the scanner or the per-layout iterators except through the seam."""
    graph = import_graph("fstate")
    keyed, fastpath, seam = "fstate.savepoint.keyed", "fstate.savepoint._fastpath", "fstate.savepoint.keyed_state"
    assert fastpath not in graph[keyed]
    assert keyed not in graph[fastpath]
    assert {keyed, fastpath, "fstate.savepoint.rocksdb"} <= graph[seam]
    upper = ("fstate.readers", "fstate.writers", "fstate.cli", "fstate.runtime")
    assert not [name for name, imported in graph.items() if name.startswith(upper) and fastpath in imported]
    # the decoding entry points of the old three places are gone: rows, table rows and timers come
    # from the seam only
    from fstate.savepoint import keyed as keyed_module, rocksdb as rocksdb_module
    for module, names in ((keyed_module, ("iter_entries", "keyed_rows", "table_rows", "timer_rows",
                                          "canonical_regions")),
                          (rocksdb_module, ("keyed_rows", "timer_rows"))):
        assert not [n for n in names if hasattr(module, n)], module.__name__
