"""``@record``: a dataclass whose comparison, hash and repr are shared functions instead of code generated per class.

``@record`` and ``@record(frozen=True)`` declare a class exactly as ``@dataclass`` does (fields, defaults,
``field(compare=False, repr=False, hash=...)``, ``__post_init__``, ``dataclasses.fields``/``replace``/``asdict``,
pickling) and behave the same: ``==`` compares the ``compare`` fields as a tuple when both sides are of the same
class (else ``NotImplemented``), a frozen record hashes that tuple (its ``hash`` fields), a mutable one is
unhashable, and ``repr`` shows the ``repr`` fields as ``Name(a=1, b='x')``.

Why: Python 3.11 compiles every method a dataclass generates, ~0.1 ms each. A frozen dataclass gets six
(``__init__``, ``__repr__``, ``__eq__``, ``__hash__``, ``__setattr__``, ``__delattr__``); the classes a run
creates before ``import torch`` (the run spec's sections, the flavor, release, estimator and format registries,
the run's records) spent ~45 ms making them. Three of the six are the same for every class, so they are written
once here; ``__init__`` and the frozen ``__setattr__``/``__delattr__`` stay generated (they differ per class).
Bottom of the house: imports nothing of advcli.
"""
from __future__ import annotations

import dataclasses
from reprlib import recursive_repr


def record(cls=None, /, *, frozen: bool = False, **options):
    """``dataclasses.dataclass(cls, frozen=frozen, **options)`` with the shared ``__eq__``, ``__hash__`` and
    ``__repr__``. ``eq=False`` keeps ``object``'s identity comparison and hash, as it does for a dataclass;
    ``repr=False`` keeps the inherited repr. A method the class body defines itself is kept."""
    eq, shown = options.pop("eq", True), options.pop("repr", True)
    if options.get("order") or options.get("unsafe_hash"):
        raise TypeError("record: order and unsafe_hash are not supported; use dataclasses.dataclass")

    def wrap(c):
        own = set(c.__dict__)  # before the decorator: what the class body wrote itself
        c = dataclasses.dataclass(c, frozen=frozen, eq=False, repr=False, **options)
        fields = dataclasses.fields(c)
        if shown and "__repr__" not in own:
            c.__record_repr__ = tuple(f.name for f in fields if f.repr)
            c.__repr__ = _repr
        if eq and "__eq__" not in own:
            c.__record_compare__ = tuple(f.name for f in fields if f.compare)
            c.__eq__ = _eq
        # dataclass's table for eq=True: a __hash__ the body wrote is kept (the None that Python sets for a body
        # defining __eq__ is not one); else frozen -> hash the fields, mutable -> unhashable
        explicit_hash = "__hash__" in own and not (c.__dict__["__hash__"] is None and "__eq__" in own)
        if eq and not explicit_hash:
            if frozen:
                c.__record_hash__ = tuple(f.name for f in fields if (f.compare if f.hash is None else f.hash))
                c.__hash__ = _hash
            else:
                c.__hash__ = None
        return c

    return wrap if cls is None else wrap(cls)


def _values(obj, names: tuple) -> tuple:
    return tuple(getattr(obj, n) for n in names)


def _eq(self, other):
    if other.__class__ is self.__class__:
        names = self.__record_compare__
        return _values(self, names) == _values(other, names)
    return NotImplemented


def _hash(self):
    return hash(_values(self, self.__record_hash__))


@recursive_repr()
def _repr(self):
    shown = ", ".join(f"{n}={getattr(self, n)!r}" for n in self.__record_repr__)
    return f"{self.__class__.__qualname__}({shown})"
