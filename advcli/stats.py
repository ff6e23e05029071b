"""Run statistics, accumulated on the way through (no second read of the input).

The collector is fed twice by the pipeline:

1. :meth:`RunStats.set_rows` once, with the resolved per-row table of the whole input (raw score,
   the estimator's row score, groups, steps, valid lengths, the per-row KL of verl's
   ``apply_kl_penalty`` and the β used by each step);
2. :meth:`RunStats.add_chunk` for every chunk of the write pass (advantages, returns, token-level
   rewards, values, mask, the chunk's layout), or :meth:`RunStats.add_row_chunk` (the rows'
   advantage and return instead of the tokens') when they are row-constant (see "How" below).

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

- ``critic/{advantages,returns}/count`` (finite valid tokens; mean/std/min/max are over these) and
  ``.../nonfinite`` (valid tokens holding NaN/±inf), ``critic/rewards/std``, ``critic/score/std``,
  ``critic/advantages/std`` (population std).
- quantiles ``critic/{score,rewards,advantages}/p{1,5,25,50,75,95,99}`` (numpy's default linear
  interpolation). Row quantities (score, rewards) are exact, over the non-aborted rows. Token
  advantages (the finite valid ones) are exact whenever every row's finite valid advantages are one
  value (every row-level estimator, whitened or not): the row values weighted by their token counts
  give the token distribution. Otherwise (GAE, REINFORCE++, ...) they come from a fixed sample of
  :data:`RESERVOIR` valid tokens drawn by ordinal (:func:`sample_ordinals`): the run's V valid tokens,
  in input order, are cut into RESERVOIR strata of V/RESERVOIR (±1) consecutive tokens and each
  stratum gives the token at an offset set by a fixed hash of the stratum number (seed :data:`SEED`)
  — a stratified sample that does not depend on ``--chunk-rows``, non-finite values left out, and
  exact when the run has at most RESERVOIR valid tokens. ``critic/advantages/quantiles_exact`` says
  which.
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
and ``group_size`` (integer bins). Advantages (finite valid tokens): when they are row-constant,
exact counts over equal bins between the exact min and max, from the row table; otherwise the edges
are fixed from the run's first RESERVOIR finite valid tokens (their [min, max] widened by half their
span on each side; all of them when the run has fewer) and every token is counted exactly against
those edges — a value in bin k when ``e_k <= x < e_k+1``, the last bin closed, as numpy —, values
outside them in ``underflow``/``overflow``. Neither depends on ``--chunk-rows``.

How (cost): the token sums are taken per row in float64 (each row reduced on its own), then added to
each scope's totals row by row in input order, so no figure depends on how rows are cut into chunks.
For row-level estimators :class:`advcli.pipeline.observe.RunObserver` feeds the rows' final values instead of the tokens
(:meth:`RunStats.add_row_chunk`): the valid-token counts of the row table weight them, and the only
per-token work left is Σ token_level_rewards per row.

Memory: a few float64/int64 entries per row (like the row table) plus per-step accumulators, the
sample and the histogram counts (and, until the histogram's edges are fixed, up to one chunk of
advantages); nothing grows with the number of tokens.
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
def row_sums64(offsets: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """float64 Σ per row of a flat token tensor (any device, any float dtype), on the CPU."""
    return Ragged(offsets.to("cpu")).row_sum(x.detach().to("cpu", torch.float64))


def _rows_constant(x: torch.Tensor, voff: torch.Tensor) -> bool:
    """Do all the values of each row of ``x`` (cut at ``voff``) compare equal? One comparison of
    neighbours, the pairs that straddle a row boundary excused."""
    n = x.numel()
    if n < 2:
        return True
    neq = x[1:] != x[:-1]
    b = voff[1:-1] - 1  # neq[b]: last token of a row vs first of the next
    neq[b[(b >= 0) & (b < n - 1)]] = False
    return not bool(neq.any())


class _Partials:
    """One chunk's per-row partial figures of the values of its valid tokens (float64 / int64 [B]):
    Σ and Σx² of the finite values, their count, the count of non-finite values, min and max of the
    finite values (+inf / −inf where a row has none) and ``raw_sum`` = Σ of all values (NaN
    propagates: a row's mean advantage is NaN when one of its tokens is). ``rows_minmax`` false:
    ``mn``/``mx`` are the chunk's (one element) instead of per row. ``nonconstant``: some row holds
    two different finite values (then ``mn``/``mx`` need not be per row)."""

    __slots__ = ("all_finite", "count", "mn", "mx", "nonconstant", "nonfinite", "raw_sum", "rows_minmax", "sum",
                 "sumsq")

    @staticmethod
    def of_tokens(x: torch.Tensor, voff: torch.Tensor, rows_minmax: bool, check_const: bool = False) -> _Partials:
        """``x`` float64 [n]: the valid tokens' values in order; ``voff`` [B+1]: where each row starts.
        ``check_const``: find out whether every row is constant and, if so, give per-row min/max
        (its value) whatever ``rows_minmax`` says."""
        p = _Partials()
        p.nonconstant = False
        rows = Ragged(voff)  # the valid tokens, row by row
        s = rows.row_reduce(x, "sum")
        p.raw_sum = s
        cnt = voff[1:] - voff[:-1]
        if bool(torch.isfinite(s.sum())):  # one reduction: every value finite (the common case)
            p.all_finite = True
            p.sum, p.count, p.nonfinite = s, cnt, torch.zeros_like(cnt)
            p.sumsq = rows.row_reduce(x * x, "sum")
            if check_const:
                if _rows_constant(x, voff):
                    has = cnt > 0
                    first = x[torch.clamp(voff[:-1], max=max(x.numel() - 1, 0))] if x.numel() else \
                        torch.zeros(cnt.numel(), dtype=x.dtype)
                    p.mn = torch.where(has, first, torch.full_like(first, math.inf))
                    p.mx = torch.where(has, first, torch.full_like(first, -math.inf))
                    p.rows_minmax = True
                    return p
                p.nonconstant = True
            p.rows_minmax = rows_minmax
            if rows_minmax:
                p.mn, p.mx = rows.row_reduce(x, "min"), rows.row_reduce(x, "max")
            elif x.numel():
                mn, mx = torch.aminmax(x)
                p.mn, p.mx = mn.reshape(1), mx.reshape(1)
            else:
                p.mn = torch.full((1,), math.inf, dtype=torch.float64)
                p.mx = torch.full((1,), -math.inf, dtype=torch.float64)
            return p
        p.all_finite = False
        fin = torch.isfinite(x)
        xf = torch.where(fin, x, torch.zeros_like(x))
        p.sum = rows.row_reduce(xf, "sum")
        p.sumsq = rows.row_reduce(xf * xf, "sum")
        p.count = rows.row_reduce(fin.to(torch.float64), "sum").to(torch.int64)
        p.nonfinite = cnt - p.count
        p.mn = rows.row_reduce(torch.where(fin, x, torch.full_like(x, math.inf)), "min")
        p.mx = rows.row_reduce(torch.where(fin, x, torch.full_like(x, -math.inf)), "max")
        p.rows_minmax = True
        p.nonconstant = bool(((p.mn != p.mx) & (p.count > 0)).any())
        return p

    @staticmethod
    def of_rows(v: torch.Tensor, n: torch.Tensor) -> _Partials:
        """Rows whose ``n`` [B] valid tokens all hold the value ``v`` [B] (float64): the same figures
        as :meth:`of_tokens` on the expanded tokens (Σ = v·n and Σx² = v²·n in one rounding)."""
        p = _Partials()
        p.rows_minmax = True
        n = n.to(torch.int64)
        has = n > 0
        fin = torch.isfinite(v)
        nf = n.to(torch.float64)
        zero = torch.zeros_like(v)
        p.raw_sum = torch.where(has, v * nf, zero)
        ok = fin & has
        p.sum = torch.where(ok, v * nf, zero)
        p.sumsq = torch.where(ok, v * v * nf, zero)
        p.count = torch.where(fin, n, torch.zeros_like(n))
        p.nonfinite = n - p.count
        p.mn = torch.where(ok, v, torch.full_like(v, math.inf))
        p.mx = torch.where(ok, v, torch.full_like(v, -math.inf))
        p.all_finite = bool(fin[has].all())
        p.nonconstant = False
        return p


class _ScopeAcc:
    """count, Σx, Σx², min, max of finite values per scope (float64), plus non-finite counts.

    Fed with per-row partials (:class:`_Partials`); each scope's sums add the row sums one row at a
    time in input order, so the totals do not depend on how rows are cut into chunks."""

    def __init__(self, num_scopes: int):
        S = max(num_scopes, 1)
        self.count = torch.zeros(S, dtype=torch.int64)
        self.sum = torch.zeros(S, dtype=torch.float64)
        self.sumsq = torch.zeros(S, dtype=torch.float64)
        self.min = torch.full((S,), math.inf, dtype=torch.float64)
        self.max = torch.full((S,), -math.inf, dtype=torch.float64)
        self.nonfinite = torch.zeros(S, dtype=torch.int64)

    def add(self, p: _Partials, scope: torch.Tensor) -> None:
        """``scope`` int64 [B]: each row's scope."""
        self.count.index_add_(0, scope, p.count)
        self.nonfinite.index_add_(0, scope, p.nonfinite)
        self.sum.index_add_(0, scope, p.sum)
        self.sumsq.index_add_(0, scope, p.sumsq)
        if p.rows_minmax:
            self.min.scatter_reduce_(0, scope, p.mn, reduce="amin")
            self.max.scatter_reduce_(0, scope, p.mx, reduce="amax")
        else:  # one scope, the chunk's min and max
            assert self.min.numel() == 1
            self.min = torch.minimum(self.min, p.mn)
            self.max = torch.maximum(self.max, p.mx)

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


def sample_ordinals(total: int, size: int, seed: int = SEED) -> torch.Tensor:
    """The sorted ordinals (0-based, among a run's ``total`` valid tokens in input order) that the
    advantage sample keeps: all of ``0 .. size−1`` when ``total <= size``; otherwise ``size`` strata
    ``[⌊j·total/size⌋, ⌊(j+1)·total/size⌋)`` and from stratum j the token at offset
    ``hash_keys(j, seed) mod (stratum width)``."""
    if total <= size:
        return torch.arange(size, dtype=torch.int64)
    j = torch.arange(size, dtype=torch.int64)
    lo = j * total // size
    width = (j + 1) * total // size - lo
    return lo + torch.remainder(hash_keys(j, seed), width)


class _Sample:
    """A fixed sample of the run's valid-token advantages, drawn by ordinal (see
    :func:`sample_ordinals`): each chunk costs a search in the sorted ordinals plus one gather of the
    tokens that fall in it, whatever the chunk size; non-finite values are left out."""

    def __init__(self, size: int = RESERVOIR, seed: int = SEED):
        self.size, self.seed = size, seed
        self.ordinals: torch.Tensor | None = None
        self.expected = 0
        self.parts: list[torch.Tensor] = []
        self.total = 0  # valid tokens seen

    def prepare(self, total: int) -> None:
        """``total``: the run's number of valid tokens (known from the row pass)."""
        self.expected = int(total)
        self.ordinals = sample_ordinals(self.expected, self.size, self.seed)

    def add(self, x: torch.Tensor) -> None:
        """``x`` float64: the next valid tokens' values, in input order."""
        if self.ordinals is None:
            self.prepare(0)
        base, n = self.total, x.numel()
        self.total += n
        lo, hi = torch.searchsorted(self.ordinals, torch.tensor([base, base + n])).tolist()
        if hi > lo:
            v = x[self.ordinals[lo:hi] - base]
            self.parts.append(v[torch.isfinite(v)])

    @property
    def values(self) -> torch.Tensor:
        return torch.cat(self.parts) if self.parts else torch.zeros(0, dtype=torch.float64)

    @property
    def exact(self) -> bool:
        """Every valid token is in the sample."""
        return self.expected <= self.size and self.total <= self.size


class _StreamHist:
    """Exact token counts over :data:`BINS` equal bins whose edges are fixed from the run's first
    ``seed_tokens`` finite valid tokens (see the module docstring); the tokens before that are held."""

    def __init__(self, bins: int = BINS, seed_tokens: int = RESERVOIR):
        self.bins = bins
        self.seed_tokens = seed_tokens
        self.edges: torch.Tensor | None = None
        self.linear = False  # torch.histogram (linear estimate + local search) gives the same bins
        self.counts = torch.zeros(bins, dtype=torch.int64)
        self.under = 0
        self.over = 0
        self.pending: list[torch.Tensor] = []
        self.npending = 0

    def add(self, x: torch.Tensor) -> None:
        """``x`` float64: the next finite valid tokens' values, in input order."""
        if x.numel() == 0:
            return
        if self.edges is None:
            self.pending.append(x)
            self.npending += x.numel()
            if self.npending >= self.seed_tokens:
                self._fix()
            return
        self._count(x)

    def _fix(self) -> None:
        x = torch.cat(self.pending)
        self.pending, self.npending = [], 0
        lo, hi = (float(t) for t in torch.aminmax(x[:self.seed_tokens]))
        span = hi - lo if hi > lo else max(abs(hi), 1.0)
        self.edges = torch.linspace(lo - span / 2, hi + span / 2, self.bins + 1, dtype=torch.float64)
        e0, e1 = float(self.edges[0]), float(self.edges[-1])
        # torch.histogram maps a value to its bin by (x − e0)/(e1 − e0)·bins, then corrects by one bin
        # either way against these same linspace edges: exact unless a bin spans only a few ulps
        width_ok = (e1 - e0) / self.bins > 1e-9 * max(abs(e0), abs(e1))
        if width_ok and math.isfinite(e1 - e0):
            _, e = torch.histogram(self.edges[:1], bins=self.bins, range=(e0, e1))
            self.linear = bool(torch.equal(e, self.edges))
        self._count(x)

    def _count(self, x: torch.Tensor) -> None:
        e = self.edges
        e0, e1 = float(e[0]), float(e[-1])
        under = int((x < e0).sum())
        if self.linear:
            h, _ = torch.histogram(x, bins=self.bins, range=(e0, e1))
            h = h.to(torch.int64)
            inside = int(h.sum())
        else:
            keep = (x >= e0) & (x <= e1)
            xi = x[keep]
            inside = xi.numel()
            h = torch.bincount(torch.clamp(torch.bucketize(xi, e, right=True) - 1, 0, self.bins - 1),
                               minlength=self.bins)
        self.counts += h
        self.under += under
        self.over += x.numel() - inside - under

    def result(self, note: str) -> dict[str, Any]:
        if self.edges is None and self.pending:
            self._fix()
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
        self.adv_sum = torch.zeros(R, dtype=torch.float64)  # Σ of the valid advantages (NaN propagates)
        self.adv_min = torch.full((R,), math.inf, dtype=torch.float64)  # of the finite valid advantages
        self.adv_max = torch.full((R,), -math.inf, dtype=torch.float64)
        self.adv_finite = torch.zeros(R, dtype=torch.int64)  # how many valid advantages are finite
        self.adv_nonconstant = False  # a row with two different finite valid advantages was seen
        self.reservoir = _Sample(reservoir)
        self.adv_hist = _StreamHist(bins, seed_tokens=reservoir)
        self.rows_set = False
        self.scopes: GroupIndex | None = None

    # ------------------------------------------------------------------------------- row feed
    def set_rows(self, *, raw_score: torch.Tensor, score: torch.Tensor, scopes: GroupIndex, step_values: list,
                 groups: GroupIndex | None, valid_len: torch.Tensor, kl_on: bool = False,
                 kl_row: torch.Tensor | None = None, betas: list[float] | None = None,
                 kls: list[float] | None = None, has_values: bool = False) -> None:
        """The per-row table of the whole input (CPU tensors, [R] each) and the per-step KL figures.
        ``valid_len`` (Σ mask per row) also fixes which valid tokens the advantage sample takes."""
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
        self.reservoir.prepare(int(self.valid_len.sum()))
        self.rows_set = True

    # ------------------------------------------------------------------------------ chunk feed
    def _row_scope(self, rows: slice, B: int) -> torch.Tensor:
        return self.scopes.codes[rows] if self.scopes is not None else torch.zeros(B, dtype=torch.int64)

    def _rows_common(self, rows: slice, layout: Ragged, m: torch.Tensor | None, tlr: torch.Tensor,
                     sel: torch.Tensor | None = None, voff: torch.Tensor | None = None) -> None:
        """seq_reward and resp_len of the chunk's rows (``m``: mask > 0 on the CPU, needed when padded)."""
        self.seq_reward[rows] = row_sums64(layout.offsets, tlr)
        if self.padded:
            if sel is None:
                sel = torch.nonzero(m, as_tuple=True)[0]
                voff = torch.searchsorted(sel, layout.offsets)
            n = voff[1:] - voff[:-1]
            last = sel[torch.clamp(voff[1:] - 1, min=0)] if sel.numel() else torch.zeros_like(n)
            self.resp_len[rows] = torch.where(n > 0, last - layout.offsets[:-1] + 1, torch.zeros_like(n))
        else:
            self.resp_len[rows] = layout.lengths

    def add_chunk(self, row0: int, layout: Ragged, mask: torch.Tensor, adv: torch.Tensor, ret: torch.Tensor,
                  tlr: torch.Tensor, values: torch.Tensor | None = None) -> None:
        """One chunk of the write pass: rows ``row0 .. row0 + B − 1`` (flat tensors on any device),
        token by token: the valid tokens are found once, each quantity is reduced per row (float64)
        and the row figures are added to the scopes in row order."""
        layout = layout.to("cpu")
        B = layout.num_rows
        rows = slice(row0, row0 + B)
        m = mask.detach().to("cpu") > 0
        # the valid tokens' flat indices, found once and gathered with; voff[i]: valid tokens before row i
        sel = torch.nonzero(m, as_tuple=True)[0]
        voff = torch.searchsorted(sel, layout.offsets)
        self._rows_common(rows, layout, m, tlr, sel, voff)
        self.valid[rows] = voff[1:] - voff[:-1]
        scope = self._row_scope(rows, B)
        # index_select, not x[sel]: the generic indexing kernel is ~3x slower for a flat gather
        av = torch.index_select(adv.detach().to("cpu"), 0, sel).to(torch.float64)
        one = self.S == 1
        pa = _Partials.of_tokens(av, voff, rows_minmax=not one, check_const=not self.adv_nonconstant)
        self.adv.add(pa, scope)
        self.adv_sum[rows] = pa.raw_sum
        self.adv_finite[rows] = pa.count
        self.adv_nonconstant |= pa.nonconstant
        if not self.adv_nonconstant:  # per-row min/max only matter while the run may be row-constant
            self.adv_min[rows], self.adv_max[rows] = pa.mn, pa.mx
        rv = torch.index_select(ret.detach().to("cpu"), 0, sel).to(torch.float64)
        self.ret.add(_Partials.of_tokens(rv, voff, rows_minmax=not one), scope)
        if values is not None and self.has_values:
            vv = torch.index_select(values.detach().to("cpu"), 0, sel).to(torch.float64)
            self.val.add(_Partials.of_tokens(vv, voff, rows_minmax=not one), scope)
            self.ret_minus_val.add(_Partials.of_tokens(rv - vv, voff, rows_minmax=not one), scope)
        finite = av if pa.all_finite else av[torch.isfinite(av)]
        self.reservoir.add(av)
        self.adv_hist.add(finite)

    def add_row_chunk(self, row0: int, layout: Ragged, mask: torch.Tensor | None, tlr: torch.Tensor,
                      adv_row: torch.Tensor, ret_row: torch.Tensor) -> None:
        """One chunk whose every valid token of row i holds the advantage ``adv_row[i]`` and the return
        ``ret_row[i]`` (row-level estimators; see :class:`advcli.pipeline.observe.RunObserver`): the figures of :meth:`add_chunk`
        from the rows, weighted by their valid-token counts (the row table's ``valid_len``). Per token
        only Σ token_level_rewards per row (and, for padded lists, the last mask=1 position)."""
        layout = layout.to("cpu")
        B = layout.num_rows
        rows = slice(row0, row0 + B)
        m = mask.detach().to("cpu") > 0 if self.padded else None
        self._rows_common(rows, layout, m, tlr)
        n = self.valid_len[rows]
        self.valid[rows] = n
        scope = self._row_scope(rows, B)
        pa = _Partials.of_rows(adv_row.detach().to("cpu", torch.float64), n)
        self.adv.add(pa, scope)
        self.adv_sum[rows] = pa.raw_sum
        self.adv_min[rows], self.adv_max[rows], self.adv_finite[rows] = pa.mn, pa.mx, pa.count
        self.ret.add(_Partials.of_rows(ret_row.detach().to("cpu", torch.float64), n), scope)

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
        """Every row's finite valid advantages are one value (always so for row-level estimators)."""
        if self.adv_nonconstant:
            return False
        has = self.adv_finite > 0
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
        has = self.adv_finite > 0
        if const:
            q = quantiles(self.adv_min[has], self.adv_finite[has])
            exact = True
        else:
            q = quantiles(self.reservoir.values)
            exact = self.reservoir.exact
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
            hist["advantages"] = histogram(self.adv_min[has], self.adv_finite[has], bins=self.bins, over="tokens",
                                           note="valid tokens; row-constant advantages: exact, edges from the "
                                                "exact min and max")
        else:
            hist["advantages"] = self.adv_hist.result(
                f"valid tokens; edges fixed from the run's first {self.adv_hist.seed_tokens} finite valid tokens "
                "([min, max] widened by half the span each side), counts exact")
        if self.groups is not None and self.groups.num_groups:
            sizes = self.groups.sizes[self.groups.sizes > 0]
            top = int(sizes.max())
            counts = torch.bincount(sizes, minlength=top + 1)[1:]
            hist["group_size"] = {"edges": [k + 0.5 for k in range(top + 1)], "counts": counts.tolist(),
                                  "underflow": 0, "overflow": 0, "over": "groups", "exact": True,
                                  "note": "groups per size (bin k holds the groups of k rows)"}
        return {"metrics": metrics, "per_step": per_step, "histograms": hist}


