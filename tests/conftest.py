import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"


def sample_dirs() -> list[Path]:
    return sorted(p.parent for p in SAMPLES.glob("*/dump.json"))


def sample_snapshot(sample: Path) -> Path:
    dump = json.loads((sample / "dump.json").read_text())
    return sample / dump["snapshot_path"]


def pytest_addoption(parser):
    parser.addoption("--fuzz-long", action="store_true", help="run the long fuzzing campaign (10 000+ cases)")


@pytest.fixture(scope="session")
def spark():
    from fstate.readers.session import get_spark

    s = get_spark("local[2]")
    yield s
