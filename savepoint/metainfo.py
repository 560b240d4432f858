"""State meta info: a state's name, kind, options and serializer snapshots (shared by both proxies)."""

from __future__ import annotations

from dataclasses import dataclass, field

from .binary import DataInput, DataOutput
from .errors import CorruptStateError
from .types import VOID_NAMESPACE, TypeInfo
from .types.roles import as_list
from .types.snapshots import read_serializer_snapshot, write_serializer_snapshot

KEY_VALUE = 0
OPERATOR = 1
BROADCAST = 2
PRIORITY_QUEUE = 3
BACKEND_TYPES = ("KEY_VALUE", "OPERATOR", "BROADCAST", "PRIORITY_QUEUE")

KEYED_STATE_TYPE = "KEYED_STATE_TYPE"
DISTRIBUTION_MODE = "OPERATOR_STATE_DISTRIBUTION_MODE"
KEY_SERIALIZER = "KEY_SERIALIZER"
VALUE_SERIALIZER = "VALUE_SERIALIZER"
NAMESPACE_SERIALIZER = "NAMESPACE_SERIALIZER"

TIMER_PREFIX = "_timer_state/"


@dataclass
class StateMetaInfo:
    name: str
    backend_type: int
    options: dict[str, str] = field(default_factory=dict)
    serializers: dict[str, TypeInfo] = field(default_factory=dict)

    @property
    def kind(self) -> str:
        """VALUE/LIST/MAP/REDUCING/AGGREGATING for keyed state, TIMERS for timer queues, and
        SPLIT_DISTRIBUTE/UNION/BROADCAST for operator state."""
        if self.backend_type == KEY_VALUE:
            return self.options.get(KEYED_STATE_TYPE, "VALUE")
        if self.backend_type == PRIORITY_QUEUE:
            return "TIMERS" if self.name.startswith(TIMER_PREFIX) else "PRIORITY_QUEUE"
        return self.options.get(DISTRIBUTION_MODE, "BROADCAST" if self.backend_type == BROADCAST else "SPLIT_DISTRIBUTE")

    @property
    def value_type(self) -> TypeInfo:
        t = self.serializers.get(VALUE_SERIALIZER)
        if t is None:
            raise CorruptStateError(f"state '{self.name}' has no value serializer")
        return t

    @property
    def namespace_type(self) -> TypeInfo:
        return self.serializers.get(NAMESPACE_SERIALIZER, VOID_NAMESPACE)

    @property
    def key_type(self) -> TypeInfo | None:
        """Broadcast state's key serializer (keyed state has its key type in the proxy)."""
        return self.serializers.get(KEY_SERIALIZER)

    @property
    def element_type(self) -> TypeInfo:
        """The type one user-visible value has: list element, map value or plain value."""
        t = self.value_type
        list_type = as_list(t) if self.kind == "LIST" else None
        return t if list_type is None else list_type.element

    def type_name(self) -> str:
        t = self.value_type
        if self.backend_type == BROADCAST:
            return f"Map<{self.key_type.name if self.key_type else '?'}, {t.name}>"
        return t.name

    @property
    def undecodable(self) -> list[TypeInfo]:
        """Types in this state whose values fstate cannot decode (read as raw bytes)."""
        return [n for t in self.serializers.values() for n in t.walk() if not n.decodable]


def read_state_meta_info(inp: DataInput) -> StateMetaInfo:
    name = inp.read_utf()
    backend_type = inp.read_i32()
    if not 0 <= backend_type < len(BACKEND_TYPES):
        raise inp.fail(f"state '{name}': unknown backend state type {backend_type}")
    n = inp.read_count("state option", limit=1024, unit_size=4)
    options = {}
    for _ in range(n):
        k = inp.read_utf()
        options[k] = inp.read_utf()
    n = inp.read_count("state serializer", limit=1024, unit_size=6)
    serializers = {}
    for _ in range(n):
        k = inp.read_utf()
        serializers[k] = read_serializer_snapshot(inp)
    return StateMetaInfo(name, backend_type, options, serializers)


def write_state_meta_info(out: DataOutput, m: StateMetaInfo) -> None:
    out.write_utf(m.name)
    out.write_i32(m.backend_type)
    out.write_i32(len(m.options))
    for k, v in m.options.items():
        out.write_utf(k)
        out.write_utf(v)
    out.write_i32(len(m.serializers))
    for k, t in m.serializers.items():
        out.write_utf(k)
        write_serializer_snapshot(out, t)
