"""``--help`` that shows options as click users know them: ``--force`` (a flag: no placeholder),
``--chunk-rows N``, ``--set KEY=VALUE`` (a value: its metavar), ``INPUT...`` (an argument).

Why this exists: typer 0.2x vendors click (``typer._click``; click itself need not be installed) and
its rich help prints a Python type beside every parameter — ``--force <bool>``, ``--help <bool>``,
``INPUT <list[str]>`` — because ``TyperOption.display_type_rich`` falls back to ``<type>`` for flags
and ``rich_utils._print_options_panel`` prints it without asking ``is_flag``; its usage line writes a
required argument as ``{INPUT}...``. Older typer (0.12-0.16, on click) renders click's way already
and has no ``display_type_rich``: there these classes change nothing.

:class:`Command` and :class:`Group` (the ``cls`` of every advcli command and of the app) give each
parameter, the generated ``--help`` included, a subclass of its own class that overrides only the
rendering: parsing, defaults, callbacks and error messages are typer's.
"""
from __future__ import annotations

from typer.core import TyperCommand, TyperGroup

_STYLED: dict[type, type] = {}


def _option_display_type(self, ctx):
    """A flag shows nothing; a value shows its metavar (every advcli option declares one), else the
    upper-case type name as click would (``INT``, ``STR``)."""
    if self.is_flag or self.count:
        return None
    if self.metavar is not None:
        return self.metavar
    return self.bare_type().upper()


def _argument_display_type(self, ctx) -> None:
    """An argument's name column already says what it is (``INPUT...``): no type beside it."""


def _argument_display_name(self) -> str:
    """The name column of the Arguments panel: ``INPUT...`` for an argument that takes several values
    (typer adds the ``...`` itself only when there is no metavar)."""
    if self.metavar is None:
        return self.name
    return self.metavar + "..." if self.nargs != 1 else self.metavar


def _argument_usage_name(self) -> str:
    """click's usage: ``INPUT...`` when required, ``[INPUT]...`` when not."""
    name = self.metavar if self.metavar is not None else self.name.upper()
    if not self.required:
        name = f"[{name}]"
    return name + "..." if self.nargs != 1 else name


def _argument_error_hint(self) -> str:
    """As typer words it (``Missing argument 'INPUT'``), although the help names it ``INPUT...``."""
    return f"'{self.metavar if self.metavar is not None else self.name}'"


def _styled_class(cls: type) -> type | None:
    """The click-style subclass of typer's parameter class ``cls`` (None: nothing to change)."""
    if cls in _STYLED:
        return _STYLED[cls]
    styled = None
    if hasattr(cls, "display_type_rich"):  # typer 0.2x; older typer renders click's way
        if getattr(cls, "param_type_name", None) == "option":
            styled = type(cls.__name__, (cls,), {"display_type_rich": _option_display_type,
                                                 "__module__": __name__})
        elif getattr(cls, "param_type_name", None) == "argument":
            styled = type(cls.__name__, (cls,), {
                "display_type_rich": _argument_display_type,
                "display_name_raw": property(_argument_display_name),
                "_usage_display_name": _argument_usage_name,
                "get_error_hint": _argument_error_hint,
                "__module__": __name__})
    _STYLED[cls] = styled
    if styled is not None:
        _STYLED[styled] = None  # already click-style
    return styled


def click_style(params) -> list:
    """``params`` (the list itself), each parameter rendering the click way from now on."""
    for p in params:
        styled = _styled_class(type(p))
        if styled is not None:
            p.__class__ = styled
    return params


class Command(TyperCommand):
    """A typer command whose ``--help`` renders its parameters as click does (see the module)."""

    def get_params(self, ctx):
        return click_style(super().get_params(ctx))


class Group(TyperGroup):
    """The app (``advcli --help``): its options (``--version``, ``--help``) render as click does."""

    def get_params(self, ctx):
        return click_style(super().get_params(ctx))
