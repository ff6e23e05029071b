"""Reports: the figures agree with the output file computed independently; the formats render.

The expected numbers are recomputed here with numpy from the written Parquet output (mask=1 tokens,
Σ token_level_rewards, list lengths ...) following verl's ``compute_data_metrics``
(verl/trainer/ppo/metric_utils.py @1dda039b), not taken from advcli's own statistics code.
"""
from __future__ import annotations

import html.parser
import json
import os
import shutil
import subprocess
import tempfile

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import SAMPLE, run_cli

import advcli
from advcli.errors import AdvcliError
from advcli.report import build_report, check_report_path, render, write_report


def invoke(*args):
    """The CLI in-process (no torch import per call); AdvcliError cases go through run_cli instead."""
    from typer.testing import CliRunner

    from advcli.cli import app

    res = CliRunner().invoke(app, [str(a) for a in args], catch_exceptions=False)
    res.returncode = res.exit_code
    return res


def _flat(col) -> tuple[np.ndarray, np.ndarray]:
    """(lengths [R], flat values) of a list column, independently of advcli's readers."""
    rows = col.to_pylist()
    return np.array([len(r) for r in rows]), np.array([x for r in rows for x in r], dtype=np.float64)


def expected_from_output(path: str) -> dict:
    t = pq.read_table(path)
    L, mask = _flat(t.column("response_mask"))
    _, adv = _flat(t.column("advantages"))
    _, ret = _flat(t.column("returns"))
    m = mask > 0
    row = np.repeat(np.arange(len(L)), L)
    score = t.column("reward").to_numpy().astype(np.float64)
    if "token_level_rewards" in t.column_names:
        _, tlr = _flat(t.column("token_level_rewards"))
        seq_reward = np.bincount(row, weights=tlr, minlength=len(L))
    else:
        seq_reward = score
    step = t.column("step").to_numpy()
    out = {"rows": len(L), "tokens": int(L.sum()), "valid_tokens": int(m.sum()),
           "critic/advantages/mean": adv[m].mean(), "critic/advantages/max": adv[m].max(),
           "critic/advantages/min": adv[m].min(), "critic/returns/mean": ret[m].mean(),
           "critic/returns/max": ret[m].max(), "critic/returns/min": ret[m].min(),
           "critic/score/mean": score.mean(), "critic/score/max": score.max(),
           "critic/rewards/mean": seq_reward.mean(), "critic/rewards/min": seq_reward.min(),
           "response_length/mean": L.mean(), "response_length/max": L.max(), "response_length/min": L.min()}
    steps = {}
    for s in np.unique(step):
        sel_tok = m & (step[row] == s)
        steps[int(s)] = {"rows": int((step == s).sum()), "critic/advantages/mean": adv[sel_tok].mean(),
                         "critic/score/mean": score[step == s].mean()}
    out["steps"] = steps
    return out


