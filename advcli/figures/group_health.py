"""Group health: how much learning signal the groups of a dump carry.

A group (the rows of one prompt within one step) whose rewards are all equal gives every
group-relative estimator (GRPO, RLOO, ...) a zero advantage: no gradient. Users want to count those,
see them per step and per data source, and filter them (``advcli filter --drop-uniform``). Figures,
from the per-row table only (numpy, vectorised; no pass over the tokens):

- per block (the whole run, each step, each data source): ``groups``, ``rows``, ``uniform_groups`` /
  ``uniform_share`` (every reward equal, ``nunique(dropna=False) == 1``, groups of one included),
  ``zero_adv_token_share`` (valid tokens whose advantage is exactly 0; when there are advantages),
  ``singleton_groups``, ``partial_groups`` (fewer rows than the usual group size),
  ``group_mean_reward`` and ``solved_share`` / ``solved_all_share`` / ``solved_none_share`` (below);
- ``group_mean_reward_histogram``: groups per mean reward (10 bins over [0, 1] when rewards are 0/1, the
  last one closed; else over [min, max]);
- ``group_sizes``: groups per size, the usual (most common) size, and flags for uneven sizes,
  partial and singleton groups;
- ``length_by_outcome``: response length (the list length L_i) of solved rows (reward > 0) and
  unsolved rows (reward ≤ 0; rows without a reward in neither): count, mean, median;
- ``per_component``: per reward component column (``reward.components``, ``reward/*``): uniform
  groups, ``group_mean_reward`` and ``solved_share`` of that component alone.

The two reward figures, each defined once here (and in docs/reports.md), never called "solve rate":

- ``group_mean_reward``: the mean over groups of the group's mean reward (each group counts once,
  whatever its size; rows without a reward, NaN, left out). Summed reward functions give values
  above 1.
- ``solved_share``: the share of rows with reward > 0 among the rows with a reward (not NaN);
  ``solved_all_share`` / ``solved_none_share``: the share of groups whose rows with a reward are all
  / none > 0. The same numbers as the metrics ``groups/solved_share`` and
  ``groups/solved_{all,none}_share``. With 0/1 rewards ``solved_share`` is the pass rate over rows and
  ``group_mean_reward`` the pass rate averaged over prompts.

A data source is a ``data_source``/``domain``-like column (advcli.figures.curate.SOURCE_COLUMNS); a group's
source is its first row's.
"""
from __future__ import annotations

from typing import Any

import numpy as np

MEAN_REWARD_BINS = 10


def _f(x) -> float | None:
    x = float(x)
    return x if np.isfinite(x) else None


def _binary(r: np.ndarray) -> bool:
    fin = r[np.isfinite(r)]
    return fin.size > 0 and bool(np.isin(fin, (0.0, 1.0)).all())


def _per_group(group: np.ndarray, reward: np.ndarray):
    from .curate import FilterSpec, group_decisions

    d = group_decisions(group, reward, FilterSpec())
    return d["size"], d["mean"], d["uniform"]


def _solved(group: np.ndarray, reward: np.ndarray, G: int):
    """Per row: has a reward (not NaN), is solved (reward > 0); per group: rows with a reward, solved rows."""
    scored = ~np.isnan(reward)
    solved = scored & (reward > 0)
    return scored, solved, np.bincount(group, scored, G), np.bincount(group, solved, G)


def _solved_figures(gsel, rsel, scored, solved, g_scored, g_solved) -> dict[str, Any]:
    """``solved_share`` over the rows ``rsel``, ``solved_{all,none}_share`` over the groups ``gsel``."""
    n_rows = int(scored[rsel].sum())
    gs = gsel & (g_scored > 0)
    n = int(gs.sum())
    return {"solved_share": _f(solved[rsel].sum() / n_rows) if n_rows else None,
            "solved_all_share": _f(((g_solved == g_scored) & gs).sum() / n) if n else None,
            "solved_none_share": _f(((g_solved == 0) & gs).sum() / n) if n else None}


