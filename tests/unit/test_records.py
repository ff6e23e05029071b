"""advcli.records.record against dataclasses.dataclass: the same class declared both ways behaves the same
(equality, hash, repr, frozen-ness, replace, asdict, pickling), so switching a class is a one-word change."""
from __future__ import annotations

import dataclasses
import pickle
from dataclasses import dataclass, field

import pytest

from advcli.records import record


def _twins(body: dict, **options):
    """The class ``body`` describes, made once by dataclass and once by record, both named ``C``."""
    made = []
    for deco in (dataclass, record):
        ns = dict(body)
        cls = type("C", (), ns)
        made.append(deco(**options)(cls) if options else deco(cls))
    return made


# shape -> (class body, constructor arguments to try pairwise)
SHAPES = {
    "plain": ({"__annotations__": {"a": "int", "b": "str"}, "b": "x"}, [(1,), (1, "y"), (2, "y"), (1, "x")]),
    "compare_false": ({"__annotations__": {"a": "int", "note": "str"}, "note": field(default="n", compare=False)},
                      [(1,), (1, "m"), (2, "m")]),
    "repr_false": ({"__annotations__": {"a": "int", "secret": "str"}, "secret": field(default="s", repr=False)},
                   [(1,), (1, "t"), (3,)]),
    "hash_false": ({"__annotations__": {"a": "int", "b": "int"}, "b": field(default=0, hash=False)},
                   [(1,), (1, 5), (2, 5)]),
    "hash_true_no_compare": ({"__annotations__": {"a": "int", "b": "int"},
                              "b": field(default=0, compare=False, hash=True)}, [(1,), (1, 5), (2, 5)]),
    "no_fields": ({}, [()]),
    "factory": ({"__annotations__": {"items": "list"}, "items": field(default_factory=list)}, [(), ([1],), ([2],)]),
}


@pytest.mark.parametrize("frozen", [False, True])
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_record_behaves_as_dataclass(shape, frozen):
    body, arguments = SHAPES[shape]
    D, R = _twins(body, frozen=frozen)
    names = [f.name for f in dataclasses.fields(D)]
    assert names == [f.name for f in dataclasses.fields(R)]
    assert (R.__hash__ is not None) is (D.__hash__ is not None)
    for args in arguments:
        d1, r1 = D(*args), R(*args)
        assert repr(d1) == repr(r1)
        assert dataclasses.asdict(d1) == dataclasses.asdict(r1)
        if D.__hash__ is not None and shape != "factory":
            assert hash(d1) == hash(r1)
        for other in arguments:
            d2, r2 = D(*other), R(*other)
            assert (d1 == d2) is (r1 == r2)
            assert (d1 != d2) is (r1 != r2)
            if names:
                changed = dataclasses.replace(r1, **{names[-1]: getattr(r2, names[-1])})
                assert changed == R(**{**dataclasses.asdict(r1), names[-1]: getattr(r2, names[-1])})
        if names and frozen:
            with pytest.raises(dataclasses.FrozenInstanceError):
                setattr(r1, names[0], 5)
        assert r1 != object() and (r1 == object()) is (d1 == object())


@record(frozen=True)
class Pickled:
    a: int = 1
    b: tuple = (2,)
    hidden: str = field(default="h", repr=False, compare=False)


def test_a_record_pickles_and_unpickles_equal():
    x = Pickled(3, (4, 5), "z")
    y = pickle.loads(pickle.dumps(x))
    assert y == x and hash(y) == hash(x) and y.hidden == "z" and repr(y).endswith("Pickled(a=3, b=(4, 5))")


def test_hash_and_equality_of_frozen_values():
    D, R = _twins({"__annotations__": {"a": "int", "b": "tuple"}, "b": ()}, frozen=True)
    assert hash(R(1, (2, 3))) == hash((1, (2, 3))) == hash(D(1, (2, 3)))
    assert {R(1), R(1), R(2)} == {R(1), R(2)}


def test_other_classes_are_not_equal_even_with_the_same_fields():
    R1 = record(type("A", (), {"__annotations__": {"a": "int"}}))
    R2 = record(type("B", (), {"__annotations__": {"a": "int"}}))
    assert R1(1) != R2(1)
    assert R1(1).__eq__(R2(1)) is NotImplemented


def test_eq_false_keeps_identity_and_the_body_keeps_its_own_methods():
    @record(frozen=True, eq=False)
    class Ident:
        a: int = 1

    x = Ident()
    assert x != Ident() and x == x and hash(x) == object.__hash__(x)

    @record(frozen=True)
    class Own:
        a: int = 1

        def __repr__(self):
            return "own"

        def __eq__(self, other):
            return True

    assert repr(Own()) == "own" and Own(1) == Own(2)
    assert hash(Own(1)) == hash((1,))  # a body's __eq__ alone: frozen still hashes its fields, as dataclass does


def test_recursive_repr_and_nested_qualname():
    made = []
    for deco in (dataclass, record):
        @deco
        class Node:
            child: object = None

        n = Node()
        n.child = n  # a cycle: shown as ..., not an endless recursion
        made.append(repr(n))
    assert made[0] == made[1] == "test_recursive_repr_and_nested_qualname.<locals>.Node(child=...)"


def test_post_init_and_inheritance():
    @record(frozen=True)
    class Base:
        a: int = 1

        def __post_init__(self):
            object.__setattr__(self, "a", self.a * 10)

    @record(frozen=True)
    class Child(Base):
        b: int = 2

    assert Base(2).a == 20 and Child(1, 3) == Child(1, 3) != Child(1, 4)
    assert repr(Child()).endswith("Child(a=10, b=2)")
    assert Child() != Base()  # other classes, as dataclass compares


def test_unsupported_options_are_refused():
    with pytest.raises(TypeError, match="order"):
        record(order=True)(type("C", (), {}))
