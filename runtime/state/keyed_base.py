"""What every keyed state of the heap backend shares (plain and TTL states): the table of the
current key group, and clear()."""

from __future__ import annotations


class KeyedStateBase:
    __slots__ = ("_b", "_data", "_desc", "name")
    kind = "VALUE"

    def __init__(self, backend, table, desc):
        self._b = backend
        self._data = table.data
        self._desc = desc
        self.name = desc.name

    def _map(self) -> dict:
        kg = self._b.current_kg
        m = self._data.get(kg)
        if m is None:
            if kg < 0:
                raise RuntimeError(f"state '{self.name}' used outside of a keyed context (no current key)")
            m = self._data[kg] = {}
        return m

    def clear(self) -> None:
        self._map().pop(self._b.current_key, None)
