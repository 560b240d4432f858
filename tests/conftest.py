import pytest
from hypothesis import HealthCheck, settings

# The machine is small and shared with JVMs and Spark: no per-example deadlines.
settings.register_profile("fstate", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("fstate")


def pytest_addoption(parser):
    parser.addoption("--fuzz-long", action="store_true", help="run the long fuzzing campaign (10 000+ cases)")


@pytest.fixture(scope="session")
def spark():
    from fstate.readers.session import get_spark

    s = get_spark("local[2]")
    yield s
