"""Run statistics, accumulated on the way through (no second read of the input).

The collector is fed twice by the pipeline:

1. :meth:`RunStats.set_rows` once, with the resolved per-row table of the whole input (raw score,
   the estimator's row score, groups, steps, valid lengths, the per-row KL of verl's
   ``apply_kl_penalty`` and the β used by each step);
2. :meth:`RunStats.add_chunk` for every chunk of the write pass (advantages, returns, token-level
   rewards, values, mask, the chunk's layout).

:meth:`RunStats.finish` then returns plain JSON-able structures (no tensors, no NaN: a figure that
cannot be computed is ``None``). They end up on :class:`advcli.pipeline.RunResult`:

``metrics`` — ``{name: float | int | None}`` over the whole run. verl's names, with verl's
definitions (``verl/trainer/ppo/metric_utils.py::compute_data_metrics`` and
``ray_trainer.py::apply_kl_penalty`` @1dda039b):

- ``critic/score/{mean,max,min}``: sequence score = Σ_t token_level_scores (the reward column, the
  weighted reward components or Σ token_level_scores, before normalisation and KL), over the rows
  with response_length > 0 (verl drops "aborted" rows from score and rewards).
- ``critic/rewards/{mean,max,min}``: sequence reward = Σ_t token_level_rewards as advcli computed
  them (after normalisation, placement and KL), same rows.
- ``critic/advantages/{mean,max,min}``, ``critic/returns/{mean,max,min}``: over the mask=1 tokens.
- ``critic/values/{mean,max,min}`` and ``critic/vf_explained_var`` (``1 − var(G − V)/(var(G) + 1e-5)``,
  unbiased vars over mask=1 tokens) when the estimator reads a ``values`` column (verl ``use_critic``).
- ``response_length/{mean,max,min}``: verl's response length is the attention-mask length of the
  response, i.e. the list length L_i (for padded lists: last mask=1 position + 1), **not** Σ mask; all
  rows. ``response_length_non_aborted/{mean,max,min}`` and ``response/aborted_ratio`` likewise.
- ``actor/reward_kl_penalty`` = mean over rows of ``Σ_t kld·m / (Σ_t m + 1e-8)`` and
  ``actor/reward_kl_penalty_coeff`` = the β used (the value before the step's update); only when KL
  enters the reward. Per step these are exactly verl's; overall they are row-weighted means of the
  per-step values (identical for a one-step dump).

advcli's additions (not logged by verl):

- ``critic/{advantages,returns}/count`` and ``.../nonfinite`` (tokens), ``critic/rewards/std``,
  ``critic/score/std``, ``critic/advantages/std`` (population std).
- quantiles ``critic/{score,rewards,advantages}/p{1,5,25,50,75,95,99}`` (numpy's default linear
  interpolation). Row quantities (score, rewards) are exact, over the non-aborted rows. Token
  advantages are exact whenever every row's valid advantages are one value (every row-level
  estimator, whitened or not): the row values weighted by their valid-token counts give the token
  distribution. Otherwise (GAE, REINFORCE++, ...) they come from a bounded reservoir of
  :data:`RESERVOIR` tokens: each valid token gets a pseudo-random key from a fixed hash of its global
  token index (seed :data:`SEED`) and the tokens with the smallest keys are kept — a uniform sample
  that does not depend on ``--chunk-rows``, and exact when the run has at most RESERVOIR valid
  tokens. ``critic/advantages/quantiles_exact`` says which.
- group figures (when rows are grouped): ``groups/count``, ``groups/size/{mean,min,max}``,
  ``groups/singleton_share``, ``groups/all_equal_share`` (groups of ≥ 2 rows whose estimator row
  scores are all equal), ``groups/solve_rate`` (share of rows with score > 0),
  ``groups/solved_{all,none,some}_share`` (groups where every / no / some rows have score > 0),
  ``groups/adv_sign/{mixed,only_pos,only_neg,all_zero}_share`` (sign of each row's mean valid
  advantage) and ``groups/adv_sign/balance_mean`` (mean over groups of (#pos − #neg)/n).

``per_step`` — one dict per step (ascending; a single entry with ``step: None`` without a step
column): ``step``, ``rows``, ``kl_coef``/``kl`` (as before), and the verl metric names above for
that step (score, rewards, advantages, returns, values, response_length, reward KL).

``histograms`` — ``{name: {"edges": [b+1 floats], "counts": [b ints], "underflow": int,
"overflow": int, "over": "rows" | "tokens", "exact": bool, "note": str}}`` for ``score``,
``rewards`` (rows, :data:`BINS` equal bins between the exact min and max), ``advantages`` (tokens)
and ``group_size`` (integer bins). Advantages: when they are row-constant, exact counts over
equal bins between the exact min and max, from the row table; otherwise the edges are fixed from
the first chunk that has valid tokens (its [min, max] widened by half its span on each side) and
every later token is counted exactly, values outside those edges in ``underflow``/``overflow``.

Memory: a few float64/int64 entries per row (like the row table) plus per-step accumulators, the
reservoir and the histogram counts; nothing grows with the number of tokens.
"""
from __future__ import annotations

