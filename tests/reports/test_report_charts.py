"""The HTML report's charts: the axis rule (nice ticks, zero-based value axes) computed by hand, the SVG
they draw, and the pages `advcli run|stats|filter --report x.html` write rendered in headless Chromium,
where every text label's box is measured: no two overlap and every plot has both axes with their ticks.

Expected ticks follow the nice-number rule by hand: the step for a span split in about n parts is
1, 2 or 5 × 10^k (the first of 1, 2, 5, 10 whose ratio to span/n / 10^k passes √2, √10, √50 — d3's
tickIncrement), and the value axis runs from the tick at or below min(data, 0) to the one at or above
max(data, 0).
"""
from __future__ import annotations

import json
import math
import re
import subprocess
import tempfile

import pytest
from conftest import SAMPLE
from hypothesis import given, settings
from hypothesis import strategies as st
from test_filter import make_dump
from test_report import CHROMIUM, HtmlTags, expected_from_output, invoke

from advcli.report import (
    FRAGMENT_CSS,
    fmt_num,
    plot_svgs,
    plots_html,
    position_axis,
    summary_html,
    svg_histogram,
    svg_lines,
    value_axis,
)
from advcli.report.charts import nice_step

MINUS = "\u2212"


# ------------------------------------------------------------------------------------- axis rule
def test_two_close_step_values_are_drawn_from_zero():
    """0.544 → 0.525 (the issue's case): span/5 = 0.1088 → step 0.1; the axis 0..0.6, so the dip is
    0.019 / 0.6 = 3 % of the height, not the whole of it."""
    ax = value_axis([0.544, 0.525])
    assert (ax.lo, ax.hi) == (0.0, 0.6)
    assert ax.ticks == [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6]  # one rounding each: 0.3, not 0.30000000000000004
    assert ax.labels == ["0", "0.1", "0.2", "0.3", "0.4", "0.5", "0.6"]


def test_value_axis_of_signed_small_large_and_constant_data():
    # ±2.47487: span 4.95/5 = 0.99 → 9.9 × 0.1 ≥ √50 → step 1
    ax = value_axis([-2.47487, 2.47487])
    assert ax.ticks == [-3.0, -2.0, -1.0, 0.0, 1.0, 2.0, 3.0]
    assert ax.labels == [f"{MINUS}3", f"{MINUS}2", f"{MINUS}1", "0", "1", "2", "3"]
    # 0.0012..0.0124: 0.0124/5 = 0.00248 → 2.48 × 10^-3 → step 0.002, three decimals
    ax = value_axis([0.0012, 0.0124])
    assert ax.ticks[:4] == [0.0, 0.002, 0.004, 0.006] and ax.hi == 0.014
    assert ax.labels[1] == "0.002" and ax.labels[-1] == "0.014"
    # all zero: [-1, 1] in steps of 0.5 (2/5 = 0.4 → 4 ≥ √10 → 5 × 0.1)
    assert value_axis([0.0, 0.0]).ticks == [-1.0, -0.5, 0.0, 0.5, 1.0]
    # counts of at most 1: whole ticks, at least three
    ax = value_axis([1, 0], integer=True)
    assert ax.ticks == [0.0, 1.0, 2.0] and ax.labels == ["0", "1", "2"]
    # millions: scientific labels, distinct (2.5e6/5 = 5e5 → step 500000)
    ax = value_axis([2_500_000])
    assert ax.ticks == [0.0, 5e5, 1e6, 1.5e6, 2e6, 2.5e6]
    assert ax.labels == ["0", "5.0e+05", "1.0e+06", "1.5e+06", "2.0e+06", "2.5e+06"]
    # shares as percentages: 0.8/5 = 0.16 → step 0.2
    assert value_axis([0.125, 0.8], percent=True).labels == ["0%", "20%", "40%", "60%", "80%"]
    # tiny values: scientific, with the digits that tell the ticks apart (3e-9/5 → step 5e-10)
    assert value_axis([1e-9, 3e-9]).labels[:3] == ["0", "5.0e\u221210", "1.0e\u221209"]
    assert value_axis([None, float("nan")]) is None


