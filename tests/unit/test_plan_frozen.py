"""The plan of a run is frozen once resolved; what the run learns while it runs (ROLL's scope domains, the
block sizes of positional groups, the grouping's warnings, the token columns already checked) lives in the
run's state, not in the plan (issue 42, part 3).

Each run goes through the command a user types (``advcli run ... --json``) with the plan the run builds
captured: assigning to any of its fields raises, every field holds after the run what it held when the run
resolved it (lists and sets included, so an in-place change is caught too), no container of the plan (nor
its column map's, nor the run spec's mappings) can be changed in place at all, and what the run learned
reaches the report: each per-step entry's domain as the dump's rows give it (counted here by hand, in order
of first appearance inside each step), and slime's warning for a step that is not whole groups.
"""
from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Mapping

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import run_main

from advcli.pipeline import run as run_module
from advcli.pipeline.plan import Plan
from advcli.sample import make_table

DOMAINS = ("math", "code", "chat")


def _dump(tmp_path, short: bool) -> str:
    """64 rows in 2 steps of 4 groups of 8 consecutive rows, a domain per group (step 1 starts with a
    different domain than step 0); ``short``: step 1 loses its last 3 rows (29 rows: not whole groups)."""
    t = make_table(64, group_size=8, min_len=4, max_len=24, seed=3, shuffle=False, steps=2)
    dom = [DOMAINS[(g + (g >= 4)) % 3] for g in range(8) for _ in range(8)]
    t = t.append_column("domain", pa.array(dom))
    if short:
        t = t.take(pa.array(np.r_[0:61]))
    path = str(tmp_path / ("short.parquet" if short else "dump.parquet"))
    pq.write_table(t, path)
    return path


def _run_capturing_plan(monkeypatch, capsys, argv: list) -> tuple[dict, list]:
    """``advcli ARGV --json`` with every plan the run resolves captured, with a copy of its fields then."""
    plans = []
    real = run_module.open_and_plan

    def capture(*a, **k):
        inputs, plan = real(*a, **k)
        fields = {f.name: getattr(plan, f.name) for f in dataclasses.fields(plan)}
        plans.append((plan, {k: copy.copy(v) if _container(v) else v for k, v in fields.items()}))
        return inputs, plan

    monkeypatch.setattr(run_module, "open_and_plan", capture)
    code, out, err = run_main(argv + ["--json", "--device", "cpu", "--force"], capsys)
    assert code == 0, err
    assert len(plans) == 1
    return json.loads(out), plans


def _container(v) -> bool:
    return isinstance(v, (list, tuple, set, dict, Mapping))


def _assert_no_in_place_change(value, where: str) -> None:
    """Every way of changing a list, set or dict in place fails on ``value`` (a plan's container)."""
    if isinstance(value, Mapping):
        key = next(iter(value), "x")
        tries = [lambda: value.__setitem__("x", 1), lambda: value.__delitem__(key), lambda: value.update(x=1),
                 lambda: value.pop(key), lambda: value.clear(), lambda: value.setdefault("x", 1)]
    else:
        tries = [lambda: value.append("x"), lambda: value.__setitem__(0, "x"), lambda: value.__delitem__(0),
                 lambda: value.extend(["x"]), lambda: value.add("x"), lambda: value.clear(), lambda: value.sort(),
                 lambda: value.remove(next(iter(value), "x")), lambda: value.__iadd__(["x"])]
    before = copy.copy(dict(value) if isinstance(value, Mapping) else list(value))
    for t in tries:
        with pytest.raises((TypeError, AttributeError)):
            t()
    assert (dict(value) if isinstance(value, Mapping) else list(value)) == before, f"{where} changed in place"