import math
from typing import Any

import torch

from .ops.groups import GroupIndex
from .ragged import Ragged

QUANTILES = (1, 5, 25, 50, 75, 95, 99)
RESERVOIR = 65536
SEED = 0x5EED
BINS = 50

_M1 = 0x9E3779B97F4A7C15 - (1 << 64)  # splitmix64 constants as signed int64
_M2 = 0xBF58476D1CE4E5B9 - (1 << 64)
_M3 = 0x94D049BB133111EB - (1 << 64)


def hash_keys(index: torch.Tensor, seed: int = SEED) -> torch.Tensor:
    """splitmix64 of ``index + seed`` in int64 arithmetic (wrapping): a fixed pseudo-random key per index."""
    x = index.to(torch.int64) + seed
    x = x * _M1
    x = x ^ ((x >> 30) & ((1 << 34) - 1))
    x = x * _M2
    x = x ^ ((x >> 27) & ((1 << 37) - 1))
    x = x * _M3
    x = x ^ ((x >> 31) & ((1 << 33) - 1))
    return x


def _f(x) -> float | None:
    """A Python float, None for NaN/inf/None (JSON-able)."""
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def quantiles(values: torch.Tensor, weights: torch.Tensor | None = None) -> dict[str, float | None]:
    """``{"p1": ..., "p99": ...}`` as ``np.quantile(expanded, q)`` (linear), where ``expanded`` repeats
    each value ``weights`` times (integer weights; all 1 when None). Exact, no expansion."""
    v = values.to(torch.float64).flatten()
    w = torch.ones_like(v, dtype=torch.int64) if weights is None else weights.to(torch.int64).flatten()
    keep = w > 0
    v, w = v[keep], w[keep]
    n = int(w.sum())
    if n == 0:
        return {f"p{q}": None for q in QUANTILES}
    order = torch.argsort(v)
    v, w = v[order], w[order]
    cum = torch.cumsum(w, 0)  # token k (0-based) has value v[searchsorted(cum, k, right=True)]
    pos = torch.tensor([q / 100 * (n - 1) for q in QUANTILES], dtype=torch.float64)
    lo = torch.floor(pos).to(torch.int64)
    hi = torch.clamp(lo + 1, max=n - 1)
    frac = pos - lo.to(torch.float64)
    vlo = v[torch.searchsorted(cum, lo, right=True)]
    vhi = v[torch.searchsorted(cum, hi, right=True)]
    out = vlo + frac * (vhi - vlo)
    return {f"p{q}": _f(x) for q, x in zip(QUANTILES, out.tolist())}


