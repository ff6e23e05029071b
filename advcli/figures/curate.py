"""Group curation: which whole groups ``advcli filter`` (and ``advcli run --drop-uniform ...``) keeps.

A group is the rows sharing a ``prompt_id`` within one ``step`` (the same key ``advcli stats`` and the
GRPO-style estimators use). For each group, over its metric values ``m`` (default the ``reward``
column):

- ``--drop-uniform`` drops it when every row has the same value (``nunique(m, dropna=False) == 1``:
  an all-NaN group is uniform, a group mixing NaN and numbers is not, a group of one is). Such a group
  carries no learning signal (DAPO's dynamic sampling drops them). ``--flavor verl`` / ``skyrl`` (and a
  run under those flavors) follow those trainers' own rule (:func:`_trainer_uniform`);
- ``--solve-rate LO:HI`` keeps it only when ``LO <= mean(m) <= HI`` (the mean over the non-NaN
  values, in float64; a group with no number is dropped);
- ``--min-group-size N`` drops it when it has fewer than ``N`` rows;
- ``--variance-top-p P`` / ``--variance-top-k K`` (RAGEN-2's signal-to-noise filter, arXiv 2604.06268;
  verl PR #7894 ``algorithm.reward_variance_filtering``, TRL PR #7242 ``reward_variance_filtering``)
  keeps, within each step, the groups with the most reward variance: the groups sorted by their variance
  ``Σ(m − mean)²/(n − ddof)`` (descending, ties in first-appearance order; zero-variance groups left out
  unless ``--variance-include-zero``), then ``top_k``: the first K; ``top_p``: the shortest prefix whose
  cumulative variance reaches ``P·Σ variance − selection_eps`` (nothing when that is ≤ 0). ``--flavor verl``
  / ``skyrl`` follow those trainers' open pull requests (``RULES``): selection_eps 0.01, and rows with an
  all-zero response mask or a non-finite reward left out of a group's variance.

verl, TRL and SkyRL's pull requests *mask* the groups they do not select (their responses stay in the
batch with a zero loss mask) rather than drop them; ``--mask-dropped`` does that (every row kept, the
dropped groups' ``response_mask`` set to 0), the default drops the rows (DAPO's dynamic sampling). The
two differ where a statistic spans groups (batch whitening, batch std, token-mean losses).

:func:`group_decisions` is the pure, vectorised part (numpy over the small columns, no loop over
rows or groups); :func:`read_small_columns` reads those columns in one streaming pass and
:func:`copy_kept_rows` streams every column of the kept rows, unchanged and in order, into an atomic
output (:class:`advcli.io.writer.AtomicParquetWriter`). Memory: the small columns of the whole input
(a few bytes per row) plus one chunk.
"""
from __future__ import annotations

import itertools
import json
import os
from dataclasses import dataclass, field

import numpy as np

from ..errors import AdvcliError

SOURCE_COLUMNS = ("data_source", "domain", "source", "dataset", "task")  # data-source-like columns, first found


@dataclass(frozen=True)
class FilterSpec:
    """What to drop. ``solve_rate``: (lo, hi) inclusive, or None."""

    drop_uniform: bool = False
    solve_rate: tuple[float, float] | None = None
    min_group_size: int | None = None
    variance_top_p: float | None = None  # RAGEN-2 top_p: keep the variance mass P of each step
    variance_top_k: int | None = None  # RAGEN-2 top_k: keep the K highest-variance groups of each step
    variance_include_zero: bool = False  # zero-variance groups may be selected
    variance_ddof: int = 1  # Σ(m − mean)²/(n − ddof)
    mask_dropped: bool = False  # keep every row, the dropped groups' response_mask set to 0 (verl #7894)
    allow_empty: bool = False  # --allow-empty: a filter that keeps no row writes an empty result (else: refused)
    variance_rule: str = "ragen"  # whose variance filter: ragen (the paper), trl (#7242), verl (#7894), skyrl (#2217)
    variance_selection_eps: float | None = None  # top_p target = P·Σ variance − eps (None: the rule's default)
    # TRL's aggregated rewards as the metric (--flavor trl --set reward_funcs=[...] / multi_objective_aggregation):
    # (aggregation, reward columns, weights or None); None: the metric column as it is
    trl_rewards: tuple | None = None
    # a run's flavor (grouping.keep_mean_between, OpenRLHF's dynamic filtering): keep the groups whose plain float64
    # mean metric lies strictly inside (lo, hi), a group with a NaN dropped; None: off
    mean_between: tuple[float, float] | None = None
    # groups are blocks of this many consecutive rows of a step (a flavor that groups by position); None: prompt_id
    block_size: int | None = None
    # whose --drop-uniform rule: verl (v1 replay buffer, 0.9.0 on), verl_recipe (the DAPO recipe, the verl releases
    # before), skyrl; None: advcli's own (every row the same value)
    uniform_rule: str | None = None

    @property
    def selection_eps(self) -> float:
        if self.variance_selection_eps is not None:
            return self.variance_selection_eps
        return RULES[self.variance_rule]["eps"]

    @property
    def by_variance(self) -> str | None:
        return "top_p" if self.variance_top_p is not None else "top_k" if self.variance_top_k is not None else None

    @property
    def active(self) -> bool:
        return (self.drop_uniform or self.solve_rate is not None or (self.min_group_size or 0) > 1
                or self.by_variance is not None or self.mean_between is not None)

    def describe(self) -> str:
        return describe_filter(self.as_dict())

    def as_dict(self) -> dict:
        return {"drop_uniform": self.drop_uniform, "solve_rate": list(self.solve_rate) if self.solve_rate else None,
                "min_group_size": self.min_group_size, "variance_top_p": self.variance_top_p,
                "variance_top_k": self.variance_top_k, "variance_include_zero": self.variance_include_zero,
                "variance_ddof": self.variance_ddof, "mask_dropped": self.mask_dropped,
                "variance_rule": self.variance_rule, "variance_selection_eps": self.variance_selection_eps,
                **({"trl_rewards": {"aggregation": self.trl_rewards[0], "reward_funcs": list(self.trl_rewards[1]),
                                    "reward_weights": None if self.trl_rewards[2] is None
                                    else list(self.trl_rewards[2])}} if self.trl_rewards else {}),
                **({"mean_between": list(self.mean_between)} if self.mean_between is not None else {}),
                **({"block_size": self.block_size} if self.block_size is not None else {})}


# The variance filter's rule per trainer: all three are open pull requests (not in a release), read at
# their 2026-09-16 heads (verl verl/trainer/ppo/reward_variance_filter.py @ a9772ca7, SkyRL
# skyrl/train/reward_variance_filter.py and trainer.py @ 4f86c72d). ``eps``: the default selection_eps;
# ``live``: rows with an all-zero response mask and non-finite rewards are left out of their group's variance
# (the group's n counts the others); ``whole``: with include_zero, a step whose variance is all 0, or top_p 1,
# keeps every group (top_k: the first K); ``masked_sum``: the ranked reward is Σ token_level_scores·response_mask
# (verl's apply_reward_variance_filter), so a scalar reward counts where its token (position L−1) has mask 1;
# ``float32``: the sums and each group's variance are float32 (torch.var of the float32 scores, which on the CPU
# is the exact variance rounded to float32), the total and the running mass Python floats.
#
# TRL PR #7242 (open, 2026-09-16, branch codex/ragen2-rv-top-p): only its call site is public where advcli can read
# it (a review thread on trl/trainer/grpo_trainer.py L2913): ``_get_reward_variance_filter_mask(rewards,
# num_generations, strategy, top_p, top_k, include_zero, selection_eps)`` on the post-aggregation ``rewards`` in
# training mode (so under normalize_then_sum the summed per-group z-scores: trl_aggregated), groups positional by
# num_generations, no ddof argument. The function's body (its default selection_eps, ddof, NaN and tie rules) is in
# no stored snapshot: the huggingface/trl mirror ends 2026-07-24 (no refs/pull/7242), the author's fork holds no
# such branch, and neither the code nor the issues corpus quotes it. So ``trl`` runs RAGEN-2's rule (as the PR
# describes itself: "sample reward variance", "stable tie-breaking", NaN rewards handled), with the sibling rules'
# fields it has no evidence for left off (no live-row rule, no whole-step include_zero branch).
RULES = {
    "ragen": {"eps": 1e-12, "live": False, "pr": "RAGEN-2 (arXiv 2604.06268)", "flavors": ()},
    "trl": {"eps": 1e-12, "live": False, "flavors": ("trl",),
            "pr": "TRL PR #7242 (open; its filter function's code is not public where advcli can read it, so "
                  "RAGEN-2's rule runs on TRL's aggregated rewards)"},
    "verl": {"eps": 0.01, "live": True, "whole": True, "masked_sum": True, "float32": True,
             "pr": "verl PR #7894 (open)", "flavors": ("verl",)},
    "skyrl": {"eps": 0.01, "live": True, "whole": True, "pr": "SkyRL PR #2217 (open)", "flavors": ("skyrl",)},
}


