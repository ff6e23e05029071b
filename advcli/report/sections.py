"""Reports made of sections (``advcli audit``, ``advcli filter``, ``advcli compare``; their notebook
results): one list of sections, rendered as JSON (the report dict itself), Markdown or a self-contained HTML
page in the style of advcli.report, and the sections of the audit and compare reports.

A section is ``(title, kind, payload)``: ``kv`` [(label, value)], ``table`` (header, rows), ``text``
[lines], ``svg`` [svg strings] (HTML only).
"""
from __future__ import annotations

import json
from typing import Any

Section = tuple[str, str, Any]


def render_sections(report: dict, fmt: str, title: str, sections: list[Section]) -> str:
    from . import CSS, esc, html_table, md_table

    if fmt == "json":
        from .primitives import to_json

        return to_json(report, indent=2) + "\n"
    if fmt == "md":
        L = [f"# {title}", "", f"advcli {report.get('advcli_version', '')} · {report.get('created', '')}"]
        for name, kind, payload in sections:
            if kind == "svg" or not payload:
                continue
            L += ["", f"## {name}", ""]
            if kind == "kv":
                L += md_table(["", ""], [[a, b] for a, b in payload])
            elif kind == "table":
                L += md_table(payload[0], payload[1])
            else:
                L += [f"- {x}" for x in payload]
        return "\n".join(L) + "\n"
    H = ["<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">",
         "<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">",
         f"<title>{esc(title)}</title><style>{CSS}</style></head><body><main class=\"advcli\">",
         f"<h1>{esc(title)}</h1>",
         f'<div class="sub">advcli {esc(report.get("advcli_version", ""))} · {esc(report.get("created", ""))}</div>']
    for name, kind, payload in sections:
        if not payload:
            continue
        H.append(f"<h2>{esc(name)}</h2>")
        if kind == "kv":
            H.append(html_table(None, [[a, b] for a, b in payload]))
        elif kind == "table":
            H.append('<div class="scroll">' + html_table(payload[0], payload[1]) + "</div>")
        elif kind == "svg":
            H.append('<div class="grid">' + "".join(p for p in payload if p) + "</div>")
        else:
            H.append("".join(f"<p>{esc(x)}</p>" for x in payload))
    H.append("</main></body></html>\n")
    return "\n".join(H)


def first_stage_line(f: dict) -> str:
    """``whitening: logs/train_data_step4.jsonl:3, token 0: expected 1.2, logged 0.7 (...); reproduced by ...``."""
    def num(x):
        return "–" if x is None else f"{x:.6g}"

    line = (f"{f['stage']}: {f.get('where') or 'row ' + str(f['row'])}, token {f['position']} of "
            f"{f['column']}: expected {num(f['expected'])}, logged {num(f['actual'])}")
    if f.get("expected_moments") or f.get("actual_moments"):
        e, a = f.get("expected_moments") or {}, f.get("actual_moments") or {}
        line += (f" (step mean/std recomputed {num(e.get('mean'))}/{num(e.get('std'))}, implied by the logged values "
                 f"{num(a.get('mean'))}/{num(a.get('std'))})")
    if f.get("note"):
        line += f"; {f['note']}"
    if f.get("reproduce"):
        line += f"; reproduced by {f['reproduce']}"
    if f.get("reproduced_by"):
        line += f"; the logged values match {f['reproduced_by']}"
    return line


