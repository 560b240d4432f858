"""State descriptors: what a function registers a keyed or operator state with (its name, kind,
types and time-to-live), as Flink's ``StateDescriptor`` classes. The backends are in
:mod:`.state` (keyed) and :mod:`.operator_state`.
"""

from __future__ import annotations

from typing import Any

from ...savepoint import types as savepoint_types
from .callables import call_of
from ..state import ttl
from .typeinfo import or_pickled


class StateDescriptor:
    kind = "VALUE"

    def __init__(self, name: str, type_info: savepoint_types.TypeInfo | None = None):
        if not name or not isinstance(name, str):
            raise ValueError("a state needs a name")
        self.name = name
        self.type_info = type_info
        self.ttl_config: ttl.StateTtlConfig | None = None

    @property
    def fully_typed(self) -> bool:
        return self.type_info is not None

    def enable_time_to_live(self, ttl_config: ttl.StateTtlConfig) -> None:
        """State TTL (see :mod:`.ttl`); a config whose update type is Disabled leaves it off."""
        if not isinstance(ttl_config, ttl.StateTtlConfig):
            raise TypeError(f"enable_time_to_live takes a StateTtlConfig, not {ttl_config!r}")
        self.ttl_config = ttl_config

    def get_ttl_config(self) -> ttl.StateTtlConfig:
        return self.ttl_config or ttl.StateTtlConfig.DISABLED

    @property
    def ttl_enabled(self) -> bool:
        return self.ttl_config is not None and self.ttl_config.is_enabled()

    def user_value_type(self) -> savepoint_types.TypeInfo:
        """The user's type: element for LIST, MapType for MAP, else the value."""
        return or_pickled(self.type_info)

    def meta_value_type(self) -> savepoint_types.TypeInfo:
        """The type ``value_state_meta`` wants: :meth:`user_value_type`, TTL-wrapped with TTL."""
        return ttl.wrap_meta_value_type(self.kind, self.user_value_type()) if self.ttl_enabled else self.user_value_type()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, {self.meta_value_type().name})"


class ValueStateDescriptor(StateDescriptor):
    kind = "VALUE"


class ListStateDescriptor(StateDescriptor):
    """List state; ``element_type`` is the type of one element."""

    kind = "LIST"


class MapStateDescriptor(StateDescriptor):
    kind = "MAP"

    def __init__(self, name: str, key_type: savepoint_types.TypeInfo | None = None,
                 value_type: savepoint_types.TypeInfo | None = None):
        super().__init__(name, None)
        self.key_type = key_type
        self.value_type = value_type

    @property
    def fully_typed(self) -> bool:
        return self.key_type is not None and self.value_type is not None

    def user_value_type(self) -> savepoint_types.TypeInfo:
        return savepoint_types.MapType(or_pickled(self.key_type), or_pickled(self.value_type))


class ReducingStateDescriptor(StateDescriptor):
    kind = "REDUCING"

    def __init__(self, name: str, reduce_function: Any, type_info: savepoint_types.TypeInfo | None = None):
        super().__init__(name, type_info)
        self.reduce = call_of(reduce_function, "reduce")


class AggregatingStateDescriptor(StateDescriptor):
    """Aggregating state; ``accumulator_type`` is what is stored (Flink stores the accumulator)."""

    kind = "AGGREGATING"

    def __init__(self, name: str, aggregate_function: Any, accumulator_type: savepoint_types.TypeInfo | None = None):
        super().__init__(name, accumulator_type)
        self.function = aggregate_function
