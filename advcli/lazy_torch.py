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