def histogram(values: torch.Tensor, weights: torch.Tensor | None = None, bins: int = BINS,
              over: str = "rows", note: str = "") -> dict[str, Any]:
    """Exact counts over ``bins`` equal bins between the min and max of ``values`` (the last bin is
    closed, as numpy's); one bin of width 1 around the value when all are equal."""
    v = values.to(torch.float64).flatten()
    w = torch.ones_like(v, dtype=torch.int64) if weights is None else weights.to(torch.int64).flatten()
    ok = torch.isfinite(v) & (w > 0)
    v, w = v[ok], w[ok]
    if v.numel() == 0:
        return {"edges": [], "counts": [], "underflow": 0, "overflow": 0, "over": over, "exact": True, "note": note}
    lo, hi = float(v.min()), float(v.max())
    if hi == lo:
        lo, hi = lo - 0.5, hi + 0.5
    edges = torch.linspace(lo, hi, bins + 1, dtype=torch.float64)
    idx = torch.clamp(torch.bucketize(v, edges, right=True) - 1, 0, bins - 1)
    counts = torch.zeros(bins, dtype=torch.int64).index_add_(0, idx, w)
    return {"edges": edges.tolist(), "counts": counts.tolist(), "underflow": 0, "overflow": 0, "over": over,
            "exact": True, "note": note}


# ------------------------------------------------------------------------------ token accumulators
class _ScopeAcc:
    """count, Σx, Σx², min, max of finite values per scope (float64), plus non-finite counts."""

    def __init__(self, num_scopes: int):
        S = max(num_scopes, 1)
        self.count = torch.zeros(S, dtype=torch.int64)
        self.sum = torch.zeros(S, dtype=torch.float64)
        self.sumsq = torch.zeros(S, dtype=torch.float64)
        self.min = torch.full((S,), math.inf, dtype=torch.float64)
        self.max = torch.full((S,), -math.inf, dtype=torch.float64)
        self.nonfinite = torch.zeros(S, dtype=torch.int64)
        self.seen = False

    def add(self, x: torch.Tensor, scope: torch.Tensor) -> None:
        """``x`` float [n] already restricted to the valid tokens, ``scope`` int64 [n]."""
        self.seen = True
        x = x.detach().to("cpu", torch.float64)
        scope = scope.to("cpu")
        if not bool(torch.isfinite(x.sum())):  # one reduction; the mask only when something is off
            fin = torch.isfinite(x)
            self.nonfinite.index_add_(0, scope[~fin], torch.ones(int((~fin).sum()), dtype=torch.int64))
            x, scope = x[fin], scope[fin]
        if self.count.numel() == 1:  # one scope: plain reductions (min/max exact, the sums as before)
            if x.numel():
                self.count += x.numel()
                self.min = torch.minimum(self.min, x.min().reshape(1))
                self.max = torch.maximum(self.max, x.max().reshape(1))
            self.sum.index_add_(0, scope, x)
            self.sumsq.index_add_(0, scope, x * x)
            return
        self.count += torch.bincount(scope, minlength=self.count.numel())
        self.sum.index_add_(0, scope, x)
        self.sumsq.index_add_(0, scope, x * x)
        self.min.scatter_reduce_(0, scope, x, reduce="amin")
        self.max.scatter_reduce_(0, scope, x, reduce="amax")

    def figures(self, s: int | None = None) -> dict[str, Any]:
        """{mean, max, min, std, count, nonfinite} of scope ``s`` (all scopes when None)."""
        if s is None:
            n, tot, sq = int(self.count.sum()), float(self.sum.sum()), float(self.sumsq.sum())
            mn, mx, nf = float(self.min.min()), float(self.max.max()), int(self.nonfinite.sum())
        else:
            n, tot, sq = int(self.count[s]), float(self.sum[s]), float(self.sumsq[s])
            mn, mx, nf = float(self.min[s]), float(self.max[s]), int(self.nonfinite[s])
        if n == 0:
            return {"mean": None, "max": None, "min": None, "std": None, "count": 0, "nonfinite": nf}
        mean = tot / n
        return {"mean": mean, "max": _f(mx), "min": _f(mn), "std": math.sqrt(max(sq / n - mean * mean, 0.0)),
                "count": n, "nonfinite": nf}


class _Reservoir:
    """The ``size`` valid tokens with the smallest hash keys of their global index (a uniform sample)."""

    def __init__(self, size: int = RESERVOIR):
        self.size = size
        self.keys = torch.zeros(0, dtype=torch.int64)
        self.values = torch.zeros(0, dtype=torch.float64)
        self.total = 0

    def add(self, values: torch.Tensor, global_index: torch.Tensor) -> None:
        values = values.detach().to("cpu", torch.float64)
        keys = hash_keys(global_index.to("cpu"))
        self.total += values.numel()
        if self.keys.numel() >= self.size:  # only keys below the current K-th smallest can enter
            thresh = self.keys.max()
            sel = keys < thresh
            keys, values = keys[sel], values[sel]
        keys = torch.cat([self.keys, keys])
        values = torch.cat([self.values, values])
        if keys.numel() > self.size:
            idx = torch.topk(keys, self.size, largest=False, sorted=False).indices
            keys, values = keys[idx], values[idx]
        self.keys, self.values = keys, values


