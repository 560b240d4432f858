"""Flink SQL operators: what they are, from ``_metadata`` alone or with the job's compiled plan.

Flink stores no field names in the state of SQL operators: keys, accumulators and stored rows are
``RowData`` with positional fields. Two sources of names, both without Spark:

* the operator's **name** (metadata V5+, e.g. ``GroupAggregate[4]``, ``Sink: agg_out[5]``) or its
  **uid** (``table.exec.uid.generation: ALWAYS``, e.g. ``4_group-aggregate``) give its kind and the
  exec node id: :func:`sql_operator`;
* a ``COMPILE PLAN`` JSON (:func:`load_plan`, :func:`parse_plan`) names, per exec node, the input
  row's fields, the grouping / partition / join keys and the aggregate calls; :func:`bind` matches
  its nodes to the savepoint's operators (by node id in names or uids, or by the uid hash of
  ``<node id>_<transformation>`` when metadata V4 stores neither) and refuses a plan of another job.

The seam for the table layer is :func:`field_names`: an operator (a :class:`SqlOperatorPlan`, a
bare :class:`SqlOperator`, or None) and the shape of a decoded state (:class:`StateSchema`: how
many fields its key, value, map key and map value rows have) give the names of those fields, with
``f0, f1, ...`` wherever the plan does not say (or says something of another arity).

Plan shapes (ExecNode JSON, the same from Flink 1.15 to 2.3): ``{"flinkVersion", "nodes": [{"id",
"type": "stream-exec-<name>_<version>", "description", "outputType", ...}], "edges": [{"source",
"target", ...}]}``; a node's inputs are the sources of the edges targeting it, in edge order (a
join's left input first). ``outputType`` is a row type, either as a string
(``ROW<`k` VARCHAR(2147483647), `n` BIGINT NOT NULL>``) or as an object
(``{"type": "ROW", "fields": [{"name", "fieldType"}]}``) when a field type has no string form.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Iterable

from .errors import InvalidArgumentError
from .sql_names import FieldNames, SqlOperatorPlan, StateSchema, describe_node, field_names, row_field_names
from .types.hashing import operator_id_for_uid

# ---------------------------------------------------------------------------------------------
# operator kinds

#: exec node kinds (the ``stream-exec-<kind>`` of plan node types) that hold keyed state
STATEFUL_KINDS = frozenset({
    "group-aggregate", "global-group-aggregate", "incremental-group-aggregate", "group-table-aggregate",
    "group-window-aggregate", "window-aggregate", "global-window-aggregate", "deduplicate",
    "window-deduplicate", "rank", "window-rank", "sort-limit", "limit", "join", "interval-join",
    "window-join", "temporal-join", "over-aggregate", "changelog-normalize", "match", "sink",
    "temporal-sort", "process-table-function", "multi-join", "python-group-aggregate",
    "python-group-window-aggregate", "python-over-aggregate", "python-group-table-aggregate"})
#: the other exec node kinds, for recognising an operator as an SQL one by its name or uid
STATELESS_KINDS = frozenset({
    "calc", "async-calc", "python-calc", "correlate", "async-correlate", "python-correlate", "exchange",
    "expand", "union", "values", "watermark-assigner", "mini-batch-assigner", "drop-update-before",
    "local-group-aggregate", "local-window-aggregate", "table-source-scan", "legacy-table-source-scan",
    "data-stream-scan", "legacy-sink", "lookup-join", "window-table-function", "multiple-input", "sort",
    "delta-join", "ml-predict-table-function", "vector-search-table-function"})
SQL_KINDS = STATEFUL_KINDS | STATELESS_KINDS

#: operator names that are not their kind spelled in CamelCase
_NAME_ALIASES = {"DataStreamToTable": "data-stream-scan", "Source": "table-source-scan", "Sink": "sink",
                 "AppendOnlyTopN": "rank", "RetractableTopN": "rank", "UpdatableTopN": "rank",
                 "FastTop1": "rank", "AppendOnlyFirstN": "rank"}
#: transformation names in generated uids that are not the exec node kind
_UID_ALIASES = {"external-datastream": "data-stream-scan", "source": "table-source-scan",
                "materialize": "sink", "constraint-validator": "sink", "partitioner": "sink",
                "timestamp-inserter": "sink", "filter-left": "interval-join", "filter-right": "interval-join",
                "pad-left": "interval-join", "pad-right": "interval-join"}
#: kinds one operator of a job may have while its plan node says another (SqlJob's plan reads a
#: table where the job converts a DataStream; a legacy and a new source or sink are one role)
_FAMILIES = {"data-stream-scan": "source", "table-source-scan": "source", "legacy-table-source-scan": "source",
             "legacy-sink": "sink"}

_NAME = re.compile(r"^(?P<word>[A-Z][A-Za-z0-9]*)(?::\s.*?)?(?:\[(?P<id>\d+)\])?(?:\(.*)?$", re.S)
_UID = re.compile(r"^(?P<id>\d+)_(?P<kind>[a-z][a-z0-9-]*)$")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


@dataclass(frozen=True)
class SqlOperator:
    """An operator of the table runtime as its name or uid shows it: its kind (the exec node kind,
    e.g. ``group-aggregate``) and exec node id (the ``[4]`` of ``GroupAggregate[4]``; None when the
    name has none, like ``DataStreamToTable``)."""

    kind: str
    node_id: int | None

    @property
    def stateful(self) -> bool:
        return self.kind in STATEFUL_KINDS


def _kebab(word: str) -> str:
    return _CAMEL.sub("-", word).lower()


def sql_operator(name: str | None, uid: str | None = None) -> SqlOperator | None:
    """The SQL kind and node id of an operator from its name (``GroupAggregate[4]``) and its
    generated uid (``4_group-aggregate``), either of which may be missing (metadata V4 has neither);
    None for a DataStream operator."""
    from_name = from_uid = None
    if name:
        match = _NAME.match(name.strip())
        if match:
            word, node_id = match.group("word"), match.group("id")
            kind = _NAME_ALIASES.get(word) or _kebab(word)
            # "Source: x" and "Sink: x" are SQL operators only with a node id ("Source: events-source" is not)
            if kind in SQL_KINDS and (node_id is not None or (word not in ("Source", "Sink") and ":" not in name)):
                from_name = SqlOperator(kind, int(node_id) if node_id is not None else None)
    if uid:
        match = _UID.match(uid)
        if match:
            kind = _UID_ALIASES.get(match.group("kind"), match.group("kind"))
            if kind in SQL_KINDS:
                from_uid = SqlOperator(kind, int(match.group("id")))
    if from_name is None or from_uid is None:
        return from_name or from_uid
    return SqlOperator(from_name.kind, from_name.node_id if from_name.node_id is not None else from_uid.node_id)


def _family(kind: str) -> str:
    return _FAMILIES.get(kind, kind)


# ---------------------------------------------------------------------------------------------
# the plan


_NODE_TYPE = re.compile(r"^(?:stream|batch)-exec-(?P<kind>[a-z0-9-]+?)(?:_(?P<version>\d+))?$")


@dataclass(frozen=True)
class PlanNode:
    id: int
    type: str  # as in the plan, e.g. stream-exec-group-aggregate_1
    kind: str  # group-aggregate
    description: str
    output_fields: tuple[str, ...]
    spec: dict = field(repr=False, compare=False, hash=False)

    @property
    def transformation_uid(self) -> str:
        """The uid ``table.exec.uid.generation: ALWAYS`` gives the node's (main) operator."""
        return f"{self.id}_{self.kind}"