def _assert_unchanged(plans) -> None:
    for plan, before in plans:
        assert isinstance(plan, Plan)
        for name, was in before.items():
            now = getattr(plan, name)
            assert (now == was) if _container(was) else (now is was), f"plan.{name} changed during the run"
            with pytest.raises(dataclasses.FrozenInstanceError):
                setattr(plan, name, now)
            if _container(now):
                _assert_no_in_place_change(now, f"plan.{name}")
        _assert_no_in_place_change(plan.cmap.names, "plan.cmap.names")
        for name, m in (("columns", plan.run.columns), ("estimator.given", plan.run.estimator.given),
                        ("source", plan.run.source)):  # the run spec's mappings
            _assert_no_in_place_change(m, f"plan.run.{name}")
        with pytest.raises(dataclasses.FrozenInstanceError):
            plan.cmap.names = {}


def test_a_plan_built_from_lists_and_dicts_holds_them_frozen(tmp_path):
    """Whatever a plan is built or replaced with (lists, a dict), it keeps a frozen copy: the caller's list
    changed afterwards does not change the plan, and the plan's own cannot be changed; it pickles and copies as
    a plan (Ray's workers and the server's children get it pickled)."""
    import pickle

    from advcli.io.reader import InputSet
    from advcli.pipeline.plan import choose_output_columns, make_plan

    src = _dump(tmp_path, short=False)
    plan = make_plan({"estimator": {"name": "grpo"}}, InputSet.open([src]), {}, "cpu")
    roles = ["response_mask", "values"]
    params = {"eps": 1.0}
    other = dataclasses.replace(plan, token_roles=roles, params=params, components=["reward"])
    roles.append("x")
    params["eps"] = 2.0
    assert other.token_roles == ("response_mask", "values") and other.params == {"eps": 1.0}
    assert other.components == ("reward",)
    for name in ("params", "components", "token_roles", "verify_roles", "output_columns", "warnings"):
        _assert_no_in_place_change(getattr(other, name), f"plan.{name}")
    one = choose_output_columns(plan, "advantages")
    assert one.output_columns == ("advantages",) and plan.output_columns == ("advantages", "returns")
    back = pickle.loads(pickle.dumps(other))
    assert back.params == other.params and back.cmap.names == other.cmap.names
    assert back.token_roles == other.token_roles
    _assert_no_in_place_change(back.params, "an unpickled plan's params")
    _assert_no_in_place_change(copy.deepcopy(other).cmap.names, "a copied plan's column map")


def test_roll_domains_reach_the_report_not_the_plan(tmp_path, monkeypatch, capsys):
    src = _dump(tmp_path, short=False)
    report, plans = _run_capturing_plan(monkeypatch, capsys, [
        "run", src, "-o", str(tmp_path / "o.parquet"), "--flavor", "roll", "--set", "adv_estimator=grpo",
        "--set", "actor_infer.generating_args.num_return_sequences=8"])
    _assert_unchanged(plans)
    t = pq.read_table(src).to_pydict()
    want = []  # (step, domain) in ascending step, domains in order of first appearance inside the step
    for s in sorted(set(t["step"])):
        seen = [d for d, st in zip(t["domain"], t["step"]) if st == s]
        want += [(s, d) for d in dict.fromkeys(seen)]
    assert want == [(0, "math"), (0, "code"), (0, "chat"), (1, "chat"), (1, "math"), (1, "code")]  # the dump
    assert [(e["step"], e["domain"]) for e in report["per_step"]] == want


@pytest.mark.parametrize("flavor", [
    ["--flavor", "slime", "--set", "n_samples_per_prompt=8"],  # a step of 29 rows: one group of all its rows
    ["--flavor", "areal@1.0.4", "--set", "actor.reward_norm.mean_level=group", "--set",
     "actor.reward_norm.std_level=group", "--set", "actor.reward_norm.group_size=8", "--set", "actor.kl_ctl=0.0"],
])
def test_positional_fallbacks_warn_from_the_run_state(tmp_path, monkeypatch, capsys, flavor):
    src = _dump(tmp_path, short=True)
    report, plans = _run_capturing_plan(monkeypatch, capsys, ["run", src, "-o", str(tmp_path / "o.parquet"),
                                                              *flavor])
    _assert_unchanged(plans)
    said = " ".join(report["warnings"])
    want = "normalised as ONE group of all their rows" if flavor[1] == "slime" else "do not split into groups of 8"
    assert want in said and "29 rows in step 1" in said, said