def audit_sections(rep: dict):
    verdict = "agree" if rep["agree"] else "DISAGREE"
    tokens = ("" if "valid_tokens" not in rep  # a dump without token data (advcli.formats.no_token_data)
              else f"{rep['tokens_disagreeing']:,} of {rep['valid_tokens']:,} mask=1 tokens and ")
    checked = rep["rows"] - rep.get("rows_without_logged_value", 0)  # a row without a logged value is not checked
    head = [("verdict", f"{verdict}: {tokens}{rep['rows_disagreeing']:,} of {checked:,} rows disagree"
                        + (f" ({rep['groups_disagreeing']:,} of {rep['groups']:,} groups)" if "groups" in rep else ""))]
    inter = rep.get("intermediate_disagreeing")
    if inter:  # the advantages agree, a logged intermediate column does not
        head[0] = ("verdict", f"DISAGREE: the advantages agree ({head[0][1].split(': ', 1)[1]}), the logged "
                              f"{inter['column']} do not: {inter.get('where') or 'row ' + str(inter['row'])}, token "
                              f"{inter['position']}: logged {inter['actual']:.6g}, recomputed {inter['expected']:.6g}")
    head.append(("recomputed with", rep["ran"]))
    if (rep.get("release") or {}).get("label"):
        head.append(("release", rep["release"]["label"]))
    head += [("logged column", f"{rep['logged_column']} (one value per "
                                                                 f"{rep['logged_per']})"),
            ("input", ", ".join(rep["inputs"])),
            ("tolerance", f"|logged − recomputed| <= {rep['tolerance']['atol']:g} + {rep['tolerance']['rtol']:g}·"
                          "|recomputed|" + (f" ({rep['tolerance']['note']})" if rep["tolerance"].get("note") else "")),
            ("max |logged − recomputed|", f"{rep['max_abs_diff']:.6g}")]
    if rep.get("masked_tokens_disagreeing"):
        head.append(("mask=0 tokens differing", f"{rep['masked_tokens_disagreeing']:,} (not counted: the loss does "
                                                "not read them)"))
    if rep.get("rows_without_logged_value"):
        head.append(("rows without a logged value", f"{rep['rows_without_logged_value']:,} (not checked)"))
    if rep.get("rows_of_torn_groups"):
        head.append(("rows not checked", f"{rep['rows_of_torn_groups']:,} of group "
                                         f"{', '.join(rep.get('torn_groups') or [])}: the group lost its torn row"))
    if rep.get("nonfinite_logged"):
        head.append(("non-finite logged values", f"{rep['nonfinite_logged']:,} mask=1 tokens"))
    if rep.get("files_not_read"):
        head.append(("left out, not read", "; ".join(rep["files_not_read"]) + " (not audited)"))
    if rep.get("release_matches"):
        flags = [f"--flavor {r['flavor']}@{r['release']}" for r in rep.get("releases_tried") or []
                 if r.get("tokens_disagreeing") == 0 and r.get("flavor")]
        head.append(("matches release", "the logged values match " + "; ".join(rep["release_matches"])
                     + f" ({' or '.join(flags) if flags else '--flavor NAME@RELEASE'} runs it)"))
    elif rep.get("releases_tried"):
        head.append(("other releases", f"none of the {len(rep['releases_tried'])} other releases advcli knows "
                                       "reproduces the logged values"))
    if rep.get("matches"):
        head.append(("reproduced by", "; ".join(rep["matches"])))
    elif rep.get("search") is not None and rep.get("release_matches"):
        head.append(("reproduced by", f"the release above; none of the {len(rep['search'])} other configurations "
                                      "tried"))
    elif rep.get("search") is not None:
        head.append(("reproduced by", f"none of the {len(rep['search'])} configurations tried"))
    if rep.get("first_stage"):
        head.append(("first stage that differs", first_stage_line(rep["first_stage"])))
    sections = [("Summary", "kv", head)]
    sections.append(("What the difference looks like", "text",
                     [f"{f['kind']}: {f['explanation']}" + (f" (closest: {f['closest']['hypothesis']}, "
                                                             f"{f['closest']['tokens_left']:,} tokens left)"
                                                             if f.get("closest") else "")
                      for f in rep.get("findings") or []]))
    if rep.get("worst"):
        cols = ["where", "row", "group", "step", "position", "logged", "recomputed", "abs_diff", "tokens_disagreeing",
                "prompt"]
        cols = [c for c in cols if any(c in e for e in rep["worst"])]
        sections.append(("Worst rows", "table", (cols, [[str(e.get(c)) if c in ("group",) else e.get(c)
                                                         for c in cols] for e in rep["worst"]])))
    if rep.get("releases_tried"):
        rows = [[r["label"], "skipped: " + r["skipped"] if "skipped" in r else
                 ("reproduces" if r["tokens_disagreeing"] == 0 else f"{r['tokens_disagreeing']:,} tokens, "
                                                                     f"{r['rows_disagreeing']:,} rows disagree")]
                for r in rep["releases_tried"]]
        sections.append(("Releases tried", "table", (["release", "result"], rows)))
    if rep.get("search"):
        rows = [[c["label"], "skipped: " + c["skipped"] if "skipped" in c else
                 ("reproduces" if c["tokens_disagreeing"] == 0 else f"{c['tokens_disagreeing']:,} tokens, "
                                                                     f"{c['rows_disagreeing']:,} rows disagree")]
                for c in rep["search"]]
        sections.append(("Configurations tried", "table", (["configuration", "result"], rows)))
    return "advcli audit report", sections


