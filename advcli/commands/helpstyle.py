"""``--help`` that shows options as click users know them: ``--force`` (a flag: no placeholder),
``--chunk-rows N``, ``--set KEY=VALUE`` (a value: its metavar), ``INPUT...`` (an argument).

Why this exists: typer 0.2x vendors click (``typer._click``; click itself need not be installed) and
its rich help prints a Python type beside every parameter — ``--force <bool>``, ``--help <bool>``,
``INPUT <list[str]>`` — because ``TyperOption.display_type_rich`` falls back to ``<type>`` for flags
and ``rich_utils._print_options_panel`` prints it without asking ``is_flag``; its usage line writes a
required argument as ``{INPUT}...``. typer releases before ``display_type_rich`` (0.27: seen on a
machine that had it) print an argument's type as ``<str>`` from ``param.type.get_metavar`` and write
its usage through ``make_metavar(ctx, usage=True)``: there the argument gets a click-style
``make_metavar`` and a type whose metavar is empty. advcli requires typer 0.27 or newer (checked with
0.27.2, 0.28.0 and 0.29.2 against tests/test_help.py; 0.16-0.26 with click 8.5 render and parse
otherwise).

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
    metavar = getattr(self, "_declared_metavar", self.metavar)
    name = metavar if metavar is not None else self.name.upper()
    if not self.required:
        name = f"[{name}]"
    return name + "..." if self.nargs != 1 else name


def _argument_error_hint(self) -> str:
    """As typer words it (``Missing argument 'INPUT'``), although the help names it ``INPUT...``."""
    metavar = getattr(self, "_declared_metavar", self.metavar)
    return f"'{metavar if metavar is not None else self.name}'"


def _argument_metavar(self, ctx, *, usage: bool = False) -> str:
    """typer 0.27's hook for the usage line (``usage=True``); its Arguments panel prints ``metavar``
    itself, which :func:`click_style` sets to the panel's name (``INPUT...``)."""
    return _argument_usage_name(self) if usage else self.metavar


def _quiet_type(param_type):
    """``param_type`` whose metavar is empty (not None: typer 0.27 then prints no ``<type>``); it
    converts values exactly as ``param_type`` does."""
    cls = type(param_type)
    quiet = _QUIET.get(cls)
    if quiet is None:
        quiet = _QUIET[cls] = type(cls.__name__, (cls,), {"get_metavar": lambda self, *a, **k: "",
                                                          "__module__": __name__})
    q = object.__new__(quiet)
    q.__dict__.update(param_type.__dict__)
    return q


_QUIET: dict[type, type] = {}


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
    elif getattr(cls, "param_type_name", None) == "argument" and "make_metavar" in vars(cls):  # typer 0.27
        styled = type(cls.__name__, (cls,), {"make_metavar": _argument_metavar,
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
            if "make_metavar" in vars(styled):  # typer 0.27: the panel prints metavar and the type's
                p._declared_metavar = p.metavar
                p.metavar = _argument_display_name(p)
                p.type = _quiet_type(p.type)
    return params


class Command(TyperCommand):
    """A typer command whose ``--help`` renders its parameters as click does (see the module)."""

    def get_params(self, ctx):
        return click_style(super().get_params(ctx))


class Group(TyperGroup):
    """The app (``advcli --help``): its options (``--version``, ``--help``) render as click does."""

    def get_params(self, ctx):
        return click_style(super().get_params(ctx))
