"""Flink CEP's serializers (the state of a ``CepOperator``), as one node class.

A CEP operator keeps, per key (all with a void namespace):

* ``nfaStateName``: the NFA state, the pending partial matches and the completed matches not yet
  emitted, each a *computation state* (``NFAStateSerializer``);
* ``sharedBuffer-events``: ``EventId`` → ``Lockable<event>`` (the buffered events, with a lock count);
* ``sharedBuffer-entries-with-lockable-edges``: ``NodeId`` → ``Lockable<SharedBufferNode>``, the
  shared buffer's nodes whose edges (each with a lock count) point back to the node of the
  previous event of a match, labelled with the Dewey version of the run that took them.

A :class:`CepType` stands for one of CEP's own serializers; ``kind`` says which (the keys of
:data:`KINDS`). All but ``Lockable`` have a fixed value structure; ``Lockable`` wraps any element
serializer (the user's event type, or the shared-buffer node). Byte formats, all big-endian:

* ``EventId``: i32 id, i64 timestamp (a ``SimpleTypeSerializerSnapshot``, no payload);
* ``DeweyNumber``: i32 n, then n i32 digits (a ``SimpleTypeSerializerSnapshot``);
* ``NodeId``: a byte (0 = null), then the ``EventId`` and the page (pattern state) name as a Flink
  string; nested serializer: EventId;
* ``SharedBufferEdge``: the target ``NodeId``, the ``DeweyNumber``; nested: NodeId, DeweyNumber;
* ``SharedBufferNode`` (``SharedBufferNodeSerializerSnapshotV2``): i32 n edges, each an i32 lock
  count and the edge; nested: SharedBufferEdge;
* ``Lockable``: i32 lock count, the element; nested: the element serializer;
* ``NFAState``: the partial matches then the completed matches, each an i32 count of computation
  states: the state name (Flink string), the previous buffer entry (``NodeId``, may be null), the
  version (``DeweyNumber``), i64 start timestamp, when the snapshot's outer flag
  ``supports_previous_timestamp`` is set (outer version 2, written since Flink 1.16) i64 previous
  timestamp, then a byte (1 = present) and the start ``EventId``. Nested: DeweyNumber, NodeId, EventId.

Decoded values are tuples in the order of :attr:`CepType.field_names` (a null ``NodeId`` is None;
a ``DeweyNumber`` is a list of ints); :attr:`CepType.shape` describes them with the plain nodes
(Row, List, scalars) so that visitors (Spark types) can treat them like any struct.
"""

from __future__ import annotations

import struct

from ..binary import DataOutput, read_flink_string, write_flink_string
from .base import I32, I64, Decoder, Encoder, TypeInfo, as_fields, read_count
from .composites import Composite, ListType, RowType
from .scalars import INT, LONG, STRING

NFA = "org.apache.flink.cep.nfa."
SHARED_BUFFER = NFA + "sharedbuffer."

#: kind -> (snapshot class, whether it is a simple snapshot without nested serializers, nested kinds
#: in order; None for the element of a Lockable, any serializer)
KINDS: dict[str, tuple[str, bool, tuple[str | None, ...]]] = {
    "EventId": (SHARED_BUFFER + "EventId$EventIdSerializer$EventIdSerializerSnapshot", True, ()),
    "DeweyNumber": (NFA + "DeweyNumber$DeweyNumberSerializer$DeweyNumberSerializerSnapshot", True, ()),
    "NodeId": (SHARED_BUFFER + "NodeId$NodeIdSerializer$NodeIdSerializerSnapshot", False, ("EventId",)),
    "SharedBufferEdge": (SHARED_BUFFER + "SharedBufferEdge$SharedBufferEdgeSerializer$"
                                         "SharedBufferEdgeSerializerSnapshot", False, ("NodeId", "DeweyNumber")),
    "SharedBufferNode": (SHARED_BUFFER + "SharedBufferNodeSerializerSnapshotV2", False, ("SharedBufferEdge",)),
    "Lockable": (SHARED_BUFFER + "LockableTypeSerializerSnapshot", False, (None,)),
    "NFAState": (NFA + "NFAStateSerializerSnapshot", False, ("DeweyNumber", "NodeId", "EventId")),
}

#: the outer snapshot version Flink 2.3 writes (NFAState's version 2 adds the previous-timestamp flag)
CURRENT_OUTER_VERSION = {"NFAState": 2}

_EVENT_ID = struct.Struct(">iq")
_TWO_LONGS = struct.Struct(">qq")