def variance_rule_of(flavor: str | None) -> str:
    """The variance filter's rule of ``--flavor NAME[@RELEASE]`` (a flavor without one: RAGEN-2's)."""
    if not flavor:
        return "ragen"
    from ..flavors import get

    name = get(flavor).name  # an unknown flavor or release is refused here
    return next((r for r, d in RULES.items() if name in d["flavors"]), "ragen")


def variance_note(spec: FilterSpec) -> str | None:
    """One line saying whose variance rule ran, that its pull request is open, and its selection_eps."""
    if spec.by_variance is None:
        return None
    r = RULES[spec.variance_rule]
    live = ("; rows with an all-zero response mask and non-finite rewards left out of their group's variance"
            if r["live"] else "")
    if r.get("whole") and spec.variance_include_zero and spec.variance_top_p is not None:
        live += "; with --variance-include-zero a step of zero variance, or top_p 1, keeps every group"
    trl = ""
    if spec.trl_rewards:
        agg, funcs, _ = spec.trl_rewards
        trl = (f"; ranked by TRL's aggregated rewards ({agg} of {', '.join(funcs)}"
               + (": each reward z-scored in its group, then summed" if agg == "normalize_then_sum" else "") + ")")
    elif spec.variance_rule == "trl":
        trl = ("; TRL ranks the aggregated rewards: under multi_objective_aggregation=normalize_then_sum those are "
               "per-group z-scored sums (--flavor trl --set multi_objective_aggregation=normalize_then_sum --set "
               "'reward_funcs=[...]')")
    return f"variance rule: {r['pr']}, not in any release; selection_eps {spec.selection_eps:g}{live}{trl}"


UNIFORM_RULES = {
    "verl": "uniform rule: verl's dynamic sampling (filter_groups, v1/replay_buffer.py): a group of more than one "
            "row whose metric's np.std is 0; a group of one, or one with a NaN, is kept",
    "verl_recipe": "uniform rule: verl's DAPO recipe (filter_groups, recipe/dapo/dapo_ray_trainer.py): a group of "
                   "more than one row whose metric's np.std is not > 0, one with a NaN or ±inf included; a group "
                   "of one is kept",
    "skyrl": "uniform rule: SkyRL's dynamic sampling (handle_filter_sampling): a group whose metric's np.std is not "
             "> 0, a group of one and one with a NaN or ±inf included (unless every group has one row)",
}


def uniform_note(spec: FilterSpec) -> str | None:
    """One line naming the trainer whose --drop-uniform rule ran, where it is not advcli's own (every row the
    same value, groups of one included)."""
    return UNIFORM_RULES.get(spec.uniform_rule) if spec.drop_uniform and spec.uniform_rule else None


# verl's dynamic sampling before 0.9.0 is the DAPO recipe's (recipe/dapo/dapo_ray_trainer.py L258 @v0.7.0, in the
# repository to 0.7.0; the verl-recipe submodule from 0.7.1, the same test at dapo/dapo_ray_trainer.py @59fa05c2);
# 0.9.0 brings the v1 trainer's replay buffer (verl/trainer/ppo/v1/replay_buffer.py L295 @v0.9.0)
VERL_REPLAY_BUFFER = "0.9.0"  # the first verl release (advcli.flavors.verl.RELEASES, oldest first) with it
VERL_DAPO_RECIPE = "0.4.0"  # the first with recipe/dapo (v0.3.0.post0 has none: no dynamic sampling)


def uniform_rule_of(flavor: str | None) -> str | None:
    """The --drop-uniform rule of ``--flavor NAME[@RELEASE]`` (:data:`UNIFORM_RULES`; None: advcli's own)."""
    if not flavor:
        return None
    from ..flavors import at, known_releases

    fa = at(flavor)  # an unknown flavor or release is refused here
    if fa.flavor.name == "verl":
        order = [r.name for r in known_releases(fa.flavor)]
        at_ = order.index(fa.release.name) if fa.release is not None else len(order)
        if at_ < order.index(VERL_DAPO_RECIPE):
            return None  # no dynamic sampling in verl yet: advcli's own rule
        return "verl_recipe" if at_ < order.index(VERL_REPLAY_BUFFER) else "verl"
    return "skyrl" if fa.flavor.name == "skyrl" else None


def describe_filter(f: dict) -> str:
    """The filter as its command-line flags (``FilterSpec.as_dict()``, or a report's ``filter``)."""
    parts = []
    if f.get("drop_uniform"):
        parts.append("--drop-uniform")
    if f.get("solve_rate"):
        parts.append(f"--solve-rate {f['solve_rate'][0]:g}:{f['solve_rate'][1]:g}")
    if f.get("min_group_size"):
        parts.append(f"--min-group-size {f['min_group_size']}")
    if f.get("mean_between"):
        lo, hi = f["mean_between"]
        parts.append(f"dynamic filtering (grouping.keep_mean_between: the groups whose mean reward is strictly inside "
                     f"({lo:.10g}, {hi:.10g}) kept)")
    return " ".join(parts + variance_flags(f))


def variance_flags(f: dict) -> list[str]:
    """The command-line flags of the variance filter and the mask mode in ``f`` (:meth:`FilterSpec.as_dict`)."""
    parts = []
    if f.get("variance_top_p") is not None:
        parts.append(f"--variance-top-p {f['variance_top_p']:g}")
    if f.get("variance_top_k") is not None:
        parts.append(f"--variance-top-k {f['variance_top_k']}")
    if (f.get("variance_top_p") is not None or f.get("variance_top_k") is not None):
        if f.get("variance_include_zero"):
            parts.append("--variance-include-zero")
        if f.get("variance_ddof", 1) != 1:
            parts.append(f"--variance-ddof {f['variance_ddof']}")
        if f.get("variance_selection_eps") is not None:
            parts.append(f"--variance-selection-eps {f['variance_selection_eps']:g}")
    if f.get("mask_dropped"):
        parts.append("--mask-dropped")
    return parts


def parse_solve_rate(text) -> tuple[float, float] | None:
    """``"LO:HI"`` -> (lo, hi), checked (0.1:0.9, :0.5 for 0..0.5, 0.2: for 0.2..1); the library's
    ``solve_rate=(lo, hi)`` (a pair of numbers, or None for an open end) is taken as ``"lo:hi"``."""
    if text is None:
        return None
    if isinstance(text, (tuple, list)) and len(text) == 2:
        text = ":".join("" if x is None else str(x) for x in text)
    if not isinstance(text, str) or ":" not in text:
        raise AdvcliError(f"--solve-rate {text!r}: expected LO:HI, e.g. 0.1:0.9 (keeps groups whose mean metric lies "
                          "in [LO, HI])")
    lo_s, hi_s = text.split(":", 1)
    try:
        lo = float(lo_s) if lo_s.strip() else 0.0
        hi = float(hi_s) if hi_s.strip() else 1.0
    except ValueError:
        raise AdvcliError(f"--solve-rate {text!r}: LO and HI must be numbers, e.g. 0.1:0.9") from None
    if not (np.isfinite(lo) and np.isfinite(hi)) or lo > hi:
        raise AdvcliError(f"--solve-rate {text!r}: need finite LO <= HI")
    return lo, hi


def trl_rewards_of(flavor: str | None, settings: list[str] | None) -> tuple | None:
    """``filter --flavor trl --set KEY=VALUE``: TRL's reward aggregation (GRPOConfig reward_funcs, reward_weights,
    multi_objective_aggregation), read by the trl flavor -> (aggregation, reward columns, weights) when it
    aggregates more than the reward column, else None. --set with another flavor (or none) is refused."""
    if not settings:
        return None
    from ..flavors import get, resolve

    if not flavor or get(flavor).name != "trl":
        raise AdvcliError("filter --set: the filter reads TRL's reward aggregation keys (reward_funcs, reward_weights, "
                          "multi_objective_aggregation) with --flavor trl; other flavors' variance rules rank the "
                          "reward column (or --metric)", hint="drop --set, or give --flavor trl")
    from ..config import parse_set

    # --set's "KEY=VALUE" texts, or the library's (key, value) pairs
    items = parse_set(settings) if isinstance(settings[0], str) else list(settings)
    allowed = ("reward_funcs", "reward_weights", "multi_objective_aggregation")
    for k, _ in items:
        if k not in allowed:
            raise AdvcliError(f"filter --set {k}: the filter reads only {', '.join(allowed)} (what TRL's variance "
                              "filter ranks: the aggregated rewards)", hint="give those keys, or none")
    from ..config.runspec import RunSpec
    from ..estimators import get as estimator
    from ..estimators import resolve_params

    run = RunSpec.from_config(resolve(flavor, items)[0])  # read through the run spec, as every command does
    params = resolve_params(estimator(run.estimator.name), run.estimator.given)
    # an estimator with no aggregation parameter ranks the summed reward: TRL's sum_then_normalize
    agg = params.get("aggregation", "sum_then_normalize")
    funcs = tuple(run.reward.components or ()) if run.reward.source == "components" else ("reward",)
    if agg == "sum_then_normalize" and funcs == ("reward",):
        return None
    weights = run.reward.weights
    return agg, funcs, None if weights is None else tuple(float(w) for w in weights)


