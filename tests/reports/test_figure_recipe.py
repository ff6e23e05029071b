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


# ------------------------------------------------------------------ every figure shown is in the catalog
def _shown_names(rep: dict) -> set[str]:
    """Every figure name a report shows: its metrics (the terminal's key figures, the reports' tables of all
    metrics, --json), its per-step entries, its histograms, the group-health block's whole-run figures
    and what the trackers are sent (the summary and each step's numbers)."""
    from advcli.results.tracker import per_step_series, summary_values

    names = set(rep.get("metrics") or {})
    names |= {k for s in rep.get("per_step") or [] for k in s if k not in ("step", "domain")}
    names |= {f"histograms/{k}" for k in rep.get("histograms") or {}}
    names |= {f"group_health/overall/{k}" for k in ((rep.get("group_health") or {}).get("overall") or {})}
    names |= {f"by_position/{k}" for k in ("mean", "count") if (rep.get("by_position") or {}).get(k)}
    names |= set(summary_values(rep))
    domains = {f"{s['domain']}/" for s in rep.get("per_step") or [] if s.get("domain") is not None}
    for _, values in per_step_series(rep):  # ROLL's entries per step and domain: their names under DOMAIN/
        names |= {next((k[len(d):] for d in domains if k.startswith(d)), k) for k in values}
    return names


def _rc_dump(path, steps=(0, 0, 1, 1, 1)):
    """The verl rollout-correction test's five rows (both log-prob columns) over two steps."""
    from test_flavor_verl_rollout_correction import _write

    return _write(path, step=list(steps))


RC = "algorithm.rollout_correction."
RC_CASES = {
    "auto": [],  # the off-policy figures alone: verl whenever the dump has rollout_log_probs
    "token_is_rs": [RC + "rollout_is=token", RC + "rollout_is_threshold=2.0", RC + "rollout_rs=token_k1,seq_mean_k3",
                    RC + "rollout_rs_threshold=0.5_4.0,2.0"],
    "seq_is_norm_rs": [RC + "rollout_is=sequence", RC + "rollout_is_threshold=3.0",
                       RC + "rollout_is_batch_normalize=true", RC + "rollout_rs=seq_max_k3,seq_sum_k2",
                       RC + "rollout_rs_threshold=0.5,0.1"],
    "icepop": [RC + "rollout_is=token", RC + "rollout_is_threshold=0.5_1.5", RC + "rollout_is_batch_normalize=true"],
}


@pytest.mark.parametrize("case", sorted(RC_CASES))
def test_every_rollout_correction_figure_a_run_shows_is_in_the_catalog(case, tmp_path, capsys):
    src, out, page = _rc_dump(tmp_path / "in.parquet"), tmp_path / "o.parquet", tmp_path / "r.html"
    argv = ["run", src, "-o", out, "--flavor", "verl", "--report", page, "--json", "--set",
            "algorithm.adv_estimator=grpo"]
    for s in RC_CASES[case]:
        argv += ["--set", s]
    code, printed, err = run_main(argv, capsys)
    assert code == 0, err
    rep = json.loads(printed)
    names = _shown_names(rep)
    assert any(n.startswith("rollout_corr/") for n in names)
    assert not sorted(n for n in names if catalog.lookup(n) is None)
    if case == "token_is_rs":  # one entry per statistic stands for each option's name
        assert catalog.lookup("rollout_corr/rollout_rs_seq_mean_k3_seq_mean").name == \
            "rollout_corr/rollout_rs_{option}_seq_mean"
        assert catalog.lookup("rollout_corr/rollout_rs_token_k1_mean").name == "rollout_corr/rollout_rs_{option}_mean"
        assert "rollout_is_weights" in rep["histograms"]
    html = page.read_text()
    assert rep["by_position"]["mean"] and "advantage by token position" in html
    for name in rep["histograms"]:  # each histogram's x axis titled with its entry's unit
        assert f"histogram: {name}" in html and f">{catalog.lookup('histograms/' + name).unit}<" in html


def test_every_figure_run_and_stats_show_is_in_the_catalog(tmp_path, capsys):
    out = tmp_path / "o.parquet"
    code, printed, err = run_main(["run", SAMPLE, "-o", out, "--json"], capsys)
    assert code == 0, err
    reps = [json.loads(printed)]
    for src in (out, SAMPLE):  # stats of an output (advantages) and of a dump (none)
        code, printed, err = run_main(["stats", src, "--json"], capsys)
        assert code == 0, err
        reps.append(json.loads(printed))
    for rep in reps:
        assert rep["group_health"]["overall"] and rep["histograms"]
        assert not sorted(n for n in _shown_names(rep) if catalog.lookup(n) is None)


