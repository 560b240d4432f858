"""Carrying a savepoint to a changed job: another SQL query, another Flink release, or both.

    upgrader = SavepointUpgrader("/sp/old", old_plan="old.json", new_plan="new.json",
                                 template="/sp/new-job-empty")         # or flink_version="2.3"
    report = upgrader.report()        # what happens to each operator's state (nothing written)
    upgrader.write("/sp/new", allow_empty=True)

Inputs: the old savepoint; for SQL jobs the old and the new job's compiled plans (``COMPILE PLAN``);
the target: a *template* (a savepoint the new job took right after starting without state: its
operator ids, parallelism, max parallelism, serializers and Flink release), or, for SQL jobs run
with ``table.exec.uid.generation: ALWAYS``, nothing (the new operator ids are the hashes of the new
plan's uids), and ``flink_version`` for another release.

Stateful SQL operators are paired by what their state depends on (``savepoint/sql_upgrade.py``);
every other operator by its operator id. Each gets one :class:`Step`: carried (its state under the
new id), migrated (re-encoded: ``writers/sql_migration.py``), new (starts empty), dropped, or
incompatible (refused with the reason). Writing refuses anything incompatible, and anything that
starts empty or is dropped unless ``allow_empty`` / ``allow_drop`` say so; the new savepoint is
verified before it is moved into place.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from dataclasses import dataclass
from typing import Any

from ..savepoint import keyed
from ..savepoint.builder import SavepointBuilder, metadata_version_for, operator_proxy_version_for
from ..savepoint.errors import InvalidArgumentError
from ..savepoint.loader import OperatorView, Savepoint
from ..savepoint.metadata import OperatorState
from ..savepoint.sql_binding import bind_savepoint
from ..savepoint.sql_plan import Plan, load_plan
from ..savepoint.sql_upgrade import Decision, Pairing, match_plans
from ..savepoint.types.hashing import operator_id_for_uid
from .flink_target import carry_for_target, operator_carry_for_target, operator_proxy_version_of
from .reencode import KeyedReencode, StateSource
from .rewrite import HandleMapper, reencoded_state
from .sql_migration import sql_reencode

_GENERATED_UID = re.compile(r"^\d+_[a-z][a-z0-9-]*$")
TEMPLATE_HINT = "--template (a savepoint the new job took right after starting without state)"


@dataclass(frozen=True)
class Target:
    """An operator of the new job: its identity and layout, and (from a template) its state header."""

    operator_id: bytes
    uid: str | None
    name: str | None
    parallelism: int
    max_parallelism: int
    view: OperatorView | None = None

    @classmethod
    def of(cls, view: OperatorView) -> "Target":
        return cls(view.state.operator_id, view.uid, view.name, view.parallelism, view.max_parallelism, view)

    @property
    def keyed_meta(self):
        return self.view.keyed_meta if self.view is not None and self.view.has_keyed_state else None

    @property
    def display_name(self) -> str:
        return self.uid or self.name or self.operator_id.hex()


@dataclass
class Step:
    """What happens to one operator's state."""

    decision: Decision
    reason: str
    old: OperatorView | None = None
    target: Target | None = None
    pairing: Pairing | None = None
    #: writing this step needs a template (the new operator id or serializers are not known)
    needs_template: bool = False

    @property
    def sql(self) -> bool:
        return self.pairing is not None

    @property
    def fresh(self) -> tuple[str, ...]:
        return self.pairing.fresh if self.pairing is not None and self.decision is Decision.MIGRATED else ()

    @property
    def lost(self) -> tuple[str, ...]:
        return self.pairing.lost if self.pairing is not None and self.decision is Decision.MIGRATED else ()

    @property
    def old_name(self) -> str | None:
        if self.old is not None:
            return self.old.display_name
        return self.pairing.old.describe() if self.pairing is not None and self.pairing.old is not None else None

    @property
    def new_name(self) -> str | None:
        if self.target is not None:
            return self.target.display_name
        return self.pairing.new.describe() if self.pairing is not None and self.pairing.new is not None else None

    def to_dict(self) -> dict[str, Any]:
        shape = lambda s: None if s is None else {"node_id": s.node.id, "kind": s.kind,  # noqa: E731
                                                  "key": list(s.key_names), "sinks": sorted(s.sinks)}
        return {"decision": self.decision.value, "reason": self.reason, "old": self.old_name, "new": self.new_name,
                "old_operator_id": self.old.uid_hash if self.old is not None else None,
                "new_operator_id": self.target.operator_id.hex() if self.target is not None else None,
                "old_node": shape(self.pairing.old) if self.pairing else None,
                "new_node": shape(self.pairing.new) if self.pairing else None,
                "fresh": list(self.fresh), "dropped_parts": list(self.lost), "needs_template": self.needs_template}