@dataclass(frozen=True)
class Plan:
    """A compiled plan: its nodes by id and each node's inputs in order."""

    path: str
    flink_version: str | None
    nodes: dict[int, PlanNode]
    inputs: dict[int, tuple[int, ...]]

    def input_fields(self, node_id: int, index: int = 0) -> tuple[str, ...]:
        sources = self.inputs.get(node_id, ())
        return self.nodes[sources[index]].output_fields if index < len(sources) else ()


def parse_plan(text: str | bytes, path: str = "plan") -> Plan:
    """A ``COMPILE PLAN`` JSON document; anything else raises InvalidArgumentError naming ``path``."""
    try:
        document = json.loads(text)
    except ValueError as error:
        raise InvalidArgumentError(f"not a JSON plan: {error}", path) from None
    if not isinstance(document, dict) or not isinstance(document.get("nodes"), list):
        raise InvalidArgumentError("not a Flink compiled plan (COMPILE PLAN JSON): no 'nodes' list", path)
    nodes: dict[int, PlanNode] = {}
    for raw in document["nodes"]:
        node_id = raw.get("id") if isinstance(raw, dict) else None
        match = _NODE_TYPE.match(str(raw.get("type", ""))) if isinstance(raw, dict) else None
        if not isinstance(node_id, int) or match is None:
            raise InvalidArgumentError(f"not a Flink compiled plan: node {json.dumps(raw)[:80]} has no id and "
                                       "stream-exec type", path)
        try:
            fields = tuple(row_field_names(raw["outputType"])) if "outputType" in raw else ()
        except ValueError as error:
            raise InvalidArgumentError(f"node {node_id}: {error}", path) from None
        nodes[node_id] = PlanNode(node_id, raw["type"], match.group("kind"), str(raw.get("description", "")),
                                  fields, raw)
    inputs: dict[int, list[int]] = {}
    for edge in document.get("edges") or []:
        source, target = (edge.get("source"), edge.get("target")) if isinstance(edge, dict) else (None, None)
        if source not in nodes or target not in nodes:
            raise InvalidArgumentError(f"edge {json.dumps(edge)[:80]} joins nodes the plan does not have", path)
        inputs.setdefault(target, []).append(source)
    version = document.get("flinkVersion")
    return Plan(path, str(version) if version is not None else None, nodes,
                {target: tuple(sources) for target, sources in inputs.items()})