def test_openrlhf_gate_figures_are_in_the_catalog(tmp_path):
    from test_openrlhf_correction import C, make_rows, run

    _, rep, _ = run(tmp_path, make_rows(1), {C + "level": "token", C + "mode": "mask", C + "gating": "ratio",
                                              C + "threshold": "[0.5,5.0]"})
    assert "vllm_kl" in rep["metrics"] and "is_filter_ratio" in rep["metrics"]
    assert not sorted(n for n in _shown_names(rep) if catalog.lookup(n) is None)


def test_group_health_table_and_trackers_read_the_catalog(tmp_path, capsys):
    """A group-health figure registered with ``group_table`` heads a column of the table under its label, and
    the trackers get it under its name; one the catalog lacks reaches neither."""
    from advcli.report import health
    from advcli.results.tracker import summary_values

    h = {"overall": {"groups": 2, "rows": 8, "uniform_share": 0.5, "extra_share": 0.25}}
    name = "group_health/overall/extra_share"
    assert "extra" not in " ".join(health.tables(h)[0][1]) and name not in summary_values({"group_health": h})
    catalog.register(catalog.Figure(name, "share of groups", "a test's share", label="extra",
                                    at=("group_health", "overall", "extra_share"), shown=("group_table", "tracker")))
    try:
        title, header, rows = health.tables(h)[0]
        assert header == ["", "groups", "rows", "uniform", "extra"] and rows[0] == ["all", 2, 8, "50.0%", "25.0%"]
        assert summary_values({"group_health": h}) == {"group_health/overall/groups": 2,
                                                       "group_health/overall/rows": 8,
                                                       "group_health/overall/uniform_share": 0.5, name: 0.25}
    finally:
        catalog.unregister(name)


def test_a_placeholder_names_known_values_only():
    fig = catalog.lookup("rollout_corr/rollout_rs_seq_max_k3_masked_fraction")
    assert fig.name == "rollout_corr/rollout_rs_{option}_masked_fraction" and fig.per_step
    assert catalog.lookup("rollout_corr/rollout_rs_seq_max_k1_masked_fraction") is None  # no such verl option
    assert catalog.lookup("rollout_corr/rollout_rs_masked_fraction").name == "rollout_corr/rollout_rs_masked_fraction"
    with pytest.raises(ValueError, match="placeholder"):
        catalog.register(catalog.Figure("x/{nope}_mean", "", ""))


def test_stats_leaves_out_what_a_file_lacks_by_the_entries_needs(tmp_path, capsys):
    """``needs``: a dump without advantages has no advantage figures nor their histogram; an output without
    its returns column has no ``critic/returns/*`` but keeps the advantages'."""
    out = tmp_path / "o.parquet"
    code, _, err = run_main(["run", SAMPLE, "-o", out], capsys)
    assert code == 0, err
    t = pq.read_table(out)
    pq.write_table(t.drop_columns(["returns"]), tmp_path / "noret.parquet")
    code, printed, err = run_main(["stats", tmp_path / "noret.parquet", "--json"], capsys)
    assert code == 0, err
    rep = json.loads(printed)
    assert "critic/advantages/mean" in rep["metrics"] and "advantages" in rep["histograms"]
    shown = set(rep["metrics"]) | {k for s in rep["per_step"] for k in s}
    assert not [n for n in shown if n.startswith("critic/returns")]
    code, printed, err = run_main(["stats", SAMPLE, "--json"], capsys)
    assert code == 0, err
    rep = json.loads(printed)
    assert "advantages" not in rep["histograms"] and "score" in rep["histograms"]
    assert not set(rep["metrics"]) & set(catalog.needing("advantages"))


def test_placeholders_agree_with_what_makes_the_names():
    """{option} lists verl's rejection-sampling options as the correction declares them; {kind} matches every
    diagnostic kind."""
    from advcli.correction.weights import RS_OPTIONS
    from advcli.pipeline.diagnostics import MEANINGS

    assert catalog.PLACEHOLDERS["option"] == RS_OPTIONS
    assert all(catalog.lookup(f"diagnostics/{k}").name == "diagnostics/{kind}" for k in MEANINGS)


