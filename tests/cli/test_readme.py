"""The README's examples run as written."""

from pathlib import Path

from fstate.readers import tables
from fstate.savepoint.loader import Savepoint

README = Path(__file__).resolve().parents[2] / "README.md"


def test_runtime_example(tmp_path):
    code = README.read_text().split("## The runtime")[1].split("```python")[1].split("```")[0]
    code = code.replace("/tmp/wc", str(tmp_path))
    exec(compile(code, "README.md", "exec"), {})
    counts = Savepoint.open(str(tmp_path / "savepoints")).operator("counts")
    assert dict(tables.keyed_table(counts).rows()) == {"to": 200, "be": 200, "or": 100, "not": 100}


def test_setup_command_names_a_shipped_sample():
    text = README.read_text()
    line = next(ln for ln in text.splitlines() if ln.startswith("pip install -e . && fstate info"))
    sample = line.split("fstate info ")[1].split(" ")[0]
    assert (README.parent / sample).is_dir()
    Savepoint.open(str(README.parent / sample)).operator("keyed")
