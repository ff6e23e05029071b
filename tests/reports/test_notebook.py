"""advcli in a notebook: ``advcli.run/stats/audit/compare`` on an in-memory pandas DataFrame or pyarrow
Table as on a path, results as Arrow / pandas, and the ``_repr_html_`` Jupyter shows (parsed here: a
frame holding a well-formed page whose summary figures are the ones computed below with numpy from the
rows, following verl's GRPO, ``compute_grpo_outcome_advantage`` (verl/trainer/ppo/core_algos.py
@1dda039b): (s − group mean) / (unbiased group std + 1e-6) on each mask=1 token, 0 elsewhere)."""
from __future__ import annotations

import html.parser
import re

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_format_verl import verl_grpo

import advcli
from advcli.errors import AdvcliError

GRPO = {"algorithm.adv_estimator": "grpo"}


@pytest.fixture
def frame() -> pd.DataFrame:
    """2 steps × 3 prompts × 4 responses; ragged, with masked tokens; rewards in {0, 0.5, 1}."""
    rng = np.random.default_rng(7)
    rows = []
    for step in (3, 4):
        for p in range(3):
            for _ in range(4):
                n = int(rng.integers(2, 7))
                mask = [1] * n
                mask[int(rng.integers(0, n))] = 0 if n > 2 else 1
                rows.append({"prompt_id": f"p{p}", "step": step, "reward": float(rng.choice([0.0, 0.5, 1.0])),
                             "response_mask": mask})
    return pd.DataFrame(rows)


def expected_advantages(df: pd.DataFrame) -> list[list[float]]:
    adv = verl_grpo(list(df["reward"]), list(zip(df["step"], df["prompt_id"])))
    return [[a * m for m in mask] for a, mask in zip(adv, df["response_mask"])]


