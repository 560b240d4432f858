"""No module reads or sets another module's private names (CONTRIBUTING: public seams between
modules): no ``from module import _name``, and no ``something._name`` (read or set) of a private name
the module does not define itself (as a function, a class attribute or a ``self._name``). Classes of
one module may share their private attributes. The package's private modules (``_fastpath``,
``_compiled``, the C extensions) are modules, not names, and may be imported."""

from __future__ import annotations

import ast

import pytest

from tests.test_layering import module_files

FILES = {name: path for name, (path, _) in module_files("fstate").items()}
#: dunder names are Python's, not private
def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_uses(tree: ast.AST) -> list[str]:
    """``line: what`` of every use of another module's or object's private name."""
    found = []
    modules = set()  # names bound to modules by import statements
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules |= {(alias.asname or alias.name).split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if _private(alias.name) and not _is_private_module(node, alias.name):
                    found.append(f"{node.lineno}: from {node.module or '.'} import {alias.name}")
                modules.add(alias.asname or alias.name)
    own = _defined_here(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            owner = ast.unparse(node.value)
            if owner in ("self", "cls", "super()") or node.attr in own or (owner, node.attr) in THIRD_PARTY:
                continue
            what = "sets" if isinstance(node.ctx, ast.Store) else "reads"
            found.append(f"{node.lineno}: {what} {owner}.{node.attr}")
    return found


def _is_private_module(node: ast.ImportFrom, name: str) -> bool:
    """``from . import _fastpath``: a module of the package (its own private module), not a name."""
    return node.module is None or name in ("_speedups", "_columnar", "_compiled", "_fastpath")


def _defined_here(tree: ast.AST) -> set[str]:
    """The private names a module defines: functions and classes, class attributes, module names and
    attributes it assigns on ``self`` / ``cls``."""
    own = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            own.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            own.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) \
                and ast.unparse(node.value) in ("self", "cls"):
            own.add(node.attr)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Attribute):
            own.add(node.target.attr)
    return {name for name in own if _private(name)}


#: private names of other libraries fstate relies on, each with its reason
THIRD_PARTY = {
    ("SparkContext", "_gateway"): "whether a JVM is running (pyspark has no public test for it)",
    ("SparkContext", "_ensure_initialized"): "start the JVM with fstate's options before a session exists",
    ("spark", "_jvm"): "ask the JVM whether Spark shares a push-down's planned read between scans "
                       "(datasource.key_push_down_is_safe; no public API tells)",
}


@pytest.mark.parametrize("module", sorted(FILES))
def test_no_private_names_across_modules(module):
    assert private_uses(ast.parse(FILES[module].read_text())) == []


def test_the_check_finds_private_uses():
    tree = ast.parse("from .rocksdb import _runs\nfrom . import keyed\nfrom . import _fastpath\n"
                     "keyed._framed_length(b)\nfunction._runtime_context = 1\nclass A:\n"
                     "    def __init__(self):\n        self._key = 1\n"
                     "    def __eq__(self, other):\n        return self._key == other._key\n")
    assert sorted(private_uses(tree)) == ["1: from rocksdb import _runs", "4: reads keyed._framed_length",
                                          "5: sets function._runtime_context"]
