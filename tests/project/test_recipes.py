"""docs/house.md's recipes, followed as written: the example estimator module of "An estimator" is taken from
the page, put in the estimators' package under a name of its own and run by `advcli run --estimator NAME`,
its advantages checked against its formula computed here from the dump; a KL kind is one registration that
`kl.estimator` takes (the page's "A KL kind"); a canonical key is one field of a section's dataclass that
SCHEMA and `explain --keys` read ("A canonical key"). The recipe for a report figure is followed by
tests/reports/test_figure_recipe.py."""
from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import re
import sys

import numpy as np
import pyarrow.parquet as pq
import pytest
from conftest import ROOT, SAMPLE, run_main

HOUSE = os.path.join(ROOT, "docs", "house.md")


def _recipe(title: str) -> str:
    """The text of the page's recipe ``- **TITLE**: ...`` (up to the next recipe)."""
    text = open(HOUSE, encoding="utf-8").read()
    m = re.search(r"^- \*\*" + re.escape(title) + r"\*\*(.*?)(?=^- \*\*|^## )", text, re.S | re.M)
    assert m, f"docs/house.md has no recipe {title!r}"
    return m.group(1)


@pytest.fixture
def recipe_estimator(tmp_path):
    """The page's example estimator module, NAME replaced by ``recipe_center``, imported as a module of
    advcli.estimators (its relative imports resolve there); unregistered afterwards."""
    from advcli import estimators

    block = re.search(r"```python\n(.*?)```", _recipe("An estimator"), re.S).group(1)
    code = "\n".join(line[2:] if line.startswith("  ") else line for line in block.splitlines())
    path = tmp_path / "recipe_center.py"
    path.write_text(code.replace("NAME", "recipe_center"))
    name = "advcli.estimators.recipe_center"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
        yield estimators.get("recipe_center")
    finally:
        estimators.REGISTRY.pop("recipe_center", None)
        sys.modules.pop(name, None)


def test_the_estimator_recipe_runs_as_written(recipe_estimator, tmp_path, capsys):
    assert recipe_estimator.level == "row" and recipe_estimator.params["eps"].default == 1e-6
    out = tmp_path / "o.parquet"
    code, printed, err = run_main(["run", SAMPLE, "-o", out, "--estimator", "recipe_center", "--device", "cpu",
                                   "--json"], capsys)
    assert code == 0, err
    assert json.loads(printed)["estimator"]["name"] == "recipe_center"
    t = pq.read_table(out, columns=["step", "prompt_id", "reward", "advantages", "response_mask"]).to_pydict()
    # A_i = s_i − mean_g(s): s the row's reward (the default flavor: no KL, no normalisation), g = (step, prompt)
    keys = list(zip(t["step"], t["prompt_id"]))
    score = np.asarray(t["reward"], dtype=np.float64)
    means = {k: score[[i for i, j in enumerate(keys) if j == k]].mean() for k in set(keys)}
    for i, (adv, mask) in enumerate(zip(t["advantages"], t["response_mask"])):
        want = score[i] - means[keys[i]]
        assert [a for a, m in zip(adv, mask) if m] == pytest.approx([want] * sum(mask), abs=1e-6), i
        assert all(a == 0 for a, m in zip(adv, mask) if not m)


def test_a_kl_kind_is_its_registration_and_the_key_takes_every_kind():
    """The recipe's two steps agree: every registered KL kind is a choice of ``kl.estimator`` and the other
    way round, and explain's formula line reads the registration."""
    from advcli.config import SCHEMA
    from advcli.ops.kl import KL_KINDS

    recipe = _recipe("A KL kind")
    assert "register_kl" in recipe and "`advcli/ops/kl.py`" in recipe
    assert set(SCHEMA["kl.estimator"].choices) == set(KL_KINDS)


def test_a_canonical_key_is_one_field_read_by_schema_set_and_explain(capsys):
    """The recipe's one field: each declared key of the run spec is SCHEMA's (default, doc, choices, kind),
    and ``explain --keys --flavor advcli`` (the canonical keys) lists every one."""
    from advcli.config import SCHEMA
    from advcli.config.runspec import RunSpec, declared_default, declared_keys

    recipe = _recipe("A canonical key")
    assert "`runspec.py`" in recipe and "key(default, doc" in recipe and "plan.run.<section>.<field>" in recipe
    fields = declared_keys()
    assert set(fields) == set(SCHEMA)
    run = RunSpec.from_config({})
    for path, f in fields.items():
        key = SCHEMA[path]
        assert (key.doc, key.choices, key.kind) == (f.metadata["doc"], f.metadata["choices"], f.metadata["kind"])
        assert key.default == declared_default(f)
    assert dataclasses.is_dataclass(run.kl) and run.kl.estimator == SCHEMA["kl.estimator"].default
    code, printed, err = run_main(["explain", "--keys", "--flavor", "advcli"], capsys)  # the canonical keys
    assert code == 0, err
    listed = set(re.findall(r"^  ([\w.]+) +default ", printed, re.M))
    assert not sorted(set(SCHEMA) - listed), "keys explain --keys does not list"


def test_every_format_module_is_loaded_and_the_machinery_is_not():
    """"A dump format" is one module defining FORMAT: the registry imports every module of advcli/formats but
    `_` ones and registry.MACHINERY (the package's own modules, skipped so that a run on advcli's own Parquet
    does not import the conversion), so a module in MACHINERY must not be a format and each other one must be."""
    import pkgutil

    from advcli.formats import registry

    names = {m.name for m in pkgutil.iter_modules([os.path.join(ROOT, "advcli", "formats")])
             if not m.name.startswith("_")}
    assert set(registry.MACHINERY) <= names, f"MACHINERY names no module: {set(registry.MACHINERY) - names}"
    for name in sorted(names):
        module = importlib.import_module(f"advcli.formats.{name}")
        is_format = getattr(module, "FORMAT", None) is not None
        assert is_format is (name not in registry.MACHINERY), (
            f"advcli/formats/{name}.py: {'a format listed in MACHINERY' if is_format else 'not a format (no FORMAT)'}"
            "; registry.MACHINERY lists exactly the package's modules that are not formats")
    registry.load()
    assert len(registry.FORMATS) == len(names) - len(registry.MACHINERY)
