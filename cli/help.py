"""Conventional --help: arguments as ``PATH``, values as ``TEXT``/``INTEGER``/``[table|json]``, flags bare.

Typer (0.29) writes its own style: ``{path}`` in the usage line and ``<bool>``/``<str>`` beside every
parameter. Typer builds its parameter objects itself and takes no class for them, so the command classes
below give each parameter a display-only subclass (no new state, nothing about parsing changes).
"""

from __future__ import annotations

import typer
from typer.core import TyperArgument, TyperGroup, TyperOption

_TYPE_NAMES = {str: "TEXT", int: "INTEGER", float: "FLOAT", bool: "BOOLEAN"}


def _value_name(parameter: TyperArgument | TyperOption) -> str:
    """TEXT, INTEGER, ... or the choices as ``[a|b]`` (as click writes them)."""
    descriptor = parameter.type_descriptor
    if descriptor.is_choice:
        return "[" + "|".join(str(getattr(c, "value", c)) for c in descriptor.choices or ()) + "]"
    annotation = descriptor.annotation
    if descriptor.is_list:
        (annotation,) = getattr(annotation, "__args__", (str,))
    return _TYPE_NAMES.get(annotation, "TEXT")


class ConventionalArgument(TyperArgument):
    @property
    def display_name_raw(self) -> str:
        return self.metavar or self.name.upper()

    def _rich_display_name(self) -> str:
        return self.display_name_raw + ("..." if self.metavar is None and self.nargs != 1 else "")

    def _usage_display_name(self) -> str:
        name = self._rich_display_name()
        return name if self.required else f"[{name}]"

    def display_type_rich(self, ctx) -> str | None:
        return _value_name(self)


class ConventionalOption(TyperOption):
    def display_type_rich(self, ctx) -> str | None:
        if self.is_flag or self.count:
            return None
        if self.metavar is not None:
            return self.metavar
        return _value_name(self) + ("..." if self.nargs != 1 else "")


def _conventional(parameters: list) -> list:
    for parameter in parameters:
        if type(parameter) is TyperArgument:
            parameter.__class__ = ConventionalArgument
        elif type(parameter) is TyperOption:
            parameter.__class__ = ConventionalOption
    return parameters


class ConventionalCommand(typer.core.TyperCommand):
    """A command whose --help reads like other command-line tools'."""

    def get_params(self, ctx) -> list:
        return _conventional(super().get_params(ctx))


class ConventionalGroup(TyperGroup):
    """The top-level group, with the same help style (also for --version, --output, completion)."""

    def get_params(self, ctx) -> list:
        return _conventional(super().get_params(ctx))