def compare_sections(res: dict):
    """(title, sections) of a comparison (:mod:`advcli.commands._sections`): the figures
    :func:`print_comparison` prints, as a report page (``advcli.compare(...)`` in a notebook)."""
    from .primitives import fmt_num

    tk, rw = res["tokens"], res["row_level"]
    pct = lambda v: "–" if v is None else f"{100 * v:.1f}%"  # noqa: E731
    head = [("A", f"{res['a']['label']} ({res['a']['path']})"), ("B", f"{res['b']['label']} ({res['b']['path']})"),
            ("rows", fmt_num(res.get("rows")))]
    head.append(("token data", f"none: {res['no_token_data']}") if res.get("no_token_data") else
                ("mask=1 tokens", fmt_num(res.get("valid_tokens"))))
    per = "responses (no token data)" if res.get("no_token_data") else "tokens (mask=1)"
    figures = [["count", fmt_num(res.get("valid_tokens", res.get("rows"))), fmt_num(rw["rows_with_valid_tokens"])],
               ["correlation (Pearson)", fmt_num(tk["pearson"]), fmt_num(rw["pearson"])],
               ["rank correlation (Spearman)", "", fmt_num(rw["spearman"])],
               ["sign agreement", pct(tk["sign_agreement"]), pct(rw["sign_agreement"])],
               ["mean |A−B|", fmt_num(tk["mean_abs_diff"]), ""], ["max |A−B|", fmt_num(tk["max_abs_diff"]), ""],
               ["mean A / B", f"{fmt_num(tk['mean_a'])} / {fmt_num(tk['mean_b'])}", ""],
               ["std A / B", f"{fmt_num(tk['std_a'])} / {fmt_num(tk['std_b'])}", ""],
               ["rows whose sign flips", "", fmt_num(rw["sign_flips"])]]
    if tk.get("returns_pearson") is not None:
        figures.insert(-1, ["returns correlation", fmt_num(tk["returns_pearson"]), ""])
    if tk.get("nonfinite"):
        figures.append(["left out: NaN/inf", f"{tk['nonfinite']:,} ({tk['nonfinite_in_one']:,} in one only)", ""])
    sections = [("Summary", "kv", head), ("A against B", "table", (["", per, "rows"], figures))]
    g = res.get("groups")
    if g:
        sections.append(("Groups", "kv", [("groups", fmt_num(g["count"])),
                                          ("with a sign flip", fmt_num(g["with_sign_flip"])),
                                          ("mean |A−B| per group", fmt_num(g["mean_abs_diff"])),
                                          ("flat in A only", fmt_num(g["flat_in_a_not_b"])),
                                          ("flat in B only", fmt_num(g["flat_in_b_not_a"]))]))
        sections.append(("Groups that differ most", "table", (
            ["prompt_id", "size", "mean |A−B|", "sign agreement", "spread A", "spread B"],
            [[str(e["prompt_id"]) + (f" (step {e['step']})" if e.get("step") is not None else ""), e["size"],
              fmt_num(e["mean_abs_diff"]), pct(e["sign_agreement"]),
              fmt_num(e["spread_a"]), fmt_num(e["spread_b"])] for e in g["most_different"]])))
    flips = rw.get("flip_examples") or []
    sections.append(("Rows whose sign flips", "table", (["row", "A", "B"], [[e["row"], fmt_num(e["a"]), fmt_num(e["b"])]
                                                                           for e in flips])))
    return "advcli comparison", sections


