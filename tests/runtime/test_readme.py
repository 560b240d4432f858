"""The example job in runtime/README.md runs as written and prints what the README says."""

from __future__ import annotations

import contextlib
import io
import re
import threading
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "runtime" / "README.md"
DEADLINE_S = 300  # the example takes about a second; its wait loop has no deadline of its own


def test_readme_example_runs():
    text = README.read_text(encoding="utf-8")
    code = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    namespace = {"__name__": "runtime_readme_example"}
    errors: list[BaseException] = []

    def run():
        try:
            exec(compile(code, str(README), "exec"), namespace)
        except BaseException as e:  # noqa: BLE001 - re-raised in the test's thread
            errors.append(e)

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        example = threading.Thread(target=run, name="readme-example", daemon=True)
        example.start()
        example.join(DEADLINE_S)
    if example.is_alive():
        client = namespace.get("client")
        if client is not None:
            client.cancel()  # the thread itself stays in its wait loop (a daemon: it does not block the exit)
        raise AssertionError(f"the README example did not finish within {DEADLINE_S} s; it printed: "
                             f"{out.getvalue()!r}")
    if errors:
        raise errors[0]
    lines = out.getvalue().splitlines()
    assert lines[0] == "[('be', 1000), ('not', 500), ('or', 500), ('to', 1000)]"
    assert lines[1].startswith("JobStatus.FINISHED [")
    assert lines[2] == "['be 1001', 'to 1001']"
