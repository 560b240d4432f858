"""The operations of a modify, applied in order to a plan of the new savepoint.

A :class:`ModifyPlan` starts as BASE's operators. Each :class:`Operation` changes it: removes an
operator, gives it another uid, another max parallelism or parallelism, queues a transform of one
of its keyed states, or adds operators. Operations name operators as the plan stands when they are
applied, so ``rename_uid("counter", "counter-v2")`` followed by ``set_max_parallelism("counter-v2",
256)`` changes the renamed operator. Naming an operator an earlier operation removed or renamed
away is a :class:`ModifyConflictError` at once; two operators that end with one operator id are
reported together by :meth:`ModifyPlan.check`, before anything is written.

Adding an operation: one subclass of :class:`Operation` here (its ``apply`` changes the plan), a
method on ``SavepointModifier`` that records it and, if the CLI offers it, one option of
``fstate modify``. Planned operators say what their state needs (``rekeyed``, ``split_parallelism``,
``transforms``, ``added``); writers/modify.py writes each accordingly.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from ..savepoint.builder import resolve_operator_id
from ..savepoint.errors import InvalidArgumentError, ModifyConflictError, UnknownOperatorError
from ..savepoint.loader import OperatorView, Savepoint
from ..savepoint.types.hashing import check_parallelism, operator_id_for_uid, parse_operator_id
from .transforms import Transform


@dataclass
class StateTransform:
    """A rewrite of one keyed state, ``how`` one of the kinds of writers/transforms.py."""

    state: str
    how: Transform
    type: Any


@dataclass
class PlannedOperator:
    """One operator of the new savepoint as the operations applied so far leave it."""

    operator_id: bytes
    uid: str | None
    name: str | None
    parallelism: int
    max_parallelism: int
    #: the BASE operator whose state it carries (None for an operator added by this modify)
    source: OperatorView | None = None
    #: the operator spec of a SavepointWriter that writes its state (added or replacing)
    added: Any = None
    transforms: list[StateTransform] = field(default_factory=list)
    #: list, union and broadcast state redistributed over this many subtasks
    split_parallelism: int | None = None
    #: descriptions of the operations that changed it, for messages
    history: list[str] = field(default_factory=list)
    #: its max parallelism was set for it alone (not for all operators at once)
    own_max_parallelism: bool = False

    @classmethod
    def of(cls, view: OperatorView) -> "PlannedOperator":
        return cls(view.state.operator_id, view.uid, view.name, view.parallelism, view.max_parallelism, view)

    @property
    def display_name(self) -> str:
        return self.uid or self.operator_id.hex()

    @property
    def uid_hash(self) -> str:
        return self.operator_id.hex()

    @property
    def has_keyed_state(self) -> bool:
        return self.source is not None and self.source.has_keyed_state

    @property
    def rekeyed(self) -> bool:
        """Keyed state must be re-assigned to key groups (its max parallelism changed)."""
        return (self.has_keyed_state and self.source.keyed_meta is not None
                and (self.max_parallelism, self.parallelism) != (self.source.max_parallelism, self.source.parallelism))

    @property
    def changed(self) -> bool:
        return bool(self.history)

    def origin(self) -> str:
        if self.source is None:
            return f"operator '{self.display_name}' added by this modify"
        what = f"BASE operator '{self.source.display_name}'"
        return what + (f" after {', '.join(self.history)}" if self.history else "")


class ModifyPlan:
    """The operators of the new savepoint, in BASE's order (added operators last)."""

    def __init__(self, base: Savepoint):
        self.base = base
        self.operators: list[PlannedOperator] = [PlannedOperator.of(view) for view in base.operators]
        #: operator ids no longer in the plan → what made them go
        self.gone: dict[bytes, str] = {}

    def apply(self, operation: "Operation") -> "ModifyPlan":
        operation.apply(self)
        return self

    def find(self, uid_or_hash: str, operation: "Operation") -> PlannedOperator:
        """The planned operator with this uid (or uid hash), as the plan stands now."""
        matches = [o for o in self.operators if o.uid is not None and o.uid == uid_or_hash]
        if not matches:
            wanted = {operator_id_for_uid(uid_or_hash)}
            raw = parse_operator_id(uid_or_hash)
            if raw is not None:
                wanted.add(raw)
            matches = [o for o in self.operators if o.operator_id in wanted]
            if not matches:
                gone = next((self.gone[i] for i in wanted if i in self.gone), None)
                if gone is not None:
                    raise ModifyConflictError(f"{operation}: operator '{uid_or_hash}' {gone}")
                known = ", ".join(o.display_name for o in self.operators) or "none"
                raise UnknownOperatorError(f"{operation}: no operator with uid or uid hash '{uid_or_hash}' "
                                           f"(operators: {known})", self.base.location.metadata_path)
        if len(matches) > 1:
            raise ModifyConflictError(f"{operation}: operator '{uid_or_hash}' is ambiguous: "
                                      + "; ".join(o.origin() for o in matches))
        return matches[0]

    def remove(self, target: PlannedOperator, why: str) -> None:
        self.operators.remove(target)
        self.gone[target.operator_id] = why

    def conflicts(self) -> list[str]:
        by_id: dict[bytes, list[PlannedOperator]] = {}
        for o in self.operators:
            by_id.setdefault(o.operator_id, []).append(o)
        return [f"operator id {i.hex()} (uid '{group[0].display_name}') would appear twice: "
                + "; ".join(o.origin() for o in group)
                for i, group in by_id.items() if len(group) > 1]

    def warnings(self) -> list[str]:
        """Max parallelism set for single operators that other operators do not share.

        On restore Flink compares the max parallelism recorded for every operator of a task (all
        operators chained into it, stateless ones too) with the task's: a job that sets its max
        parallelism refuses any operator that differs; one that does not adopts the recorded
        value, which cannot match two values in one task. fstate does not know the chaining, so
        this is a warning: an operator in a task of its own may have a max parallelism of its own."""
        out = []
        for changed in (o for o in self.operators if o.own_max_parallelism):
            others = [o.display_name for o in self.operators if o.max_parallelism != changed.max_parallelism]
            if others:
                shown = ", ".join(others[:4]) + (", ..." if len(others) > 4 else "")
                out.append(f"operator {changed.display_name} now has max parallelism {changed.max_parallelism} "
                           f"but {len(others)} other operator(s) do not ({shown}); Flink checks every operator of "
                           "a task (chained ones, stateless ones too) against the task's max parallelism and "
                           "refuses a restore where they differ: set it for all operators at once "
                           f"(--max-parallelism {changed.max_parallelism}) unless {changed.display_name} runs in "
                           "a task of its own")
        return out

    def check(self) -> None:
        """Every conflict of the plan in one error (before anything is written)."""
        problems = self.conflicts()
        if len(problems) == 1:
            raise ModifyConflictError(problems[0])
        if problems:
            raise ModifyConflictError("conflicting operations:\n" + "\n".join(f"  - {p}" for p in problems))


