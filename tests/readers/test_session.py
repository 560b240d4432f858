"""The settings fstate starts a Spark session with (no JVM is started here)."""

import pytest

from fstate.readers import session


class _Started(Exception):
    pass


def _settings(monkeypatch, master, conf, tasks_only, archived: list | None = None) -> dict:
    from pyspark.sql import SparkSession

    seen: list = []

    def capture(settings, own_java_options=False):
        seen.append(dict(settings))
        if archived is not None:
            archived.append(own_java_options)
        raise _Started

    monkeypatch.setattr(SparkSession, "getActiveSession", staticmethod(lambda: None))
    monkeypatch.setattr(session, "_start_quiet_jvm", capture)
    with pytest.raises(_Started):
        session.get_spark(master, conf, tasks_only=tasks_only)
    return seen[0]


def test_a_session_for_python_tasks_only_compiles_with_c1_and_forks_its_workers_from_fstates_daemon(monkeypatch):
    plain = _settings(monkeypatch, "local[1]", None, False)
    assert "TieredStopAtLevel" not in plain["spark.driver.extraJavaOptions"]
    assert "spark.python.daemon.module" not in plain
    tasks = _settings(monkeypatch, "local[1]", None, True)
    assert tasks["spark.driver.extraJavaOptions"] == plain["spark.driver.extraJavaOptions"] + " -XX:TieredStopAtLevel=1"
    assert tasks["spark.python.daemon.module"] == "fstate.readers.spark_daemon"
    archived: list = []
    own = _settings(monkeypatch, None, {"spark.driver.extraJavaOptions": "-Dx=1",
                                        "spark.python.daemon.module": "pyspark.daemon"}, True, archived)
    assert own["spark.driver.extraJavaOptions"] == "-Dx=1" and own["spark.python.daemon.module"] == "pyspark.daemon"
    _settings(monkeypatch, "local[1]", None, True, archived)
    assert archived == [False, True]  # the class-data archive only with fstate's own Java options
