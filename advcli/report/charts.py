"""The report's plots as inline SVG: the axis rule (nice ticks, honest ranges) and the charts built on it
(lines, histogram, horizontal bars). Plain lists in, an ``<svg>`` string out; no numpy, no script.

Every chart is drawn the same way, so a reader can trust any of them:

- **Ticks** are "nice" numbers: multiples of 1, 2 or 5 × 10^k (the rule of Heckbert's *Nice numbers for
  graph labels* and of d3's ``ticks``), about five per axis and never fewer than three, each labelled with
  just the decimals its step needs; counts, steps, token positions and group sizes get whole-number ticks.
- **The value axis includes zero** (:func:`value_axis`): a quantity of one sign is drawn from 0, so a
  curve's height is its value and a change of 3 % looks like 3 % (a score going 0.544 → 0.525 is a small
  dip, not a crash); the axis then ends on the next tick beyond the data. Exact values are on hover and in
  the tables.
- **The position axis** (steps, positions, a histogram's edges; :func:`position_axis`) spans the data,
  widened to three whole-number ticks when the data has fewer (two steps 0 and 1: ticks 0, 1, 2).
- Gridlines at every tick, axis titles with units, the tick labels outside the frame, a legend with a
  colour swatch per series above the frame (never over it), a point per value for short series, and a
  hover title with the exact value on every point, bar and step. Each series after the first has its
  own dash pattern and smaller points, so two equal series both stay visible.

Each text sits in its own box computed here (labels measured at a conservative character width); the
browser test of ``tests/reports/test_report.py`` checks on the rendered page that no two labels overlap.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from .primitives import PALETTE, esc, is_num

# text sizes (px) and the widths a character takes at most in the sans-serif fonts the CSS names
LABEL_PX, TITLE_PX = 11, 13
LABEL_CHAR_W, TITLE_CHAR_W = 6.6, 8.0
GRID, AXIS, TEXT, MUTED = "#e5e7eb", "#6b7280", "#111827", "#4b5563"
# the n-th series' dash pattern and point radius: a later series drawn over an equal earlier one leaves it
# visible (a solid line and a ring around a smaller point)
DASHES, RADII = ["", "6 3", "2 3", "8 3 2 3"], [3.5, 2.5, 2.0, 2.0]
FONT = 'font-family="system-ui,-apple-system,Segoe UI,Roboto,Helvetica,Arial,sans-serif"'


# ----------------------------------------------------------------------------------- the axis rule
@dataclass(frozen=True)
class Axis:
    """One axis: the domain drawn (``lo``..``hi``), its ticks and their labels."""
    lo: float
    hi: float
    ticks: list[float]
    labels: list[str]


def nice_step(span: float, count: int) -> float:
    """The tick step for ``span`` split in about ``count`` parts: 1, 2 or 5 × 10^k (d3's tickIncrement)."""
    raw = span / max(count, 1)
    power = math.floor(math.log10(raw))
    err = raw / 10 ** power
    factor = 10 if err >= math.sqrt(50) else 5 if err >= math.sqrt(10) else 2 if err >= math.sqrt(2) else 1
    return _exact(factor, power)


def _exact(k: float, power: int) -> float:
    """k × 10^power rounded once (0.1 × 3 is 0.3, not 0.30000000000000004)."""
    return k * 10 ** power if power >= 0 else k / 10 ** -power


def _multiples(lo: float, hi: float, step: float) -> list[float]:
    """The multiples of ``step`` in [lo, hi], each computed as one rounded product."""
    power = math.floor(math.log10(step) + 1e-9)
    mant = round(step / 10 ** power) if power >= 0 else round(step * 10 ** -power)
    first, last = math.ceil(lo / step - 1e-9), math.floor(hi / step + 1e-9)
    return [_exact(i * mant, power) + 0.0 for i in range(first, last + 1)]


def _step_for(span: float, count: int, integer: bool) -> float:
    step = nice_step(span, count) if span > 0 else 1.0
    return max(step, 1.0) if integer else step


def value_axis(values: list, *, integer: bool = False, percent: bool = False, count: int = 5) -> Axis | None:
    """The value (y) axis of ``values``: zero included, widened to the ticks around the data, at least
    three ticks. Data all 0 are drawn on [-1, 1] ([0, 2] for counts). None when no value is finite."""
    vals = [float(v) if abs(v) >= 1e-300 else 0.0 for v in values if is_num(v)]  # below: drawn as 0 anyway
    if not vals:
        return None
    lo, hi = min(min(vals), 0.0), max(max(vals), 0.0)
    if lo == hi:
        lo, hi = (0.0, 2.0) if integer else (-1.0, 1.0)
    for c in range(count, count + 8):
        step = _step_for(hi - lo, c, integer)
        a, b = math.floor(lo / step + 1e-9) * step, math.ceil(hi / step - 1e-9) * step
        ticks = _multiples(a, b, step)
        if len(ticks) >= 3:
            break
    while len(ticks) < 3:  # counts of at most 1: one more whole tick
        ticks.append(ticks[-1] + step)
    return Axis(ticks[0], ticks[-1], ticks, tick_labels(ticks, step, percent=percent))


def position_axis(lo: float, hi: float, *, integer: bool = False, count: int = 6) -> Axis:
    """The position (x) axis over [lo, hi]: the data's own extent with the nice ticks inside it, widened by
    whole units when whole-number data would show fewer than three ticks (steps 0, 1 → 0..2)."""
    lo, hi = float(lo), float(hi)
    if integer:
        while len(_multiples(lo, hi, 1.0)) < 3:
            if lo - 1 >= 0 and (hi - lo) % 2:  # alternate sides, never below a non-negative start
                lo -= 1
            else:
                hi += 1
    elif hi == lo:
        lo, hi = lo - 1, hi + 1
    ticks: list[float] = []
    for c in range(count, count + 8):
        step = _step_for(hi - lo, c, integer)
        ticks = _multiples(lo, hi, step)
        if len(ticks) >= 3:
            break
    return Axis(lo, hi, ticks, tick_labels(ticks, step))


def tick_labels(ticks: list[float], step: float, *, percent: bool = False) -> list[str]:
    """Tick labels with the decimals the step needs (0.5 → "0.5", 0.25 never: steps are 1, 2, 5 × 10^k);
    scientific notation when every tick is below 0.001 or one is a million or more (0.99995 stays fixed);
    ``percent``: values × 100 with "%".
    Negative values carry a true minus sign."""
    if percent:
        ticks, step = [100 * t for t in ticks], 100 * step
    big = max(abs(t) for t in ticks)
    if big >= 1e6 or big < 1e-3:
        p = max(0, math.floor(math.log10(big) + 1e-9) - math.floor(math.log10(step) + 1e-9))
        out = ["0" if t == 0 else f"{t:.{p}e}" for t in ticks]
    else:
        d = max(0, -math.floor(math.log10(step) + 1e-9))
        out = ["0" if t == 0 else f"{t:,.{d}f}" for t in ticks]
    return [s.replace("-", "\u2212") + ("%" if percent else "") for s in out]


def exact(v) -> str:
    """A value as a hover shows it: ten significant digits, whole numbers with separators."""
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    if is_num(v):
        return f"{float(v):.10g}"
    return "–" if v is None else str(v)


# ------------------------------------------------------------------------------------------ layout
def text_width(s: str, char_w: float = LABEL_CHAR_W) -> float:
    return len(s) * char_w


def _text(x: float, y: float, s: str, *, anchor: str = "middle", size: int = LABEL_PX, fill: str = MUTED,
          cls: str = "l", extra: str = "") -> str:
    return (f'<text x="{x:.1f}" y="{y:.1f}" class="{cls}" text-anchor="{anchor}" font-size="{size}" '
            f'fill="{fill}" {FONT}{extra}>{esc(s)}</text>')


def _title_lines(title: str, width: float) -> list[str]:
    """The title on one line, or two split at the space nearest the middle when it is too wide."""
    if text_width(title, TITLE_CHAR_W) <= width or " " not in title:
        return [title]
    mid = len(title) / 2
    cut = min((i for i, ch in enumerate(title) if ch == " "), key=lambda i: abs(i - mid))
    return [title[:cut], title[cut + 1:]]


def _legend(entries: list[tuple[str, str, str]], x0: float, width: float, y: float) -> tuple[list[str], float]:
    """Legend items (name, colour, kind "line" | "band") laid out in rows from (x0, y); returns the parts
    and the height used."""
    parts, x, row = [], x0, 0
    for i, (name, color, kind) in enumerate(entries):
        wi = 16 + 5 + text_width(name) + 14
        if x > x0 and x + wi > x0 + width:
            x, row = x0, row + 1
        cy = y + row * 16
        if kind == "band":
            sw = f'<rect x="{x:.1f}" y="{cy - 5:.1f}" width="16" height="10" fill="{color}" fill-opacity="0.2"/>'
        else:
            sw = (f'<line x1="{x:.1f}" y1="{cy:.1f}" x2="{x + 16:.1f}" y2="{cy:.1f}" stroke="{color}" '
                  f'stroke-width="2"{_dash(i)}/><circle cx="{x + 8:.1f}" cy="{cy:.1f}" r="{RADII[i % 4]}" '
                  f'fill="{color}"/>')
        parts.append(f'<g class="legend-item">{sw}'
                     + _text(x + 21, cy + 4, name, anchor="start", fill=TEXT, cls="l legend") + "</g>")
        x += wi
    return parts, (row + 1) * 16


def _dash(i: int) -> str:
    return f' stroke-dasharray="{DASHES[i % 4]}"' if DASHES[i % 4] else ""


@dataclass
class _Frame:
    """A chart's frame: the svg size and the plot area, with the scales of its two axes."""
    w: float
    h: float
    left: float
    top: float
    right: float
    bottom: float
    x: Axis | None
    y: Axis | None

    def sx(self, v: float) -> float:
        a = self.x
        return self.left + (float(v) - a.lo) / ((a.hi - a.lo) or 1.0) * (self.right - self.left)

    def sy(self, v: float) -> float:
        a = self.y
        return self.bottom - (float(v) - a.lo) / ((a.hi - a.lo) or 1.0) * (self.bottom - self.top)


def _frame(title: str, x: Axis | None, y: Axis | None, xlabel: str, ylabel: str, legend: list, w: int,
           plot_h: int, y_cats: list[str] | None = None) -> tuple[_Frame, list[str]]:
    """Margins sized to what they hold (tick labels, axis titles, the legend), then the title, legend,
    gridlines and both axes. Returns the frame and the svg parts so far (the opening tag comes later)."""
    y_label_w = max(text_width(s) for s in (y_cats if y_cats is not None else y.labels))
    left = 8 + (LABEL_PX + 6 if ylabel else 0) + y_label_w + 8
    right_pad = max(14.0, text_width(x.labels[-1]) / 2 + 4) if x else 14.0
    lines = _title_lines(title, w - 16)
    parts = [_text(w / 2, 18 + 16 * i, line, size=TITLE_PX, fill=TEXT, cls="t", extra=' font-weight="600"')
             for i, line in enumerate(lines)]
    top = 18 + 16 * (len(lines) - 1) + 10
    if legend:
        items, used = _legend(legend, left, w - left - right_pad, top + 8)
        parts += items
        top += used + 2
    top += 8
    bottom = top + plot_h
    h = bottom + 8 + LABEL_PX + (6 + LABEL_PX if xlabel else 0) + 10
    f = _Frame(w, h, left, top, w - right_pad, bottom, x, y)
    grid, axes = [], []
    if y is not None:
        for t, lab in zip(y.ticks, y.labels):
            py = f.sy(t)
            grid.append(f'<line x1="{f.left:.1f}" y1="{py:.1f}" x2="{f.right:.1f}" y2="{py:.1f}" stroke="{GRID}"/>')
            axes.append(f'<g class="tick"><line x1="{f.left - 4:.1f}" y1="{py:.1f}" x2="{f.left:.1f}" '
                        f'y2="{py:.1f}" stroke="{AXIS}"/>' + _text(f.left - 7, py + 4, lab, anchor="end") + "</g>")
        if y.lo < 0 < y.hi:
            grid.append(f'<line x1="{f.left:.1f}" y1="{f.sy(0):.1f}" x2="{f.right:.1f}" y2="{f.sy(0):.1f}" '
                        f'stroke="{AXIS}" stroke-dasharray="3 3" class="zero"/>')
    if y_cats is not None:  # one band per category, its name centred on it
        band_h = plot_h / max(len(y_cats), 1)
        axes += ['<g class="tick">' + _text(f.left - 7, f.top + band_h * (i + 0.5) + 4, name, anchor="end")
                 + "</g>" for i, name in enumerate(y_cats)]
    ycls = "axis y band" if y_cats is not None else "axis y"
    yparts = [f'<g class="{ycls}"><line class="domain" x1="{f.left:.1f}" y1="{f.top:.1f}" x2="{f.left:.1f}" '
              f'y2="{f.bottom:.1f}" stroke="{AXIS}"/>'] + axes
    if ylabel:
        cy = (f.top + f.bottom) / 2
        shown = ylabel if text_width(ylabel) <= plot_h else ylabel[: int(plot_h / LABEL_CHAR_W) - 1] + "…"
        yparts.append(_text(8 + LABEL_PX, cy, shown, fill=TEXT, cls="l axis-title",
                            extra=f' transform="rotate(-90 {8 + LABEL_PX:.1f} {cy:.1f})"'))
    xparts = [f'<g class="axis x"><line class="domain" x1="{f.left:.1f}" y1="{f.bottom:.1f}" x2="{f.right:.1f}" '
              f'y2="{f.bottom:.1f}" stroke="{AXIS}"/>']
    if x is not None:
        for t, lab in zip(x.ticks, x.labels):
            px = f.sx(t)
            grid.append(f'<line x1="{px:.1f}" y1="{f.top:.1f}" x2="{px:.1f}" y2="{f.bottom:.1f}" stroke="{GRID}" '
                        f'stroke-opacity="0.7"/>')
            xparts.append(f'<g class="tick"><line x1="{px:.1f}" y1="{f.bottom:.1f}" x2="{px:.1f}" '
                          f'y2="{f.bottom + 4:.1f}" stroke="{AXIS}"/>'
                          + _text(px, f.bottom + 6 + LABEL_PX, lab) + "</g>")
    if xlabel:
        xparts.append(_text((f.left + f.right) / 2, f.bottom + 12 + 2 * LABEL_PX, xlabel, fill=TEXT,
                            cls="l axis-title"))
    return f, parts + grid + yparts + ["</g>"] + xparts + ["</g>"]


def _svg(f: _Frame, title: str, body: list[str]) -> str:
    return (f'<svg class="plot" viewBox="0 0 {f.w:.0f} {f.h:.0f}" '
            f'width="{f.w:.0f}" height="{f.h:.0f}" role="img" aria-label="{esc(title)}">'
            f'<rect width="100%" height="100%" fill="#fff"/>' + "".join(body) + "</svg>")


def _fits(axis: Axis, width: float) -> bool:
    """Whether neighbouring tick labels of ``axis`` over ``width`` px keep 8 px apart."""
    if len(axis.ticks) < 2:
        return True
    gap = width / ((axis.hi - axis.lo) or 1.0) * (axis.ticks[1] - axis.ticks[0])
    return gap >= max(text_width(s) for s in axis.labels) + 8


def _x_axis(lo: float, hi: float, integer: bool, width: float) -> Axis:
    """The position axis with as many ticks as fit side by side in ``width`` px (at least three)."""
    for count in (6, 5, 4, 3, 2):
        ax = position_axis(lo, hi, integer=integer, count=count)
        if _fits(ax, width):
            return ax
    return ax


# ------------------------------------------------------------------------------------------ charts
def svg_lines(xs: list, series: dict[str, list], title: str, xlabel: str = "", w: int = 560, h: int = 220,
              band: tuple[list, list] | None = None, *, ylabel: str = "", percent: bool = False,
              band_label: str = "", integer_x: bool = True) -> str:
    """A line chart of each series over ``xs`` (None values break the line), optionally with a shaded
    ``band`` (lo, hi) around the first series. Points at each value for series of at most 60 values; a
    hover strip per x naming every series' exact value there. ``h`` is the plot area's height.
    ``percent``: values are shares, labelled as percentages."""
    xs_ok = [float(x) for x in xs if is_num(x)]
    allv = [y for ys in series.values() for y in ys] + ([y for ys in band for y in ys] if band else [])
    y_axis = value_axis(allv, percent=percent)
    if not xs_ok or y_axis is None:
        return ""
    integer_x = integer_x and all(float(x).is_integer() for x in xs_ok)
    legend = [(name, PALETTE[i % len(PALETTE)], "line") for i, name in enumerate(series)] if (
        len(series) > 1 or band) else []
    if band:
        legend.append((band_label or "band", PALETTE[0], "band"))
    est_left = 8 + (LABEL_PX + 6 if ylabel else 0) + max(text_width(s) for s in y_axis.labels) + 8
    x_axis = _x_axis(min(xs_ok), max(xs_ok), integer_x, w - est_left - 30)
    f, parts = _frame(title, x_axis, y_axis, xlabel, ylabel, legend, w, h)
    if band:
        up = [(f.sx(x), f.sy(y)) for x, y in zip(xs, band[1]) if is_num(x) and is_num(y)]
        dn = [(f.sx(x), f.sy(y)) for x, y in zip(xs, band[0]) if is_num(x) and is_num(y)]
        if up and dn:
            poly = " ".join(f"{a:.2f},{b:.2f}" for a, b in up + dn[::-1])
            parts.append(f'<polygon class="band" points="{poly}" fill="{PALETTE[0]}" fill-opacity="0.2" '
                         f'stroke="none"/>')
    for si, (name, ys) in enumerate(series.items()):
        color = PALETTE[si % len(PALETTE)]
        segs, cur = [], []
        for x, y in zip(xs, ys):
            if is_num(x) and is_num(y):
                cur.append(f"{f.sx(x):.2f},{f.sy(y):.2f}")
            elif cur:
                segs.append(cur)
                cur = []
        if cur:
            segs.append(cur)
        parts += [f'<polyline class="series" points="{" ".join(s)}" fill="none" stroke="{color}" '
                  f'stroke-width="1.8"{_dash(si)}/>' for s in segs if len(s) > 1]
        # a point per value for short series; in long ones only where a value stands alone between gaps
        shown = [(x, y) for x, y in zip(xs, ys) if is_num(x) and is_num(y)]
        alone = {s[0] for s in segs if len(s) == 1}
        for x, y in shown:
            cx, cy = f"{f.sx(x):.2f}", f"{f.sy(y):.2f}"
            if len(shown) <= 60 or f"{cx},{cy}" in alone:
                parts.append(f'<circle class="point" cx="{cx}" cy="{cy}" r="{RADII[si % 4]}" fill="{color}">'
                             f"<title>{esc(name)} at {esc(xlabel or 'x')} {exact(x)}: {exact(y)}</title></circle>")
    parts += _hover_strips(f, xs, series, xlabel, band, band_label)
    return _svg(f, title, parts)


def _hover_strips(f: _Frame, xs: list, series: dict, xlabel: str, band, band_label: str) -> list[str]:
    """One invisible strip per x spanning the plot's height, whose hover title holds every exact value."""
    order = sorted((float(x), i) for i, x in enumerate(xs) if is_num(x))
    out = []
    for k, (x, i) in enumerate(order):
        a = (f.sx(order[k - 1][0]) + f.sx(x)) / 2 if k else f.left
        b = (f.sx(order[k + 1][0]) + f.sx(x)) / 2 if k + 1 < len(order) else f.right
        lines = [f"{xlabel or 'x'} {exact(xs[i])}"]
        lines += [f"{name}: {exact(ys[i] if i < len(ys) else None)}" for name, ys in series.items()]
        if band:
            lines.append(f"{band_label or 'band'}: {exact(band[0][i])} … {exact(band[1][i])}")
        out.append(f'<rect class="hov" x="{a:.2f}" y="{f.top:.1f}" width="{max(b - a, 0.5):.2f}" '
                   f'height="{f.bottom - f.top:.1f}" fill="#000" fill-opacity="0">'
                   f"<title>{esc(chr(10).join(lines))}</title></rect>")
    return out


def svg_histogram(edges: list, counts: list, title: str, w: int = 560, h: int = 200, *, xlabel: str = "",
                  ylabel: str = "count", integer_x: bool = False) -> str:
    """A bar chart of ``counts`` over ``edges`` (len(edges) = len(counts) + 1); each bar's hover title
    holds its bin and exact count. ``h`` is the plot area's height."""
    n = min(len(counts), len(edges) - 1)
    if n <= 0:
        return ""
    y_axis = value_axis(list(counts[:n]), integer=True)
    est_left = 8 + (LABEL_PX + 6 if ylabel else 0) + max(text_width(s) for s in y_axis.labels) + 8
    x_axis = _x_axis(float(edges[0]), float(edges[n]), integer_x, w - est_left - 30)
    f, parts = _frame(title, x_axis, y_axis, xlabel, ylabel, [], w, h)
    for i in range(n):
        c = counts[i]
        if not c:
            continue
        bx = f.sx(edges[i])
        bw = max(f.sx(edges[i + 1]) - bx - 0.6, 0.8)
        top = f.sy(c)
        close = "]" if i == n - 1 else ")"
        parts.append(f'<rect class="bar" x="{bx:.2f}" y="{top:.2f}" width="{bw:.2f}" height="{f.bottom - top:.2f}" '
                     f'fill="{PALETTE[0]}"><title>[{exact(edges[i])}, {exact(edges[i + 1])}{close}: '
                     f"{exact(c)}</title></rect>")
    return _svg(f, title, parts)


def svg_bars(labels: list[str], values: list, title: str, w: int = 560, *, xlabel: str = "",
             percent: bool = False) -> str:
    """Horizontal bars, one per label (its name left of the bar, never crowded), from 0; hover titles
    with the exact values."""
    if not labels:
        return ""
    x_axis = value_axis([v if is_num(v) else 0.0 for v in values], percent=percent)
    names = [str(s) if len(str(s)) <= 24 else str(s)[:23] + "…" for s in labels]
    f, parts = _frame(title, x_axis, None, xlabel, "", [], w, 22 * len(labels), y_cats=names)
    for i, (lab, v) in enumerate(zip(labels, values)):
        cy = f.top + 22 * i + 11
        if is_num(v):
            x0, x1 = f.sx(min(0.0, v)), f.sx(max(0.0, v))
            shown = f"{100 * v:.4g}%" if percent else exact(v)
            parts.append(f'<rect class="bar" x="{x0:.2f}" y="{cy - 7:.1f}" width="{max(x1 - x0, 0.8):.2f}" '
                         f'height="14" fill="{PALETTE[0]}"><title>{esc(str(lab))}: {esc(shown)}</title></rect>')
    return _svg(f, title, parts)