@dataclass
class UpgradeReport:
    steps: list[Step]
    source_version: int
    target_version: int

    @property
    def refused(self) -> list[Step]:
        return [s for s in self.steps if s.decision is Decision.INCOMPATIBLE]

    @property
    def empty(self) -> list[Step]:
        """Steps where state starts empty: new operators, fresh accumulators or fields."""
        return [s for s in self.steps if s.decision is Decision.NEW or s.fresh]

    @property
    def dropped(self) -> list[Step]:
        return [s for s in self.steps if s.decision is Decision.DROPPED or s.lost]

    @property
    def exit_code(self) -> int:
        """0: everything carries; 1: something starts empty or is dropped; 2: something is refused."""
        return 2 if self.refused else 1 if self.empty or self.dropped else 0

    def to_dict(self) -> dict[str, Any]:
        return {"exit_code": self.exit_code, "source_metadata_version": self.source_version,
                "target_metadata_version": self.target_version, "operators": [s.to_dict() for s in self.steps]}


class SavepointUpgrader:
    def __init__(self, old: str, *, old_plan: str | Plan | None = None, new_plan: str | Plan | None = None,
                 template: str | None = None, flink_version: str | None = None, allow_external_paths: bool = False,
                 fs_options=None):
        self.old = Savepoint.open(old, allow_external_paths=allow_external_paths, fs_options=fs_options)
        if (old_plan is None) != (new_plan is None):
            raise InvalidArgumentError("give both plans (the old job's and the new job's COMPILE PLAN) or neither")
        self.old_plan = load_plan(old_plan) if isinstance(old_plan, str) else old_plan
        self.new_plan = load_plan(new_plan) if isinstance(new_plan, str) else new_plan
        self.template = Savepoint.open(template, fs_options=fs_options) if template else None
        self._flink_version = flink_version
        if flink_version:
            self.target_version = metadata_version_for(flink_version)
        elif self.template is not None:
            self.target_version = self.template.metadata.version
        else:
            self.target_version = self.old.metadata.version
        self._report: UpgradeReport | None = None

    @functools.cached_property
    def operator_proxy_version(self) -> int:
        """The operator-state header version the new savepoint's streams get: the asked-for release's,
        else the template's or the old savepoint's own (1.16 and 1.17 read only 5)."""
        if self._flink_version:
            return operator_proxy_version_for(self._flink_version)
        return operator_proxy_version_of(self.template if self.template is not None else self.old)

    # ------------------------------------------------------------------------------------------
    # planning

    def report(self) -> UpgradeReport:
        if self._report is None:
            self._report = UpgradeReport(self._sql_steps() + self._other_steps(), self.old.metadata.version,
                                         self.target_version)
        return self._report

    def _bound(self, plan: Plan, savepoint: Savepoint) -> dict[int, OperatorView]:
        """Plan node id → the savepoint's operator (``sql_binding.bind_savepoint``)."""
        binding = bind_savepoint(plan, savepoint)
        views = {o.uid_hash: o for o in savepoint.operators}
        return {described.node_id: views[uid_hash] for uid_hash, described in binding.operators.items()}

    def _sql_steps(self) -> list[Step]:
        if self.old_plan is None:
            return []
        self._old_sql = self._bound(self.old_plan, self.old)
        new_sql = self._bound(self.new_plan, self.template) if self.template is not None else None
        self._new_sql = new_sql or {}
        steps = []
        for pairing in match_plans(self.old_plan, self.new_plan):
            old = self._old_sql.get(pairing.old.node.id) if pairing.old is not None else None
            target = None
            if pairing.new is not None:
                target = (new_sql.get(pairing.new.node.id) and Target.of(new_sql[pairing.new.node.id])
                          if new_sql is not None else self._generated_target(pairing, old))
            steps.append(self._sql_step(pairing, old, target))
        return steps

    def _generated_target(self, pairing: Pairing, old: OperatorView | None) -> Target | None:
        """Without a template: the operator ``table.exec.uid.generation: ALWAYS`` gives the new node
        (None when the old job's SQL operators have no generated uids: then only a template tells)."""
        if old is None or not (old.uid and _GENERATED_UID.match(old.uid)):
            return None
        uid = pairing.new.node.transformation_uid
        return Target(operator_id_for_uid(uid), uid, None, old.parallelism, old.max_parallelism)

    def _sql_step(self, pairing: Pairing, old: OperatorView | None, target: Target | None) -> Step:
        decision, reason = pairing.decision, pairing.reason
        if decision in (Decision.CARRIED, Decision.MIGRATED):
            if old is None or not old.has_keyed_state:
                return Step(Decision.CARRIED, "no state in the old savepoint: nothing to carry", old, target, pairing)
            if target is None and self.template is not None:
                return Step(Decision.INCOMPATIBLE, "the template has no operator for node "
                            f"{pairing.new.node.id} of the new plan: is it the new job's?", old, None, pairing)
            if target is None:
                return Step(decision, f"{reason}; writing it needs {TEMPLATE_HINT} (the old job's SQL operators have "
                            "no generated uids, so the new operator ids cannot be computed from the plan)",
                            old, None, pairing, needs_template=True)
            new_meta = target.keyed_meta
            if decision is Decision.CARRIED and new_meta is not None and not _same_header(old.keyed_meta, new_meta):
                decision, reason = Decision.MIGRATED, "the new job's serializers differ: re-encoded"
            if decision is Decision.MIGRATED:
                opaque = [s.name for s in old.keyed_meta.states if s.undecodable]
                if opaque:
                    return Step(Decision.INCOMPATIBLE, f"{reason}; but state {', '.join(opaque)} has serializers "
                                "fstate cannot decode: such state is carried only unchanged", old, target, pairing)
                if new_meta is None:
                    return Step(decision, f"{reason}; re-encoding it needs the new job's serializers: "
                                f"writing it needs {TEMPLATE_HINT}", old, target, pairing, needs_template=True)
                try:
                    sql_reencode(pairing, old.keyed_meta, new_meta, f"operator {old.display_name}")
                except InvalidArgumentError as e:
                    return Step(Decision.INCOMPATIBLE, str(e), old, target, pairing)
        elif decision is Decision.DROPPED and (old is None or not _has_state(old)):
            reason = "no state in the old savepoint"
        return Step(decision, reason, old, target, pairing)

    def _other_steps(self) -> list[Step]:
        """Operators that are no SQL node of the plans (DataStream operators, sources, or every
        operator when no plans were given): paired by operator id."""
        sql_old = {v.uid_hash for v in getattr(self, "_old_sql", {}).values()}
        sql_new = {v.uid_hash for v in getattr(self, "_new_sql", {}).values()}
        steps = []
        targets = ({o.uid_hash: o for o in self.template.operators if o.uid_hash not in sql_new}
                   if self.template is not None else None)
        for view in self.old.operators:
            if view.uid_hash in sql_old:
                continue
            if targets is None or view.uid_hash in targets:
                target = Target.of(targets.pop(view.uid_hash) if targets is not None else view)
                steps.append(self._carried_step(view, target))
            elif _has_state(view):
                steps.append(Step(Decision.DROPPED, "the new job has no operator with this id: its state is "
                                  "left behind", view))
        for target in (targets or {}).values():
            if _has_state(target):
                steps.append(Step(Decision.NEW, "an operator the old job did not have: starts empty",
                                  None, Target.of(target)))
        return steps

    def _carried_step(self, view: OperatorView, target: Target) -> Step:
        """An operator kept by its id: carried as it is, or re-encoded where the new job's headers
        (a template's) or the target release's serializers differ; refused when that cannot be done."""
        if not _has_state(view):
            return Step(Decision.CARRIED, "same operator id (no state)", view, target)
        if _template_plan(view, target) is not None or _template_operator_meta(view, target) is not None:
            return Step(Decision.MIGRATED, "same operator id; the new job's serializers differ: re-encoded",
                        view, target)
        try:
            crossing = (carry_for_target(view, self.target_version) is not None
                        or operator_carry_for_target(view, self.target_version,
                                                     self.operator_proxy_version) is not None)
        except InvalidArgumentError as e:
            return Step(Decision.INCOMPATIBLE, str(e), view, target)
        if crossing:
            return Step(Decision.MIGRATED, "same operator id; re-encoded with the target release's serializers "
                        "(or operator-state header)",
                        view, target)
        return Step(Decision.CARRIED, "same operator id", view, target)

    # ------------------------------------------------------------------------------------------
    # writing

    def check_allowed(self, allow_empty: bool, allow_drop: bool) -> None:
        report = self.report()
        if report.refused:
            step = report.refused[0]
            more = f" (and {len(report.refused) - 1} more)" if len(report.refused) > 1 else ""
            raise InvalidArgumentError(f"cannot carry the state of {step.old_name or step.new_name}: "
                                       f"{step.reason}{more}", self.old.path)
        missing = [s for s in report.steps if s.needs_template]
        if missing:
            raise InvalidArgumentError(f"writing the state of {missing[0].old_name} needs {TEMPLATE_HINT}",
                                       self.old.path)
        if report.empty and not allow_empty:
            names = ", ".join(s.new_name or "?" for s in report.empty)
            raise InvalidArgumentError(f"state would start empty for {names}: pass --allow-empty "
                                       "(allow_empty=True) to write it anyway", self.old.path)
        if report.dropped and not allow_drop:
            names = ", ".join(s.old_name or "?" for s in report.dropped)
            raise InvalidArgumentError(f"state would be dropped for {names}: pass --allow-drop "
                                       "(allow_drop=True) to write it anyway", self.old.path)

    def write(self, path: str, *, allow_empty: bool = False, allow_drop: bool = False, overwrite: bool = False,
              verify: bool = True) -> str:
        """Write the upgraded savepoint (nothing when a step is refused or not allowed)."""
        self.check_allowed(allow_empty, allow_drop)
        builder = SavepointBuilder(path, overwrite=overwrite, checkpoint_id=self.old.metadata.checkpoint_id,
                                   metadata_version=self.target_version,
                                   operator_proxy_version=self.operator_proxy_version, fs_options=self.old.fs_options)
        try:
            mapper = HandleMapper(self.old, builder, True)
            for step in self.report().steps:
                if step.decision in (Decision.CARRIED, Decision.MIGRATED) and step.old is not None \
                        and step.target is not None and _has_state(step.old):
                    builder.add_operator_state(self._written(step, builder, mapper))
        except BaseException:
            builder.abort()
            raise
        return builder.commit(verify=verify)

    def _written(self, step: Step, builder: SavepointBuilder, mapper: HandleMapper) -> OperatorState:
        """The state of one carried or migrated operator in the new savepoint: SQL state re-encoded
        for the new query; otherwise the new job's headers (a template's, or the target release's
        serializers: writers/flink_target.py) wherever they differ from the old ones; bytes copied
        where nothing differs."""
        old, target = step.old, step.target
        if step.sql and step.decision is Decision.MIGRATED:
            keyed_plan = sql_reencode(step.pairing, old.keyed_meta, target.keyed_meta, f"operator {old.display_name}")
        else:
            keyed_plan = _template_plan(old, target) or carry_for_target(old, self.target_version)
        operator_meta = _template_operator_meta(old, target) or operator_carry_for_target(
            old, self.target_version, self.operator_proxy_version)
        identity = dict(operator_id=target.operator_id, uid=target.uid, name=target.name)
        if keyed_plan is None and operator_meta is None and old.max_parallelism == target.max_parallelism:
            return dataclasses.replace(old.state, subtasks={i: mapper.subtask(s) for i, s in old.state.subtasks.items()},
                                       entry_order=(), **identity)
        parallelism = target.parallelism if keyed_plan is not None or old.max_parallelism != target.max_parallelism \
            else old.parallelism
        return reencoded_state(old, builder, mapper, keyed_plan, operator_meta, parallelism=parallelism,
                               max_parallelism=target.max_parallelism, **identity)


