"""A Parquet file without a ``values`` column under a flavor whose default estimator is GAE (verl, OpenRLHF, ROLL):
the refusal says that GAE is only the flavor's default and names the estimators that run without the column (with
the group size OpenRLHF's group estimators also need, read from the file's prompt ids), so that the first command
the hint gives runs; an estimator the user named keeps the plain refusal. ``validate`` and the library say the same."""
from __future__ import annotations

import re

import pyarrow.parquet as pq
import pytest
from conftest import SAMPLE, run_main

import advcli
from advcli.errors import AdvcliError


@pytest.fixture
def no_values(tmp_path):
    path = tmp_path / "no_values.parquet"
    pq.write_table(pq.read_table(SAMPLE).drop(["values"]), path)  # 48 prompt groups of 8 rows
    return str(path)


def _sets(hint: str) -> list[str]:
    """The ``--set K=V`` pairs of the hint's first suggestion."""
    first = hint.split(" (or ")[0].split(", an estimator")[0]
    return re.findall(r"--set (\S+)", first)


@pytest.mark.parametrize("flavor, key, first", [("verl", "algorithm.adv_estimator", ["algorithm.adv_estimator=grpo"]),
                                                ("roll", "adv_estimator", ["adv_estimator=grpo", "advcli.group_by=id"]),
                                                ("openrlhf", "algo.advantage.estimator",
                                                 ["algo.advantage.estimator=rloo", "rollout.n_samples_per_prompt=8",
                                                  "advcli.group_by=id"])])
def test_the_hint_names_an_estimator_that_runs(tmp_path, capsys, no_values, flavor, key, first):
    out = tmp_path / "out.parquet"
    code, _, err = run_main(["run", no_values, "-o", out, "--flavor", flavor], capsys)
    said = " ".join(err.split())
    assert code == 2 and "missing column 'values' (estimator gae needs it)" in said, err
    assert f"{key}=gae is the default of --flavor {flavor}, not a choice made for this file" in said
    assert _sets(said.split("hint: ")[1]) == first
    code, _, err = run_main(["validate", no_values, "--flavor", flavor], capsys)
    assert code == 2 and f"is the default of --flavor {flavor}" in " ".join(err.split())
    args = [a for s in first for a in ("--set", s)]
    code, _, err = run_main(["run", no_values, "-o", out, "--flavor", flavor, *args, "-q"], capsys)
    assert code == 0 and out.exists(), err
    code, _, err = run_main(["run", no_values, "-o", out, "--force", "--flavor", flavor, "--set", f"{key}=gae"],
                            capsys)
    assert code == 2 and "not a choice" not in err and "--column values=NAME" in err


def test_the_library_says_it_in_its_keywords(tmp_path, no_values):
    with pytest.raises(AdvcliError) as e:
        advcli.run(no_values, str(tmp_path / "o.parquet"), flavor="openrlhf")
    assert ("settings={'algo.advantage.estimator': 'rloo', 'rollout.n_samples_per_prompt': 8, 'advcli.group_by': "
            "'id'}") in e.value.hint
    assert "the default of flavor='openrlhf'" in e.value.message
