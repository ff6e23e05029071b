"""``advcli.filter``: the library's ``advcli filter``. The kept groups are worked out here with pandas from the rule
(a group is dropped when every reward in it is equal, a group of one included: advcli's own rule; verl's keeps a
group of one), and the library's rows equal the command's output."""
import os

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from conftest import run_cli

import advcli
from advcli import AdvcliError


def _frame():
    return pd.DataFrame({"prompt_id": ["a", "a", "b", "b", "b", "c", "d", "d"],
                         "reward": [1.0, 1.0, 0.0, 1.0, 0.5, 0.7, 0.0, 0.0],
                         "tags": [["x"]] * 8, "note": list("abcdefgh")})


def test_the_library_keeps_the_groups_the_rule_keeps_in_memory_and_in_a_file(tmp_path):
    df = _frame()
    spread = df.groupby("prompt_id")["reward"].agg(lambda r: r.nunique() > 1)
    want = df[df["prompt_id"].map(spread)]  # advcli's rule: b only (its rows keep their labels: 2, 3, 4)
    got = advcli.filter(df, drop_uniform=True)
    rows = got.to_pandas()
    assert rows.drop(columns="tags").equals(want.drop(columns="tags"))
    assert [list(t) for t in rows["tags"]] == [["x"]] * 3 and df.equals(_frame())  # the caller's frame as it was
    assert (got["groups"], got["groups_kept"], got["rows_kept"], got["output"]) == (4, 1, 3, None)
    assert "<pandas.DataFrame>" in got["inputs"]
    # verl's dynamic sampling keeps the group of one (c)
    verl = advcli.filter(df, drop_uniform=True, flavor="verl").to_pandas()
    assert verl["prompt_id"].tolist() == ["b", "b", "b", "c"]

    src = tmp_path / "in.parquet"
    df.to_parquet(src)
    out = tmp_path / "lib.parquet"
    res = advcli.filter(str(src), str(out), drop_uniform=True)
    r = run_cli("filter", src, "-o", tmp_path / "cli.parquet", "--drop-uniform")
    assert r.returncode == 0, r.stderr
    assert pq.read_table(out).equals(pq.read_table(tmp_path / "cli.parquet"))
    assert res.table.equals(pq.read_table(out))


def test_variance_top_k_ranks_as_the_command(tmp_path):
    df = _frame()
    got = advcli.filter(df, variance_top_k=1).to_pandas()
    var = df.groupby("prompt_id", sort=False)["reward"].var(ddof=1).fillna(0.0)
    assert set(got["prompt_id"]) == {var.idxmax()}
    assert np.isclose(var.max(), np.var([0.0, 1.0, 0.5], ddof=1))


@pytest.mark.parametrize("kwargs, words", [
    ({}, "drop_uniform=True"),
    ({"drop_uniform": True, "settings": {"reward_funcs": ["reward"]}}, "flavor='trl'"),
    ({"variance_top_p": 1.5}, "variance_top_p"),
    ({"variance_top_k": -1}, "variance_top_k=-1"),
    ({"drop_uniform": True, "by": "nope"}, "by='nope'"),
    ({"drop_uniform": True, "metric": "nope"}, "metric='COLUMN'"),
])
def test_the_library_refuses_in_its_own_words(kwargs, words):
    with pytest.raises(AdvcliError) as e:
        advcli.filter(_frame(), **kwargs)
    assert words in str(e.value) + (e.value.hint or "") and "--" not in str(e.value) + (e.value.hint or "")


@pytest.mark.parametrize("rows", [slice(0, 24), slice(16, 40)])
def test_a_dataframes_index_comes_back_with_the_rows_kept(rows):
    """A DataFrame with its default RangeIndex (or a slice of one): the kept rows carry their own labels, so
    df.loc[kept.index] is those rows (the labels came back as 0..n-1, joining back to other rows, silently)."""
    import pandas as pd

    df = pd.read_parquet(os.path.join(os.path.dirname(__file__), "..", "..", "sample_data", "rollouts.parquet"))
    df = df.iloc[rows]
    kept = advcli.filter(df, drop_uniform=True).to_pandas()
    spread = df.groupby(["step", "prompt_id"])["reward"].transform(lambda r: r.nunique() > 1)
    want = list(df.index[spread.to_numpy(bool)])  # the rows of groups with two rewards or more
    assert 0 < len(want) < len(df)
    assert list(kept.index) == want
    assert list(df.loc[kept.index, "prompt_id"]) == list(kept["prompt_id"])