class Operation:
    """One change of a modify; ``str()`` describes it in messages."""

    def apply(self, plan: ModifyPlan) -> None:
        raise NotImplementedError(type(self).__name__)

    def __str__(self) -> str:
        fields = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in dataclasses.fields(self)
                           if getattr(self, f.name) is not None)
        return f"{type(self).__name__}({fields})"


@dataclass
class RemoveOperator(Operation):
    uid: str

    def apply(self, plan: ModifyPlan) -> None:
        target = plan.find(self.uid, self)
        plan.remove(target, f"was removed by {self}")

    def __str__(self) -> str:
        return f"remove {self.uid}"


@dataclass
class RenameUid(Operation):
    """State of operator ``old`` (uid or uid hash) becomes the state of uid ``new``."""

    old: str
    new: str

    def apply(self, plan: ModifyPlan) -> None:
        target = plan.find(self.old, self)
        new_id = resolve_operator_id(self.new, None)
        if new_id == target.operator_id:
            return
        plan.gone[target.operator_id] = f"was renamed by {self}"
        plan.gone.pop(new_id, None)
        if target.name in (None, target.uid):
            target.name = self.new
        target.operator_id, target.uid = new_id, self.new
        target.history.append(str(self))

    def __str__(self) -> str:
        return f"rename {self.old} → {self.new}"