class CepType(Composite):
    """One of Flink CEP's serializers (see the module docstring for ``kind`` and the bytes)."""

    def __init__(self, kind: str, children: tuple[TypeInfo, ...] = (), outer_version: int | None = None,
                 supports_previous_timestamp: bool = True):
        if kind not in KINDS:
            raise ValueError(f"unknown CEP serializer kind {kind!r}")
        self.kind = kind
        self.snapshot_class, self.simple, nested = KINDS[kind]
        if not children and None not in nested:
            children = tuple(CepType(k) for k in nested)  # type: ignore[arg-type]
        if len(children) != len(nested):
            raise ValueError(f"CEP {kind} serializer takes {len(nested)} nested serializers, got {len(children)}")
        self.children = tuple(children)
        self.outer_version = CURRENT_OUTER_VERSION.get(kind, 1) if outer_version is None else outer_version
        self.supports_previous_timestamp = bool(supports_previous_timestamp) and kind == "NFAState" \
            and self.outer_version >= 2
        self.length = 12 if kind == "EventId" else -1

    # -- identity ----------------------------------------------------------------------------
    @property
    def name(self) -> str:
        if self.kind == "Lockable":
            return f"Lockable<{self.children[0].name}>"
        return self.kind

    def _key(self) -> tuple:
        return (self.kind, self.children, self.outer_version, self.supports_previous_timestamp)

    # -- snapshot ----------------------------------------------------------------------------
    def _write_payload(self, out: DataOutput) -> None:
        if not self.simple:
            super()._write_payload(out)

    def _write_outer(self, out: DataOutput) -> None:
        if self.kind == "NFAState" and self.outer_version >= 2:
            out.write_bool(self.supports_previous_timestamp)

    # -- value structure ---------------------------------------------------------------------
    @property
    def field_names(self) -> tuple[str, ...]:
        return _FIELD_NAMES.get(self.kind, ())

    @property
    def shape(self) -> TypeInfo:
        """The decoded value's structure in plain nodes (Row = struct, List = array); not its bytes."""
        kind = self.kind
        if kind == "EventId":
            return RowType((INT, LONG), self.field_names, supports_row_kind=False)
        if kind == "DeweyNumber":
            return ListType(INT)
        if kind == "NodeId":
            return RowType((self.children[0].shape, STRING), self.field_names, supports_row_kind=False)
        if kind == "SharedBufferEdge":
            return RowType(tuple(c.shape for c in self.children), self.field_names, supports_row_kind=False)
        if kind == "SharedBufferNode":
            edge = RowType((INT, self.children[0].shape), ("lock_count", "edge"), supports_row_kind=False)
            return RowType((ListType(edge),), self.field_names, supports_row_kind=False)
        if kind == "Lockable":
            element = self.children[0]
            element_shape = element.shape if isinstance(element, CepType) else element
            return RowType((INT, element_shape), self.field_names, supports_row_kind=False)
        dewey, node_id, event_id = (c.shape for c in self.children)
        fields = (STRING, node_id, dewey, LONG) + ((LONG,) if self.supports_previous_timestamp else ()) + (event_id,)
        state = RowType(fields, self.computation_state_fields, supports_row_kind=False)
        return RowType((ListType(state), ListType(state)), self.field_names, supports_row_kind=False)

    @property
    def computation_state_fields(self) -> tuple[str, ...]:
        previous = ("previous_timestamp",) if self.supports_previous_timestamp else ()
        return ("state_name", "previous_entry", "version", "start_timestamp") + previous + ("start_event",)

    # -- codecs ------------------------------------------------------------------------------
    def decoder(self) -> Decoder:
        return getattr(self, "_decoder_" + self.kind.lower())()

    def encoder(self) -> Encoder:
        return getattr(self, "_encoder_" + self.kind.lower())()

    def _decoder_eventid(self) -> Decoder:
        unpack = _EVENT_ID.unpack_from

        def dec(buf, pos):
            return unpack(buf, pos), pos + 12

        return dec

    def _encoder_eventid(self) -> Encoder:
        pack = _EVENT_ID.pack

        def enc(out, v):
            event_id, timestamp = as_fields(v, self.field_names)
            out += pack(event_id, timestamp)

        return enc

    def _decoder_deweynumber(self) -> Decoder:
        def dec(buf, pos):
            n, pos = read_count(buf, pos, "Dewey number length", width=4)
            return list(struct.unpack_from(f">{n}i", buf, pos)), pos + 4 * n

        return dec

    def _encoder_deweynumber(self) -> Encoder:
        def enc(out, v):
            digits = list(v)
            out += I32.pack(len(digits))
            out += struct.pack(f">{len(digits)}i", *digits)

        return enc

    def _decoder_nodeid(self) -> Decoder:
        event_id = self.children[0].decoder()

        def dec(buf, pos):
            if buf[pos] == 0:
                return None, pos + 1
            eid, pos = event_id(buf, pos + 1)
            page, pos = read_flink_string(buf, pos)
            return (eid, page), pos

        return dec

    def _encoder_nodeid(self) -> Encoder:
        event_id = self.children[0].encoder()
        names = self.field_names

        def enc(out, v):
            if v is None:
                out.append(0)
                return
            eid, page = as_fields(v, names)
            out.append(1)
            event_id(out, eid)
            write_flink_string(out, page)

        return enc

    def _decoder_sharedbufferedge(self) -> Decoder:
        target, version = (c.decoder() for c in self.children)

        def dec(buf, pos):
            node, pos = target(buf, pos)
            dewey, pos = version(buf, pos)
            return (node, dewey), pos

        return dec

    def _encoder_sharedbufferedge(self) -> Encoder:
        target, version = (c.encoder() for c in self.children)
        names = self.field_names

        def enc(out, v):
            node, dewey = as_fields(v, names)
            target(out, node)
            version(out, dewey)

        return enc

    def _decoder_sharedbuffernode(self) -> Decoder:
        edge = self.children[0].decoder()

        def dec(buf, pos):
            n, pos = read_count(buf, pos, "shared buffer edge count")
            edges = []
            for _ in range(n):
                lock_count = I32.unpack_from(buf, pos)[0]
                e, pos = edge(buf, pos + 4)
                edges.append((lock_count, e))
            return (edges,), pos

        return dec

    def _encoder_sharedbuffernode(self) -> Encoder:
        edge = self.children[0].encoder()
        names = self.field_names

        def enc(out, v):
            (edges,) = as_fields(v, names)
            out += I32.pack(len(edges))
            for item in edges:
                lock_count, e = as_fields(item, ("lock_count", "edge"))
                out += I32.pack(lock_count)
                edge(out, e)

        return enc

    def _decoder_lockable(self) -> Decoder:
        element = self.children[0].decoder()

        def dec(buf, pos):
            lock_count = I32.unpack_from(buf, pos)[0]
            value, pos = element(buf, pos + 4)
            return (lock_count, value), pos

        return dec

    def _encoder_lockable(self) -> Encoder:
        element = self.children[0].encoder()
        names = self.field_names

        def enc(out, v):
            lock_count, value = as_fields(v, names)
            out += I32.pack(lock_count)
            element(out, value)

        return enc

    def _decoder_nfastate(self) -> Decoder:
        dewey, node_id, event_id = (c.decoder() for c in self.children)
        previous = self.supports_previous_timestamp

        def states(buf, pos):
            n, pos = read_count(buf, pos, "computation state count")
            out = []
            for _ in range(n):
                state_name, pos = read_flink_string(buf, pos)
                entry, pos = node_id(buf, pos)
                version, pos = dewey(buf, pos)
                if previous:
                    start_timestamp, previous_timestamp = _TWO_LONGS.unpack_from(buf, pos)
                    timestamps = (start_timestamp, previous_timestamp)
                    pos += 16
                else:
                    timestamps = I64.unpack_from(buf, pos)
                    pos += 8
                start_event = None
                if buf[pos] == 1:
                    start_event, pos = event_id(buf, pos + 1)
                else:
                    pos += 1
                out.append((state_name, entry, version) + timestamps + (start_event,))
            return out, pos

        def dec(buf, pos):
            partial, pos = states(buf, pos)
            completed, pos = states(buf, pos)
            return (partial, completed), pos

        return dec

    def _encoder_nfastate(self) -> Encoder:
        dewey, node_id, event_id = (c.encoder() for c in self.children)
        fields = self.computation_state_fields
        previous = self.supports_previous_timestamp
        names = self.field_names

        def states(out, items):
            out += I32.pack(len(items))
            for item in items:
                values = as_fields(item, fields)
                write_flink_string(out, values[0])
                node_id(out, values[1])
                dewey(out, values[2])
                out += I64.pack(values[3])
                if previous:
                    out += I64.pack(values[4])
                start_event = values[-1]
                if start_event is None:
                    out.append(0)
                else:
                    out.append(1)
                    event_id(out, start_event)

        def enc(out, v):
            partial, completed = as_fields(v, names)
            states(out, list(partial))
            states(out, list(completed))

        return enc



_FIELD_NAMES = {
    "EventId": ("id", "timestamp"),
    "NodeId": ("event_id", "page_name"),
    "SharedBufferEdge": ("target", "version"),
    "SharedBufferNode": ("edges",),
    "Lockable": ("lock_count", "element"),
    "NFAState": ("partial_matches", "completed_matches"),
}
