import os

import pytest
from hypothesis import HealthCheck, settings

# The machine is small and shared with JVMs and Spark: no per-example deadlines.
settings.register_profile("fstate", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("fstate")


def pytest_addoption(parser):
    parser.addoption("--fuzz-long", action="store_true", help="run the long fuzzing campaign (10 000+ cases)")
    parser.addoption("--exhaustive", action="store_true",
                     help="every case of the tests that run representative ones by default (Spark comparisons, "
                          "bit flips, random kills; CONTRIBUTING.md, 'Running the tests', lists them)")


@pytest.fixture(scope="session")
def exhaustive(request) -> bool:
    """``--exhaustive``: run every case, not only the representative ones of the quick default run."""
    return request.config.getoption("--exhaustive")


@pytest.fixture(scope="session")
def spark():
    from fstate.readers.session import get_spark

    s = get_spark("local[2]")
    yield s


# The AWS SDK must never ask the EC2 instance-metadata address for credentials or a region while
# testing (only loopback traffic here); set before any Spark JVM or worker inherits the environment.
os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")


@pytest.fixture(scope="session")
def s3(tmp_path_factory):
    """A real S3-protocol server (moto) on 127.0.0.1 with the shipped samples uploaded to
    s3://samples/<sample name>/; dummy credentials in the environment, the endpoint, region and
    path-style access as fstate file-system options (``s3.options``). Stopped at the end."""
    from tests.s3_support import DUMMY_ENV, start_server
    from tests.support import sample_dirs

    server = start_server(tmp_path_factory.mktemp("moto"))
    saved = {k: os.environ.get(k) for k in DUMMY_ENV}
    os.environ.update(DUMMY_ENV)
    try:
        for sample in sample_dirs():
            server.upload(sample, f"s3://samples/{sample.name}")
        yield server
    finally:
        server.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