def _template_plan(old: OperatorView, target: Target) -> KeyedReencode | None:
    """The old keyed state re-encoded with the template's header, where the template's differs."""
    new = target.keyed_meta
    if new is None or not old.has_keyed_state or _same_header(old.keyed_meta, new):
        return None
    return KeyedReencode(new, {s.name: StateSource(s.name) for s in new.states if old.keyed_meta.state_id(s.name)
                               is not None})


def _template_operator_meta(old: OperatorView, target: Target):
    """The template's operator-state header, where it differs from the old one's."""
    new = target.view.operator_meta if target.view is not None else None
    current = old.operator_meta
    if new is None or current is None or new.states == current.states:
        return None
    return new


def _has_state(view: OperatorView) -> bool:
    return any(not s.is_empty for s in view.state.subtasks.values()) or view.state.coordinator_state is not None


def _same_header(old, new) -> bool:
    """Whether two keyed backend headers declare the same key and states byte for byte (compression and
    proxy version aside): the serialized forms matter, e.g. a LogicalType Java-serialized by 1.20 and by
    2.x reads alike but only the job's own release restores its form."""
    def normalized(meta) -> bytes:
        return keyed.proxy_bytes(dataclasses.replace(meta, compressed=False, version=keyed.CURRENT_VERSION))

    return old.key_type == new.key_type and old.states == new.states and normalized(old) == normalized(new)


__all__ = ["SavepointUpgrader", "UpgradeReport", "Step", "Target", "Decision"]