# ------------------------------------------------------------------------------ several estimators
def _pct(v) -> str:
    return "–" if v is None else f"{100 * v:.1f}%"


PAIR_FIGURES = (  # (label, how a pair's comparison dict gives it, how it is shown)
    ("token correlation (Pearson)", lambda p: p["tokens"]["pearson"], "num"),
    ("tokens changing sign", lambda p: p["tokens"]["sign_change_share"], "pct"),
    ("mean |A−B| per token", lambda p: p["tokens"]["mean_abs_diff"], "num"),
    ("row correlation (Pearson)", lambda p: p["row_level"]["pearson"], "num"),
    ("rows whose sign flips", lambda p: p["row_level"]["sign_flips"], "int"),
    ("groups with a sign flip", lambda p: (p.get("groups") or {}).get("with_sign_flip"), "int"),
)


def _shown(value, how: str) -> str:
    from .primitives import fmt_num

    if value is None:
        return "–"
    return _pct(value) if how == "pct" else (f"{value:,}" if how == "int" else fmt_num(value))


def estimators_sections(rep: dict):
    """(title, sections) of several estimators compared (``advcli compare --estimators``, ``advcli.compare(dump,
    estimators=[...])``): the runs, the pairs side by side (one column a pair), and for each pair the groups
    where they disagree most."""
    runs = [(f"E{i + 1}", r["label"]) for i, r in enumerate(rep["runs"])]
    ran = []  # what ran under each name: the flavor's own estimator (nemo's grpo is its leave-one-out), its release
    for (k, label), r in zip(runs, rep["runs"]):
        name = (r.get("estimator") or {}).get("name")
        release = (r.get("release") or {}).get("label")
        ran.append((k, f"{label}" + (f" (ran {name})" if name and name != label else "")
                    + (f"; {r['flavor']}" if r.get("flavor") else "") + (f", {release}" if release else "")))
    each = [r.get("settings") or {} for r in rep["runs"]]  # the settings all runs share (not each one's estimator)
    given = ", ".join(f"{k}={json.dumps(v)}" for k, v in (each[0] if each else {}).items()
                      if all(k in o and o[k] == v for o in each))
    sections = [("Estimators", "kv", ran + [("settings", given or "–"), ("input", rep["input"])])]
    names = {r["label"]: k for k, r in zip((k for k, _ in runs), rep["runs"])}
    heads = [f"{names.get(p['a']['label'], 'A')} vs {names.get(p['b']['label'], 'B')}" for p in rep["pairs"]]
    rows = [[label] + [_shown(get(p), how) for p in rep["pairs"]] for label, get, how in PAIR_FIGURES]
    sections.append(("Pairs side by side", "table", ([""] + heads, rows)))
    for head, p in zip(heads, rep["pairs"]):
        worst = (p.get("groups") or {}).get("most_different") or []
        table = [[e["prompt_id"], e["size"], _shown(e["mean_abs_diff"], "num"), _shown(e["sign_agreement"], "pct"),
                  " ".join("–" if x is None else f"{x:+.3g}" for x in e["a"][:8]),
                  " ".join("–" if x is None else f"{x:+.3g}" for x in e["b"][:8])] for e in worst]
        sections.append((f"{head}: groups where they disagree most", "table",
                         (["group", "rows", "mean |A−B|", "sign agreement", f"A ({p['a']['label']})",
                           f"B ({p['b']['label']})"], table)))
    return "advcli compare: estimators", sections