def test_position_axis_spans_the_data_with_three_whole_ticks_at_least():
    # two steps 0 and 1: widened to 0..2 (never below 0); steps 1, 2: widened to 0..2
    assert position_axis(0, 1, integer=True).ticks == [0.0, 1.0, 2.0]
    assert position_axis(1, 2, integer=True).ticks == [0.0, 1.0, 2.0]
    # 0..399 in about 6 parts: 66.5 → 6.65 × 10 ≥ √10 → step 50, ticks inside the data only
    ax = position_axis(0, 399, integer=True)
    assert (ax.lo, ax.hi) == (0.0, 399.0) and ax.ticks == [50.0 * k for k in range(8)]
    # a histogram's edges -2.5..2.5: 5/6 → 8.3 × 0.1 → step 1, labels without decimals
    ax = position_axis(-2.5, 2.5)
    assert ax.ticks == [-2.0, -1.0, 0.0, 1.0, 2.0] and ax.labels[0] == f"{MINUS}2"
    # a narrow span around 1: fixed decimals, as many as the step 0.00005 needs (0.0002/6 → 3.3e-5 → 5e-5)
    assert position_axis(0.9999, 1.0001).labels == ["0.99990", "0.99995", "1.00000", "1.00005", "1.00010"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(-1e7, 1e7, allow_nan=False).map(lambda v: v if abs(v) >= 1e-300 else 0.0),  # drawn as 0
                min_size=1, max_size=20), st.booleans())
def test_value_axis_rule_holds_for_any_data(values, integer):
    if integer:
        values = [float(round(v)) for v in values]
    ax = value_axis(values, integer=integer)
    assert len(ax.ticks) >= 3 and len(set(ax.labels)) == len(ax.labels)
    assert 0.0 in ax.ticks
    step = ax.ticks[1] - ax.ticks[0]
    # the data and zero inside (a value within 1e-9 of a step past the last tick counts as on it)
    assert ax.lo <= min(min(values), 0.0) + 1e-9 * step and ax.hi >= max(max(values), 0.0) - 1e-9 * step
    assert all(math.isclose(b - a, step, rel_tol=1e-9) for a, b in zip(ax.ticks, ax.ticks[1:]))
    mant = step / 10 ** math.floor(math.log10(step) + 1e-9)
    assert min(abs(mant - m) for m in (1, 2, 5)) < 1e-6, step  # a nice step
    assert not integer or step >= 1
    # the axis ends on the first tick beyond the data: one step less would cut a value off (all zero: [-1, 1])
    if any(values) and len(ax.ticks) > 3:
        assert ax.hi == 0.0 or ax.hi - step < max(values)
        assert ax.lo == 0.0 or ax.lo + step > min(values)


def test_nice_step_thresholds():
    assert [nice_step(s, 1) for s in (1.4, 1.5, 3.1, 3.2, 7.0, 7.1)] == [1, 2, 2, 5, 5, 10]


# ------------------------------------------------------------------------------------------ the svg
def _num(label: str) -> float:
    return float(label.replace(MINUS, "-").replace(",", "").rstrip("%"))


def test_two_step_plot_is_drawn_to_scale_with_points_legend_and_hover():
    svg = svg_lines([0, 1], {"a/mean": [0.5443217, 0.525], "b/mean": [0.1, None]}, "two steps", "step")
    # the circles' y positions: the dip is 0.0193217/0.6 of the plot's height (the axis 0..0.6)
    top, bottom = (float(v) for v in re.search(r'class="domain" x1="[\d.]+" y1="([\d.]+)" x2="[\d.]+" '
                                               r'y2="([\d.]+)"', svg).groups())
    cys = [float(c) for c in re.findall(r'class="point" cx="[\d.]+" cy="([\d.]+)"', svg)]
    assert len(cys) == 3  # every value a point, the lone b/mean one too
    assert cys[1] - cys[0] == pytest.approx((0.5443217 - 0.525) / 0.6 * (bottom - top), abs=0.02)
    # a legend item with a swatch of its series' colour for each series
    items = re.findall(r'<g class="legend-item"><line [^>]*stroke="(#\w+)".*?>([^<]*)</text></g>', svg)
    assert [name for _, name in items] == ["a/mean", "b/mean"] and items[0][0] != items[1][0]
    # hover: the exact value at each step, ten significant digits
    assert "a/mean: 0.5443217" in svg and "b/mean: –" in svg


def test_steps_per_domain_are_one_curve_per_domain():
    """ROLL's per-step entries are per step and domain: one curve per domain over the distinct steps (not
    a zigzag through both), each in the legend."""
    from advcli.report import to_html

    steps = [{"step": s, "domain": d, "critic/score/mean": v}
             for s, d, v in [(0, "math", 0.25), (0, "code", 0.75), (1, "math", 0.5), (1, "code", 1.0)]]
    page = to_html({"command": "run", "per_step": steps})
    svg = re.search(r'<svg class="plot"[^>]*aria-label="critic/score/mean by step".*?</svg>', page, re.S).group(0)
    assert [n for n in re.findall(r'class="l legend"[^>]*>([^<]*)<', svg)] == ["math", "code"]
    assert len(re.findall(r'<polyline class="series"', svg)) == 2
    assert "math: 0.25" in svg and "code: 1" in svg  # the step-0 and step-1 hover titles


