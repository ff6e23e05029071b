"""docs/house.md's recipe for a report figure, followed: one ``register(Figure(...))`` (what
advcli/report/catalog.py does for each of its figures) and the figure is computed by ``advcli run`` and
``advcli stats`` and shown where it says — the terminal summary, the Markdown and HTML reports (a card, a
curve by step), the trackers' values and ``--follow``'s per-step line — and left out of a dump without
advantages. Its value is checked against the share computed here from the output file. The catalog itself
is checked too: every figure the collector makes is registered, once."""
import json

import numpy as np
import pyarrow.parquet as pq
import pytest
from conftest import SAMPLE, run_main

from advcli.report import catalog

NAME = "rows/positive_advantage_share"


def _positive_share(st, rows, scope):
    """Share of the rows ``rows`` whose mean advantage over their valid tokens is > 0."""
    a = st.row_advantage()[rows]
    return float((a > 0).mean()) if a.size else None


@pytest.fixture
def new_figure():
    fig = catalog.register(catalog.Figure(
        NAME, "share of rows", "share of rows whose mean valid advantage is > 0", compute=_positive_share,
        per_step=True, shown=("summary", "card", "step_plot", "follow", "tracker"), label="positive rows",
        needs=("advantages",)))
    yield fig
    catalog.unregister(NAME)


def _expected(out_path):
    """(overall share, {step: share}) from the output file: each row's advantages over its mask=1 tokens."""
    t = pq.read_table(out_path, columns=["step", "advantages", "response_mask"]).to_pydict()
    pos = []
    for adv, m in zip(t["advantages"], t["response_mask"]):
        v = [a for a, k in zip(adv, m) if k]
        pos.append(bool(v) and sum(v) / len(v) > 0)
    pos, steps = np.array(pos), np.array(t["step"])
    return pos.mean(), {int(s): pos[steps == s].mean() for s in np.unique(steps)}


def test_a_registered_figure_reaches_run_stats_reports_trackers_and_follow(new_figure, tmp_path, capsys,
                                                                          monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    out = tmp_path / "o.parquet"
    code, printed, err = run_main(["run", SAMPLE, "-o", out, "--json"], capsys)
    assert code == 0, err
    ran = json.loads(printed)
    overall, per_step = _expected(out)
    assert ran["metrics"][NAME] == pytest.approx(overall)
    assert {s["step"]: s[NAME] for s in ran["per_step"]} == pytest.approx(per_step)

    md, page = tmp_path / "s.md", tmp_path / "s.html"
    code, _, err = run_main(["stats", out, "--report", md], capsys)
    assert code == 0, err
    assert NAME in err  # the terminal summary's key figures
    code, _, err = run_main(["stats", out, "--report", page, "-q"], capsys)
    assert code == 0, err
    code, printed, err = run_main(["stats", out, "--json"], capsys)
    assert code == 0, err
    rep = json.loads(printed)
    assert rep["metrics"][NAME] == pytest.approx(overall)
    assert {s["step"]: s[NAME] for s in rep["per_step"]} == pytest.approx(per_step)

    key = md.read_text().split("## Key figures", 1)[1].split("##", 1)[0]
    assert f"| {NAME} |" in key
    html = page.read_text()
    assert f'<div class="k">{NAME}</div>' in html  # its card
    assert f"{NAME} by step" in html and "share of rows" in html  # its curve, the axis titled with its unit

    from advcli.commands.follow import step_line
    from advcli.results.tracker import per_step_series, summary_values

    assert summary_values(rep)[NAME] == pytest.approx(overall)
    assert all(NAME in values for _, values in per_step_series(rep))
    line = step_line("stats", 0, rep)[0]
    assert f"positive rows {format(rep['metrics'][NAME], '.4g')}" in line

    code, printed, err = run_main(["stats", SAMPLE, "--json"], capsys)  # a dump: no advantages, no such figure
    assert code == 0, err
    assert NAME not in json.loads(printed)["metrics"]


def test_every_figure_the_collector_makes_is_registered_once(tmp_path, capsys):
    out = tmp_path / "o.parquet"
    code, printed, err = run_main(["run", SAMPLE, "-o", out, "--json", "--flavor", "verl", "--set",
                                   "algorithm.adv_estimator=gae"], capsys)
    assert code == 0, err
    rep = json.loads(printed)
    names = set(rep["metrics"]) | {k for s in rep["per_step"] for k in s if k not in ("step", "rows")}
    assert "critic/values/mean" in names and "critic/vf_explained_var" in names
    assert not sorted(names - set(catalog.FIGURES))
    with pytest.raises(ValueError, match="registered twice"):
        catalog.register(catalog.FIGURES["critic/score/mean"])
    with pytest.raises(ValueError, match="unknown place"):
        catalog.register(catalog.Figure("x/y", "", "", shown=("sidebar",)))