def trl_aggregated(per_func: np.ndarray, group: np.ndarray, agg: str, weights) -> np.ndarray:
    """float64 [R]: the ``rewards`` TRL's GRPOTrainer ranks in PR #7242 (open; ``_get_reward_variance_filter_mask``
    on the post-aggregation rewards, trl/trainer/grpo_trainer.py at the PR's 2026-09-16 head), from
    ``per_func`` [R, K] (NaN: a reward function that returned None) and the rows' group codes.

    ``sum_then_normalize``: ``Σ_k w_k r_k`` (nansum); ``normalize_then_sum``: per group and reward
    ``(r_k − nanmean)/(nanstd + 1e-4)`` (nanstd unbiased, NaN with ≤ 1 value, 0 in a group of one row), then
    ``Σ_k w_k ·`` those (nansum); a row with every reward NaN is NaN (as advcli's grpo_nan, TRL
    GRPOTrainer._generate_and_score_completions). Vectorised with bincount over (group, reward) cells."""
    R, K = per_func.shape
    w = np.ones(K) if weights is None else np.asarray(weights, np.float64)
    if w.size != K:
        raise AdvcliError(f"reward_weights: {w.size} weights for {K} reward_funcs (TRL raises ValueError here)")
    unscorable = np.isnan(per_func).all(axis=1) if K else np.ones(R, bool)
    x = per_func
    if agg == "normalize_then_sum" and R:
        G = int(group.max()) + 1
        cell = (group[:, None] * K + np.arange(K)[None, :]).ravel()  # (group, reward) per value
        v = per_func.ravel()
        ok = ~np.isnan(v)
        cnt = np.bincount(cell[ok], minlength=G * K).astype(np.float64)
        mean = np.bincount(cell[ok], v[ok], minlength=G * K) / np.where(cnt > 0, cnt, np.nan)
        dev = np.where(ok, v - mean[cell], 0.0)
        var = np.bincount(cell, dev * dev, minlength=G * K) / np.where(cnt > 0, cnt, np.nan)
        std = np.sqrt(var * np.where(cnt > 1, cnt / np.where(cnt > 1, cnt - 1, 1), np.nan))
        size = np.bincount(group, minlength=G)
        std = np.where(np.repeat(size, K) > 1, std, 0.0)  # TRL's view(-1, 1, K): a lone row's std is 0
        x = ((v - mean[cell]) / (std[cell] + 1e-4)).reshape(R, K)
    out = np.nansum(x * w[None, :], axis=1)
    out[unscorable] = np.nan
    return out


def make_spec(drop_uniform: bool, solve_rate: str | None, min_group_size: int | None,
              variance_top_p: float | None = None, variance_top_k: int | None = None,
              variance_include_zero: bool = False, variance_ddof: int = 1, mask_dropped: bool = False,
              allow_empty: bool = False, flavor: str | None = None,
              variance_selection_eps: float | None = None, settings: list[str] | None = None) -> FilterSpec:
    if min_group_size is not None and (isinstance(min_group_size, bool) or not isinstance(min_group_size, int)):
        raise AdvcliError(f"--min-group-size {min_group_size!r}: expected a whole number of rows, e.g. 2")
    if min_group_size is not None and min_group_size < 1:
        raise AdvcliError(f"--min-group-size {min_group_size}: must be at least 1")
    if variance_top_p is not None and variance_top_k is not None:
        raise AdvcliError("--variance-top-p and --variance-top-k: give one (RAGEN-2's strategy is top_p or top_k)")
    if variance_top_p is not None and not 0.0 < variance_top_p <= 1.0:
        raise AdvcliError(f"--variance-top-p {variance_top_p:g}: must be in (0, 1], the share of each step's "
                          "reward-variance mass to keep", hint="e.g. --variance-top-p 0.9")
    if variance_top_k is not None and variance_top_k < 1:
        raise AdvcliError(f"--variance-top-k {variance_top_k}: must be at least 1 (groups kept per step)")
    if variance_ddof < 0:
        raise AdvcliError(f"--variance-ddof {variance_ddof}: must be 0 (population) or more (1: sample variance)")
    if variance_selection_eps is not None and not (np.isfinite(variance_selection_eps) and variance_selection_eps >= 0):
        raise AdvcliError(f"--variance-selection-eps {variance_selection_eps:g}: must be a number ≥ 0 (top_p keeps "
                          "nothing in a step whose P·Σ variance is at most it)")
    return FilterSpec(bool(drop_uniform), parse_solve_rate(solve_rate), min_group_size, variance_top_p,
                      variance_top_k, bool(variance_include_zero), int(variance_ddof), bool(mask_dropped),
                      bool(allow_empty), variance_rule_of(flavor), variance_selection_eps,
                      trl_rewards_of(flavor, settings), uniform_rule=uniform_rule_of(flavor))


def variance_selection(var: np.ndarray, scope: np.ndarray, spec: FilterSpec) -> np.ndarray:
    """bool [G]: the groups RAGEN-2's filter selects, per scope (step) independently.

    Per scope: order the groups by variance, descending, stable (ties keep the first-appearing group
    first); leave out the zero-variance ones unless ``variance_include_zero``; ``top_k`` takes the first
    K, ``top_p`` the first ``c + 1`` where c is the first index whose cumulative variance reaches
    ``P·Σ_scope variance − selection_eps`` (nothing when that target is ≤ 0: verl/SkyRL's default eps 0.01
    keeps no group of a step whose variance mass is that small; RAGEN-2's 1e-12 only absorbs rounding, so a
    prefix summing to the target exactly reaches it). verl PR #7894 / TRL PR #7242
    ``_get_reward_variance_filter_mask``.

    The trainers' rules (``RULES[...]["whole"]``: verl PR #7894 ``get_reward_variance_filter_mask`` in
    verl/trainer/ppo/reward_variance_filter.py @ a9772ca, SkyRL PR #2217 ``reward_variance_filter`` in
    skyrl/train/reward_variance_filter.py @ 4f86c72) keep *every* group of a scope under
    ``--variance-include-zero`` when its total variance is 0 (top_p; top_k: the first K) or when top_p is 1.

    The sums are the PRs' own: Σ variance in first-appearance order (Python ``sum`` over the groups), the
    cumulative mass restarted at each scope and added in rank order, so a prefix that reaches the target
    exactly does here too. Vectorised: one lexsort by (scope, −variance, group), a bincount for the totals
    and a cumulative sum along one row per scope."""
    G = var.size
    sel = np.zeros(G, bool)
    if not G:
        return sel
    _, sc_code = np.unique(np.asarray(scope), return_inverse=True)
    sc_code = sc_code.ravel().astype(np.int64)
    S = int(sc_code.max()) + 1
    total = np.bincount(sc_code, weights=var, minlength=S)  # group-index (first-appearance) order, as sum()
    order = np.lexsort((np.arange(G), -var, sc_code))  # by scope, then variance descending, then group
    seg = sc_code[order]
    v = var[order]
    eligible = v > 0 if not spec.variance_include_zero else np.ones(G, bool)
    starts = np.flatnonzero(np.r_[True, seg[1:] != seg[:-1]])
    pos = np.arange(G) - starts[seg]  # position within the scope (eligible groups come first: variance ≥ 0)
    ecount = np.cumsum(eligible)
    rank = ecount - 1 - np.r_[0, ecount][starts][seg]
    whole = RULES[spec.variance_rule].get("whole", False)
    if spec.variance_top_k is not None:
        take = eligible & (rank < spec.variance_top_k)
    else:
        cum = scope_cumsum(np.where(eligible, v, 0.0), seg, pos, S)
        target = spec.variance_top_p * total[seg] - spec.selection_eps
        reached = eligible & (cum >= target)
        # the first eligible rank where the cumulative mass reaches the target, per scope (none: all eligible)
        big = np.iinfo(np.int64).max
        first = np.full(S, big)
        np.minimum.at(first, seg[reached], rank[reached])
        take = eligible & (target > 0) & (rank <= first[seg])
        if whole and spec.variance_include_zero:
            take |= ((total <= 0) | (spec.variance_top_p == 1.0))[seg]
    sel[order[take]] = True
    return sel


def scope_cumsum(x: np.ndarray, seg: np.ndarray, pos: np.ndarray, S: int) -> np.ndarray:
    """[n] the running sum of ``x`` within each scope (``seg`` sorted, ``pos`` the place in the scope), added
    from 0 in order as a Python loop does (not a global cumulative sum minus an offset, which rounds
    differently). One row per scope when that table is small, else one cumulative sum per scope."""
    width = int(pos.max()) + 1 if pos.size else 0
    if S * width <= 4 * x.size + 65536:
        dense = np.zeros((S, width))
        dense[seg, pos] = x
        return np.cumsum(dense, axis=1)[seg, pos]
    out = np.empty_like(x)
    bounds = np.flatnonzero(np.r_[True, seg[1:] != seg[:-1], True])
    for a, b in zip(bounds[:-1], bounds[1:]):  # one per step (a handful), each vectorised
        out[a:b] = np.cumsum(x[a:b])
    return out