class _StreamHist:
    """Exact token counts over edges fixed from the first non-empty chunk (see the module docstring)."""

    def __init__(self, bins: int = BINS):
        self.bins = bins
        self.edges: torch.Tensor | None = None
        self.counts = torch.zeros(bins, dtype=torch.int64)
        self.under = 0
        self.over = 0

    def add(self, x: torch.Tensor) -> None:
        x = x.detach().to("cpu", torch.float64)
        if not bool(torch.isfinite(x.sum())):
            x = x[torch.isfinite(x)]
        if x.numel() == 0:
            return
        if self.edges is None:
            lo, hi = float(x.min()), float(x.max())
            span = hi - lo if hi > lo else max(abs(hi), 1.0)
            self.edges = torch.linspace(lo - span / 2, hi + span / 2, self.bins + 1, dtype=torch.float64)
        e = self.edges
        under, over = x < e[0], x > e[-1]
        n_under, n_over = int(under.sum()), int(over.sum())
        self.under += n_under
        self.over += n_over
        if n_under or n_over:
            x = x[~under & ~over]
        idx = torch.clamp(torch.bucketize(x, e, right=True) - 1, 0, self.bins - 1)
        self.counts += torch.bincount(idx, minlength=self.bins)

    def result(self, note: str) -> dict[str, Any]:
        return {"edges": [] if self.edges is None else self.edges.tolist(), "counts": self.counts.tolist(),
                "underflow": self.under, "overflow": self.over, "over": "tokens", "exact": True, "note": note}


