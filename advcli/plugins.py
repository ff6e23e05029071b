"""Discovery of self-registering modules: estimators, flavors and dump formats are each one module of
their package, found here so that adding one is adding its file."""
from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterable
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