@pytest.mark.parametrize("settings", [
    ["algorithm.adv_estimator=grpo"],
    ["algorithm.adv_estimator=gae", "algorithm.lam=0.95", "algorithm.use_kl_in_reward=true",
     "algorithm.kl_penalty=low_var_kl", "algorithm.kl_ctrl.kl_coef=0.05"],
], ids=["grpo", "gae-kl"])
def test_report_figures_agree_with_the_output_file(tmp_path, settings):
    out, rep_path = tmp_path / "out.parquet", tmp_path / "report.json"
    args = ["run", SAMPLE, "-o", out, "--flavor", "verl", "--report", rep_path, "-q"]
    for s in settings:
        args += ["--set", s]
    r = invoke(*args)
    assert r.returncode == 0, r.stderr
    assert r.stdout == ""  # quiet: nothing on stdout
    rep = json.loads(rep_path.read_text())
    exp = expected_from_output(str(out))
    for k in ("rows", "tokens", "valid_tokens"):
        assert rep[k] == exp[k], k
    m = rep["metrics"]
    for k, v in exp.items():
        if "/" in k:
            assert m[k] == pytest.approx(v, rel=1e-5, abs=1e-6), k
    by_step = {s["step"]: s for s in rep["per_step"]}
    for s, e in exp["steps"].items():
        assert by_step[s]["rows"] == e["rows"]
        assert by_step[s]["critic/advantages/mean"] == pytest.approx(e["critic/advantages/mean"], rel=1e-5, abs=1e-6)
        assert by_step[s]["critic/score/mean"] == pytest.approx(e["critic/score/mean"], rel=1e-6)
    # the advantage histogram counts every valid token once
    h = rep["histograms"]["advantages"]
    assert sum(h["counts"]) + h.get("underflow", 0) + h.get("overflow", 0) == exp["valid_tokens"]
    # advantage by position: the count per position sums to the valid tokens, and position 0's mean is exact
    bp = rep["by_position"]
    assert sum(bp["count"]) == exp["valid_tokens"]
    t = pq.read_table(out, columns=["advantages", "response_mask"])
    first = [(a[0], mk[0]) for a, mk in zip(t.column("advantages").to_pylist(), t.column("response_mask").to_pylist())]
    vals = np.array([a for a, mk in first if mk], dtype=np.float64)
    if bp["bucket_width"] == 1:
        assert bp["positions"][0] == 0
        assert bp["count"][0] == len(vals)
        assert bp["mean"][0] == pytest.approx(vals.mean(), rel=1e-6, abs=1e-9)
    # provenance in the report
    assert rep["outputs"] == [str(out)] and rep["inputs"] == [SAMPLE]
    assert rep["config"]["estimator"]["name"] == settings[0].split("=")[1]
    assert rep["timings"]["seconds"] > 0


def test_stats_of_an_output_agree_with_the_run_report(tmp_path):
    out, rep_run, rep_stats = tmp_path / "out.parquet", tmp_path / "run.json", tmp_path / "stats.json"
    r = invoke("run", SAMPLE, "-o", out, "--set", "algorithm.adv_estimator=rloo", "--report", rep_run, "-q")
    assert r.returncode == 0, r.stderr
    r = invoke("stats", out, "--report", rep_stats, "-q")
    assert r.returncode == 0, r.stderr
    a, b = json.loads(rep_run.read_text()), json.loads(rep_stats.read_text())
    exp = expected_from_output(str(out))
    for k, v in exp.items():
        if "/" in k:
            assert b["metrics"][k] == pytest.approx(v, rel=1e-5, abs=1e-6), k
    for k in ("critic/advantages/p50", "critic/advantages/p95", "groups/all_equal_share", "groups/solved_share"):
        assert b["metrics"][k] == pytest.approx(a["metrics"][k], rel=1e-5, abs=1e-7), k
    assert b["flavor"] == "verl" and b["command"] == "stats"
    assert b["by_position"]["count"] == a["by_position"]["count"]


def _fake_report() -> dict:
    class R:
        inputs, outputs, rows, tokens, valid_tokens, seconds = ["in.parquet"], ["out.parquet"], 4, 10, 8, 0.5
        config = {"estimator": {"name": "grpo"}}
        metrics = {"critic/advantages/mean": 0.25, "critic/advantages/max": 1.0, "response_length/mean": 2.5,
                   "groups/count": 2}
        per_step = [{"step": 0, "rows": 2, "critic/advantages/mean": 0.5},
                    {"step": 1, "rows": 2, "critic/advantages/mean": 0.0}]
        histograms = {"advantages": {"edges": [-1.0, 0.0, 1.0], "counts": [3, 5]}}
        diagnostics = [{"kind": "groups_of_one", "count": 1, "unit": "groups",
                        "examples": [{"group": "p<1>", "row": 3}],
                        "explanation": "a <b>single</b> row"},
                       {"kind": "kl_input_clamp", "count": 0, "examples": [], "explanation": "none"}]
        warnings = ["something & odd"]
        by_position = {"positions": [0, 1, 2], "mean": [0.1, 0.2, None], "lo": [0, 0, 0], "hi": [1, 1, 1],
                       "count": [4, 3, 1], "band": "mean ± 1 std"}
    return build_report(R(), flavor="verl", native={"algorithm.adv_estimator": "grpo"})