def assert_lists_close(got, expected):
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert np.allclose(g, e, rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------------------------------ the calls
def test_run_on_a_dataframe_gives_the_rows_back(frame):
    result = advcli.run(frame, flavor="verl", settings=GRPO, device="cpu")
    out = result.to_pandas()
    assert isinstance(out, pd.DataFrame) and len(out) == len(frame)
    assert list(out["prompt_id"]) == list(frame["prompt_id"])  # the input's columns, in order, plus the new ones
    assert_lists_close([list(a) for a in out["advantages"]], expected_advantages(frame))
    assert isinstance(result.table, pa.Table) and result.outputs == []
    assert result.inputs == ["<pandas.DataFrame>"]
    # per step: the mean score of the step's rows (verl's critic/score/mean), computed from the frame
    for entry in result.per_step:
        assert entry["critic/score/mean"] == pytest.approx(frame[frame["step"] == entry["step"]]["reward"].mean())


def test_run_on_a_dataframe_keeps_its_index(frame, tmp_path):
    """A frame indexed by its own row ids gets them back (the rows join back by index), as a file pandas wrote
    does through the command line; the advantages are those of the unindexed frame."""
    indexed = frame.set_axis(pd.Index(np.arange(len(frame)) * 10 + 7, name="rid"))
    out = advcli.run(indexed, flavor="verl", settings=GRPO, device="cpu").to_pandas()
    assert out.index.name == "rid" and list(out.index) == list(indexed.index)
    assert_lists_close([list(a) for a in out["advantages"]], expected_advantages(frame))
    assert list(out.columns) == [*frame.columns, "advantages", "returns"]
    indexed.to_parquet(tmp_path / "in.parquet")
    advcli.run(tmp_path / "in.parquet", tmp_path / "out.parquet", flavor="verl", settings=GRPO, device="cpu")
    assert list(pd.read_parquet(tmp_path / "out.parquet").index) == list(indexed.index)


def test_run_on_an_arrow_table_and_on_a_path_agree(frame, tmp_path):
    table = pa.Table.from_pandas(frame, preserve_index=False)
    src = tmp_path / "in.parquet"
    pq.write_table(table, src)
    from_path = advcli.run(src, tmp_path / "out.parquet", settings=GRPO, device="cpu")
    in_memory = advcli.run(table, settings=GRPO, device="cpu")
    assert from_path.table.column("advantages").to_pylist() == in_memory.table.column("advantages").to_pylist()
    assert from_path.outputs == [str(tmp_path / "out.parquet")]
    # with an output path, an in-memory input is written there, as a path would be
    written = advcli.run(table, tmp_path / "o2.parquet", settings=GRPO, device="cpu")
    assert pq.read_table(tmp_path / "o2.parquet").column("advantages") == written.table.column("advantages")


def test_run_without_output_on_a_path_says_where_the_rows_are(frame, tmp_path):
    src = tmp_path / "in.parquet"
    frame.to_parquet(src)
    result = advcli.run(str(src), settings=GRPO, device="cpu")
    with pytest.raises(AdvcliError, match="wrote no rows"):
        result.to_pandas()


def test_stats_table_is_one_row_per_step(frame):
    out = advcli.run(frame, settings=GRPO, device="cpu").table
    stats = advcli.stats(out)
    steps = stats.to_pandas()
    assert list(steps["step"]) == [3, 4] and list(steps["rows"]) == [12, 12]
    expected = expected_advantages(frame)
    for _, row in steps.iterrows():
        sel = [i for i, s in enumerate(frame["step"]) if s == row["step"]]
        valid = [a for i in sel for a, m in zip(expected[i], frame["response_mask"][i]) if m]
        assert row["critic/advantages/mean"] == pytest.approx(np.mean(valid), abs=1e-6)
        assert row["critic/score/mean"] == pytest.approx(frame["reward"][sel].mean())
    assert stats["metrics"]["critic/score/mean"] == pytest.approx(frame["reward"].mean())  # the report, as a dict
    assert stats.report["inputs"] == ["<pyarrow.Table>"]


def test_audit_of_a_table_agrees_then_names_the_row_that_does_not(frame):
    out = advcli.run(frame, settings=GRPO, device="cpu").to_pandas()
    ok = advcli.audit(out, flavor="verl", settings=GRPO, device="cpu")
    assert ok.agree and ok["tokens_disagreeing"] == 0 and ok.table.num_rows == 0
    bad = out.copy()
    adv = [list(a) for a in bad["advantages"]]
    first = next(i for i, m in enumerate(frame["response_mask"][5]) if m)
    adv[5][first] += 0.25
    bad["advantages"] = adv
    res = advcli.audit(bad, flavor="verl", settings=GRPO, search=False, device="cpu")
    assert not res.agree and res["tokens_disagreeing"] == 1
    worst = res.to_pandas()
    assert worst.loc[0, "row"] == 5 and worst.loc[0, "abs_diff"] == pytest.approx(0.25, abs=1e-6)
    assert "<pandas.DataFrame>" in res["inputs"][0]
    assert repr(res).startswith("<AuditResult DISAGREE: 1 of ")


def test_compare_two_tables_and_two_configurations(frame, tmp_path):
    a = advcli.run(frame, settings=GRPO, device="cpu").table
    same = advcli.compare(a, a)
    assert same["tokens"]["pearson"] == pytest.approx(1.0) and same["tokens"]["max_abs_diff"] == 0
    assert same["a"]["label"] == "<pyarrow.Table>" and same["b"]["label"] == "<pyarrow.Table #2>"
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), tmp_path / "in.parquet")
    two = advcli.compare(str(tmp_path / "in.parquet"),
                         configs=[{"flavor": "verl", "settings": GRPO},
                                  {"flavor": "verl", "settings": {"algorithm.adv_estimator": "grpo",
                                                                  "algorithm.norm_adv_by_std_in_grpo": False}}])
    groups = two.to_pandas()
    assert list(groups.columns) == ["prompt_id", "size", "mean_abs_diff", "sign_agreement", "spread_a", "spread_b"]
    assert set(groups["size"]) == {4}
    # without the std division the signs are the same: centring alone flips none
    assert two["tokens"]["sign_agreement"] == 1.0 and two["row_level"]["sign_flips"] == 0
    with pytest.raises(AdvcliError, match="give two outputs"):
        advcli.compare(a)


