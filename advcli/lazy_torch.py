"""``torch``, imported when first used: ``from advcli.lazy_torch import torch`` (``from ..lazy_torch import
torch`` inside the package) in place of ``import torch``.

The math modules that the estimator registry and the light commands load (the estimator modules and what
they import: ``batch``, ``ragged``, ``ops``) hold their registrations, constants and functions without
needing torch; their functions reach torch only when they run. So ``advcli inspect`` and ``advcli explain``
can read the estimator registry without the 1-3 s of ``import torch``, while ``advcli run`` imports it at
its first tensor operation.

A module written this way must not touch ``torch.X`` at import time (a module-level constant, a default
argument value, a decorator): that imports torch there. Annotations are fine under
``from __future__ import annotations``. Whether torch is loaded is ``"torch" in sys.modules``, as ever:
the proxy puts nothing there until it is used.
"""
from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any


class LazyTorch:
    """A stand-in for the ``torch`` module: the first attribute read imports torch; every attribute read
    is then kept on the instance, so later reads cost what a module attribute read costs."""

    def __getattr__(self, name: str) -> Any:  # called only for names not yet kept
        value = getattr(importlib.import_module("torch"), name)
        setattr(self, name, value)
        return value

    def __repr__(self) -> str:
        return "<torch, imported when first used>"


torch = LazyTorch()


class _HeldLoader:
    """torch's own loader, its module run inside ``hold()``; everything else is the loader's."""

    def __init__(self, loader, hold: Callable[[], AbstractContextManager]):
        self._loader, self._hold = loader, hold

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module) -> None:
        try:
            with self._hold():
                self._loader.exec_module(module)
        finally:  # torch sees its own loader afterwards, as if nothing had stood between
            module.__loader__ = self._loader
            if getattr(module, "__spec__", None) is not None:
                module.__spec__.loader = self._loader

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)


# The imports held (:func:`import_held`): torch's, and pandas', whose C extensions import their parts as they
# initialise: a Ctrl-C there was lost (pandas went on) or left pandas half-imported ('partially initialized
# module pandas has no attribute _pandas_datetime_CAPI', an internal error) while `advcli stats` imported it.
HELD_IMPORTS = ("torch", "pandas")


class _FirstHeavyImport:
    """A finder on ``sys.meta_path`` for the modules of :data:`HELD_IMPORTS` alone, each until it is loaded: the
    spec the other finders give, with its loader wrapped in :class:`_HeldLoader` (a mere
    ``importlib.util.find_spec("torch")`` gets the same and loads nothing)."""

    def __init__(self, hold: Callable[[], AbstractContextManager]):
        self.hold = hold
        self._asking = False

    def find_spec(self, name, path=None, target=None):
        if name not in HELD_IMPORTS or self._asking or name in sys.modules:
            return None
        import importlib.util

        self._asking = True  # the other finders answer (importlib.util.find_spec asks sys.meta_path, this too)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            self._asking = False
        if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = _HeldLoader(spec.loader, self.hold)
        return spec


@contextmanager
def import_held(hold: Callable[[], AbstractContextManager]) -> Iterator[None]:
    """Within: the first ``import torch``, wherever it happens, runs inside ``hold()`` (the command line passes
    :func:`advcli.io.commit.shielded`: SIGINT and SIGTERM recorded while torch imports, raised again once it
    is loaded).

    Why: torch's C extension imports numpy as it initialises and, when that import fails, warns and goes on
    without numpy. A Ctrl-C that landed in numpy's import there was swallowed, and the command went on with a
    half-imported numpy until an unrelated error (``module 'numpy' has no attribute 'nonzero'``). Held, the
    Ctrl-C stops the command as soon as torch is loaded (its import takes 1-3 s). Process-wide signal
    handling: the command line's, never the library's. Nothing is installed when torch is already loaded."""
    if all(name in sys.modules for name in HELD_IMPORTS):
        yield
        return
    finder = _FirstHeavyImport(hold)
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        if finder in sys.meta_path:
            sys.meta_path.remove(finder)