class HtmlTags(html.parser.HTMLParser):
    VOID = {"meta", "br", "line", "rect", "circle", "polyline", "polygon", "path", "img", "link", "input"}

    def __init__(self):
        super().__init__()
        self.stack, self.tags, self.errors = [], [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_endtag(self, tag):
        if tag in self.VOID:
            return
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"unbalanced </{tag}> (open: {self.stack[-3:]})")
        else:
            self.stack.pop()


def test_html_is_self_contained_and_well_formed():
    page = render(_fake_report(), "html")
    p = HtmlTags()
    p.feed(page)
    assert not p.errors and p.stack == [], p.errors
    names = [t for t, _ in p.tags]
    assert names.count("svg") >= 3  # histogram, by position, per-step curve
    assert "script" not in names and "link" not in names and "img" not in names
    assert "http:" not in page and "https:" not in page and "url(" not in page
    # user text is escaped
    assert "<b>single</b>" not in page and "&lt;b&gt;single&lt;/b&gt;" in page
    assert "something &amp; odd" in page


def test_markdown_and_json_hold_every_figure():
    rep = _fake_report()
    md = render(rep, "md")
    assert "| critic/advantages/mean | 0.25 |" in md
    assert "groups_of_one" in md and "something & odd" in md
    assert "## Per step" in md and "## Histogram: advantages" in md
    back = json.loads(render(rep, "json"))
    assert back["metrics"] == rep["metrics"] and back["per_step"] == rep["per_step"]


def test_write_report_is_atomic_and_checks_the_path(tmp_path):
    rep = _fake_report()
    p = tmp_path / "r.md"
    assert write_report(str(p), rep) == "md"
    assert sorted(os.listdir(tmp_path)) == ["r.md"]  # no temporary file left
    with pytest.raises(AdvcliError, match="unknown report format '.htlm'.*'.html'"):
        check_report_path(str(tmp_path / "r.htlm"))
    with pytest.raises(AdvcliError, match="does not exist"):
        check_report_path(str(tmp_path / "nope" / "r.json"))
    with pytest.raises(AdvcliError, match="also an input, output or configuration file"):
        check_report_path(str(tmp_path / "x.json"), [str(tmp_path / "x.json")])


def test_run_refuses_a_bad_report_path_before_any_work(tmp_path):
    out = tmp_path / "out.parquet"
    r = run_cli("run", SAMPLE, "-o", out, "--report", tmp_path / "report.pdf")
    assert r.returncode == 2
    assert "report format" in r.stderr and "Traceback" not in r.stderr
    assert not out.exists()


def test_json_on_stdout_is_the_report(tmp_path):
    r = invoke("run", SAMPLE, "-o", tmp_path / "o.parquet", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)  # nothing else on stdout
    assert d["rows"] == 384 and d["metrics"]["critic/advantages/count"] == d["valid_tokens"]
    assert d["report"] == "advcli/1"


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(CHROMIUM is None, reason="needs chromium (apt-get install -y chromium)")
def test_html_report_renders_in_headless_chromium(tmp_path):
    html_path = tmp_path / "report.html"
    r = invoke("run", SAMPLE, "-o", tmp_path / "o.parquet", "--report", html_path, "-q")
    assert r.returncode == 0, r.stderr
    flags = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={tempfile.mkdtemp(dir=tmp_path)}"]
    url = html_path.resolve().as_uri()
    dom = subprocess.run(flags + ["--dump-dom", url], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert "advcli run report" in dom.stdout and dom.stdout.count("<svg") >= 4
    shot = tmp_path / "shot.png"
    s = subprocess.run(flags + [f"--screenshot={shot}", "--window-size=1280,2000", url], capture_output=True,
                       text=True, timeout=120)
    assert s.returncode == 0, s.stderr[-2000:]
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data) > 30_000  # a page of tables and plots, not a blank canvas (a blank 1280x2000 PNG is ~10 kB)