def test_the_library_calls_stay_functions_beside_their_modules():
    import advcli.audit.recompute  # noqa: F401 - the subpackage of the same name, imported
    from advcli.runs.compare import compare_files  # noqa: F401

    assert callable(advcli.audit) and callable(advcli.compare) and advcli.audit.__module__ == "advcli"


def test_a_dataframe_missing_a_column_is_named_as_the_dataframe(frame):
    with pytest.raises(AdvcliError) as e:
        advcli.run(frame.drop(columns=["reward"]), settings=GRPO, device="cpu")
    assert str(e.value).startswith("<pandas.DataFrame>: missing column 'reward'")
    assert "advcli-frames-" not in str(e.value)


# ---------------------------------------------------------------------------------------- what Jupyter shows
VOID = {"meta", "br", "img", "input", "hr", "link", "col", "area", "base", "wbr", "source", "embed", "param", "track"}


class Page(html.parser.HTMLParser):
    """Well-formedness (every element closed in order, void elements excepted) and the text, in order."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack, self.errors, self.text, self.iframes = [], [], [], []

    def handle_starttag(self, tag, attrs):
        if tag == "iframe":
            self.iframes.append(dict(attrs))
        if tag not in VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag):
        if tag in VOID:
            return
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1] if self.stack else 'nothing'}")
        else:
            self.stack.pop()

    def handle_data(self, data):
        if data.strip():
            self.text.append(data.strip())


def parse(markup: str) -> Page:
    p = Page()
    p.feed(markup)
    p.close()
    assert not p.errors and not p.stack, (p.errors, p.stack)
    return p


def shown_page(result) -> Page:
    """The page inside the frame of ``result._repr_html_()``, both parsed and checked."""
    outer = parse(result._repr_html_())
    assert len(outer.iframes) == 1 and outer.text == []
    inner = outer.iframes[0]["srcdoc"]
    assert inner.lstrip().lower().startswith("<!doctype html>")
    return parse(inner)


def figure_beside(page: Page, label: str, after: bool = False) -> float:
    """The number shown just before ``label`` (a summary card: its value, then its name) or, with ``after``,
    just after it (a table's row: its name, then the value)."""
    i = page.text.index(label)
    t = page.text[i + 1] if after else page.text[i - 1]
    assert re.fullmatch(r"[-+]?[\d,]*\.?\d+(?:e[-+]?\d+)?", t), f"no number beside {label!r}: {t!r}"
    return float(t.replace(",", ""))


def test_run_result_shows_its_summary(frame):
    result = advcli.run(frame, settings=GRPO, device="cpu")
    page = shown_page(result)
    assert figure_beside(page, "rows") == len(frame)
    assert figure_beside(page, "valid tokens") == sum(map(sum, frame["response_mask"]))
    assert figure_beside(page, "critic/score/mean") == pytest.approx(frame["reward"].mean(), rel=1e-4)
    valid = [a for row, mask in zip(expected_advantages(frame), frame["response_mask"]) for a, m in zip(row, mask) if m]
    assert figure_beside(page, "critic/advantages/min", after=True) == pytest.approx(min(valid), rel=1e-4)
    text = repr(result)
    assert text.startswith("<RunResult verl grpo: 24 rows, ") and "2 step(s)" in text


def test_stats_audit_compare_results_show_their_reports(frame):
    out = advcli.run(frame, settings=GRPO, device="cpu").table
    stats = advcli.stats(out)
    assert figure_beside(shown_page(stats), "rows") == len(frame)
    audit = advcli.audit(out, flavor="verl", settings=GRPO, device="cpu")
    page = shown_page(audit)
    assert any(t.startswith("agree: 0 of ") for t in page.text)
    same = advcli.compare(out, out)
    page = shown_page(same)
    assert figure_beside(page, "correlation (Pearson)", after=True) == pytest.approx(1.0)
    assert "A=<pyarrow.Table> B=<pyarrow.Table #2>" in repr(same)
