"""Discovery of self-registering modules: estimators, flavors and dump formats are each one module of
their package, found here so that adding one is adding its file; and a package's names imported from their
modules when first read (:func:`lazy_exports`)."""
from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Iterable
from typing import Any


def load_modules(package: str, path: Iterable[str], attr: str | None = None, skip: Iterable[str] = ()) -> list[Any]:
    """Import every module of ``package`` (found on ``path``) whose name does not start with ``_`` and is not
    in ``skip`` (the package's own machinery), in name order; return the value of ``attr`` of each module that
    defines it (none when ``attr`` is None: the modules register themselves on import)."""
    found = []
    skipped = set(skip)
    for mod in sorted(pkgutil.iter_modules(list(path)), key=lambda m: m.name):
        if mod.name.startswith("_") or mod.name in skipped:
            continue
        module = importlib.import_module(f"{package}.{mod.name}")
        if attr is not None and getattr(module, attr, None) is not None:
            found.append(getattr(module, attr))
    return found


def lazy_exports(package: str, namespace: dict, where: dict[str, str]) -> Callable[[str], Any]:
    """A package's module ``__getattr__`` (PEP 562): each name of ``where`` imported from its module (a path
    relative to ``package``) when first read, then kept in the package's ``namespace``; any other name is an
    AttributeError. ``__getattr__ = lazy_exports(__name__, globals(), {"name": ".module", ...})``. A name must not
    also be a submodule's: once that submodule is imported (the server's preload imports them all) the package
    attribute is the module and ``__getattr__`` is never asked."""

    def __getattr__(name: str) -> Any:
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(where[name], package), name)
        namespace[name] = value
        return value

    __getattr__.names = tuple(where)  # (a test checks none is also a submodule's name: see its docstring)
    return __getattr__