# ------------------------------------------------------------------------------------ the collector
class RunStats:
    """Streaming statistics of one run (see the module docstring for every figure)."""

    def __init__(self, num_rows: int, *, padded: bool = False, reservoir: int = RESERVOIR, bins: int = BINS):
        R = num_rows
        self.R = R
        self.padded = padded
        self.bins = bins
        # per row, filled chunk by chunk
        self.seq_reward = torch.zeros(R, dtype=torch.float64)
        self.resp_len = torch.zeros(R, dtype=torch.int64)
        self.valid = torch.zeros(R, dtype=torch.int64)
        self.adv_sum = torch.zeros(R, dtype=torch.float64)
        self.adv_min = torch.full((R,), math.inf, dtype=torch.float64)
        self.adv_max = torch.full((R,), -math.inf, dtype=torch.float64)
        self.token_base = 0
        self.reservoir = _Reservoir(reservoir)
        self.adv_hist = _StreamHist(bins)
        self.rows_set = False
        self.scopes: GroupIndex | None = None

    # ------------------------------------------------------------------------------- row feed
    def set_rows(self, *, raw_score: torch.Tensor, score: torch.Tensor, scopes: GroupIndex, step_values: list,
                 groups: GroupIndex | None, valid_len: torch.Tensor, kl_on: bool = False,
                 kl_row: torch.Tensor | None = None, betas: list[float] | None = None,
                 kls: list[float] | None = None, has_values: bool = False) -> None:
        """The per-row table of the whole input (CPU tensors, [R] each) and the per-step KL figures."""
        self.raw_score = raw_score.detach().to(torch.float64)
        self.score = score.detach().to(torch.float64)
        self.scopes = scopes
        self.S = max(scopes.num_groups, 1)
        self.step_values = step_values
        self.groups = groups
        self.valid_len = valid_len.to(torch.int64)
        self.kl_on = kl_on
        self.kl_row = None if kl_row is None else kl_row.detach().to(torch.float64)
        self.betas, self.kls = betas or [], kls or []
        self.has_values = has_values
        self.adv = _ScopeAcc(self.S)
        self.ret = _ScopeAcc(self.S)
        self.val = _ScopeAcc(self.S)
        self.ret_minus_val = _ScopeAcc(self.S)
        self.rows_set = True

    # ------------------------------------------------------------------------------ chunk feed
    def add_chunk(self, row0: int, layout: Ragged, mask: torch.Tensor, adv: torch.Tensor, ret: torch.Tensor,
                  tlr: torch.Tensor, values: torch.Tensor | None = None) -> None:
        """One chunk of the write pass: rows ``row0 .. row0 + B − 1`` (flat tensors on any device)."""
        layout = layout.to("cpu")
        B = layout.num_rows
        rows = slice(row0, row0 + B)
        m = mask.detach().to("cpu") > 0
        adv = adv.detach().to("cpu")
        ret = ret.detach().to("cpu")
        self.seq_reward[rows] = layout.row_sum(tlr.detach().to("cpu", torch.float64))
        if self.padded:
            last = layout.last_true_index(m)
            self.resp_len[rows] = torch.where(last >= 0, last - layout.offsets[:-1] + 1, torch.zeros_like(last))
        else:
            self.resp_len[rows] = layout.lengths
        # the valid tokens' flat indices, found once and gathered with (the boolean-mask form
        # searches the mask again for every tensor it selects from)
        sel = torch.nonzero(m, as_tuple=True)[0]
        vrow = layout.row_index[sel]
        self.valid[rows] = torch.bincount(vrow, minlength=B)
        av = adv[sel].to(torch.float64)
        self.adv_sum[rows] = torch.zeros(B, dtype=torch.float64).index_add_(0, vrow, av)
        amin = torch.full((B,), math.inf, dtype=torch.float64).scatter_reduce_(0, vrow, av, reduce="amin")
        amax = torch.full((B,), -math.inf, dtype=torch.float64).scatter_reduce_(0, vrow, av, reduce="amax")
        self.adv_min[rows], self.adv_max[rows] = amin, amax
        scope_tok = self.scopes.codes[rows][vrow] if self.scopes is not None else torch.zeros_like(vrow)
        self.adv.add(av, scope_tok)
        rv = ret[sel]
        self.ret.add(rv, scope_tok)
        if values is not None and self.has_values:
            v = values.detach().to("cpu")[sel]
            self.val.add(v, scope_tok)
            self.ret_minus_val.add(rv.to(torch.float64) - v.to(torch.float64), scope_tok)
        gidx = self.token_base + sel
        self.reservoir.add(av, gidx)
        self.adv_hist.add(av)
        self.token_base += layout.num_tokens

    # ---------------------------------------------------------------------------------- figures
    def _row_figs(self, x: torch.Tensor, sel: torch.Tensor) -> dict[str, Any]:
        v = x[sel]
        v = v[~torch.isnan(v)]  # unscored rows (TRL's None rewards) are left out, as TRL's nanmean does
        if v.numel() == 0:
            return {"mean": None, "max": None, "min": None, "std": None}
        return {"mean": _f(v.mean()), "max": _f(v.max()), "min": _f(v.min()),
                "std": _f(v.std(unbiased=False))}

    def _block(self, rows_sel: torch.Tensor, s: int | None) -> dict[str, Any]:
        """verl's metric block for the rows ``rows_sel`` (bool [R]) and scope ``s`` (None: all)."""
        out: dict[str, Any] = {}
        non_aborted = rows_sel & (self.resp_len > 0)
        for name, x in (("critic/score", self.raw_score), ("critic/rewards", self.seq_reward)):
            f = self._row_figs(x, non_aborted)
            out.update({f"{name}/{k}": f[k] for k in ("mean", "max", "min")})
        for name, acc in (("critic/advantages", self.adv), ("critic/returns", self.ret)):
            f = acc.figures(s)
            out.update({f"{name}/{k}": f[k] for k in ("mean", "max", "min")})
        if self.has_values:
            f = self.val.figures(s)
            out.update({f"critic/values/{k}": f[k] for k in ("mean", "max", "min")})
            out["critic/vf_explained_var"] = self._explained_var(s)
        L = self.resp_len[rows_sel].to(torch.float64)
        out["response_length/mean"] = _f(L.mean()) if L.numel() else None
        out["response_length/max"] = _f(L.max()) if L.numel() else None
        out["response_length/min"] = _f(L.min()) if L.numel() else None
        if self.kl_on and self.kl_row is not None:
            if s is None:
                out["actor/reward_kl_penalty"] = _f(self.kl_row.mean()) if self.R else None
                sizes = self.scopes.sizes.to(torch.float64)
                b = torch.tensor(self.betas, dtype=torch.float64)
                out["actor/reward_kl_penalty_coeff"] = _f((b * sizes).sum() / sizes.sum()) if self.R else None
            else:
                out["actor/reward_kl_penalty"] = _f(self.kls[s])
                out["actor/reward_kl_penalty_coeff"] = _f(self.betas[s])
        return out

    def _explained_var(self, s: int | None) -> float | None:
        """verl: 1 − var(G − V)/(var(G) + 1e-5), torch.var unbiased over the valid tokens."""
        d, g = self.ret_minus_val.figures(s), self.ret.figures(s)
        n = g["count"]
        if not n or n < 2 or d["count"] < 2:
            return None
        var_d = d["std"] ** 2 * d["count"] / (d["count"] - 1)
        var_g = g["std"] ** 2 * n / (n - 1)
        return _f(1.0 - var_d / (var_g + 1e-5))

    def row_advantage(self) -> torch.Tensor:
        """[R] each row's mean advantage over its valid tokens (NaN for rows with none)."""
        return torch.where(self.valid > 0, self.adv_sum / self.valid.clamp(min=1), torch.full_like(self.adv_sum, math.nan))

    def row_constant(self) -> bool:
        has = self.valid > 0
        return bool((self.adv_min[has] == self.adv_max[has]).all())

    def _group_figs(self) -> dict[str, Any]:
        g = self.groups
        out: dict[str, Any] = {}
        if g is None or g.num_groups == 0:
            return out
        sizes = g.sizes
        present = sizes > 0
        sz = sizes[present].to(torch.float64)
        G = int(present.sum())
        out["groups/count"] = G
        out["groups/size/mean"] = _f(sz.mean())
        out["groups/size/min"] = int(sz.min())
        out["groups/size/max"] = int(sz.max())
        out["groups/singleton_share"] = _f((sizes[present] == 1).to(torch.float64).mean())
        smin = torch.full((g.num_groups,), math.inf, dtype=torch.float64).scatter_reduce_(0, g.codes, self.score, "amin")
        smax = torch.full((g.num_groups,), -math.inf, dtype=torch.float64).scatter_reduce_(0, g.codes, self.score, "amax")
        multi = sizes > 1
        out["groups/all_equal_share"] = _f(((smin == smax) & multi).sum() / max(int(multi.sum()), 1))
        solved = (self.raw_score > 0).to(torch.int64)
        out["groups/solve_rate"] = _f(solved.to(torch.float64).mean()) if self.R else None
        ns = g.sum(solved)[present]
        out["groups/solved_all_share"] = _f((ns == sizes[present]).to(torch.float64).mean())
        out["groups/solved_none_share"] = _f((ns == 0).to(torch.float64).mean())
        out["groups/solved_some_share"] = _f(((ns > 0) & (ns < sizes[present])).to(torch.float64).mean())
        a = self.row_advantage()
        pos = g.sum((a > 0).to(torch.int64))[present]
        neg = g.sum((a < 0).to(torch.int64))[present]
        out["groups/adv_sign/mixed_share"] = _f(((pos > 0) & (neg > 0)).to(torch.float64).mean())
        out["groups/adv_sign/only_pos_share"] = _f(((pos > 0) & (neg == 0)).to(torch.float64).mean())
        out["groups/adv_sign/only_neg_share"] = _f(((neg > 0) & (pos == 0)).to(torch.float64).mean())
        out["groups/adv_sign/all_zero_share"] = _f(((neg == 0) & (pos == 0)).to(torch.float64).mean())
        out["groups/adv_sign/balance_mean"] = _f(((pos - neg).to(torch.float64) / sz).mean())
        return out

    def finish(self) -> dict[str, Any]:
        """``{"metrics": {...}, "per_step": [...], "histograms": {...}}`` (JSON-able)."""
        R = self.R
        allrows = torch.ones(R, dtype=torch.bool)
        metrics = self._block(allrows, None)
        L = self.resp_len
        aborted = L == 0
        na = L[~aborted].to(torch.float64)
        metrics["response_length_non_aborted/mean"] = _f(na.mean()) if na.numel() else None
        metrics["response_length_non_aborted/max"] = _f(na.max()) if na.numel() else None
        metrics["response_length_non_aborted/min"] = _f(na.min()) if na.numel() else None
        metrics["response/aborted_ratio"] = _f(aborted.to(torch.float64).mean()) if R else None
        non_aborted = ~aborted
        for name, x in (("critic/score", self.raw_score), ("critic/rewards", self.seq_reward)):
            metrics[f"{name}/std"] = self._row_figs(x, non_aborted)["std"]
            for k, v in quantiles(x[non_aborted & ~torch.isnan(x)]).items():
                metrics[f"{name}/{k}"] = v
        a = self.adv.figures(None)
        metrics["critic/advantages/std"] = a["std"]
        metrics["critic/advantages/count"] = a["count"]
        metrics["critic/advantages/nonfinite"] = a["nonfinite"]
        r = self.ret.figures(None)
        metrics["critic/returns/count"] = r["count"]
        metrics["critic/returns/nonfinite"] = r["nonfinite"]
        const = self.row_constant()
        has = (self.valid > 0) & torch.isfinite(self.adv_min)
        if const:
            q = quantiles(self.adv_min[has], self.valid[has])
            exact = True
        else:
            q = quantiles(self.reservoir.values)
            exact = self.reservoir.total <= self.reservoir.size
        metrics.update({f"critic/advantages/{k}": v for k, v in q.items()})
        metrics["critic/advantages/quantiles_exact"] = exact
        metrics.update(self._group_figs())

        per_step = []
        for s in range(self.S):
            sel = self.scopes.codes == s
            d: dict[str, Any] = {"step": self.step_values[s] if s < len(self.step_values) else None,
                                 "rows": int(sel.sum()),
                                 "kl_coef": _f(self.betas[s]) if self.kl_on and s < len(self.betas) else None,
                                 "kl": _f(self.kls[s]) if self.kl_on and s < len(self.kls) else None}
            d.update(self._block(sel, s))
            per_step.append(d)

        hist = {
            "score": histogram(self.raw_score[non_aborted & ~torch.isnan(self.raw_score)], bins=self.bins, over="rows",
                               note="sequence score (before normalisation and KL), non-aborted rows"),
            "rewards": histogram(self.seq_reward[non_aborted & ~torch.isnan(self.seq_reward)], bins=self.bins, over="rows",
                                 note="sequence reward Σ token_level_rewards, non-aborted rows"),
        }
        if const:
            hist["advantages"] = histogram(self.adv_min[has], self.valid[has], bins=self.bins, over="tokens",
                                           note="valid tokens; row-constant advantages: exact, edges from the "
                                                "exact min and max")
        else:
            hist["advantages"] = self.adv_hist.result("valid tokens; edges fixed from the first chunk with valid "
                                                      "tokens ([min, max] widened by half the span each side), "
                                                      "counts exact")
        if self.groups is not None and self.groups.num_groups:
            sizes = self.groups.sizes[self.groups.sizes > 0]
            top = int(sizes.max())
            counts = torch.bincount(sizes, minlength=top + 1)[1:]
            hist["group_size"] = {"edges": [k + 0.5 for k in range(top + 1)], "counts": counts.tolist(),
                                  "underflow": 0, "overflow": 0, "over": "groups", "exact": True,
                                  "note": "groups per size (bin k holds the groups of k rows)"}
        return {"metrics": metrics, "per_step": per_step, "histograms": hist}


