"""CONTRIBUTING.md's "Adding a type" recipe holds: carried out on a copy of the package (a dummy node
class, touching only the files the recipe names), every module imports and every visitor answers for
the new node; leaving out any one file the recipe names for a visitor makes the import fail."""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ROOMS = ("savepoint", "readers", "writers", "cli", "runtime")

NODE = '''

class DummyType(TypeInfo):
    """A node added by tests/test_contributing.py."""

    snapshot_class = "com.acme.DummySerializerSnapshot"
    length = 4

    @property
    def name(self) -> str:
        return "Dummy"
'''

#: the recipe's own files get these edits; every other package file it names gets a branch per visitor
SPECIAL = {"savepoint/types/composites.py", "savepoint/types/__init__.py", "savepoint/types/visitor.py",
           "savepoint/types/snapshots.py"}

CHECK = '''
import importlib, pkgutil
import fstate
from fstate.savepoint.types import DummyType, TypeInfoVisitor, visit
from fstate.savepoint.types.visitor import BASES, BRANCHES
assert BRANCHES[DummyType] == "visit_dummy"
for room in {rooms!r}:
    package = importlib.import_module("fstate." + room)
    for module in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        importlib.import_module(module.name)
def subclasses(cls):
    return {{s for c in cls.__subclasses__() for s in {{c}} | subclasses(c)}}
visitors = subclasses(TypeInfoVisitor) - set(BASES)
assert len(visitors) >= 10, visitors
for cls in visitors:
    assert getattr(cls, "visit_dummy")(None, DummyType()) == "dummy", cls
from fstate.readers.schema import SparkTypeVisitor
assert visit(DummyType(), SparkTypeVisitor()) == "dummy"
print("ok", len(visitors))
'''


def recipe_files() -> list[str]:
    """The package files CONTRIBUTING's "Adding a type" section names (not the tests)."""
    text = (REPO / "CONTRIBUTING.md").read_text()
    section = text[text.index("## Adding a type"):]
    section = section[:section.index("\n## ", 3)]
    section = section[:section.index("A new scalar kind")]
    return sorted({path for path in re.findall(r"`(\w+/[\w/]+\.py)`", section) if not path.startswith("tests/")})


def _add_branches(path: Path) -> None:
    """A ``visit_dummy`` method in every class of the file that derives from a visitor."""
    source = path.read_text()
    lines = source.splitlines(keepends=True)
    tree = ast.parse(source)
    inserts = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and any(
                "Visitor" in ast.unparse(base) or "Types" in ast.unparse(base) for base in node.bases):
            first = node.body[0]
            indent = " " * first.col_offset
            inserts.append((first.lineno - 1, f"{indent}def visit_dummy(self, node):\n{indent}    return 'dummy'\n\n"))
    assert inserts, f"{path} names no visitor class"
    for line, text in sorted(inserts, reverse=True):
        lines.insert(line, text)
    path.write_text("".join(lines))


def _apply_recipe(package: Path, files: list[str]) -> None:
    types = package / "savepoint" / "types"
    with open(types / "composites.py", "a") as f:
        f.write(NODE)
    init = types / "__init__.py"
    init.write_text(init.read_text() + "\nfrom .composites import DummyType  # noqa: E402\n__all__.append('DummyType')\n")
    visitor = types / "visitor.py"
    text = visitor.read_text()
    text = text.replace("BRANCHES: dict[type[TypeInfo], str] = {", "BRANCHES: dict[type[TypeInfo], str] = {\n"
                        "    DummyType: \"visit_dummy\",", 1)
    text = text.replace("from .base import TypeInfo\n", "from .base import TypeInfo\nfrom .composites import DummyType\n", 1)
    text += textwrap.dedent('''
        TypeInfoVisitor.visit_dummy = abstractmethod(lambda self, node: None)
    ''')
    visitor.write_text(text)
    for name in files:
        if name not in SPECIAL:
            _add_branches(package / name)


def _run(tmp: Path, files: list[str], check: str = CHECK.format(rooms=ROOMS)) -> subprocess.CompletedProcess:
    package = tmp / "fstate"
    shutil.copytree(REPO / "fstate", package)
    for room in ROOMS:
        shutil.copytree(REPO / room, package / room, ignore=shutil.ignore_patterns("__pycache__", "*.c", "*.h"))
    _apply_recipe(package, files)
    return subprocess.run([sys.executable, "-c", check], cwd=tmp, capture_output=True,
                          text=True, env={"PYTHONPATH": str(tmp), "PATH": "/usr/bin:/bin"})


def test_the_recipe_names_every_file_a_new_type_needs(tmp_path):
    files = recipe_files()
    assert SPECIAL - {"savepoint/types/snapshots.py"} <= set(files), files
    result = _run(tmp_path / "all", files)
    assert result.returncode == 0 and result.stdout.startswith("ok"), result.stderr[-2000:]


@pytest.mark.parametrize("left_out", [f for f in recipe_files() if f not in SPECIAL])
def test_leaving_out_a_visitor_file_fails(tmp_path, left_out):
    """Importing the file left out fails (the other files import, as the test above shows): one module's
    imports, not the package's."""
    module = "fstate." + left_out.removesuffix(".py").replace("/", ".")
    result = _run(tmp_path, [f for f in recipe_files() if f != left_out], f"import {module}")
    assert result.returncode != 0
    assert "has no branch visit_dummy" in result.stderr, result.stderr[-2000:]