def group_variance(group: np.ndarray, m: np.ndarray, G: int, ddof: int, live: np.ndarray | None = None):
    """[G] Σ(x − mean)²/(n − ddof) over each group's counted values (0 when n ≤ ddof), and n. Counted: the
    non-NaN values (RAGEN-2's rule), or with ``live`` (verl #7894, SkyRL #2217) the finite values of rows
    whose response mask has a 1."""
    use = ~np.isnan(m) if live is None else (np.isfinite(m) & live)
    n = np.bincount(group, weights=use.astype(np.float64), minlength=G)
    mz = np.where(use, m, 0.0)
    # each group's values summed in ascending order, whatever the rows' order: groups of the same values get the
    # same variance to the bit, and so tie (the ranking keeps the first-appearing of tied groups first)
    order = np.lexsort((mz, group))
    group, mz, use = group[order], mz[order], use[order]
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):  # ±inf metrics: NaN/inf variance, said
        mean = np.where(n > 0, np.bincount(group, weights=mz, minlength=G) / np.maximum(n, 1), 0.0)
        dev = np.where(use, mz - mean[group], 0.0) if group.size else np.zeros(0)
        ss = np.bincount(group, weights=dev * dev, minlength=G)
    denom = n - ddof
    return np.where(denom > 0, ss / np.maximum(denom, 1), 0.0), n


def _trainer_uniform(rule: str, size: np.ndarray, n_nan: np.ndarray, gmin: np.ndarray,
                     gmax: np.ndarray, n_inf: np.ndarray | None = None) -> np.ndarray:
    """bool [G]: the groups a trainer's DAPO-style dynamic sampling filters out, by ``np.std`` of the group's
    metric values (float64) as the trainer computes it:

    - verl (``verl/trainer/ppo/v1/replay_buffer.py`` L295 @1dda039b): ``len(values) > 1 and np.std(values) ==
      0``: a group of one is kept, and so is one with a NaN (its std is NaN);
    - verl's DAPO recipe (``recipe/dapo/dapo_ray_trainer.py`` L258 @v0.7.0, before 0.9.0): kept when ``std > 0 or
      len == 1``: a group with a NaN (more than one row) is dropped, a group of one kept;
    - SkyRL (``skyrl/train/utils/trainer_utils.py::handle_filter_sampling`` L551-556 @a9564572): kept when
      ``std > 0 or n_samples_per_prompt == 1``: a group with a NaN is dropped, and so is a group of one, unless
      every group has one row (the run's n_samples_per_prompt is 1).

    The std of identical values is computed as numpy computes it (0.1 three times is 1.4e-17, not 0: kept by
    both): once per distinct (value, size) pair, the only groups where it can be 0. A group holding ±inf
    (``n_inf``) has ``np.std`` NaN, as one holding a NaN: kept by verl's v1 rule, dropped by the others."""
    same = (n_nan == 0) & (gmin == gmax) & (size > 1)
    zero = np.zeros(size.size, bool)
    if same.any():  # one np.std per distinct (value, size), not per group
        pairs, inv = np.unique(np.stack([gmin[same], size[same].astype(np.float64)], 1), axis=0, return_inverse=True)
        exact = np.array([float(np.std(np.full(int(n), x))) == 0.0 for x, n in pairs], bool)
        zero[same] = exact[inv.ravel()]
    if rule == "verl":
        return zero
    bad = n_nan if n_inf is None else n_nan + n_inf  # rows whose value makes np.std NaN
    if rule == "verl_recipe":  # not (std > 0 or len == 1): a NaN's std is NaN, not > 0
        return zero | ((bad > 0) & (size > 1))
    all_single = bool(size.size) and bool((size == 1).all())
    return zero | (bad > 0) | ((size == 1) & (not all_single))