def test_histogram_bars_hold_their_bin_and_count():
    svg = svg_histogram([-1.0, 0.0, 1.0], [3, 5], "h", xlabel="advantage", ylabel="tokens")
    assert "<title>[-1, 0): 3</title>" in svg and "<title>[0, 1]: 5</title>" in svg
    assert 'class="axis x"' in svg and 'class="axis y"' in svg


def test_summary_and_plots_render_alone_as_html_fragments(tmp_path):
    """What a notebook shows: the summary block and the plots, each a fragment with its own style, whose
    rules all sit under .advcli (nothing restyles the host page)."""
    r = invoke("run", SAMPLE, "-o", tmp_path / "o.parquet", "--json")
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    selectors = [rule.split("{")[0] for rule in re.findall(r"[^{}]+\{[^}]*\}", FRAGMENT_CSS)]
    assert selectors and all(sel.strip().startswith(".advcli") for rule in selectors for sel in rule.split(","))
    summary, plots = summary_html(rep), plots_html(rep)
    for frag in (summary, plots):
        p = HtmlTags()
        p.feed(frag)
        assert not p.errors and p.stack == [], p.errors
        assert frag.startswith('<div class="advcli"><style>') and "<body" not in frag and "<script" not in frag
    assert f'<div class="v">{rep["rows"]}</div><div class="k">rows</div>' in summary
    assert "float32_cancellation" in summary and "<svg" not in summary
    assert plots.count("<svg") == len(plot_svgs(rep)) >= 6  # 4 histograms, 2 by position, the step curves


# ------------------------------------------------------------------------------------ the browser
MEASURE = """<script>
(function () {
  const box = e => { const r = e.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
  const axis = (svg, sel) => {
    const g = svg.querySelector(sel);
    if (!g) return null;
    const d = g.querySelector("line.domain");
    return {band: g.classList.contains("band"), domain: d ? box(d) : null,
            ticks: [...g.querySelectorAll("g.tick")].map(t => ({s: t.textContent, b: box(t.querySelector("text"))}))};
  };
  const plots = [...document.querySelectorAll("svg.plot")].map(svg => ({
    title: svg.getAttribute("aria-label"), box: box(svg),
    texts: [...svg.querySelectorAll("text")].map(t => ({s: t.textContent, b: box(t)})),
    x: axis(svg, "g.axis.x"), y: axis(svg, "g.axis.y"),
    series: new Set([...svg.querySelectorAll("polyline.series, circle.point")].map(
      e => e.getAttribute("fill") === "none" ? e.getAttribute("stroke") : e.getAttribute("fill"))).size,
    legend: [...svg.querySelectorAll("g.legend-item")].map(
      g => ({s: g.textContent, swatch: !!g.querySelector("line, rect")})),
    axisTitles: svg.querySelectorAll("text.axis-title").length,
    hover: svg.querySelectorAll("title").length}));
  const pre = document.createElement("pre");
  pre.id = "advcli-measure";
  pre.textContent = JSON.stringify(plots);
  document.body.appendChild(pre);
})();
</script>"""