def group_health(group: np.ndarray, reward: np.ndarray, valid: np.ndarray, length: np.ndarray, *,
                 step: np.ndarray | None = None, step_values: list | None = None,
                 source: np.ndarray | None = None, source_names: list | None = None,
                 zero_adv: np.ndarray | None = None, components: dict[str, np.ndarray] | None = None) -> dict:
    """The group-health figures (module docstring). ``group``: group code per row (0..G-1, first
    appearance or any order); ``step``: step code per row (0..S-1, values ``step_values``);
    ``source``: source code per row (names ``source_names``); ``zero_adv``: valid tokens with
    advantage 0 per row (None: no advantages); ``components``: {name: reward per row}."""
    group = np.asarray(group, np.int64)
    reward = np.asarray(reward, np.float64)
    valid = np.asarray(valid, np.int64)
    length = np.asarray(length, np.int64)
    R = group.size
    size, mean, uniform = _per_group(group, reward)
    G = size.size
    present = size > 0
    sizes = size[present]
    usual = int(np.bincount(sizes).argmax()) if sizes.size else 0
    binary = _binary(reward)
    first = np.full(G, -1, np.int64)
    first[group[::-1]] = np.arange(R)[::-1]
    solved_by = _solved(group, reward, G)

    def block(gsel: np.ndarray, rsel: np.ndarray) -> dict[str, Any]:
        gsel = gsel & present
        n = int(gsel.sum())
        out: dict[str, Any] = {"groups": n, "rows": int(rsel.sum()),
                               "uniform_groups": int((uniform & gsel).sum()),
                               "uniform_share": _f((uniform & gsel).sum() / n) if n else None,
                               "singleton_groups": int(((size == 1) & gsel).sum()),
                               "partial_groups": int(((size < usual) & gsel).sum()),
                               "group_mean_reward": _group_mean(mean, gsel),
                               **_solved_figures(gsel, rsel, *solved_by)}
        if zero_adv is not None:
            v = int(valid[rsel].sum())
            out["zero_adv_token_share"] = _f(np.asarray(zero_adv)[rsel].sum() / v) if v else None
        return out

    h: dict[str, Any] = {"overall": block(np.ones(G, bool), np.ones(R, bool)), "binary_rewards": binary}
    if step is not None and step_values is not None and len(step_values) > 1:
        step = np.asarray(step, np.int64)
        gstep = step[first.clip(min=0)]
        h["per_step"] = [{"step": sv, **block(gstep == k, step == k)} for k, sv in enumerate(step_values)]
    if source is not None and source_names:
        source = np.asarray(source, np.int64)
        gsrc = source[first.clip(min=0)]
        h["per_source"] = [{"source": str(nm), **block(gsrc == k, source == k)} for k, nm in enumerate(source_names)]
    # groups per mean reward
    gm = mean[present & np.isfinite(mean)]
    if gm.size:
        lo, hi = (0.0, 1.0) if binary else (float(gm.min()), float(gm.max()))
        if hi == lo:
            hi = lo + 1.0
        counts, edges = np.histogram(gm, bins=MEAN_REWARD_BINS, range=(lo, hi))
        h["group_mean_reward_histogram"] = {"edges": edges.tolist(), "counts": counts.tolist(), "over": "groups",
                                            "note": ("mean 0/1 reward per group (its share of solved rows)"
                                                     if binary else "mean reward per group")}
    # group sizes
    if sizes.size:
        bc = np.bincount(sizes)
        flags = []
        if np.count_nonzero(bc) > 1:
            flags.append(f"uneven group sizes ({np.count_nonzero(bc)} different sizes; usual {usual})")
        n_partial = int((sizes < usual).sum())
        if n_partial:
            flags.append(f"{n_partial} partial group(s) with fewer than {usual} rows")
        n_single = int((sizes == 1).sum())
        if n_single:
            flags.append(f"{n_single} singleton group(s): group-relative advantages are 0 (or the raw reward)")
        h["group_sizes"] = {"sizes": [int(k) for k in np.flatnonzero(bc)], "counts": [int(c) for c in bc[bc > 0]],
                            "usual": usual, "min": int(sizes.min()), "max": int(sizes.max()), "flags": flags}
    # response length by outcome
    scored, solved = solved_by[0], solved_by[1]
    unsolved = scored & ~solved
    lbo = {}
    for name, sel in (("solved", solved), ("unsolved", unsolved)):
        x = length[sel]
        lbo[name] = {"rows": int(sel.sum()), "mean": _f(x.mean()) if x.size else None,
                     "median": _f(np.median(x)) if x.size else None}
    h["length_by_outcome"] = lbo
    comps = []
    for name, vals in (components or {}).items():
        cv = np.asarray(vals, np.float64)
        s2, m2, u2 = _per_group(group, cv)
        p2 = s2 > 0
        n = int(p2.sum())
        comps.append({"component": name, "uniform_groups": int((u2 & p2).sum()),
                      "uniform_share": _f((u2 & p2).sum() / n) if n else None,
                      "group_mean_reward": _group_mean(m2, p2),
                      "solved_share": _solved_figures(p2, np.ones(R, bool), *_solved(group, cv, s2.size))[
                          "solved_share"],
                      "binary": _binary(cv)})
    if comps:
        h["per_component"] = comps
    return h


def _group_mean(mean: np.ndarray, gsel: np.ndarray) -> float | None:
    """``group_mean_reward``: the mean over the groups ``gsel`` of their mean reward (groups with no
    reward left out)."""
    m = mean[gsel]
    return _f(np.nanmean(m)) if m.size and not np.isnan(m).all() else None


def of_collector(st, source=None, source_names=None, components=None) -> dict | None:
    """:func:`group_health` of a :class:`advcli.figures.FigureCollector` after its chunks (None without groups)."""
    g = st.groups
    if g is None or g.num_groups == 0:
        return None
    step, step_values = None, st.step_values
    if st.scopes is not None:
        # scopes can be finer than steps (ROLL: one per step and domain): per_step is per step
        keys = [repr(v) for v in st.step_values]
        first = {k: i for i, k in reversed(list(enumerate(keys)))}
        distinct = sorted(set(first.values()))
        code_of = np.array([distinct.index(first[k]) for k in keys], np.int64)
        step = code_of[st.scopes.codes] if len(keys) else st.scopes.codes
        step_values = [st.step_values[i] for i in distinct]
    zero = st.adv_zero if getattr(st, "has_advantages", True) else None
    return group_health(g.codes, st.raw_score, st.valid, st.resp_len,
                        step=step, step_values=step_values, source=source, source_names=source_names,
                        zero_adv=zero, components=components)