def test_api_doc_examples_run(tmp_path, monkeypatch):
    """Every Python block of docs/api.md runs, in order, from a directory holding sample_data/."""
    import re

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    os.symlink(os.path.join(root, "sample_data"), tmp_path / "sample_data")
    monkeypatch.chdir(tmp_path)
    text = open(os.path.join(root, "docs", "api.md"), encoding="utf-8").read()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) >= 6
    ns: dict = {}
    for i, block in enumerate(blocks):
        exec(compile(block, f"docs/api.md block {i}", "exec"), ns)  # noqa: S102 - our own documentation
    # the numbers the page prints in its comments
    assert ns["result"].rows == 384 and (tmp_path / "report.html").exists()
    assert [round(float(x), 4) for x in ns["adv"]] == [0.9, 0.8, 0.7, 0.5, 0.4]
    assert sum(ns["result"].histograms["advantages"]["counts"]) == ns["result"].valid_tokens
    # the notebook walkthrough: rows back from an in-memory run, verl's GRPO audited as such
    assert len(ns["rows"]) == 384 and ns["check"].agree and ns["steps"].to_pandas()["rows"].sum() == 384


def test_run_report_by_position_is_the_runs_own(tmp_path, monkeypatch):
    """``run --report``'s advantage by token position comes from the run itself, not from reading back the
    output it wrote: with a sidecar output (which has no mask) the figures are still over the input's mask=1
    tokens, several chunks add up, and no file named like the output is opened for reading. Expected: the
    mean, std and count per position (bucketed as the report says) from the input mask and the written
    advantages, computed here with plain loops."""
    import advcli.io.reader as reader

    opened = []
    real_open = reader.InputSet.open

    def spy(specs, *a, **k):
        opened.extend(str(s) for s in specs)
        return real_open(specs, *a, **k)

    monkeypatch.setattr(reader.InputSet, "open", staticmethod(spy))
    out, rep_path = tmp_path / "side.parquet", tmp_path / "r.json"
    r = invoke("run", SAMPLE, "-o", out, "--set", "algorithm.adv_estimator=grpo", "--output-mode", "sidecar",
               "--chunk-rows", "50", "--report", rep_path, "-q")
    assert r.returncode == 0, r.stderr
    assert not [p for p in opened if "side.parquet" in p], opened
    bp = json.loads(rep_path.read_text())["by_position"]
    mask = pq.read_table(SAMPLE, columns=["response_mask"]).column("response_mask").to_pylist()
    adv = pq.read_table(out, columns=["advantages"]).column("advantages").to_pylist()
    width = bp["bucket_width"]
    sums: dict[int, list[float]] = {}
    for a_row, m_row in zip(adv, mask):
        assert len(a_row) == len(m_row)
        for t, (a, m) in enumerate(zip(a_row, m_row)):
            if m:
                sums.setdefault(t // width, []).append(float(a))
    buckets = sorted(sums)
    assert bp["positions"] == [b * width for b in buckets]
    assert bp["count"] == [len(sums[b]) for b in buckets]
    assert sum(bp["count"]) == sum(sum(1 for m in row if m) for row in mask)
    for b, mean, std in zip(buckets, bp["mean"], bp["std"]):
        v = np.array(sums[b])
        assert mean == pytest.approx(v.mean(), rel=1e-9, abs=1e-12)
        assert std == pytest.approx(v.std(), rel=1e-6, abs=1e-9)


def test_stats_of_an_output_replays_the_runs_reshaped_rewards(tmp_path):
    """An output without token_level_rewards whose run reshaped the rewards: stats' critic/score and
    critic/rewards are the run's (it once showed the dump's raw reward). By hand, two groups of two rows
    (rewards [1, 0] and [0.5, 0.5]), lengths 2, 3, 1, 4; row 1 ends on a masked token:
    - slime grpo: a = 0.5/(std(±0.5) + 1e-6) = 0.5/(0.7071068 + 1e-6) on every position (−a on row 1, 0 in
      the equal group), so the rows' Σ_t rewards are 2a, −3a, 0, 0: mean −a/4;
    - ROLL grpo: the same normalised reward once, at L−1, lost on row 1 (masked there): a, 0, 0, 0;
    - AReaL (r − 0.5)·10 with no normalisation: critic/score = mean(5, −5, 0, 0) = 0, max 5."""
    src = tmp_path / "in.parquet"
    pq.write_table(pa.table({"prompt_id": ["p", "p", "q", "q"], "reward": [1.0, 0.0, 0.5, 0.5],
                             "response_mask": [[1, 1], [1, 1, 0], [1], [1, 1, 1, 1]]}), str(src))
    a = 0.5 / (0.70710678 + 1e-6)
    cases = [("slime", {"n_samples_per_prompt": 2}, {"critic/rewards/mean": (2 * a - 3 * a) / 4,
                                                      "critic/rewards/min": -3 * a, "critic/rewards/max": 2 * a}),
             ("roll", {"adv_estimator": "grpo", "actor_infer.generating_args.num_return_sequences": 2},
              {"critic/rewards/mean": a / 4, "critic/rewards/min": 0.0, "critic/rewards/max": a}),
             ("areal", {"actor.reward_scaling": 10, "actor.reward_bias": -0.5, "actor.kl_ctl": 0.0},
              {"critic/score/mean": 0.0, "critic/score/max": 5.0, "critic/score/min": -5.0})]
    for flavor, settings, want in cases:
        out = tmp_path / f"{flavor}.parquet"
        ran = advcli.run(str(src), str(out), flavor=flavor, settings=settings, force=True)
        got = advcli.stats(str(out)).metrics
        for k, v in want.items():
            assert got[k] == pytest.approx(v, rel=1e-6, abs=1e-7), (flavor, k, got[k])
            assert got[k] == pytest.approx(ran.metrics[k], rel=1e-6, abs=1e-7), (flavor, k, ran.metrics[k])


@pytest.mark.parametrize("command", ["run", "audit", "stats"])
def test_a_report_never_replaces_the_config_or_a_file_that_is_not_a_report(tmp_path, command):
    """--report equal to --config replaced the user's configuration with the report (exit 0), and --report on
    any existing file replaced it. An earlier advcli report is replaced (a rerun), the config and another file
    are refused before any work; run's --force replaces another file."""
    runs = iter(range(100))
    audited = tmp_path / "adv.parquet"
    assert run_cli("run", SAMPLE, "-o", audited, "--flavor", "verl", "--set", "algorithm.adv_estimator=grpo",
                   "-q").returncode == 0

    def base():
        return {"run": ["run", SAMPLE, "-o", tmp_path / f"o{next(runs)}.parquet"], "audit": ["audit", audited],
                "stats": ["stats", SAMPLE]}[command]

    cfg = tmp_path / "cfg.json"  # (YAML: JSON is YAML) a name --report also takes
    cfg.write_text('{"algorithm": {"adv_estimator": "grpo"}}\n')
    conf = ["--flavor", "verl", "--config", cfg] if command != "stats" else []
    r = run_cli(*base(), *conf, "--report", cfg, "-q") if command != "stats" else None
    if r is not None:
        assert r.returncode == 2 and "is also an input, output or configuration file" in r.stderr, r.stderr
        assert cfg.read_text() == '{"algorithm": {"adv_estimator": "grpo"}}\n'
    notes = tmp_path / "notes.md"
    notes.write_text("my notes\n")
    r = run_cli(*base(), *conf, "--report", notes, "-q")
    assert r.returncode == 2 and "already exists and is not an advcli report" in r.stderr, r.stderr
    assert notes.read_text() == "my notes\n"
    earlier = tmp_path / "earlier.json"
    for _ in range(2):  # the second replaces the first
        r = run_cli(*base(), *conf, "--report", earlier, "-q")
        assert r.returncode == 0, r.stderr
        assert json.loads(earlier.read_text())["advcli_version"]
    if command == "run":
        r = run_cli(*base(), *conf, "--report", notes, "-q", "--force")
        assert r.returncode == 0 and notes.read_text().startswith("# advcli"), r.stderr
