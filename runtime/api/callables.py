"""Adapting plain callables: wherever a function object is expected, a plain callable works too."""

from __future__ import annotations

from typing import Any, Callable


def call_of(function: Any, method: str) -> Callable:
    """The callable to invoke for ``function``: its ``method`` when it has one (a Function
    subclass, or any object with that method), else ``function`` itself."""
    bound = getattr(function, method, None)
    if bound is not None:
        return bound
    if callable(function):
        return function
    raise TypeError(f"{function!r} is neither callable nor has a {method}() method")
