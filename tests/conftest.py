import pytest


def pytest_addoption(parser):
    parser.addoption("--fuzz-long", action="store_true", help="run the long fuzzing campaign (10 000+ cases)")


@pytest.fixture(scope="session")
def spark():
    from fstate.readers.session import get_spark

    s = get_spark("local[2]")
    yield s
