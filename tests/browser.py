"""Pages rendered by a real headless Chromium (Debian's ``chromium`` package): the DOM after its
scripts ran, and every console message (errors, uncaught exceptions) it logged."""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

CHROMIUM = "chromium"
INSTALL = "apt-get install -y chromium"
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--enable-logging=stderr", "--v=0")
#: a console message in Chromium's log: [pid:tid:time:INFO:CONSOLE:line] "text", source: url (line)
_CONSOLE = re.compile(r"^\[[^\]]*:CONSOLE[^\]]*\] (.*)$", re.M)


@dataclass(frozen=True)
class Rendered:
    dom: str
    console: list[str]


def chromium() -> str:
    """The Chromium executable; the test fails with one line saying how to install it when missing."""
    found = shutil.which(CHROMIUM)
    if found is None:
        pytest.fail(f"chromium is missing: install it with `{INSTALL}` (Debian's package; see CONTRIBUTING.md)",
                    pytrace=False)
    return found


def render(page: Path, timeout: float = 120) -> Rendered:
    """``page`` (a local file) as Chromium's DOM after load, with its console messages; no network
    (the page must need none), a fresh profile each time."""
    executable = chromium()
    with tempfile.TemporaryDirectory(prefix="fstate-chromium-") as profile:
        result = subprocess.run([executable, *FLAGS, f"--user-data-dir={profile}", "--dump-dom",
                                 page.resolve().as_uri()], capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, result.stderr[-2000:]
    return Rendered(result.stdout, _CONSOLE.findall(result.stderr))
