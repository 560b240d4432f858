"""Values from configuration text: durations (``10 s``, ``500 ms``), integers (``inf``), numbers and
enum names, each refused with an error naming its key."""

from __future__ import annotations

import re
from typing import Any

from ..savepoint.errors import InvalidArgumentError

# ---------------------------------------------------------------------------------------------
# durations and values from config text

_UNITS = {
    "ms": 1, "milli": 1, "millis": 1, "millisecond": 1, "milliseconds": 1,
    "s": 1000, "sec": 1000, "secs": 1000, "second": 1000, "seconds": 1000,
    "min": 60_000, "mins": 60_000, "minute": 60_000, "minutes": 60_000, "m": 60_000,
    "h": 3_600_000, "hour": 3_600_000, "hours": 3_600_000,
    "d": 86_400_000, "day": 86_400_000, "days": 86_400_000,
}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_duration_ms(value: Any, key: str = "duration") -> int:
    """``10 s``, ``500ms``, ``1 min``, ``2h`` or a plain number of milliseconds."""
    if isinstance(value, bool):
        raise InvalidArgumentError(f"{key}: expected a duration, got {value!r}")
    if isinstance(value, (int, float)):
        return int(value)
    m = _DURATION.match(str(value))
    if not m:
        raise InvalidArgumentError(f"{key}: cannot parse duration {value!r} (e.g. '10 s', '500 ms', '1 min')")
    unit = m.group(2).lower() or "ms"
    if unit not in _UNITS:
        raise InvalidArgumentError(f"{key}: unknown time unit {m.group(2)!r} in {value!r}")
    return int(float(m.group(1)) * _UNITS[unit])


def parse_int(value: Any, key: str) -> int:
    try:
        if isinstance(value, str) and value.strip().lower() in ("inf", "infinite", "unlimited"):
            return 2**31 - 1
        return int(value)
    except (TypeError, ValueError):
        raise InvalidArgumentError(f"{key}: expected an integer, got {value!r}") from None


def parse_float(value: Any, key: str) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        raise InvalidArgumentError(f"{key}: expected a number, got {value!r}") from None


def enum_value(enum_cls, value: Any, key: str):
    if isinstance(value, enum_cls):
        return value
    text = str(value).strip().upper().replace("-", "_")
    try:
        return enum_cls[text]
    except KeyError:
        names = ", ".join(e.name for e in enum_cls)
        raise InvalidArgumentError(f"{key}: {value!r} is not one of {names}") from None