def _measure(html_path, tmp_path) -> list[dict]:
    """The page rendered by headless Chromium with a measuring script appended: each plot's text boxes,
    axes and ticks as the browser laid them out."""
    page = tmp_path / ("measured-" + html_path.name)
    page.write_text(html_path.read_text(encoding="utf-8").replace("</body>", MEASURE + "</body>"), encoding="utf-8")
    flags = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--window-size=1280,2000", f"--user-data-dir={tempfile.mkdtemp(dir=tmp_path)}"]
    dom = subprocess.run(flags + ["--dump-dom", page.resolve().as_uri()], capture_output=True, text=True,
                         timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    m = re.search(r'<pre id="advcli-measure">(.*?)</pre>', dom.stdout, re.S)
    assert m, dom.stdout[-2000:]
    import html

    return json.loads(html.unescape(m.group(1)))


def _overlap(a, b, tol=0.5) -> bool:
    return a[0] < b[2] - tol and b[0] < a[2] - tol and a[1] < b[3] - tol and b[1] < a[3] - tol


def _check_plot(p: dict) -> None:
    where = p["title"]
    texts = [t for t in p["texts"] if t["s"].strip()]
    for i, a in enumerate(texts):  # no two labels overlap, and each lies inside its plot
        assert p["box"][0] - 0.5 <= a["b"][0] and a["b"][2] <= p["box"][2] + 0.5, (where, a)
        for b in texts[i + 1:]:
            assert not _overlap(a["b"], b["b"]), (where, a, b)
    x, y = p["x"], p["y"]
    assert x and y, f"{where}: missing an axis"
    assert len(x["ticks"]) >= 3, (where, x["ticks"])
    assert len(y["ticks"]) >= (1 if y["band"] else 3), (where, y["ticks"])
    xs = [_num(t["s"]) for t in x["ticks"]]
    assert xs == sorted(xs) and len(set(xs)) == len(xs), (where, xs)
    for t in x["ticks"]:  # the x tick labels below the x axis line, the y ones left of the y axis line
        assert t["b"][1] >= x["domain"][3] - 0.5, (where, t)
    for t in y["ticks"]:
        assert t["b"][2] <= y["domain"][0] + 0.5, (where, t)
    if not y["band"]:
        ys = [_num(t["s"]) for t in y["ticks"]]
        assert ys == sorted(ys) and 0.0 in ys, (where, ys)
    if p["series"] > 1:  # several series: a legend entry with a swatch for each
        assert len(p["legend"]) >= p["series"] and all(e["swatch"] for e in p["legend"]), where
    assert p["axisTitles"] == (1 if y["band"] else 2), where  # what each axis holds, in its unit
    assert p["hover"] > 0, where


@pytest.mark.skipif(CHROMIUM is None, reason="needs chromium (apt-get install -y chromium)")
def test_rendered_pages_have_readable_axes_and_no_overlapping_labels(tmp_path):
    run_html, out = tmp_path / "run.html", tmp_path / "o.parquet"
    r = invoke("run", SAMPLE, "-o", out, "--report", run_html, "--json")
    assert r.returncode == 0, r.stderr
    severity = {d["kind"]: d.get("severity") for d in json.loads(r.stdout)["diagnostics"] if d.get("count")}
    # a dump with three steps, three data sources, uneven groups (the filter tests' builder), NaN rewards
    # left out by stats, and filter's own report
    dump = make_dump(tmp_path / "d.parquet", seed=3, rows=400)
    stats_html, filter_html = tmp_path / "stats.html", tmp_path / "filter.html"
    assert invoke("stats", dump, "--report", stats_html, "-q").returncode == 0
    r = invoke("filter", dump, "-o", tmp_path / "f.parquet", "--drop-uniform", "--report", filter_html, "-q")
    assert r.returncode == 0, r.stderr
    plots = {}
    for path in (run_html, stats_html, filter_html):
        for p in _measure(path, tmp_path):
            _check_plot(p)
            plots[f"{path.name}: {p['title']}"] = p
    titles = "\n".join(plots)
    for want in ("run.html: histogram: advantages", "run.html: advantage by token position",
                 "run.html: critic/score/mean by step", "stats.html: share of uniform groups by source",
                 # the stats dump holds no advantages: no zero-advantage token share there (a figure it cannot give)
                 "stats.html: share of uniform groups by step",
                 "run.html: share of uniform groups (and zero-advantage tokens) by step",
                 "filter.html: groups by step"):
        assert any(k.startswith(want) for k in plots), (want, titles)
    # the score by step of the sample (two steps) is drawn from 0: its lowest y tick is 0
    score = next(p for k, p in plots.items() if k.startswith("run.html: critic/score/mean by step"))
    assert _num(score["y"]["ticks"][0]["s"]) == 0.0
    # the cards: each family's mean with its min and max beside it, from the output file itself
    exp = expected_from_output(str(out))
    page = run_html.read_text(encoding="utf-8")
    card = re.search(r'<div class="k">critic/advantages/mean</div><div class="r">([^<]*)</div>', page).group(1)
    lo, hi = fmt_num(float(exp["critic/advantages/min"])), fmt_num(float(exp["critic/advantages/max"]))
    assert card == f"min {lo} · max {hi}"
    # each diagnostic styled and labelled by its severity: warnings apart from information
    shown = dict((k, c) for c, k in re.findall(r'<div class="diag (\w+)"><span class="badge">\1</span><b>([^<]*)</b>',
                                                page))
    assert severity and shown == {k: "warning" if v == "warning" else "info" for k, v in severity.items()}