@dataclass
class SetMaxParallelism(Operation):
    """Re-assign keyed state to the key groups of a new max parallelism, as Flink would."""

    uid: str
    max_parallelism: int
    parallelism: int | None = None

    def apply(self, plan: ModifyPlan) -> None:
        target = plan.find(self.uid, self)
        _set_max_parallelism(target, self.max_parallelism, self.parallelism, self)
        target.own_max_parallelism = True

    def __str__(self) -> str:
        p = f" (parallelism {self.parallelism})" if self.parallelism else ""
        return f"max parallelism of {self.uid} → {self.max_parallelism}{p}"


@dataclass
class SetMaxParallelismOfAll(Operation):
    """The max parallelism of every operator the plan has so far (keyed state re-assigned, stateless
    operators too: Flink checks each of them on restore)."""

    max_parallelism: int

    def apply(self, plan: ModifyPlan) -> None:
        for target in plan.operators:
            _set_max_parallelism(target, self.max_parallelism, None, self)
            target.own_max_parallelism = False

    def __str__(self) -> str:
        return f"max parallelism of all operators → {self.max_parallelism}"


def _set_max_parallelism(target: PlannedOperator, max_parallelism: int, parallelism: int | None,
                         operation: Operation) -> None:
    if not target.has_keyed_state:
        if parallelism is not None and parallelism != target.parallelism:
            raise InvalidArgumentError(f"{operation}: operator {target.display_name} has no keyed state; "
                                       "change its parallelism with set_parallelism")
        current = target.split_parallelism or target.parallelism
        try:
            check_parallelism(current, max_parallelism)
        except InvalidArgumentError as e:
            raise InvalidArgumentError(f"{operation}: operator {target.display_name}: {e}") from None
        target.max_parallelism = max_parallelism
    else:
        p = parallelism or min(target.parallelism, max_parallelism)
        check_parallelism(p, max_parallelism)
        target.max_parallelism, target.parallelism = max_parallelism, p
    target.history.append(str(operation))


@dataclass
class SetParallelism(Operation):
    """Split or merge an operator's list, union and broadcast state over a new number of subtasks."""

    uid: str
    parallelism: int

    def apply(self, plan: ModifyPlan) -> None:
        target = plan.find(self.uid, self)
        if target.source is None:
            raise InvalidArgumentError(f"{self}: operator {target.display_name} is added by this modify; "
                                       "give its parallelism where it is added")
        if target.has_keyed_state:
            raise InvalidArgumentError(f"operator {self.uid} has keyed state: change its max parallelism instead "
                                       "(Flink redistributes keyed state by key group on restore)")
        check_parallelism(self.parallelism, target.max_parallelism)
        target.split_parallelism = self.parallelism
        target.history.append(str(self))

    def __str__(self) -> str:
        return f"parallelism of {self.uid} → {self.parallelism}"


@dataclass
class TransformState(Operation):
    """Rewrite one keyed state (see ``SavepointModifier.transform_state``)."""

    uid: str
    state: str
    how: Transform
    type: Any = None

    def apply(self, plan: ModifyPlan) -> None:
        target = plan.find(self.uid, self)
        meta = target.source.keyed_meta if target.source is not None else None
        if meta is None or meta.state_id(self.state) is None:
            raise InvalidArgumentError(f"operator {self.uid} has no keyed state '{self.state}'")
        target.transforms.append(StateTransform(self.state, self.how, self.type))
        target.history.append(str(self))

    def __str__(self) -> str:
        return f"transform {self.uid}:{self.state}"


@dataclass
class AddOperators(Operation):
    """The operators of a SavepointWriter: each is added, or replaces the planned operator with its id."""

    writer: Any

    def apply(self, plan: ModifyPlan) -> None:
        for spec in self.writer.operators:
            operator_id = resolve_operator_id(spec.uid, spec.uid_hash)
            added = PlannedOperator(operator_id, spec.uid, spec.name, spec.parallelism or 0, spec.max_parallelism,
                                    added=spec)
            replaced = [o for o in plan.operators if o.operator_id == operator_id]
            if len(replaced) > 1:
                continue  # already a conflict: check() reports it
            if replaced:
                plan.operators[plan.operators.index(replaced[0])] = added
            else:
                plan.operators.append(added)
            plan.gone.pop(operator_id, None)

    def __str__(self) -> str:
        return "add operators"
