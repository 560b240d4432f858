"""Code outside the visitors does not ask a TypeInfo node for its class (``isinstance`` / ``type() is``):
what a type means to a consumer is a visitor's branch (savepoint/types/visitor.py), so a new node
class is never silently taken for another. The checks that remain are counted per file and may only
go down (:data:`REMAINING`); the node classes' own package (savepoint/types/) is exempt."""

from __future__ import annotations

import ast
from collections import Counter

from fstate.savepoint.types import TypeInfo
from fstate.savepoint.types.visitor import BRANCHES
from tests.savepoint.test_type_visitors import MODULE_FILES, VISITORS

NODE_NAMES = {cls.__name__ for cls in BRANCHES} | {"TypeInfo", "Composite"}
VISITOR_NAMES = {cls.__name__ for cls in VISITORS}

#: isinstance / type() checks on type nodes left outside visitors, per file (to be replaced by visitors)
REMAINING = {
    "fstate.cli.read": 1, "fstate.readers.cep": 2, "fstate.readers.views": 1, "fstate.savepoint._fastpath": 1,
    "fstate.savepoint.columnar": 2, "fstate.savepoint.header_search": 1, "fstate.savepoint.keyed": 1,
    "fstate.savepoint.keyed_codecs": 2,  # state_shape: the one kind x value-type switch of keyed state
    "fstate.savepoint.metainfo": 1, "fstate.savepoint.sql_shape_binding": 3, "fstate.savepoint.ttl_meta": 5,
    "fstate.writers.flink_target": 5, "fstate.writers.rewrite": 2, "fstate.writers.spec": 2,
    "fstate.writers.sql_migration": 4, "fstate.writers.writer": 4,
}


def _class_names(node: ast.expr) -> set[str]:
    return {ast.unparse(n).split(".")[-1] for n in (node.elts if isinstance(node, ast.Tuple) else [node])}


def type_checks(tree: ast.AST) -> list[int]:
    """Lines of isinstance(x, Node) / type(x) is Node checks outside visitor classes."""
    found = []

    def walk(node: ast.AST, in_visitor: bool) -> None:
        if isinstance(node, ast.ClassDef):
            in_visitor = in_visitor or bool({ast.unparse(b).split("[")[0].split(".")[-1] for b in node.bases}
                                            & (VISITOR_NAMES | {"TypeInfoVisitor"}))
        if not in_visitor:
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "isinstance" and len(node.args) == 2 \
                    and _class_names(node.args[1]) & NODE_NAMES:
                found.append(node.lineno)
            if isinstance(node, ast.Compare) and isinstance(node.left, ast.Call) \
                    and getattr(node.left.func, "id", None) == "type" \
                    and any(isinstance(op, (ast.Is, ast.IsNot, ast.Eq, ast.NotEq)) for op in node.ops) \
                    and any(_class_names(c) & NODE_NAMES for c in node.comparators):
                found.append(node.lineno)
        for child in ast.iter_child_nodes(node):
            walk(child, in_visitor)

    walk(tree, False)
    return found


def _counts() -> Counter:
    counts = Counter()
    for module, path in MODULE_FILES.items():
        if module.startswith("fstate.savepoint.types"):
            continue
        lines = type_checks(ast.parse(path.read_text()))
        if lines:
            counts[module] = len(lines)
    return counts


def test_no_new_type_checks_outside_visitors():
    counts = _counts()
    grown = {module: (n, REMAINING.get(module, 0)) for module, n in counts.items() if n > REMAINING.get(module, 0)}
    assert not grown, f"isinstance on TypeInfo nodes outside visitors (found, allowed): {grown}; write a visitor"
    stale = {module: (counts.get(module, 0), n) for module, n in REMAINING.items() if counts.get(module, 0) < n}
    assert not stale, f"fewer checks than REMAINING allows: lower it to what is found {stale}"


def test_the_check_finds_type_checks():
    tree = ast.parse("def f(t):\n    if isinstance(t, (ListType, int)):\n        return type(t) is MapType\n"
                     "class V(TypeInfoVisitor[int]):\n    def visit_list(self, node):\n"
                     "        return isinstance(node, ListType)\n")
    assert type_checks(tree) == [2, 3]
    assert "TypeInfo" in NODE_NAMES and TypeInfo.__name__ == "TypeInfo"