# ------------------------------------------------------------------------------ pipeline glue
class RunObserver:
    """What the pipeline feeds: :class:`RunStats` plus :class:`advcli.diagnostics.Diagnostics`.

    ``RunObserver(plan, res, row, betas, kls)`` after the row table is resolved; ``add(...)`` for
    every chunk of the write (or compute-only) pass; ``finish(result)`` fills ``result.metrics``,
    ``per_step``, ``histograms``, ``diagnostics`` and adds a warning line per diagnostic of severity
    ``warning`` with a non-zero count.
    """

    def __init__(self, plan, res, row: dict, betas: list, kls: list):
        from .config import get_path
        from .diagnostics import Diagnostics, drops_masked_rewards, id_lookup

        table = res.table
        R = table.num_rows
        self.stats = RunStats(R, padded=bool(getattr(plan, "padded", False)))
        raw = getattr(res, "raw_score", None)
        if raw is None:
            raw = table.score
        self.stats.set_rows(raw_score=raw, score=table.score, scopes=res.scopes, step_values=res.step_values,
                            groups=res.groups, valid_len=table.valid_len, kl_on=plan.kl_on,
                            kl_row=row.get("kl_mean"), betas=betas, kls=kls,
                            has_values="values" in plan.token_roles)
        keys = getattr(res, "row_keys", None) or {}
        pid = plan.cmap.names.get("prompt_id") if plan.cmap.has("prompt_id") else None
        drops = drops_masked_rewards(plan.spec, plan.params, plan.cfg)
        mask_placed = bool(get_path(plan.cfg, "reward.mask_placed"))
        self.diag = Diagnostics(ids=id_lookup(keys.get(pid) if pid else None),
                                kl_cfg=dict(plan.cfg["kl"]) if plan.kl_on else None, drops=drops,
                                token_scores=plan.reward_source == "token_level_scores")
        self.diag.rows(spec=plan.spec, params=plan.params, table=table, adv_row=res.adv_row, run_dtype=plan.dtype,
                       reward_row=res.reward_row, keep=row.get("keep"), mask_placed=mask_placed)

        ncfg = plan.cfg["reward"]["normalize"]
        if (plan.reward_source != "token_level_scores" and (ncfg["mean"], ncfg["std"]) != ("none", "none")
                and getattr(res, "raw_score", None) is not None):
            self.diag.reward_normalization(lambda r: _normalize_like_pipeline(plan, res, r), res.raw_score,
                                           res.reward_row, plan.dtype, res.groups,
                                           f"reward normalisation (mean {ncfg['mean']}, std {ncfg['std']}, "
                                           f"eps {ncfg['eps']:g}) in float32: for equal non-dyadic rewards the "
                                           "group mean is an ulp off and the std a tiny residue instead of 0, "
                                           f"which eps={ncfg['eps']:g} does not absorb")

    def add(self, row0: int, layout: Ragged, mask, adv, ret, tlr, tok: dict) -> None:
        self.stats.add_chunk(row0, layout, mask, adv, ret, tlr, tok.get("values"))
        self.diag.add_chunk(row0, layout, mask, adv, tok)

    def finish(self, result) -> None:
        out = self.stats.finish()
        result.metrics = out["metrics"]
        result.per_step = out["per_step"]
        if hasattr(result, "histograms"):
            result.histograms = out["histograms"]
        diags = self.diag.finish()
        if hasattr(result, "diagnostics"):
            result.diagnostics = diags
        for d in diags:
            if d["severity"] == "warning" and d["count"]:
                rows = [e.get("row", e.get("group")) for e in d["examples"][:5]]
                result.warnings.append(d.get("summary") or f"{d['kind']}: {d['count']} {d['unit']} (e.g. {rows})")


def _normalize_like_pipeline(plan, res, raw: torch.Tensor) -> torch.Tensor:
    """The pipeline's reward post-processing (same ops, same switches) on ``raw`` in raw's dtype."""
    from .config import get_path
    from .ops.rewards import clip as clip_values, normalize_rewards

    ncfg = plan.cfg["reward"]["normalize"]
    if plan.group_by == "position":
        from .ops.blocks import block_normalize
        out = block_normalize(raw, res.scopes, int(get_path(plan.cfg, "grouping.size")), ncfg["mean"], ncfg["std"],
                              ncfg["eps"])
    else:
        out = normalize_rewards(raw, res.scopes, res.groups, ncfg["mean"], ncfg["std"], ncfg["eps"])
    return clip_values(out, get_path(plan.cfg, "reward.clip"))