def load_plan(path: str) -> Plan:
    """Read and parse the plan at ``path`` (local or a URI fstate's file systems read)."""
    from .io import io_for

    io = io_for(path)
    if not io.exists(path) or io.is_dir(path):
        raise InvalidArgumentError("no such plan file (a JSON file from Flink's COMPILE PLAN)", path)
    return parse_plan(io.read(path), path)


# ---------------------------------------------------------------------------------------------
# matching a plan to a savepoint


@dataclass
class PlanBinding:
    """A plan matched to one savepoint: the plan's description of each SQL operator, by uid hash."""

    plan: Plan
    operators: dict[str, SqlOperatorPlan]

    def operator(self, operator) -> SqlOperatorPlan | None:
        """The plan's description of an OperatorView (None: no node of the plan)."""
        return self.operators.get(operator.uid_hash)


def bind(plan: Plan, operators: Iterable[Any], source: str | None = None) -> PlanBinding:
    """Match the plan's nodes to operators (objects with ``name``, ``uid`` and ``uid_hash``, e.g. a
    Savepoint's OperatorViews). An operator whose name or uid has a node id the plan lacks, or
    whose kind differs from that node's, or a plan matching none of the operators, is an
    InvalidArgumentError naming the plan file: the plan is another job's."""
    operators = list(operators)
    by_uid_hash = {node.id: operator_id_for_uid(node.transformation_uid).hex() for node in plan.nodes.values()}
    matched: dict[str, SqlOperatorPlan] = {}
    for operator in operators:
        known = sql_operator(operator.name, operator.uid)
        node = None
        if known is not None and known.node_id is not None:
            node = plan.nodes.get(known.node_id)
            where = f"operator {operator.name or operator.uid} of {source or 'the savepoint'}"
            if node is None:
                raise InvalidArgumentError(f"the plan has no node {known.node_id} for {where}: "
                                           "it is not the plan of this job", plan.path)
            if _family(node.kind) != _family(known.kind):
                raise InvalidArgumentError(f"node {node.id} of the plan is a {node.kind}, but {where} is a "
                                           f"{known.kind}: it is not the plan of this job", plan.path)
        elif known is None and not operator.name and not operator.uid:
            node = next((plan.nodes[node_id] for node_id, hashed in by_uid_hash.items()
                         if hashed == operator.uid_hash), None)
        if node is not None:
            matched[operator.uid_hash] = describe_node(plan, node)
    if not matched:
        raise InvalidArgumentError(f"no operator of {source or 'the savepoint'} is a node of this plan "
                                   "(by node id in names, generated uids or their hashes)", plan.path)
    return PlanBinding(plan, matched)


__all__ = ["SqlOperator", "sql_operator", "STATEFUL_KINDS", "SQL_KINDS", "row_field_names", "PlanNode", "Plan",
           "parse_plan", "load_plan", "PlanBinding", "bind", "SqlOperatorPlan", "StateSchema",
           "FieldNames", "field_names", "describe_node"]
