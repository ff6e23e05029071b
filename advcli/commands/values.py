"""Option and argument values converted without pydantic, for the plain types advcli's commands declare.

typer 0.29 converts every parameter's value through a pydantic ``TypeAdapter`` built on first use: the
first one imports pydantic (about 0.1 s of CPU) and each adapter costs a little more, on every command,
``--help`` included (the ``--help`` flag itself is converted). advcli's parameters are ``str``, ``int``,
``float``, ``bool`` and lists of them, with no parser, range, path or file setting: for such a parameter
:func:`light` returns a converter that handles the values a command line gives (``"4096"``, ``"0.95"``,
``("a", "b")``) with Python's own conversions, and hands anything else (``"1_000"``, ``" 7 "``, a bad
value) to typer's own converter, so that every value gets typer's result and every error typer's message.
tests/cli/test_help.py checks the two agree on a spread of values.
"""
from __future__ import annotations

import re

_INT = re.compile(r"[+-]?[0-9]{1,18}")
_FLOAT = re.compile(r"[+-]?([0-9]{1,18}\.?[0-9]{0,18}|\.[0-9]{1,18})([eE][+-]?[0-9]{1,2})?")


class _Typers(Exception):
    """This value is typer's to convert."""


def _str(v):
    if isinstance(v, str):
        return v
    raise _Typers


def _int(v):
    if type(v) is int:
        return v
    if isinstance(v, str) and _INT.fullmatch(v):
        return int(v)
    raise _Typers


def _float(v):
    if type(v) is float:
        return v
    if type(v) is int:
        return float(v)
    if isinstance(v, str) and _FLOAT.fullmatch(v):
        return float(v)
    raise _Typers


def _bool(v):
    if type(v) is bool:
        return v
    raise _Typers


_SCALARS = {str: _str, int: _int, float: _float, bool: _bool}


class LightParam:
    """What typer's ``RuntimeParam`` offers the parameter (``coerce``), for a plain type; values it does not
    recognise go to ``fallback()``, typer's own."""

    def __init__(self, scalar, is_list: bool, fallback):
        self._scalar, self._list, self._fallback = scalar, is_list, fallback

    def coerce(self, value, param, ctx):
        multi = param.multiple or param.nargs == -1
        if value is None:  # as typer's RuntimeParam.coerce
            return () if multi else None
        try:
            if multi and isinstance(value, str):
                raise _Typers
            if self._list:
                if not isinstance(value, (list, tuple)):
                    value = [value]
                return [self._scalar(v) for v in value]
            return self._scalar(value)
        except _Typers:
            return self._fallback().coerce(value, param=param, ctx=ctx)


def light(param) -> LightParam | None:
    """A pydantic-free converter for typer parameter ``param``, or None where its type or settings are not
    plain (typer's converter then runs as it would)."""
    desc = getattr(param, "type_descriptor", None)
    if desc is None:
        return None
    info = desc.parameter_info
    if (getattr(info, "parser", None) is not None or getattr(info, "min", None) is not None
            or getattr(info, "max", None) is not None or desc.is_file or desc.is_path or desc.is_choice):
        return None
    annotation, is_list = desc.annotation, False
    if getattr(annotation, "__origin__", None) is list and len(getattr(annotation, "__args__", ())) == 1:
        annotation, is_list = annotation.__args__[0], True
    scalar = _SCALARS.get(annotation) if isinstance(annotation, type) else None
    if scalar is None:
        return None
    return LightParam(scalar, is_list, lambda: super(type(param), param).get_runtime_param())
