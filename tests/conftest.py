import os

import pytest
from hypothesis import HealthCheck, settings

# fstate's Spark driver class-data archive (readers/spark_cds.py) beside the suite's other caches: a
# fresh cache (FSTATE_CACHE, as tests/flink/harness.py uses it) starts without one, as a new user does.
os.environ.setdefault("FSTATE_SPARK_CDS", os.path.join(
    os.environ.get("FSTATE_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "fstate"), "spark-cds"))

# The machine is small and shared with JVMs and Spark: no per-example deadlines.
settings.register_profile("fstate", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("fstate")


def pytest_xdist_auto_num_workers(config):
    """``-n auto`` (pyproject's addopts): a worker per core, at most 4; each may hold a Spark session
    and a Flink JVM, and the oracle's jobs are small (tests/flink/VERSIONS.md, 'Suite time')."""
    return max(1, min(4, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1))


#: the xdist group of the tests that use the ``spark`` fixture (pyproject's ``--dist loadgroup``)
SPARK_GROUP = "spark"


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    """The Spark tests (the ``spark`` fixture or marker) in one xdist group, so that one worker starts
    Spark (a session start and its first read are about 15 s of a worker's time) while the others run
    the rest. Oracle tests that use Spark stay with their module (its Flink runs are module fixtures).
    Before pytest-xdist's own hook, which turns the group into the test id's ``@spark`` suffix."""
    for item in items:
        uses_spark = "spark" in getattr(item, "fixturenames", ()) or item.get_closest_marker("spark") is not None
        if uses_spark and item.get_closest_marker("flink") is None:
            item.add_marker(pytest.mark.xdist_group(SPARK_GROUP))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """``--dist loadgroup`` as ``--dist loadfile`` (a module whole on one worker, its module fixtures
    made once) except for the ``spark`` group, one unit sent first: its worker takes modules after it,
    the others take modules from the start (tests/flink/VERSIONS.md, 'Suite time')."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class SparkGroupFirst(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            if nodeid.rfind("@") > nodeid.rfind("]"):  # a group (xdist's test: a parameter may hold "@")
                return nodeid.rsplit("@", 1)[1]
            return nodeid.split("::", 1)[0]

        def _assign_work_unit(self, node) -> None:
            if SPARK_GROUP in self.workqueue:
                self.workqueue.move_to_end(SPARK_GROUP, last=False)
            super()._assign_work_unit(node)

    return SparkGroupFirst(config, log)


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
def spark(tmp_path_factory):
    """The test session's Spark: a plain ``SparkSession.builder`` session, as a notebook or spark-submit
    has, made without fstate's settings; ``fstate.readers.register`` is all fstate adds. Every Spark
    test so runs on what users run (fstate's own quiet start-up, readers/session.get_spark, is run by the
    real-process test in tests/writers/test_bootstrap_validation.py). One setting is the suite's own:
    two shuffle partitions (Spark's default, 200, makes every join, grouping and write of a few
    hundred rows 200 tasks; fstate's get_spark sets 8), which changes no result; Spark's catalog
    directory (``spark-warehouse``, made in the working directory when a query first touches the
    catalog) in the session's temporary directory, not in the checkout; and the driver JVM on the C1
    compiler only with the serial collector, as the Flink oracle's JVMs (tests/flink/harness.py): a
    test's Spark jobs are short, C2's compiling of Spark's hot code never pays back, and a second
    collector thread competes with the other xdist worker (a third less JVM CPU time over the Spark
    tests; tests/flink/VERSIONS.md, 'Suite time')."""
    import sys

    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # the workers must import this fstate
    s = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
         .config("spark.ui.showConsoleProgress", "false").config("spark.sql.shuffle.partitions", "2")
         .config("spark.sql.warehouse.dir", str(tmp_path_factory.mktemp("spark-warehouse")))
         .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
         .getOrCreate())
    s.sparkContext.setLogLevel("ERROR")
    import fstate.readers

    fstate.readers.register(s)
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



#: the ledgers of the pytest-xdist workers (tests/flink/harness.py LEDGER), gathered by the controller
_WORKER_LEDGERS: list[list] = []


def _ledger() -> list:
    import sys

    harness = sys.modules.get("tests.flink.harness")
    return [list(vars(e).values()) for e in harness.LEDGER] if harness is not None else []


def pytest_sessionfinish(session):
    if hasattr(session.config, "workeroutput"):  # a pytest-xdist worker: hand the ledger to the controller
        session.config.workeroutput["flink_ledger"] = _ledger()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    _WORKER_LEDGERS.append(getattr(node, "workeroutput", {}).get("flink_ledger", []))


def pytest_terminal_summary(terminalreporter):
    """What real Flink cost this run: every javac and job JVM the oracle started (none when its cache
    was warm), by job and release (tests/flink/VERSIONS.md, 'Suite time'); with pytest-xdist, of
    every worker."""
    ledger = _ledger() + [e for worker in _WORKER_LEDGERS for e in worker]
    if not ledger:
        return
    by: dict[tuple[str, str, str], list[float]] = {}
    tests: dict[str, float] = {}
    for what, job, version, seconds, test in ledger:
        by.setdefault((what, job, version), []).append(seconds)
        tests[test] = tests.get(test, 0.0) + seconds
    total = sum(e[3] for e in ledger)
    terminalreporter.section(f"real Flink: {len(ledger)} processes, {total:.0f} s")
    for (what, job, version), secs in sorted(by.items(), key=lambda kv: -sum(kv[1])):
        terminalreporter.write_line(f"{sum(secs):7.1f} s  {len(secs):3d} x {what:5s} {job} {version}")
    terminalreporter.write_line("the tests that started them (top 15):")
    for test, secs in sorted(tests.items(), key=lambda kv: -kv[1])[:15]:
        terminalreporter.write_line(f"{secs:7.1f} s  {test or '(outside a test)'}")