# ------------------------------------------- compare's and audit's tracker numbers, --follow's per-step lines
def _logged_and_lines(tmp_path, capsys) -> dict[str, dict]:
    """The reports the trackers get from `advcli compare` (two outputs; two configurations on one dump) and
    `advcli audit` (an output that agrees; one that does not: fits, hypotheses, the first stage) and from
    `advcli stats`, as each command sends them (compare: its result under ``command``)."""
    outs = {}
    for est in ("grpo", "rloo"):
        outs[est] = tmp_path / f"{est}.parquet"
        code, _, err = run_main(["run", SAMPLE, "-o", outs[est], "--flavor", "verl", "--set",
                                 f"algorithm.adv_estimator={est}", "-q"], capsys)
        assert code == 0, err
    argvs = {"compare_outputs": ["compare", outs["grpo"], outs["rloo"]],
             "compare_configurations": ["compare", SAMPLE, "--flavor", "verl", "--set", "algorithm.adv_estimator=grpo",
                                        "--flavor", "verl", "--set", "algorithm.adv_estimator=rloo"],
             "audit_agrees": ["audit", outs["grpo"], "--flavor", "verl", "--set", "algorithm.adv_estimator=grpo"],
             "audit_disagrees": ["audit", outs["grpo"], "--flavor", "verl", "--set", "algorithm.adv_estimator=rloo"],
             "stats": ["stats", outs["grpo"]]}
    reps = {}
    for name, argv in argvs.items():
        code, printed, err = run_main(argv + ["--json"], capsys)
        assert code == (1 if name == "audit_disagrees" else 0), err
        rep = json.loads(printed)
        reps[name] = {"command": "compare", **rep} if name.startswith("compare") else rep
    return reps


def test_compare_audit_tracker_numbers_and_follow_lines_read_the_catalog(tmp_path, capsys, monkeypatch):
    from advcli.commands import follow
    from advcli.results.tracker import summary_values

    reps = _logged_and_lines(tmp_path, capsys)
    bad = reps["audit_disagrees"]
    assert bad["agree"] is False and bad["hypotheses"] and "fitted" in bad and bad["first_stage"]
    for name, rep in reps.items():  # every number a tracker gets has its entry
        names = _shown_names(rep)
        assert names, name
        assert not sorted(n for n in names if catalog.lookup(n) is None), name
    assert {"tokens/pearson", "row_level/sign_flips", "groups/with_sign_flip"} <= set(
        summary_values(reps["compare_outputs"]))
    assert {"agree", "max_abs_diff", "hypotheses/sign/tokens_left", "first_stage/row"} <= set(summary_values(bad))
    assert catalog.lookup("hypotheses/group_shift/tokens_left").name == "hypotheses/{hypothesis}/tokens_left"
    # a number a report gains without an entry is logged, and this test's check names it
    assert [n for n in _shown_names({**bad, "new_number": 3}) if catalog.lookup(n) is None] == ["new_number"]

    # --follow's lines: each figure they lead with is an entry shown in `follow`, its value read at the entry's
    # path (checked here against the report's own fields); the line of a report is the same text
    for command, names in follow.LEAD.items():
        for n in names:
            fig = catalog.lookup(n)
            assert fig is not None and "follow" in fig.shown, (command, n)
    stats = reps["stats"]
    gh = stats["group_health"]["overall"]
    line = follow.step_line("stats", 4, stats)[0]
    assert line.startswith(f"step 4: {stats['rows']} rows, score {stats['metrics']['critic/score/mean']:.4g}, solved "
                           f"{gh['solved_share']:.1%}, uniform groups {gh['uniform_groups']} of {gh['groups']}, "
                           "advantages mean "), line
    line, agree, values = follow.step_line("audit", 2, bad)
    assert not agree and line.startswith(f"step 2: {bad['rows']} rows, DISAGREE, max |diff| "
                                         f"{bad['max_abs_diff']:.3g}, {bad['rows_disagreeing']} row(s) disagree")
    assert values == summary_values(bad)
    # a figure the line prints that the catalog lacks fails, naming it
    monkeypatch.delitem(catalog.FIGURES, "max_abs_diff")
    with pytest.raises(KeyError, match="max_abs_diff"):
        follow.step_line("audit", 2, bad)


def test_the_hypothesis_placeholder_lists_the_audits_hypotheses():
    from advcli.audit.checks import HYPOTHESES

    assert set(catalog.PLACEHOLDERS["hypothesis"]) == set(HYPOTHESES)
