"""SavepointReader: the Python API for reading savepoint state as Spark DataFrames.

    reader = SavepointReader("/savepoints/savepoint-1a2b3c")
    reader.operators()                        # metadata, no Spark needed
    reader.list_state("src", "offsets")       # DataFrame: subtask, index, value
    reader.broadcast_state("rules-op", "rules")  # DataFrame: key, value
    reader.keyed("counter")                   # DataFrame: key + one column per keyed state
"""

from __future__ import annotations

from typing import Any

from ..savepoint.errors import spark_errors
from ..savepoint.loader import Savepoint
from ..savepoint.sql_binding import load_binding
from ..savepoint.summary import summarize
from . import tables
from .options import FORMAT, savepoint_source_options


class SavepointReader:
    def __init__(self, path: str, spark=None, *, allow_external_paths: bool = False,
                 checkpoint_base_dir: str | None = None, fs_options=None, plan: str | None = None):
        """``fs_options``: file-system options for remote paths (endpoint, region, path_style,
        credentials, ...; see savepoint/io/); they travel with every Spark task. ``plan``: the SQL
        job's compiled plan (COMPILE PLAN JSON file), checked against the savepoint here; it names
        the SQL operators' key and state fields (the data source option ``plan``)."""
        self.path = path
        self.allow_external_paths = allow_external_paths
        #: new location of the job's checkpoint directory (holding shared/ and chk-N/) when it moved
        self.checkpoint_base_dir = checkpoint_base_dir
        self.savepoint = Savepoint.open(path, allow_external_paths=allow_external_paths,
                                        checkpoint_base_dir=checkpoint_base_dir, fs_options=fs_options)
        self._spark = spark
        self.plan = plan
        #: the plan matched to the savepoint's operators (``sql_plan.PlanBinding``), or None
        self.plan_binding = load_binding(plan, self.savepoint) if plan else None

    # -- metadata (no Spark) -------------------------------------------------------------------
    @property
    def metadata(self):
        return self.savepoint.metadata

    def info(self) -> dict[str, Any]:
        return summarize(self.savepoint, self.plan_binding)

    def operators(self) -> list[dict[str, Any]]:
        return self.info()["operators"]

    def operator(self, uid: str):
        return self.savepoint.operator(uid)

    # -- DataFrames ----------------------------------------------------------------------------
    @property
    def spark(self):
        """The session DataFrames are read with: the one given (the data source registered on it) or
        one from :func:`~.session.get_spark`."""
        if self._spark is None:
            from .session import get_spark

            self._spark = get_spark()
        else:
            from .datasource import register

            register(self._spark)
        return self._spark

    def _load(self, uid: str, **options):
        """The DataFrame of a state table; an fstate error of the data source (a corrupt header, an
        unknown state) is raised as itself, not as Spark's ``AnalysisException``. The DataFrame's own
        actions raise Spark's exceptions: ``with fstate.spark_errors(): frame.collect()`` raises the
        fstate error they carry."""
        options = savepoint_source_options(self.savepoint, uid, plan=self.plan, **options)
        with spark_errors():
            return self.spark.read.format(FORMAT).options(**options).load()

    def list_state(self, uid: str, state: str):
        """Operator list state (or union state): one row per element, with its subtask."""
        return self._load(uid, table="list", state=state)

    union_state = list_state

    def broadcast_state(self, uid: str, state: str):
        """Broadcast state: key, value (one copy; every subtask holds the same)."""
        return self._load(uid, table="broadcast", state=state)

    def keyed(self, uid: str, states: list[str] | str | None = None, *, flat: bool = False,
              flatten: bool | None = None):
        """All keyed states of an operator as one table: key + one column per state."""
        if isinstance(states, (list, tuple)):
            states = ",".join(states)
        return self._load(uid, table="keyed", state=states, flat=flat, flatten=flatten)

    def timers(self, uid: str, *, flatten: bool | None = None):
        return self._load(uid, table="timers", flatten=flatten)

    # -- without Spark ---------------------------------------------------------------------------
    def table(self, uid: str, *, table: str, state: str | None = None, **kw) -> tables.Table:
        """The Spark-free table (columns + rows) behind each DataFrame, read in this process."""
        op = self.savepoint.operator(uid)
        if table == "list":
            return tables.list_state_table(op, state)
        if table == "broadcast":
            return tables.broadcast_state_table(op, state)
        sql = self.plan_binding.operator(op) if self.plan_binding is not None else None
        if table == "keyed":
            return tables.keyed_table(op, [s for s in state.split(",")] if state else None, sql=sql, **kw)
        if table == "timers":
            return tables.timers_table(op, sql=sql, **kw)
        raise ValueError(f"unknown table kind {table}")