def group_decisions(group: np.ndarray, metric: np.ndarray, spec: FilterSpec,
                    scope: np.ndarray | None = None, live: np.ndarray | None = None,
                    vmetric: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Per group ``g`` (codes ``0..G-1`` in ``group``, one per row) the figures and the decision.

    Returns ``size``, ``mean`` (nanmean of the metric, float64), ``uniform``, ``variance`` (of the
    non-NaN values, ``/(n − ddof)``, 0 when ``n ≤ ddof``), the per-reason drop flags ``drop_min_size``,
    ``drop_uniform``, ``drop_solve_rate``, ``drop_variance`` and ``keep`` (no reason applies), all of
    length G. ``scope``: each group's step (the variance filter ranks within a step; None: one step).
    ``vmetric``: the values the variance filter ranks when they are not the metric (verl's masked reward sums).
    Vectorised: one stable sort of the codes and ``reduceat`` over the sorted metric.
    """
    group = np.asarray(group, np.int64)
    m = np.asarray(metric, np.float64)
    G = int(group.max()) + 1 if group.size else 0
    size = np.bincount(group, minlength=G)
    nan = np.isnan(m)
    n_nan = np.bincount(group, weights=nan.astype(np.float64), minlength=G)
    mz = np.where(nan, 0.0, m)
    s = np.bincount(group, weights=mz, minlength=G)
    n_num = size - n_nan
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(n_num > 0, s / np.maximum(n_num, 1), np.nan)
    # min and max over the numbers of each group: sort by group, reduceat at the group starts
    order = np.argsort(group, kind="stable")
    gs = group[order]
    starts = np.flatnonzero(np.r_[True, gs[1:] != gs[:-1]]) if gs.size else np.zeros(0, np.int64)
    lo_v = np.where(nan, np.inf, m)[order]
    hi_v = np.where(nan, -np.inf, m)[order]
    gmin = np.full(G, np.inf)
    gmax = np.full(G, -np.inf)
    if gs.size:
        gmin[gs[starts]] = np.minimum.reduceat(lo_v, starts)
        gmax[gs[starts]] = np.maximum.reduceat(hi_v, starts)
    uniform = (n_nan == size) | ((n_nan == 0) & (gmin == gmax))
    if spec.drop_uniform and spec.uniform_rule:
        n_inf = np.bincount(group, weights=np.isinf(m).astype(np.float64), minlength=G)
        uniform = _trainer_uniform(spec.uniform_rule, size, n_nan, gmin, gmax, n_inf)
    drop_min = size < spec.min_group_size if spec.min_group_size else np.zeros(G, bool)
    drop_uni = uniform if spec.drop_uniform else np.zeros(G, bool)
    if spec.solve_rate is not None:
        lo, hi = spec.solve_rate
        with np.errstate(invalid="ignore"):
            drop_sr = ~((mean >= lo) & (mean <= hi))  # NaN mean: dropped
    else:
        drop_sr = np.zeros(G, bool)
    if spec.mean_between is not None:  # OpenRLHF: sum(scores) / len(scores) in Python floats, NaN not skipped
        lo, hi = spec.mean_between
        plain = np.where(n_nan > 0, np.nan, s / np.maximum(size, 1))
        with np.errstate(invalid="ignore"):
            drop_sr = drop_sr | ~((plain > lo) & (plain < hi))
    if not RULES[spec.variance_rule]["live"]:
        live = None
    elif live is None:  # no response mask: every row is live
        live = np.ones(m.size, bool)
    vm = m if vmetric is None else np.asarray(vmetric, np.float64)  # what the variance rule ranks
    if RULES[spec.variance_rule].get("float32") and vmetric is not None:
        vm = vm.astype(np.float32).astype(np.float64)  # verl sums float32 scores
    variance, _ = group_variance(group, vm, G, spec.variance_ddof, live)
    if RULES[spec.variance_rule].get("float32"):
        variance = variance.astype(np.float32).astype(np.float64)  # float(torch.var(float32 values))
    if spec.by_variance is not None:
        sc = np.zeros(G, np.int64) if scope is None else np.asarray(scope, np.int64)
        drop_var = ~variance_selection(variance, sc, spec)
    else:
        drop_var = np.zeros(G, bool)
    keep = ~(drop_min | drop_uni | drop_sr | drop_var)
    return {"size": size, "mean": mean, "uniform": uniform, "variance": variance, "drop_min_size": drop_min,
            "drop_uniform": drop_uni, "drop_solve_rate": drop_sr, "drop_variance": drop_var, "keep": keep}


@dataclass
class SmallColumns:
    """The whole input's small columns, one entry per row (input order, files concatenated)."""

    rows: int
    group: np.ndarray  # group code per row ((step, prompt_id) pairs, first-appearance order)
    group_ids: list  # the prompt_id of each group code
    group_steps: list  # the step of each group code (None without a step column)
    metric: np.ndarray  # float64
    step: np.ndarray | None
    source: np.ndarray | None  # data-source code per row
    source_names: list = field(default_factory=list)
    columns: dict = field(default_factory=dict)  # role -> column name used
    padding: np.ndarray | None = None  # [rows] bool: synthetic padding rows (verl's V1 trainer, is_padding)


def without_padding(small: SmallColumns) -> SmallColumns:
    """``small`` without its synthetic padding rows (``is_padding``: verl's V1 trainer pads a batch with them),
    the groups renumbered in first-appearance order: they are in no group, no decision and no count."""
    pad = small.padding
    if pad is None or not pad.any():
        return small
    keep = ~pad
    uniq, inv = np.unique(small.group[keep], return_inverse=True)  # codes are first-appearance ranks
    return SmallColumns(int(keep.sum()), inv.ravel().astype(np.int64), [small.group_ids[u] for u in uniq],
                        [small.group_steps[u] for u in uniq], small.metric[keep],
                        None if small.step is None else small.step[keep],
                        None if small.source is None else small.source[keep], small.source_names, small.columns)


def find_source_column(names: list[str], explicit: str | None = None) -> str | None:
    if explicit:
        if explicit not in names:
            from ..errors import did_you_mean
            raise AdvcliError(f"--by {explicit!r}: no such column.{did_you_mean(explicit, names)}")
        return explicit
    return next((c for c in SOURCE_COLUMNS if c in names), None)


def read_small_columns(ins, cmap, metric_col: str, source_col: str | None, chunk_rows: int = 65536,
                       block_size: int | None = None) -> SmallColumns:
    """One streaming pass over the group id, step, metric and data-source columns of ``ins``. ``block_size``:
    groups are blocks of that many consecutive rows of each step (steps ascending, rows in input order: a flavor's
    ``grouping.by=position``), named by their first row; the prompt_id column is not read."""
    import pyarrow as pa

    from ..io.arrays import import_pandas, keys_codes, numeric

    import_pandas()  # (not first in pyarrow's compiled code, where a Ctrl-C raised at its end was lost)

    file0 = ins.paths[0]
    pid = None if block_size else cmap.require("prompt_id", "groups are the rows sharing a prompt_id (within a step)")
    if metric_col not in ins.schema.names:
        from ..errors import did_you_mean
        raise AdvcliError(f"{file0}: no metric column {metric_col!r}.{did_you_mean(metric_col, ins.schema.names)} "
                          f"Columns present: {', '.join(ins.schema.names)}",
                          hint="name it with --metric COLUMN" + (
                              "; verl's seq_final_reward (Σ token_level_rewards, the reward after its KL term) is "
                              "no column of a dump: the reward without the KL term is its seq_reward (no --metric)"
                              if metric_col == "seq_final_reward" else ""))
    mt = ins.schema.field(metric_col).type
    if not (pa.types.is_integer(mt) or pa.types.is_floating(mt) or pa.types.is_boolean(mt)):
        raise AdvcliError(f"{file0}: metric column {metric_col!r} has type {mt}; expected one number per row",
                          hint="name a numeric column with --metric COLUMN")
    step_col = cmap.names.get("step")
    pad_col = "is_padding" if "is_padding" in ins.schema.names else None
    cols = list(dict.fromkeys(c for c in (pid, metric_col, step_col, source_col, pad_col) if c))
    parts: dict[str, list] = {c: [] for c in cols}
    for _, _, batch in ins.iter_batches(cols, chunk_rows):
        for c in cols:
            parts[c].append(batch.column(c))
    R = ins.num_rows

    def chunked(c):
        return pa.chunked_array(parts[c], type=ins.schema.field(c).type)

    metric = np.asarray(chunked(metric_col).to_numpy(zero_copy_only=False), np.float64) if R else np.zeros(0)
    if block_size:
        pcodes, puniq = _block_codes(None if step_col is None else numeric(chunked(step_col), step_col, file0), R,
                                     block_size)
    else:
        pcodes, puniq = keys_codes(chunked(pid)) if R else (np.zeros(0, np.int64), np.zeros(0))
    if (pcodes < 0).any():
        first = int(np.nonzero(pcodes < 0)[0][0])
        path, row = _file_row(ins, first)
        raise AdvcliError(f"{path}: column {pid!r}, row {row}: null group id "
                          f"({int((pcodes < 0).sum())} row(s) without one)",
                          hint="every row needs its group id: repair those rows or drop them")
    step = None
    if step_col:
        step = numeric(chunked(step_col), step_col, file0).astype(np.int64) if R else np.zeros(0, np.int64)
        from ..ops.grouprule import by_first_appearance, id_groups, scope_codes

        # the (step, prompt_id) groups (advcli.ops.grouprule, the run's rule), in first-appearance order
        group, order = by_first_appearance(*id_groups(scope_codes(step)[0], pcodes))
        gids, gsteps = [puniq[pcodes[i]] for i in order], [int(step[i]) for i in order]
    else:
        group = pcodes
        gids, gsteps = list(puniq), [None] * len(puniq)
    source, source_names = None, []
    if source_col:
        arr = chunked(source_col)
        if pa.types.is_dictionary(arr.type):
            arr = arr.cast(arr.type.value_type)
        vals = arr.to_numpy(zero_copy_only=False)
        import pandas as pd
        codes, uniq = pd.factorize(vals, sort=False, use_na_sentinel=False)
        source, source_names = codes.astype(np.int64), [None if (u is None or u != u) else _plain(u) for u in uniq]
    padding = None
    if pad_col and R:
        padding = np.asarray(chunked(pad_col).fill_null(False).to_numpy(zero_copy_only=False), bool)
    return SmallColumns(R, np.asarray(group, np.int64), [_plain(g) for g in gids], gsteps, metric, step, source,
                        source_names, {"prompt_id": pid, "metric": metric_col, "step": step_col, "source": source_col},
                        padding)


def _block_codes(step, rows: int, n: int) -> tuple[np.ndarray, list]:
    """(a code per row, the name of each code) of the blocks of ``n`` consecutive rows of each step (steps
    ascending, rows in input order; the whole input without a step column): the positional groups of a run."""
    if not rows:
        return np.zeros(0, np.int64), []
    from ..ops.grouprule import rank_in_scope, scope_codes

    scope = np.zeros(rows, np.int64) if step is None else scope_codes(np.asarray(step))[0]
    rank = rank_in_scope(scope)
    key = scope * (rows // n + 1) + rank // n
    _, first, codes = np.unique(key, return_index=True, return_inverse=True)
    return codes.ravel().astype(np.int64), [f"rows from {int(r)}" for r in first]


def read_reward_columns(ins, names: tuple, chunk_rows: int) -> np.ndarray:
    """float64 [R, K]: the reward columns ``names`` (nulls NaN), in one streaming pass."""
    import pyarrow as pa

    for c in names:
        if c not in ins.schema.names:
            from ..errors import did_you_mean
            raise AdvcliError(f"{ins.paths[0]}: no reward column {c!r} (reward_funcs)."
                              f"{did_you_mean(c, ins.schema.names)}",
                              hint="reward_funcs names the dump's reward columns, e.g. --set 'reward_funcs=[acc,fmt]'")
        t = ins.schema.field(c).type
        if not (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)):
            raise AdvcliError(f"{ins.paths[0]}: reward column {c!r} has type {t}; expected one number per row")
    parts = []
    for _, _, batch in ins.iter_batches(list(dict.fromkeys(names)), chunk_rows):
        parts.append(np.stack([np.asarray(batch.column(c).cast(pa.float64()).fill_null(np.nan)
                                          .to_numpy(zero_copy_only=False), np.float64) for c in names], axis=1))
    return np.concatenate(parts) if parts else np.zeros((0, len(names)))


def live_rows(ins, mask_col: str, chunk_rows: int) -> np.ndarray:
    """bool [R]: the rows whose response mask has a nonzero value (one streaming pass over the mask column;
    a scalar mask column: nonzero)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    out = []
    for _, _, batch in ins.iter_batches([mask_col], chunk_rows):
        col = batch.column(mask_col)
        if not (pa.types.is_list(col.type) or pa.types.is_large_list(col.type)
                or pa.types.is_fixed_size_list(col.type)):
            out.append(np.asarray(col.to_numpy(zero_copy_only=False), np.float64) != 0)
            continue
        lengths = np.asarray(pc.list_value_length(col).fill_null(0).to_numpy(zero_copy_only=False), np.int64)
        flat = np.asarray(pc.list_flatten(col).to_numpy(zero_copy_only=False), np.float64)
        ones = np.r_[0, np.cumsum(flat != 0)]
        ends = np.cumsum(lengths)
        out.append(ones[ends] - ones[ends - lengths] > 0)
    return np.concatenate(out) if out else np.zeros(0, bool)


def masked_reward_sums(ins, mask_col: str, reward: np.ndarray, tls_col: str | None, chunk_rows: int) -> np.ndarray:
    """float64 [R]: what verl PR #7894 ranks, ``(token_level_scores * response_mask).sum(-1)``
    (apply_reward_variance_filter, verl/trainer/ppo/reward_variance_filter.py @ a9772ca7). From the
    ``tls_col`` token list when the dump has one; else the row reward where verl's reward manager writes it,
    at position L−1 (L: the list's length, or its last mask=1 position + 1 in a fixed-width padded list),
    times the mask there: a row whose last token is masked ranks as 0. A NaN stays NaN (NaN·0 in torch)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    out = []
    row0 = 0
    cols = [mask_col] + ([tls_col] if tls_col else [])
    for _, _, batch in ins.iter_batches(cols, chunk_rows):
        n = batch.num_rows
        col = batch.column(mask_col)
        lengths = np.asarray(pc.list_value_length(col).fill_null(0).to_numpy(zero_copy_only=False), np.int64)
        flat = np.asarray(pc.list_flatten(col).to_numpy(zero_copy_only=False), np.float64)
        parent = np.repeat(np.arange(n), lengths)
        if tls_col:
            tls = np.asarray(pc.list_flatten(batch.column(tls_col)).cast(pa.float64()).fill_null(np.nan)
                             .to_numpy(zero_copy_only=False), np.float64)
            if tls.size != flat.size:
                raise AdvcliError(f"{ins.paths[0]}: columns {tls_col!r} and {mask_col!r} differ in length on some "
                                  f"row of rows {row0}..{row0 + n - 1}; each row needs one score per mask token")
            out.append(np.bincount(parent, weights=tls * flat, minlength=n))
        else:
            ends = np.cumsum(lengths)
            if pa.types.is_fixed_size_list(col.type):  # padded: L is the last mask=1 position + 1
                ones = np.r_[0, np.cumsum(flat != 0)]
                has = ones[ends] - ones[ends - lengths] > 0
                at = np.where(has, 1.0, 0.0)
            else:
                at = np.where(lengths > 0, flat[np.maximum(ends - 1, 0)] if flat.size else 0.0, 0.0)
            with np.errstate(invalid="ignore"):
                out.append(reward[row0:row0 + n] * at)
        row0 += n
    return np.concatenate(out) if out else np.zeros(0)


def _plain(v):
    """numpy scalars and bytes as JSON-able Python values."""
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    if hasattr(v, "item"):
        return v.item()
    return v


def summarize(small: SmallColumns, dec: dict[str, np.ndarray], spec: FilterSpec, top: int = 10) -> dict:
    """What was kept and dropped: totals, and per step and data source (rows and groups, by reason)."""
    keep_row = dec["keep"][small.group]
    G = dec["keep"].size
    gsize = dec["size"]

    def block(gmask: np.ndarray, rmask: np.ndarray) -> dict:
        return {"groups": int(gmask.sum()), "rows": int(rmask.sum()),
                "groups_kept": int((gmask & dec["keep"]).sum()), "rows_kept": int((rmask & keep_row).sum()),
                "groups_dropped": int((gmask & ~dec["keep"]).sum()), "rows_dropped": int((rmask & ~keep_row).sum()),
                "dropped_min_group_size": int((gmask & dec["drop_min_size"]).sum()),
                "dropped_uniform": int((gmask & dec["drop_uniform"]).sum()),
                "dropped_solve_rate": int((gmask & dec["drop_solve_rate"]).sum()),
                "dropped_variance": int((gmask & dec["drop_variance"]).sum()),
                "uniform_groups": int((gmask & dec["uniform"]).sum())}

    allg = np.ones(G, bool)
    out = {"filter": spec.as_dict(), "columns": small.columns, **block(allg, np.ones(small.rows, bool))}
    if small.step is not None:
        gstep = np.asarray(small.group_steps, np.int64)
        out["per_step"] = [{"step": int(s), **block(gstep == s, small.step == s)} for s in np.unique(gstep)]
    if small.source is not None:
        # a group's source: that of its first row (a group normally has one)
        first = np.full(G, -1, np.int64)
        first[small.group[::-1]] = np.arange(small.rows)[::-1]
        gsrc = small.source[first]
        out["per_source"] = [{"source": name, **block(gsrc == k, small.source == k)}
                             for k, name in enumerate(small.source_names)]
        mixed = np.bincount(small.group, minlength=G)  # rows per group
        same = np.bincount(small.group, weights=(small.source == gsrc[small.group]).astype(float), minlength=G)
        n_mixed = int((same != mixed).sum())
        if n_mixed:
            out["groups_with_several_sources"] = n_mixed
    dropped = np.flatnonzero(~dec["keep"])[:top]
    out["examples_dropped"] = [
        {"group": small.group_ids[g], "step": small.group_steps[g], "size": int(gsize[g]),
         "mean_metric": None if not np.isfinite(dec["mean"][g]) else float(dec["mean"][g]),
         "variance": float(dec["variance"][g]),
         "reasons": [r for r, k in (("min_group_size", "drop_min_size"), ("uniform", "drop_uniform"),
                                    ("solve_rate", "drop_solve_rate"), ("variance", "drop_variance"))
                     if dec[k][g]]} for g in dropped]
    return out


def zero_list_rows(arr, keep):
    """The list column ``arr`` with every value of the rows where ``keep`` is false set to 0 (lengths,
    nulls and type unchanged)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    values = arr.flatten()
    parent = pc.list_parent_indices(arr).to_numpy(zero_copy_only=False)
    vals = values.to_numpy(zero_copy_only=False)
    new_vals = pa.array(np.where(keep[parent], vals, 0).astype(vals.dtype, copy=False), values.type)
    offsets = arr.offsets
    offsets = pc.subtract(offsets, offsets[0])
    cls = pa.LargeListArray if pa.types.is_large_list(arr.type) else pa.ListArray
    return cls.from_arrays(offsets, new_vals, type=arr.type, mask=arr.is_null() if arr.null_count else None)


def copy_kept_rows(ins, keep_row: np.ndarray, target: str, chunk_rows: int, metadata_note: dict | None = None,
                   progress=None, mask_column: str | None = None, footer: dict | None = None) -> int:
    """Every column of the rows with ``keep_row`` (input order, files concatenated) into ``target``,
    unchanged and in order; atomic (nothing at ``target`` unless complete). Returns the rows written.

    ``mask_column``: every row is written, and that (list) column is set to 0 on the rows not kept (the
    groups masked out of the loss, as verl PR #7894 does). ``footer``: keys kept in the output's metadata (a dump's
    group sizes: :func:`advcli.formats.conversion.import_footer`; filter keeps or drops whole groups, so the
    trainer's group size stays what it was)."""
    import pyarrow as pa

    from ..io.writer import AtomicParquetWriter

    schema = ins.schema
    if metadata_note is not None or footer:
        meta = dict(schema.metadata or {})
        if metadata_note is not None:
            meta[b"advcli_filter"] = json.dumps(metadata_note, default=str).encode()
        meta.update({k.encode(): v.encode() for k, v in (footer or {}).items()})
        schema = schema.with_metadata(meta)
    from ..io.commit import shielded

    w = None
    row0 = 0
    written = 0
    try:
        # created and held in one step (as the write pass does, advcli/pipeline/write.py): a signal landing
        # as the constructor returns is raised once ``w`` holds the temporary file, whose clean-up removes it
        with shielded():
            w = AtomicParquetWriter(target, schema)
        for _, _, batch in ins.iter_batches(schema.names, chunk_rows):
            n = batch.num_rows
            k = keep_row[row0:row0 + n]
            row0 += n
            if mask_column is not None:
                out = batch
                if not k.all():
                    i = batch.schema.get_field_index(mask_column)
                    out = batch.set_column(i, batch.schema.field(i), zero_list_rows(batch.column(i), k))
            elif k.all():
                out = batch
            elif not k.any():
                continue
            else:
                out = batch.filter(pa.array(k))
            w.write(out.replace_schema_metadata(schema.metadata))
            written += out.num_rows
            if progress:
                progress("copy", row0, keep_row.size)
        w.commit()
    except BaseException as e:
        # the clean-up runs to its end whatever signal comes meanwhile (a second Ctrl-C, a repeated SIGTERM):
        # the writer's thread is stopped and its temporary file removed before anything is raised
        with shielded(redeliver=not isinstance(e, KeyboardInterrupt)):
            if w is not None:
                w.abort()
        from ..errors import disk_full, is_disk_full
        from ..io import remote

        if is_disk_full(e) and not remote.is_uri(target):  # the directory, its free space, what was written
            raise disk_full(os.path.dirname(os.path.abspath(target)), "the kept rows") from None
        raise
    return written


# verl's algorithm.filter_groups.metric names that are no column of a dump: the column they stand for, said in a note
VERL_METRICS = {"seq_reward": "--metric seq_reward: verl's Σ token_level_scores of a response, its reward (the reward "
                              "column)"}


def filter_file(inputs: list[str], output: str, spec: FilterSpec, *, metric: str | None = None,
                by: str | None = None, column_overrides: dict | None = None, chunk_rows: int = 8192,
                force: bool = False, progress=None, kept_rows: dict | None = None) -> dict:
    """``advcli filter``: decide per group from the small columns, then copy the kept rows. Returns the
    summary dict (:func:`summarize` plus inputs/output/rows_written). ``kept_rows``: receives, under ``output``,
    the input row (from 0) of each row written (a run's message about a kept row names the input's)."""
    from ..config.columns import resolve_columns
    from ..io.reader import InputSet
    from ..io.writer import check_output_path, clean_stale_temps

    if chunk_rows < 1:
        raise AdvcliError(f"--chunk-rows must be at least 1 (got {chunk_rows})")
    ins = InputSet.open(inputs)
    check_output_path(output, ins.paths, force)
    chunk_rows = ins.chunk_rows(chunk_rows)  # and about CHUNK_TOKENS tokens: long responses, small chunks
    cmap = resolve_columns(ins.schema, column_overrides or {}, ins.paths[0])
    metric_col = metric or (cmap.names.get("reward") or "reward")
    alias_note = None
    if metric in VERL_METRICS and metric not in ins.schema.names:
        metric_col, alias_note = (cmap.names.get("reward") or "reward"), VERL_METRICS[metric]
    source_col = find_source_column(ins.schema.names, by)
    mask_column = None
    if spec.mask_dropped:
        mask_column = cmap.require("response_mask", "--mask-dropped sets the dropped groups' response mask to 0")
        import pyarrow as pa
        mt = ins.schema.field(mask_column).type
        if not (pa.types.is_list(mt) or pa.types.is_large_list(mt)):
            raise AdvcliError(f"{ins.paths[0]}: column {mask_column!r} has type {mt}; --mask-dropped needs the "
                              "per-token response mask (a list column)",
                              hint="map it with --column response_mask=NAME, or drop the groups (no --mask-dropped)")
    if spec.trl_rewards and metric:
        raise AdvcliError("--metric and --set reward_funcs/multi_objective_aggregation both name what groups are "
                          "ranked by; give one")
    if spec.trl_rewards:
        metric_col = spec.trl_rewards[1][0]
    full = read_small_columns(ins, cmap, metric_col, source_col, block_size=spec.block_size)
    if spec.trl_rewards:
        agg, funcs, weights = spec.trl_rewards
        full.metric = trl_aggregated(read_reward_columns(ins, funcs, chunk_rows), full.group, agg, weights)
        metric_col = f"TRL {agg} of {', '.join(funcs)}"
    small = without_padding(full)  # verl's synthetic padding rows: in no group, no decision, not written
    scope = None if small.step is None else np.asarray(small.group_steps, np.int64)
    check_solve_rate(spec, small.metric, metric_col)
    if spec.by_variance is not None and not rule_live(spec):
        refuse_infinite(full.metric, metric_col, ins)  # (every row: its index is the input's)
    live = vmetric = None
    rule = RULES[spec.variance_rule]
    if spec.by_variance is not None and rule["live"] and cmap.has("response_mask"):
        live = live_rows(ins, cmap["response_mask"], chunk_rows)
        if small is not full:  # the rows of the groups decided on: padding rows set aside
            live = live[~full.padding]
        import pyarrow as pa
        mt = ins.schema.field(cmap["response_mask"]).type
        if (rule.get("masked_sum") and metric is None and not spec.trl_rewards
                and (pa.types.is_list(mt) or pa.types.is_large_list(mt) or pa.types.is_fixed_size_list(mt))):
            tls = cmap["token_level_scores"] if cmap.has("token_level_scores") else None
            vmetric = masked_reward_sums(ins, cmap["response_mask"], full.metric, tls, chunk_rows)
            if small is not full:
                vmetric = vmetric[~full.padding]
    dec = group_decisions(small.group, small.metric, spec, scope, live, vmetric)
    summary = summarize(small, dec, spec)
    note = variance_note(spec)
    if note and vmetric is not None:
        note += ("; each row ranked by its masked reward sum Σ token_level_scores·response_mask"
                 + ("" if cmap.has("token_level_scores") else " (the reward at position L−1 times the mask there)"))
    notes = [n for n in (uniform_note(spec), note, alias_note) if n]
    if notes:
        summary["notes"] = notes
    if not dec["keep"].any() and len(dec["keep"]) and not spec.allow_empty:  # (no group at all: an empty input)
        raise AdvcliError(kept_nothing(spec, summary), hint="loosen the filter, or add --allow-empty to write the "
                                                             "empty result")
    keep_row = dec["keep"][small.group]
    if small is not full:
        keep_row = np.zeros(full.rows, bool)
        keep_row[~full.padding] = dec["keep"][small.group]
        from ..formats.conversion import PADDING_NOTE
        summary["padding_rows"] = int(full.padding.sum())
        summary["padding_note"] = PADDING_NOTE.format(n=summary["padding_rows"]) + "; not written"
    if kept_rows is not None:
        kept_rows[output] = np.flatnonzero(keep_row)
    clean_stale_temps(output)
    from ..formats import info_for
    from ..formats.conversion import import_footer

    info = info_for(ins.paths[0])  # a trainer's dump (or a file advcli convert wrote): its group sizes stay with it
    n = copy_kept_rows(ins, keep_row, output, chunk_rows,
                       metadata_note={"filter": spec.as_dict(), "metric": metric_col,
                                      "inputs": [os.path.basename(p) for p in ins.paths],
                                      "rows_in": small.rows, "rows_kept": summary["rows_kept"]},
                       progress=progress, mask_column=mask_column,
                       footer=(import_footer(info.group_sizes, info.shown_settings, info.last_step_estimators)
                               if info is not None and len(ins.paths) == 1 else None))
    summary.update(inputs=ins.paths, output=output, rows_written=n)
    return summary


def filter_dumps(given: list[str], output: str, spec: FilterSpec, *, source: str | None = None,
                 check_output: bool = True, **filter_options) -> dict:
    """``advcli filter`` and ``advcli.filter`` from the paths the user gave: refuse an inactive spec and missing
    inputs (the first things to say), check the output path (``check_output``: the library's in-memory result
    has none) before a trainer's dump is converted to canonical Parquet as run reads it (``source``: --from),
    filter (:func:`filter_file` with ``filter_options``), and name the dumps given in the summary, not their
    temporary Parquet."""
    from ..formats import name_dumps, open_inputs
    from ..io.reader import refuse_missing_inputs
    from ..io.writer import check_output_path

    if not spec.active:
        raise AdvcliError("filter: nothing to filter by", hint="give --drop-uniform, --solve-rate LO:HI, "
                                                              "--min-group-size N or --variance-top-p P / "
                                                              "--variance-top-k K")
    refuse_missing_inputs(list(given))
    if check_output:
        check_output_path(output, list(given), filter_options.get("force", False))
    specs = open_inputs(list(given), source, synth_mask=False)
    return name_dumps(filter_file(specs, output, spec, **filter_options))


def _file_row(ins, row: int) -> tuple[str, int]:
    """(the file, its row from 0) of row ``row`` of the inputs ``ins`` read as one (files in order)."""
    from ..io.value_checks import file_row

    return file_row(ins.paths, ins.file_rows(), row)


def rule_live(spec: FilterSpec) -> bool:
    return bool(RULES[spec.variance_rule]["live"])


def refuse_infinite(metric: np.ndarray, metric_col: str, ins) -> None:
    """RAGEN-2's variance filter ranks every row with a number: an infinite one makes its group's variance, and the
    step's total mass, NaN, so top_p kept nothing of the step (in silence). Refused, naming the row. (The verl and
    SkyRL rules leave non-finite rewards out of the variance, as those trainers do.)"""
    inf = np.isinf(np.asarray(metric, np.float64))
    if inf.any():
        first = int(np.flatnonzero(inf)[0])
        path, row = _file_row(ins, first)
        raise AdvcliError(f"{path}: column {metric_col!r}, row {row}: "
                          f"{float(metric[first]):g} ({int(inf.sum())} infinite value(s)): the variance filter ranks "
                          "groups by their variance, which an infinite value makes NaN for its whole step",
                          hint="repair or drop those rows; --flavor verl or skyrl leave non-finite rewards out of "
                               "the variance, as those trainers do")


def check_solve_rate(spec: FilterSpec, metric: np.ndarray, metric_col: str) -> None:
    """Refuse a --solve-rate bound outside the metric's range: [0, 1] (a solve rate), widened to the
    metric's own values where they go beyond it (a reward in [-1, 1])."""
    if spec.solve_rate is None:
        return
    m = np.asarray(metric, np.float64)
    m = m[np.isfinite(m)]
    lo_r, hi_r = (min(0.0, float(m.min())), max(1.0, float(m.max()))) if m.size else (0.0, 1.0)
    bad = [f"{name} {v:g}" for name, v in zip(("LO", "HI"), spec.solve_rate) if not lo_r <= v <= hi_r]
    if bad:
        lo, hi = spec.solve_rate
        raise AdvcliError(f"--solve-rate {lo:g}:{hi:g}: {' and '.join(bad)} outside the range of the groups' mean "
                          f"{metric_col} ({lo_r:g} to {hi_r:g})",
                          hint="a solve rate is the share of a group's rows solved: e.g. --solve-rate 0.1:0.9 keeps "
                               "the groups solved sometimes, neither always nor never")


def kept_nothing(spec: FilterSpec, summary: dict) -> str:
    """The message of a filter that would keep no row: what it dropped, by reason."""
    reasons = [f"{summary[k]:,} {label}" for k, label in (
        ("dropped_min_group_size", "too small"), ("dropped_uniform", "uniform"),
        ("dropped_solve_rate", "outside the solve rate"), ("dropped_variance", "below the variance cut"))
        if summary.get(k)]
    return (f"{spec.describe()} keeps no row: all {summary['groups']:,} group(s) ({summary['rows']:,} rows) are "
            f"dropped ({', '.join(reasons)}; a group may have several reasons); nothing written")


# ------------------------------------------------------------------------------- advcli run --drop-...
# (the run itself: advcli.runs.runner)
_SERIAL = itertools.count()  # the in-memory runs' kept-rows files of one process


def prefilter_path(output: str | None) -> str:
    """The file the kept rows of ``advcli run --drop-uniform`` (...) go to: beside ``output``, named as its
    temporary files are (``.NAME.advcli-tmp-PID.filter.parquet``), so that the next run for that output removes
    it when this one was killed (advcli.io.writer.clean_stale_temps); known before it exists, so that the run's
    clean-up removes it whenever it was stopped."""
    from ..io import remote
    from ..io.temps import TMP_TAG, owner_tag, temp_stem

    if output is None or remote.is_uri(output):  # no output file (advcli.run(..., None): the rows in memory), or
        import hashlib  # one on object storage: a local file in TMPDIR, named as an upload's local copy is
        import tempfile  # (advcli.io.writer.temp_path_for), which the next advcli process sweeps if this one dies

        key = output or f"in-memory-{next(_SERIAL)}"
        tag = hashlib.sha256(key.encode()).hexdigest()[:12]
        name = key.rsplit("/", 1)[-1]
        return os.path.join(tempfile.gettempdir(), f".advcli-upload-{tag}-{name}.filter{TMP_TAG}{owner_tag()}")
    d, name = os.path.split(os.path.abspath(output))
    return os.path.join(d, f".{temp_stem(name)}{TMP_TAG}{owner_tag()}.filter.parquet")


def prefilter_for_run(inputs: list[str], output: str, spec, column_overrides: dict | None, chunk_rows: int,
                      force: bool = False, metric: str | None = None, output_mode: str = "full") -> tuple[str, dict]:
    """(path of a temporary file holding the kept rows, the filter summary) for ``advcli run`` with
    group-filter options. The file lies beside ``output`` (the caller removes it)."""
    if output_mode != "full":  # its row_index would count the kept rows, not the input's
        raise AdvcliError(f"--output-mode {output_mode} with {spec.describe()}: the "
                          "sidecar's row_index would number the kept rows, not the input's, and join back wrongly",
                          hint="filter first (advcli filter IN -o kept.parquet ...), then run on kept.parquet")
    from ..io.reader import GIVEN_FILES, SHOWN_AS, expand_inputs, given_files, shown_name
    from ..io.writer import check_output_path

    files = expand_inputs(inputs)
    if len(files) != 1:
        raise AdvcliError(f"{spec.describe()} on `run` takes one input file",
                          hint="filter several files into one first: advcli filter IN... -o kept.parquet "
                               "--drop-uniform, then advcli run kept.parquet")
    if output is not None:
        check_output_path(output, files, force)  # before any work, against the real input
    tmp = prefilter_path(output)
    SHOWN_AS[tmp] = shown_name(files[0])  # the output's provenance names the input, not this file
    GIVEN_FILES[tmp] = given_files(files[0])
    from ..io.commit import immediate

    with immediate():  # the kept rows are the run's input: in place now, even while the run's outputs wait
        summary = filter_file(inputs, tmp, spec, metric=metric, column_overrides=column_overrides,
                              chunk_rows=max(chunk_rows, 1), force=True, kept_rows=KEPT_ROWS)
    return tmp, summary


# a run's prefiltered file -> the input row of each of its rows (prefilter_for_run; the run forgets it after)
KEPT_ROWS: dict[str, np.ndarray] = {}


def input_row_message(message: str, prefiltered: str, given: str) -> str:
    """A message about the prefiltered file's rows (``PATH: column 'reward', row 4``) naming the file the user
    gave and that row's place in it (row 11), through :data:`KEPT_ROWS`."""
    import re

    rows = KEPT_ROWS.get(prefiltered)

    def where(m: re.Match) -> str:
        n = int(m.group(2))
        return (f"{given}{m.group(1)}row {int(rows[n])}" if rows is not None and n < rows.size else
                f"{given} (the rows the group filter kept){m.group(1)}row {n}")

    out = re.sub(re.escape(prefiltered) + r"([^\n]*?)\brow (\d+)\b", where, message)
    return out.replace(prefiltered, f"{given} (the rows the group filter kept)")


def run_filter_note(spec, summary: dict) -> str:
    return (f"{spec.describe()}: advantages computed as if the {summary['groups_dropped']:,} dropped group(s) "
            f"({summary['rows_dropped']:,} of {summary['rows']:,} rows) had not been sampled (DAPO dynamic "
            f"sampling); the output holds the {summary['rows_kept']:,} kept rows in input order"
            + (f" ({uniform_note(spec)})" if uniform_note(spec) else ""))


def _share(a: int, b: int) -> str:
    """a / b as a percentage with one decimal; – for b = 0."""
    return f"{100 * a / b:.1f}%" if b else "–"


def filter_sections(rep: dict):
    """``advcli filter``'s report (its summary dict) as sections: what was dropped, per step and source, the
    dropped groups first listed."""
    head = [("filter", describe_filter(rep.get("filter") or {})), ("metric", _filter_metric(rep)),
            ("input", ", ".join(rep.get("inputs") or [])), ("output", rep.get("output")),
            ("groups", f"{rep['groups']:,}: {rep['groups_kept']:,} kept, {rep['groups_dropped']:,} dropped "
                       f"({_share(rep['groups_dropped'], rep['groups'])})"),
            ("rows", f"{rep['rows']:,}: {rep['rows_kept']:,} kept, {rep['rows_dropped']:,} dropped "
                     f"({_share(rep['rows_dropped'], rep['rows'])})"),
            ("uniform groups", f"{rep['uniform_groups']:,} ({_share(rep['uniform_groups'], rep['groups'])})"),
            ("dropped: too small / uniform / solve rate / variance",
             f"{rep['dropped_min_group_size']:,} / {rep['dropped_uniform']:,} / {rep['dropped_solve_rate']:,} / "
             f"{rep.get('dropped_variance', 0):,} groups (a group may have several reasons)")]
    for note in rep.get("notes") or []:
        head.append(("note", note))
    if rep.get("padding_note"):
        head.append(("padding", rep["padding_note"]))
    if (rep.get("filter") or {}).get("mask_dropped"):
        head.append(("masked", f"every row written; the {rep['rows_dropped']:,} rows of the dropped groups have "
                               "response_mask 0"))
    cols = ["groups", "groups_dropped", "rows", "rows_dropped", "uniform_groups", "dropped_min_group_size",
            "dropped_uniform", "dropped_solve_rate", "dropped_variance"]
    sections = [("Summary", "kv", head)]
    svgs = []
    for key, label in (("per_step", "step"), ("per_source", "source")):
        entries = rep.get(key) or []
        if entries:
            sections.append((f"Per {label}", "table", ([label] + cols, [[str(e[label])] + [e[c] for c in cols]
                                                                       for e in entries])))
    steps = rep.get("per_step") or []
    if len(steps) > 1:
        from ..report import svg_lines

        svgs.append(svg_lines([e["step"] for e in steps],
                              {"groups dropped": [e["groups_dropped"] for e in steps],
                               "uniform groups": [e["uniform_groups"] for e in steps]}, "groups by step", "step",
                              ylabel="groups"))
    sections.append(("Plots", "svg", svgs))
    ex = rep.get("examples_dropped") or []
    if ex:
        sections.append(("Dropped groups (first listed)", "table",
                         (["group", "step", "size", "mean metric", "variance", "reasons"],
                          [[str(e["group"]), "" if e["step"] is None else str(e["step"]), e["size"], e["mean_metric"],
                            e.get("variance"), ", ".join(e["reasons"])] for e in ex])))
    return "advcli filter report", sections


def _filter_metric(rep: dict) -> str | None:
    """What the filter ranked: the metric column, or TRL's aggregate of its reward columns."""
    trl = (rep.get("filter") or {}).get("trl_rewards")
    if not trl:
        return (rep.get("columns") or {}).get("metric")
    weights = trl.get("reward_weights")
    terms = ", ".join(f"{w:g}·{c}" for w, c in zip(weights, trl["reward_funcs"])) if weights else \
        ", ".join(trl["reward_funcs"])
    return f"TRL's {trl['aggregation']} of {terms}"
