"""No visitor walks the tree by hand: the dispatcher (``visit``) hands a branch its children's results or
thunks, so a visitor never calls it on a child (:func:`hand_recursion`).

Code outside the visitors does not ask a TypeInfo node for its class (``isinstance`` / ``type() is``):
what a type means to a consumer is a visitor's branch (savepoint/types/visitor.py; the structural
questions "is it a list, a map, a TTL wrapper, ..." are ``savepoint/types/roles.py``), so a new node
class is never silently taken for another. The node classes' own package (savepoint/types/) is
exempt; a check on a name imported from outside fstate (pyspark's or pyarrow's ``MapType``) is no
check on a node. :data:`ALLOWED` lists the few checks left, each with why it is not about what a
type means."""

from __future__ import annotations

import ast
from collections import Counter

from fstate.savepoint.types import TypeInfo
from fstate.savepoint.types.visitor import BASES, BRANCHES
from tests.savepoint.test_type_visitors import MODULE_FILES, VISITORS

NODE_NAMES = {cls.__name__ for cls in BRANCHES} | {"TypeInfo", "Composite"}
VISITOR_NAMES = {cls.__name__ for cls in VISITORS} | {cls.__name__ for cls in BASES} | {"TypeInfoVisitor"}

#: module -> (checks, why each is not about what a type means); the count may only go down
ALLOWED = {
    "fstate.writers.spec": (1, "parse_type accepts a TypeInfo in place of a type string: is it a type at all"),
}


def _foreign_names(tree: ast.AST) -> set[str]:
    """Names the module binds only by imports from outside fstate (``spark_types``, pyspark's ``MapType``)."""
    foreign, own = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            outside = isinstance(node, ast.Import) or (node.level == 0 and not (node.module or "").startswith("fstate"))
            for alias in node.names:
                name = alias.asname or alias.name.split(".")[0]
                (foreign if outside and not alias.name.startswith("fstate") else own).add(name)
    return foreign - own


def _class_names(node: ast.expr, foreign: set[str] = frozenset()) -> set[str]:
    """The class names ``node`` (a class or a tuple of classes) names, without those imported from outside fstate."""
    names = [ast.unparse(n) for n in (node.elts if isinstance(node, ast.Tuple) else [node])]
    return {name.split(".")[-1] for name in names if name.split(".")[0] not in foreign}


def type_checks(tree: ast.AST) -> list[int]:
    """Lines of isinstance(x, Node) / type(x) is Node checks outside visitor classes."""
    found = []
    foreign = _foreign_names(tree)

    def walk(node: ast.AST, in_visitor: bool) -> None:
        if isinstance(node, ast.ClassDef):
            in_visitor = in_visitor or bool({ast.unparse(b).split("[")[0].split(".")[-1] for b in node.bases}
                                            & VISITOR_NAMES)
        if not in_visitor:
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "isinstance" and len(node.args) == 2 \
                    and _class_names(node.args[1], foreign) & NODE_NAMES:
                found.append(node.lineno)
            if isinstance(node, ast.Compare) and isinstance(node.left, ast.Call) \
                    and getattr(node.left.func, "id", None) == "type" \
                    and any(isinstance(op, (ast.Is, ast.IsNot, ast.Eq, ast.NotEq)) for op in node.ops) \
                    and any(_class_names(c, foreign) & NODE_NAMES for c in node.comparators):
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


def test_no_type_checks_outside_visitors():
    counts = _counts()
    allowed = {module: n for module, (n, _) in ALLOWED.items()}
    grown = {module: (n, allowed.get(module, 0)) for module, n in counts.items() if n > allowed.get(module, 0)}
    assert not grown, (f"isinstance on TypeInfo nodes outside visitors (found, allowed): {grown}; write a visitor "
                       "branch or use savepoint/types/roles.py")
    stale = {module: (counts.get(module, 0), n) for module, n in allowed.items() if counts.get(module, 0) < n}
    assert not stale, f"fewer checks than ALLOWED lists: lower it to what is found {stale}"
    assert all(reason for _, reason in ALLOWED.values())


def test_the_check_finds_type_checks():
    tree = ast.parse("def f(t):\n    if isinstance(t, (ListType, int)):\n        return type(t) is MapType\n"
                     "class V(TypeInfoVisitor[int]):\n    def visit_list(self, node):\n"
                     "        return isinstance(node, ListType)\n")
    assert type_checks(tree) == [2, 3]
    spark = ast.parse("from pyspark.sql import types as spark_types\nfrom pyspark.sql.types import MapType\n"
                      "def f(t):\n    return isinstance(t, spark_types.MapType) or isinstance(t, MapType)\n")
    assert type_checks(spark) == []
    own = ast.parse("from ..savepoint import types as savepoint_types\nfrom ..savepoint.types import MapType\n"
                    "def f(t):\n    return isinstance(t, savepoint_types.ListType) or type(t) is MapType\n")
    assert type_checks(own) == [4, 4]
    assert "TypeInfo" in NODE_NAMES and TypeInfo.__name__ == "TypeInfo"


def _dispatchers(tree: ast.AST) -> set[str]:
    """The names the module binds to fstate's dispatcher (``from ..savepoint.types import visit``)."""
    return {alias.asname or alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
            and "types" in (node.module or "") for alias in node.names if alias.name == "visit"}


def _is_visitor(node: ast.ClassDef) -> bool:
    return bool({ast.unparse(b).split("[")[0].split(".")[-1] for b in node.bases} & VISITOR_NAMES)


def hand_recursion(tree: ast.AST) -> list[int]:
    """Lines where a visitor walks the tree itself: a call of the dispatcher in a visitor class, or in a
    function that passes it a visitor it was given (``visit(child, visitor)``, ``visit(child, self)``)."""
    dispatchers = _dispatchers(tree)
    found = []

    def walk(node: ast.AST, in_visitor: bool, params: frozenset) -> None:
        if isinstance(node, ast.ClassDef):
            in_visitor = in_visitor or _is_visitor(node)
        if isinstance(node, (ast.FunctionDef, ast.Lambda)):
            params = params | {a.arg for a in node.args.args + node.args.kwonlyargs}
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) in dispatchers and (
                in_visitor or len(node.args) == 2 and getattr(node.args[1], "id", None) in params):
            found.append(node.lineno)
        for child in ast.iter_child_nodes(node):
            walk(child, in_visitor, params)

    walk(tree, False, frozenset())
    return found


def test_no_visitor_recurses_by_hand():
    found = {module: lines for module, path in MODULE_FILES.items()
             if (lines := hand_recursion(ast.parse(path.read_text())))}
    assert not found, (f"visitors calling the dispatcher on a node's children (module: lines): {found}; take the "
                       "children's results (TypeVisitor) or thunks (PreOrderTypeVisitor) the branch is given")


def test_the_check_finds_hand_recursion():
    tree = ast.parse("from ..savepoint.types import visit\n"
                     "def _struct(names, children, visitor):\n    return [visit(c, visitor) for c in children]\n"
                     "class V(TypeVisitor[int]):\n    def visit_list(self, node, element):\n"
                     "        return visit(node.element, V())\n"
                     "class W(PreOrderTypeVisitor[int]):\n    def visit_map(self, node, key, value):\n"
                     "        return [visit(c, self) for c in node.children]\n"
                     "def entry(t):\n    return visit(t, V())\n")
    assert hand_recursion(tree) == [3, 6, 9]
    local = ast.parse("def visit(value, inside):\n    return value\ndef f(spec, inside):\n    visit(spec, inside)\n")
    assert hand_recursion(local) == []  # a function of its own called visit (writers/bootstrap.py's)
