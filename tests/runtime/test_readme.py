"""The example job in runtime/README.md runs as written and prints what the README says."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "runtime" / "README.md"


def test_readme_example_runs():
    text = README.read_text(encoding="utf-8")
    code = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, str(README), "exec"), {"__name__": "runtime_readme_example"})
    lines = out.getvalue().splitlines()
    assert lines[0] == "[('be', 1000), ('not', 500), ('or', 500), ('to', 1000)]"
    assert lines[1].startswith("JobStatus.FINISHED [")
    assert lines[2] == "['be 1001', 'to 1001']"
