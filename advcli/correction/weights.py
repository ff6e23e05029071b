"""Rollout correction (training–inference mismatch): IS weights, rejection sampling, metrics.

Reproduces verl's decoupled-mode correction, ``verl/trainer/ppo/rollout_corr_helper.py`` @1dda039b
(``compute_rollout_correction_weights`` L522-657, ``compute_rollout_rejection_mask`` L197-413, the
metrics of ``compute_is_metrics`` L660-783, ``compute_rs_metrics`` L416-519 and
``compute_offpolicy_metrics`` L904-1010), on ragged chunks. Notation, per token of row i::

    lr   = old_log_probs − rollout_log_probs            (float32, every position)
    m    = response_mask (0/1);  C(x) = clamp(x, −20, 20)  (verl's SAFETY_BOUND)
    S_i  = Σ_t lr·m                                      (verl masked_sum: lr at m=0 counts as 0)

IS weights (``level``): ``token``: raw = exp(C(lr))·m; ``sequence``: raw = exp(C(S_i))·m. Then TIS
``w = min(raw, upper)`` (no lower clamp) or IcePop ``w = raw if lower ≤ raw ≤ upper else 0``. With
batch normalisation, ``w ← w/μ`` when μ > 1e-8, μ over the step: token: Σw·m/(Σm + 1e-8); sequence:
the mean over rows with Σm > 0 of Σ_t w·m/(Σm + 1e-8). Weights are **not** zeroed at rejected tokens.

Rejection (``rs``, all options ANDed): per token, with l = C(lr): k1 = −l, k2 = ½l², k3 = eˡ − 1 − l;
``token_kX`` tests each token, ``seq_sum_kX`` Σ kX·m, ``seq_mean_kX`` Σ kX·m/(Σm + 1e-8), ``seq_max_kX``
the max over m=1 tokens (0 for an empty row); kept iff ``lo ≤ stat ≤ hi`` (inclusive; ``lo`` None:
no lower test). For k1 verl passes ``lo, hi = log(lower), log(upper)``: the bounds act on
−lr = log(π_rollout/π_train). The mask the estimator sees is ``m · Π_o keep_o``.

Everything a step's metrics need is reduced per row inside each chunk (rows are whole in a chunk),
then added per step in float64 (:class:`MetricSums`), so neither the weights, the mask nor the
metrics depend on the chunking. The metric formulas are in :func:`step_metrics`.

Bypass mode (IS/RS inside the actor loss, against the *current* policy) cannot be recomputed from a
dump and is not here.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..lazy_torch import torch
from ..ops.ragged import Ragged

SAFETY_BOUND = 20.0  # rollout_corr_helper.py L75
RS_OPTIONS = ("token_k1", "token_k2", "token_k3", "seq_sum_k1", "seq_sum_k2", "seq_sum_k3", "seq_mean_k1",
              "seq_mean_k2", "seq_mean_k3", "seq_max_k2", "seq_max_k3")  # L77-89
# verl 0.6.1-0.7.0's rollout_rs levels (ratio bounds; rollout_corr_helper.py @v0.7.0 L120-127) -> aggregation
LEGACY_RS = {"token": "token", "sequence": "sum", "geometric": "mean"}


@dataclass(frozen=True)
class RSOption:
    """One rejection criterion: ``name`` (verl's option name, used in the metric names), the
    per-token divergence ``kind`` (k1/k2/k3), how it is aggregated per row (``token``, ``sum``,
    ``mean``, ``max``) and the inclusive bounds on that statistic (``lo`` None: no lower test)."""

    name: str
    kind: str
    agg: str
    lo: float | None
    hi: float

    @staticmethod
    def parse_name(name: str) -> tuple[str, str]:
        """``seq_mean_k3`` -> (``k3``, ``mean``)."""
        kind = name[-2:]
        agg = "token" if name.startswith("token_") else name.split("_")[1]
        return kind, agg


@dataclass(frozen=True)
class Gate:
    """OpenRLHF's IS correction (``algo.advantage.is_correction_*``, release 0.11.2, #1339): the statistic
    ``stat`` (ratio, binary_kl, tv) read per ``level`` (token, seq), and what a unit outside ``[low, high]``
    gets (``mode``: mask, clip). See :func:`gate_chunk`."""

    level: str
    mode: str
    stat: str
    low: float
    high: float


@dataclass(frozen=True)
class CorrectionSpec:
    level: str | None = None  # None (no weights), "token" or "sequence"
    upper: float | None = None  # TIS clamp, or IcePop's upper bound
    lower: float | None = None  # IcePop's lower bound (None: TIS)
    batch_normalize: bool = False
    rs: tuple[RSOption, ...] = ()
    gate: Gate | None = None  # OpenRLHF's coefficient instead of verl's weights and rejection
    # verl before 0.8.0 (see :func:`_legacy_is_rows`): the IS metrics of the weights before truncation, std and
    # ESS on them clamped to [metric_lower, upper] (0.6.0-0.7.1); the sequence batch mean over every row, an
    # empty row's 0 included (0.6.1); the per-token veto (0.6.0-0.7.0: a row with a mask=1 token whose log-ratio
    # is below log(veto) is rejected; its two metrics, 0 when off, from 0.6.1); 0.6.0's mismatch_helper: the
    # veto and the mask mode zero the weights and the mask stays (``zero_weights``), the weights are computed
    # for the metrics only unless algorithm.rollout_is (``write_weights``), the metrics are named mismatch/*
    raw_metrics: bool = False
    rows_applied: bool = False  # verl 0.8.0: seq_fraction_high/low of the applied weights' row means
    lower_metrics: float | None = None  # 0.6.0: rollout_is_threshold_lower in the metrics of truncate mode
    norm_all_rows: bool = False
    veto: float | None = None
    veto_metrics: bool = False
    zero_weights: bool = False
    write_weights: bool = True
    names: str = "rollout_corr"

    @property
    def weights(self) -> bool:
        return self.gate is not None or (self.level is not None and self.upper is not None)

    @property
    def weight_quantiles(self) -> bool:
        """verl 0.6.0's ``rollout_is_p25 ... p99`` (mismatch_helper.py compute_is_metrics): the weights' quantiles,
        which later releases dropped."""
        return self.names == "mismatch" and self.raw_metrics and self.weights

    @property
    def histogram(self) -> bool:
        """verl's weights lie in [0, upper]: the report's exact histogram of them (OpenRLHF's mask mode
        keeps unbounded ratios: none)."""
        return self.gate is None and self.weights and self.write_weights

    @property
    def corrects_mask(self) -> bool:
        """The estimator sees the corrected mask (verl); OpenRLHF's coefficient acts in the loss only."""
        return self.gate is None

    @property
    def icepop(self) -> bool:
        return self.lower is not None

    @property
    def metric_lower(self) -> float:
        """The lower threshold of the IS metrics: 1/upper for TIS, lower for IcePop (L700-702)."""
        if self.lower_metrics is not None:
            return self.lower_metrics
        return 1.0 / self.upper if self.lower is None else self.lower


@dataclass
class ChunkCorrection:
    """One chunk's result: ``weights`` (before batch normalisation; None without IS), ``mask`` (the
    response mask after rejection, float 0/1), and the per-row partial sums of the metrics."""

    weights: torch.Tensor | None
    mask: torch.Tensor
    rows: dict[str, tuple[str, torch.Tensor]] = field(default_factory=dict)  # name -> (sum|max|min, [B] f64)
    # spec.weight_quantiles: the weights before truncation at the mask=1 tokens (flat, row by row) and how many
    # each row has (what compute_is_metrics takes its quantiles of)
    raw: torch.Tensor | None = None
    raw_counts: torch.Tensor | None = None


def _clamp(x: torch.Tensor) -> torch.Tensor:
    return x.clamp(-SAFETY_BOUND, SAFETY_BOUND)


def divergences(lr: torch.Tensor) -> dict[str, torch.Tensor]:
    """k1, k2, k3 per token of C(lr) (L254-257)."""
    ls = _clamp(lr)
    return {"k1": -ls, "k2": 0.5 * ls ** 2, "k3": torch.exp(ls) - 1.0 - ls}


def correct_chunk(spec: CorrectionSpec, layout: Ragged, mask: torch.Tensor, old_lp: torch.Tensor,
                  rollout_lp: torch.Tensor, metrics: bool = True) -> ChunkCorrection:
    """IS weights, rejection mask and (``metrics``) per-row metric partials of one chunk.

    ``mask`` is the input response mask (float 0/1, the log-probs' dtype); nothing is normalised
    here (the step factor comes from :func:`norm_factor` over the whole step)."""
    if spec.gate is not None:
        return gate_chunk(spec.gate, layout, mask, old_lp, rollout_lp, metrics)
    dt = old_lp.dtype
    m = mask.to(dt)
    mb = m > 0
    lr = old_lp - rollout_lp
    zero = torch.zeros((), dtype=dt, device=lr.device)
    n_int = layout.count_per_row(mb)
    n = n_int.to(dt)
    denom = n + 1e-8  # masked_mean's Σm + 1e-8 per row, in the working dtype

    def msum(x: torch.Tensor) -> torch.Tensor:  # verl masked_sum over each row
        return layout.row_sum(torch.where(mb, x, zero) * m)

    S = msum(lr)  # Σ_t lr·m per row
    rows: dict[str, tuple[str, torch.Tensor]] = {}

    def put(name: str, how: str, v: torch.Tensor) -> None:
        if metrics:
            rows[name] = (how, v.detach().to(torch.float64))

    def tok(name: str, x: torch.Tensor) -> None:  # Σ_t x·m per row (token-level masked sums)
        put(name, "sum", msum(x.to(dt)))

    valid_row = n_int > 0
    put("n", "sum", n)
    put("rows", "sum", torch.ones_like(n))
    put("valid_rows", "sum", valid_row.to(dt))
    if metrics:  # mask=1 tokens the engine gave probability 0 (vLLM can): lr = +inf, clamped below like verl
        put("rollout_neg_inf", "sum", layout.count_per_row(torch.isneginf(rollout_lp) & mb).to(dt))

    # ------------------------------------------------------------------ IS weights (L568-603)
    weights = None
    quantile_input = (None, None)
    if spec.weights:
        stat = S / denom if spec.level == "geometric" else S  # geometric: verl 0.6.0's masked mean log-ratio
        if spec.level == "token":
            raw = torch.exp(_clamp(lr)) * m
        else:
            raw = layout.broadcast(torch.exp(_clamp(stat))) * m
        if spec.icepop:
            weights = torch.where((raw >= spec.lower) & (raw <= spec.upper), raw, torch.zeros_like(raw))
        else:
            weights = raw.clamp(max=spec.upper)
        if metrics and spec.weight_quantiles:
            quantile_input = (raw[mb], n_int)
        if metrics and spec.raw_metrics:
            _legacy_ratio_rows("L:is:", spec.level, layout, put, tok, msum, mb, raw, stat, spec.upper,
                               spec.metric_lower, denom, token_fractions=spec.level == "geometric")
            _norm_rows(layout, put, tok, msum, mb, weights, denom)
            if spec.icepop and spec.zero_weights:  # 0.6.0 mask mode: the band's rejections (weights only)
                out_band = 1 - ((raw >= spec.lower) & (raw <= spec.upper)).to(dt)
                r_row = torch.exp(_clamp(stat))
                rej_row = None if spec.level == "token" else ~((r_row >= spec.lower) & (r_row <= spec.upper))
                _rejected_rows("L:ism:", layout, put, tok, mb, out_band, rej_row)
        elif metrics:
            _is_rows(spec, layout, put, tok, msum, m, mb, raw, weights, S, denom)
    # ------------------------------------------------------------------- rejection (L259-406)
    keep_all = torch.ones_like(m)
    if spec.rs:
        div = divergences(lr)
        for opt in spec.rs:
            if opt.kind == "ratio":  # verl 0.6.1-0.7.0's rollout_rs token/sequence/geometric (ratio bounds)
                keep_all = keep_all * _legacy_rs(opt, layout, put, tok, msum, mb, lr, S, denom, metrics)
                continue
            k = div[opt.kind]
            if opt.agg == "token":
                stat = k
                keep = stat <= opt.hi
                if opt.lo is not None:
                    keep = keep & (stat >= opt.lo)
                seq = msum(stat) / denom  # per-row values the metrics read (L455-456)
            else:
                if opt.agg == "sum":
                    seq = msum(k)
                elif opt.agg == "mean":
                    seq = msum(k) / denom
                else:  # max over m=1 tokens, 0 for an empty row (L278-283)
                    seq = layout.row_reduce(torch.where(mb, k, torch.full_like(k, -math.inf)), "max")
                    seq = torch.where(seq == -math.inf, torch.zeros_like(seq), seq)
                keep_row = seq <= opt.hi
                if opt.lo is not None:
                    keep_row = keep_row & (seq >= opt.lo)
                keep = layout.broadcast(keep_row)
                stat = None
            keep_f = keep.to(dt)
            keep_all = keep_all * keep_f
            if metrics:
                _rs_rows(opt, layout, put, tok, msum, m, mb, stat, seq, keep_f, n, valid_row)
        if metrics and not any(o.kind == "ratio" for o in spec.rs):
            tok("rs_rejected", 1 - keep_all)
            put("rs_rows_hit", "sum", (layout.count_per_row(mb & (keep_all <= 0.5)) > 0).to(dt))
    # ------------------------------------------------- the per-token veto (verl 0.6.0-0.7.0)
    if spec.veto is not None:
        log_v = float(torch.log(torch.tensor(spec.veto, dtype=torch.float32)))  # torch.log(torch.tensor(v))
        cat = mb & (lr < log_v)  # the unclamped log-ratio
        vetoed = layout.count_per_row(cat) > 0
        keep_v = layout.broadcast(~vetoed).to(dt)
        if spec.zero_weights:  # 0.6.0: the weights of a vetoed row are 0, the mask stays
            weights = weights * keep_v if weights is not None else None
        else:
            keep_all = keep_all * keep_v
        tok("veto_tok", cat.to(dt))
        put("veto_rows", "sum", vetoed.to(dt))
    # ------------------------------------------------------------------ off-policy (L904-1010)
    if metrics:
        mean_old = msum(old_lp) / denom
        mean_roll = msum(rollout_lp) / denom
        diff = mean_roll - mean_old
        put("train_ppl", "sum", torch.exp(-mean_old))
        put("train_log_ppl", "sum", -mean_old)
        put("roll_ppl", "sum", torch.exp(-mean_roll))
        put("roll_log_ppl", "sum", -mean_roll)
        put("lpd", "sum", diff)
        put("lpd_abs", "sum", diff.abs())
        put("lpd_max", "max", diff)
        put("lpd_min", "min", diff)
        put("ppl_ratio", "sum", torch.exp(diff))
        tok("kl", rollout_lp - old_lp)
        tok("k3_kl", torch.exp(lr) - lr - 1)  # unclamped (L962-963)
        tok("chi2_tok", torch.exp(_clamp(lr)).square())
        put("chi2_seq", "sum", torch.exp(2.0 * _clamp(S)))
    return ChunkCorrection(weights=weights, mask=m * keep_all, rows=rows, raw=quantile_input[0],
                           raw_counts=quantile_input[1])


QUANTILES = (25, 50, 75, 95, 99)  # verl 0.6.0's rollout_is_pNN (mismatch_helper.py @v0.6.0 L363-367)
QUANTILE_STEP_LIMIT = 2 ** 24  # torch.quantile's largest input: verl 0.6.0 itself raises beyond it
QUANTILE_OPEN_LIMIT = 2 ** 26  # weights kept at once over the steps not yet complete (256 MiB in float32)


class WeightQuantiles:
    """verl 0.6.0's ``rollout_is_p25 ... p99`` per step, exactly: ``torch.quantile(flat_weights, q)`` (linear
    interpolation, in the weights' dtype) of the step's weights before truncation at its mask=1 tokens
    (``rollout_is_weights[response_mask.bool()]``, mismatch_helper.py @v0.6.0 L357-367; at the sequence and
    geometric levels each row's weight stands on each of its mask=1 tokens).

    A quantile needs every weight of its step at once. Memory stays bounded: a step's weights are kept only
    while the step is open (its rows are counted as they pass; once all are seen its quantiles are taken and
    the weights dropped), so a dump whose steps are contiguous holds one step at a time. A step of more than
    :data:`QUANTILE_STEP_LIMIT` mask=1 tokens gets none (torch.quantile refuses such an input: verl 0.6.0 stops
    there), and once the open steps together hold more than :data:`QUANTILE_OPEN_LIMIT` weights the open steps
    get none; :attr:`notes` says why. No approximate figure is printed."""

    def __init__(self, scope_sizes: torch.Tensor):
        self.left = scope_sizes.to(torch.int64).clone()  # rows of each step not seen yet
        self.parts: dict[int, list[torch.Tensor]] = {}
        self.kept = 0
        self.values: list[dict[int, float] | None] = [None] * int(scope_sizes.numel())
        self.dropped: set[int] = set()
        self.notes: list[str] = []
        for s in torch.nonzero(self.left == 0).flatten().tolist():  # an empty step is complete (no figure)
            self.dropped.add(s)

    def add(self, raw: torch.Tensor, counts: torch.Tensor, row_scope: torch.Tensor) -> None:
        """One chunk: ``raw`` its rows' weights at their mask=1 tokens (flat, row by row), ``counts`` [B] how
        many each row has, ``row_scope`` [B] each row's step."""
        raw, counts, row_scope = raw.cpu(), counts.cpu().to(torch.int64), row_scope.cpu().to(torch.int64)
        tok_scope = torch.repeat_interleave(row_scope, counts)
        steps, rows_in = torch.unique(row_scope, return_counts=True)
        for s, r in zip(steps.tolist(), rows_in.tolist()):  # the chunk's steps (one, mostly), not its rows
            if s not in self.dropped:
                part = raw[tok_scope == s] if steps.numel() > 1 else raw
                self.parts.setdefault(s, []).append(part.clone())
                self.kept += part.numel()
            self.left[s] -= r
            if self.left[s] == 0:
                self._close(s)
        if self.kept > QUANTILE_OPEN_LIMIT:
            open_steps = sorted(self.parts)
            self.notes.append(f"rollout_is_p25 ... p99 of {len(open_steps)} step(s) not computed: their rows are "
                              f"interleaved and they hold more than {QUANTILE_OPEN_LIMIT} IS weights at once, "
                              "which exact quantiles would keep in memory; order the dump by step to get them")
            for s in open_steps:
                self.parts.pop(s)
                self.dropped.add(s)
            self.kept = 0

    def _close(self, s: int) -> None:
        parts = self.parts.pop(s, None)
        if parts is None or s in self.dropped:
            return
        w = torch.cat(parts)
        self.kept -= w.numel()
        if w.numel() == 0:  # no valid token: verl refuses such a batch (correction_state)
            return
        if w.numel() > QUANTILE_STEP_LIMIT:
            self.notes.append(f"rollout_is_p25 ... p99 of a step with {w.numel()} weighted tokens not computed: "
                              f"torch.quantile takes at most {QUANTILE_STEP_LIMIT} values, so verl 0.6.0's "
                              "compute_is_metrics raises on such a batch")
            return
        q = torch.tensor([p / 100 for p in QUANTILES], dtype=w.dtype)  # as verl's float q, in the input's dtype
        self.values[s] = dict(zip(QUANTILES, torch.quantile(w, q).tolist()))

    def step_figures(self, s: int, names: str) -> dict[str, float]:
        """Step ``s``'s figures under verl's names (none where they were not computed)."""
        v = self.values[s] if s < len(self.values) else None
        return {} if v is None else {f"{names}/rollout_is_p{p}": x for p, x in v.items()}


def gate_chunk(gate: Gate, layout: Ragged, mask: torch.Tensor, old_lp: torch.Tensor, rollout_lp: torch.Tensor,
               metrics: bool = True) -> ChunkCorrection:
    """OpenRLHF's coefficient of one chunk, as ``PolicyLoss.forward`` (``openrlhf/models/loss.py`` L214-247,
    release 0.11.2) computes it before multiplying the per-token loss by it::

        lr = old − rollout;  token_is = exp(lr)                           (no clamp)
        ratio:      stat = exp(lr)               (seq: exp(Σ lr·m / Σm), the geometric mean)
        binary_kl:  stat = p·log(p/q) + (1−p)·log((1−p)/(1−q))   (seq: Σ stat·m / Σm)
        tv:         stat = |p − q|                                (seq: Σ stat·m / Σm)
                    p = clamp(exp(rollout), 1e-6, 1 − 1e-6), q = clamp(exp(old), 1e-6, 1 − 1e-6)
        mask:  coef = token_is where low ≤ stat ≤ high, else 0;   filtered = not kept
        clip:  coef = clamp(stat, low, high);                      filtered = stat < low or stat > high

    The masked mean divides by Σm without an epsilon, as OpenRLHF's ``masked_mean``: a row with no mask=1
    token has a NaN statistic, is filtered, and counts as such in the seq-level filter ratio. The result:
    ``weights`` the coefficient at mask=1 tokens (0 elsewhere, where the loss ignores it), ``mask`` the
    input mask times the kept units (the tokens whose loss term survives; clip keeps every one), ``rows``
    the metric partials: Σm, Σ(rollout − old)·m (``vllm_kl``), the filtered tokens or rows
    (``is_filter_ratio``: per token over mask=1 tokens, per row over every row)."""
    dt = old_lp.dtype
    m = mask.to(dt)
    mb = m > 0
    zero = torch.zeros((), dtype=dt, device=m.device)
    n = layout.count_per_row(mb).to(dt)
    lr = old_lp - rollout_lp
    token_is = lr.exp()

    def row_mean(x: torch.Tensor) -> torch.Tensor:  # masked_mean(x, m, dim=-1): Σ x·m / Σm, no epsilon
        return layout.row_sum(torch.where(mb, x, zero)) / n

    seq_stat = None  # [B] at seq level
    if gate.stat == "ratio":
        if gate.level == "seq":
            seq_stat = row_mean(lr).exp()
        stat = token_is
    else:
        p = rollout_lp.exp().clamp(1e-6, 1 - 1e-6)
        q = old_lp.exp().clamp(1e-6, 1 - 1e-6)
        if gate.stat == "binary_kl":
            stat = p * (p / q).log() + (1 - p) * ((1 - p) / (1 - q)).log()
        else:
            stat = (p - q).abs()
        if gate.level == "seq":
            seq_stat = row_mean(stat)
    if seq_stat is not None:
        stat = layout.broadcast(seq_stat)
    if gate.mode == "clip":
        coef = stat.clamp(min=gate.low, max=gate.high)
        keep = torch.ones_like(mb)
        filtered = (stat < gate.low) | (stat > gate.high)
    else:
        keep = (stat >= gate.low) & (stat <= gate.high)
        coef = torch.where(keep, token_is, zero)
        filtered = ~keep
    rows: dict[str, tuple[str, torch.Tensor]] = {}
    if metrics:
        f64 = torch.float64
        rows["n"] = ("sum", n.to(f64))
        rows["rows"] = ("sum", torch.ones_like(n, dtype=f64))
        rows["g_kl"] = ("sum", layout.row_sum(torch.where(mb, rollout_lp - old_lp, zero)).to(f64))
        if seq_stat is not None:  # one unit per row (an empty row's NaN statistic is filtered)
            rows["g_filtered"] = ("sum", (~((seq_stat >= gate.low) & (seq_stat <= gate.high))).to(f64))
        else:
            rows["g_filtered"] = ("sum", layout.count_per_row(mb & filtered).to(f64))
    return ChunkCorrection(weights=torch.where(mb, coef, zero), mask=m * keep.to(dt), rows=rows)


def _is_rows(spec, layout, put, tok, msum, m, mb, raw, w, S, denom) -> None:
    """Per-row partials of compute_is_metrics (L660-783) and of the batch-normalisation mean."""
    dt = w.dtype
    u, lo = spec.upper, spec.metric_lower
    tok("w", w)
    wc = w.clamp(min=0.0, max=u)
    tok("wc", wc)
    tok("wc2", wc.square())
    if spec.level == "token":
        tok("is_high", (raw > u).to(dt))
        tok("is_low", (raw < lo).to(dt))
        put("w_max", "max", layout.row_reduce(torch.where(mb, w, torch.full_like(w, -math.inf)), "max"))
        put("w_min", "min", layout.row_reduce(torch.where(mb, w, torch.full_like(w, math.inf)), "min"))
    else:  # log space on S_i over all rows (L706-719); the thresholds' logs in float32 as verl's torch.log
        log_u = torch.log(torch.tensor(u, dtype=torch.float32)).to(dt)
        log_lo = torch.log(torch.tensor(lo, dtype=torch.float32)).to(dt)
        put("S_max", "max", S)
        put("S_min", "min", S)
        put("is_high", "sum", (S > log_u).to(dt))
        put("is_low", "sum", (S < log_lo).to(dt))
    q = msum(w) / denom  # per-row mean weight, every row (an empty row gives 0)
    put("q", "sum", q)
    put("q2", "sum", q.to(torch.float64).square())  # exact squares: the std of values near 1 is not lost to them
    put("q_max", "max", q)
    put("q_min", "min", q)
    put("q_dev", "max", (q - 1.0).abs())
    qr = q if spec.rows_applied else msum(raw) / denom  # compute_is_metrics @v0.8.0 L772-774: the applied ones
    put("q_high", "sum", (qr > u).to(dt))
    put("q_low", "sum", (qr < lo).to(dt))
    put("q_valid", "sum", torch.where(layout.count_per_row(mb) > 0, q, torch.zeros_like(q)))
    if spec.icepop:
        tok("oob", ((raw < spec.lower) | (raw > spec.upper)).to(dt))


def _legacy_ratio_rows(p, level, layout, put, tok, msum, mb, raw, stat, u, lo, denom,
                       token_fractions: bool = False) -> None:
    """Per-row partials of verl's ratio metrics before 0.8.0 (``compute_is_metrics`` in rollout_corr_helper.py
    @v0.6.1-v0.7.1 and mismatch_helper.py @v0.6.0, ``compute_rs_metrics`` @v0.6.1-v0.7.0): on the ratios
    ``raw`` before any truncation or band (masked by the metrics), std and ESS on raw clamped to [lo, u];
    ``stat`` the row's log-ratio (sum, or the masked mean for geometric) at the sequence levels."""
    dt = raw.dtype
    tok(p + "w", raw)
    if level == "token":
        tok(p + "hi", (raw > u).to(dt))
        tok(p + "lo", (raw < lo).to(dt))
        put(p + "max", "max", layout.row_reduce(torch.where(mb, raw, torch.full_like(raw, -math.inf)), "max"))
        put(p + "min", "min", layout.row_reduce(torch.where(mb, raw, torch.full_like(raw, math.inf)), "min"))
    else:  # log space on the row statistic of every row; the thresholds' logs in float32 as verl's torch.log
        log_u = torch.log(torch.tensor(u, dtype=torch.float32)).to(dt)
        log_lo = torch.log(torch.tensor(lo, dtype=torch.float32)).to(dt)
        put(p + "Lmax", "max", stat)
        put(p + "Lmin", "min", stat)
        if token_fractions:  # 0.6.0's geometric level: the row flags stand on each of its tokens
            tok(p + "hi", layout.broadcast((stat > log_u).to(dt)))
            tok(p + "lo", layout.broadcast((stat < log_lo).to(dt)))
        else:
            put(p + "hi", "sum", (stat > log_u).to(dt))
            put(p + "lo", "sum", (stat < log_lo).to(dt))
    wc = raw.clamp(min=lo, max=u)
    tok(p + "wc", wc)
    tok(p + "wc2", wc.square())
    q = msum(raw) / denom
    put(p + "q", "sum", q)
    put(p + "q2", "sum", q.to(torch.float64).square())
    put(p + "q_max", "max", q)
    put(p + "q_min", "min", q)
    put(p + "q_dev", "max", (q - 1.0).abs())
    put(p + "q_high", "sum", (q > u).to(dt))
    put(p + "q_low", "sum", (q < lo).to(dt))


def _norm_rows(layout, put, tok, msum, mb, w, denom) -> None:
    """The batch-normalisation sums of the (truncated) weights next to the legacy metrics."""
    tok("w", w)
    q = msum(w) / denom
    put("q_valid", "sum", torch.where(layout.count_per_row(mb) > 0, q, torch.zeros_like(q)))
    put("q_all", "sum", q)


def _rejected_rows(p, layout, put, tok, mb, rej_tok, rej_row=None) -> None:
    """verl's masked fractions before 0.8.0: mmean(1 − mask) and the share of rows rejected: at the token
    level a row with a rejected mask=1 token, at the sequence levels the row's own verdict ``rej_row``
    (``1 − mask[:, 0]``: an empty row counts with its statistic's verdict)."""
    dt = rej_tok.dtype
    tok(p + "tok", rej_tok)
    if rej_row is None:
        rej_row = layout.count_per_row(mb & (rej_tok > 0.5)) > 0
    put(p + "rows", "sum", rej_row.to(dt))


def _legacy_rs(opt, layout, put, tok, msum, mb, lr, S, denom, metrics: bool) -> torch.Tensor:
    """verl 0.6.1-0.7.0's rejection (``compute_rollout_rejection_mask`` in rollout_corr_helper.py @v0.7.0
    L82-193): the ratio r = exp(C(lr)) per token (``token``), exp(C(S_i)) (``sequence``) or exp(C(S_i/(Σm +
    1e-8))) (``geometric``); kept iff lo ≤ r ≤ hi (lo: rollout_rs_threshold_lower, else 1/hi). The keep
    factor per token (the working dtype)."""
    dt = lr.dtype
    if opt.agg == "token":
        stat = None
        r = torch.exp(_clamp(lr))
        keep = (r >= opt.lo) & (r <= opt.hi)
        rej_row = None
    else:
        stat = S if opt.agg == "sum" else S / denom
        r_row = torch.exp(_clamp(stat))
        keep_row = (r_row >= opt.lo) & (r_row <= opt.hi)
        keep = layout.broadcast(keep_row)
        r = layout.broadcast(r_row)
        rej_row = ~keep_row
    if metrics:
        level = "token" if opt.agg == "token" else "sequence"
        _legacy_ratio_rows("L:rs:", level, layout, put, tok, msum, mb, r, stat, opt.hi, opt.lo, denom)
        _rejected_rows("L:rsm:", layout, put, tok, mb, 1 - keep.to(dt), rej_row)
    return keep.to(dt)


def _legacy_ratio_metrics(g, p: str, name: str, level: str, N: float, R: float, u: float, lo: float,
                          dtype, token_fractions: bool = False) -> dict:
    """The figures of :func:`_legacy_ratio_rows` under verl's names (``name`` rollout_is or rollout_rs)."""
    out = {f"{name}_mean": _mmean(g(p + "w"), N)}
    if level == "token":
        out[f"{name}_max"], out[f"{name}_min"] = g(p + "max"), g(p + "min")
    else:
        out[f"{name}_max"] = math.exp(min(g(p + "Lmax"), SAFETY_BOUND))
        out[f"{name}_min"] = math.exp(g(p + "Lmin"))
    if level == "token" or token_fractions:
        out[f"{name}_ratio_fraction_high"] = _mmean(g(p + "hi"), N)
        out[f"{name}_ratio_fraction_low"] = _mmean(g(p + "lo"), N)
    else:
        out[f"{name}_ratio_fraction_high"] = g(p + "hi") / R
        out[f"{name}_ratio_fraction_low"] = g(p + "lo") / R
    mc = _mmean(g(p + "wc"), N)
    out[f"{name}_std"] = _std_of_means(mc, _mmean(g(p + "wc2"), N), dtype) if N > 1 else 0.0
    ess = _mmean(g(p + "wc2"), N) / (mc + 1e-8) ** 2
    out[f"{name}_eff_sample_size"] = 1.0 / ess if ess > 0 else None
    out[f"{name}_seq_mean"] = g(p + "q") / R
    out[f"{name}_seq_std"] = _std_unbiased(g(p + "q"), g(p + "q2"), R)
    out[f"{name}_seq_max"], out[f"{name}_seq_min"] = g(p + "q_max"), g(p + "q_min")
    out[f"{name}_seq_max_deviation"] = g(p + "q_dev")
    out[f"{name}_seq_fraction_high"] = g(p + "q_high") / R
    out[f"{name}_seq_fraction_low"] = g(p + "q_low") / R
    return out


def _rs_rows(opt, layout, put, tok, msum, m, mb, stat, seq, keep_f, n, valid_row) -> None:
    """Per-row partials of compute_rs_metrics (L416-519) and the masked fractions (L385-396)."""
    dt = m.dtype
    p = f"rs:{opt.name}:"
    lo_thr = opt.lo if opt.lo is not None else 0.0
    vr = valid_row.to(dt)
    inf = torch.full_like(seq, math.inf)
    if stat is not None:  # token level: the statistic per token
        tok(p + "sum", stat)
        c = stat.clamp(min=lo_thr, max=opt.hi)
        tok(p + "c", c)
        tok(p + "c2", c.square())
        tok(p + "high", (stat > opt.hi).to(dt))
        tok(p + "low", (stat < lo_thr).to(dt))
        put(p + "max", "max", layout.row_reduce(torch.where(mb, stat, torch.full_like(stat, -math.inf)), "max"))
        put(p + "min", "min", layout.row_reduce(torch.where(mb, stat, torch.full_like(stat, math.inf)), "min"))
    else:  # sequence level: the row statistic stands on each of the row's tokens
        put(p + "sum", "sum", seq * n)
        c = seq.clamp(min=lo_thr, max=opt.hi)
        put(p + "c", "sum", c * n)
        put(p + "c2", "sum", c.square() * n)
        put(p + "high", "sum", ((seq > opt.hi).to(dt) * vr))
        put(p + "low", "sum", ((seq < lo_thr).to(dt) * vr))
        put(p + "max", "max", torch.where(valid_row, seq, -inf))
        put(p + "min", "min", torch.where(valid_row, seq, inf))
    # per-row values over the valid rows
    put(p + "s", "sum", seq * vr)
    put(p + "s2", "sum", seq.to(torch.float64).square() * vr)
    put(p + "s_max", "max", torch.where(valid_row, seq, -inf))
    put(p + "s_min", "min", torch.where(valid_row, seq, inf))
    put(p + "s_dev", "max", torch.where(valid_row, seq.abs(), -inf))
    put(p + "s_high", "sum", (seq > opt.hi).to(dt) * vr)
    put(p + "s_low", "sum", (seq < lo_thr).to(dt) * vr)
    tok(p + "rej", 1 - keep_f)
    put(p + "rej_rows", "sum", (layout.count_per_row(mb & (keep_f <= 0.5)) > 0).to(dt) * vr)


class MetricSums:
    """Per-step accumulators of the per-row partials (float64; sums, maxima, minima)."""

    def __init__(self, num_scopes: int):
        self.S = num_scopes
        self.acc: dict[str, tuple[str, torch.Tensor]] = {}

    def add(self, rows: dict[str, tuple[str, torch.Tensor]], scope: torch.Tensor) -> None:
        scope = scope.to(torch.int64)
        for name, (how, v) in rows.items():
            v = v.to("cpu", torch.float64)
            if name not in self.acc:
                fill = {"sum": 0.0, "max": -math.inf, "min": math.inf}[how]
                self.acc[name] = (how, torch.full((self.S,), fill, dtype=torch.float64))
            t = self.acc[name][1]
            if how == "sum":
                t.index_add_(0, scope, v)
            else:
                t.scatter_reduce_(0, scope, v, reduce="amax" if how == "max" else "amin")

    def get(self, name: str, s: int) -> float:
        return float(self.acc[name][1][s])


def norm_factors(spec: CorrectionSpec, sums: MetricSums) -> list[float | None]:
    """Per step: μ of the batch normalisation (L614-650), or None where μ ≤ 1e-8 (no division;
    verl logs the factor as 1.0)."""
    out: list[float | None] = []
    for s in range(sums.S):
        if spec.level == "token":
            mu = sums.get("w", s) / (sums.get("n", s) + 1e-8)
        elif spec.norm_all_rows:  # verl 0.6.1: the mean of every row's mean weight (rollout_corr_helper.py L416)
            mu = sums.get("q_all", s) / sums.get("rows", s)
        else:
            mu = sums.get("q_valid", s) / max(sums.get("valid_rows", s), 1e-8)
        out.append(mu if mu > 1e-8 else None)
    return out


def _mmean(total: float, n: float) -> float:
    return total / (n + 1e-8)


def _std_unbiased(s1: float, s2: float, k: float) -> float:
    if k <= 1:
        return 0.0
    return math.sqrt(max((s2 - s1 * s1 / k) / (k - 1), 0.0))


def _std_of_means(mean_c: float, mean_c2: float, dtype: torch.dtype) -> float:
    """sqrt(max(E[c²] − E[c]², 0)) with the subtraction in ``dtype``: verl subtracts two float32 masked
    means, and where the clamped statistic sits mostly on a bound the difference is float32 cancellation
    (it can read 0 where the float64 value is 2e-5); doing the same keeps the metric verl's."""
    a = torch.tensor(mean_c2, dtype=dtype)
    b = torch.tensor(mean_c, dtype=dtype)
    return float(torch.sqrt(torch.clamp(a - b.square(), min=0.0)))


def step_metrics(spec: CorrectionSpec, sums: MetricSums, s: int, factor: float | None = None,
                 dtype: torch.dtype | None = None) -> dict[str, float]:
    """verl's ``rollout_corr/*`` metrics of step ``s`` (names as verl logs them).

    ``mmean(x)`` = Σ x·m / (Σm + 1e-8) over the step's tokens; "rows" = every row of the step, "valid
    rows" = those with Σm > 0; u/lo the IS thresholds (lo = 1/u for TIS); w the weights before batch
    normalisation, w' = clamp(w, 0, u), q_i = Σ_t w·m/(Σm_i + 1e-8):

    - off-policy (``compute_offpolicy_metrics``): ``kl`` mmean(rollout − old); ``k3_kl`` mmean(e^lr − lr − 1)
      (unclamped); ``training_ppl``/``rollout_ppl`` mean over rows of exp(−row mean log-prob) and
      ``*_log_ppl`` of −row mean; ``log_ppl_diff*`` mean/|·|-mean/max/min of d_i = row mean rollout −
      row mean old; ``ppl_ratio`` mean e^{d_i}; ``chi2_token`` mmean(e^{2C(lr)}) − 1; ``chi2_seq`` mean over
      rows of e^{2C(S_i)} − 1.
    - IS (``compute_is_metrics``): ``mean`` mmean(w); token: ``max``/``min`` over mask=1 tokens,
      ``ratio_fraction_high/low`` mmean(raw > u), mmean(raw < lo); sequence: ``max`` e^{min(max S, 20)},
      ``min`` e^{min S} (no clamp), fractions of rows with S > log u, S < log lo; ``std`` sqrt(max(mmean(w'²)
      − mmean(w')², 0)) (0 for ≤ 1 token); ``eff_sample_size`` 1/mmean((w'/(mmean(w') + 1e-8))²);
      ``seq_mean/std/max/min`` of q over rows (unbiased std), ``seq_max_deviation`` max |q − 1|,
      ``seq_fraction_high/low`` of the rows' raw-weight means against u, lo; ``oob_ratio`` (IcePop)
      mmean(raw ∉ [lo, hi]); ``batch_norm_factor`` μ (1.0 when not applied).
    - RS per option (``compute_rs_metrics``), on the option's statistic (a row statistic stands on each
      of its tokens): ``mean`` mmean; ``max/min`` (token: over mask=1 tokens; sequence: over valid
      rows); ``fraction_high/low`` (token: mmean; sequence: over valid rows; low only for k1, else 0);
      ``std`` of the statistic clamped to [lo or 0, hi] as for IS; ``seq_*`` over valid rows of the row
      values (token options: the row's masked mean), ``seq_fraction_low`` only for k1;
      ``masked_fraction`` mmean(1 − keep), ``seq_masked_fraction`` valid rows with a rejected token.
      Totals: ``rollout_rs_masked_fraction`` mmean(1 − Π keep), ``rollout_rs_seq_masked_fraction`` the
      share of all rows with a rejected mask=1 token.

    ``factor``: the step's batch-normalisation μ (None: weights left as they were, factor 1.0);
    ``dtype``: the precision of the std subtraction (:func:`_std_of_means`; None: float32)."""
    dtype = torch.float32 if dtype is None else dtype
    g = lambda k: sums.get(k, s)  # noqa: E731
    if spec.gate is not None:  # OpenRLHF's two figures (ppo_actor.py L314-316), over the step's tokens / rows
        return {"vllm_kl": g("g_kl") / g("n"),
                "is_filter_ratio": g("g_filtered") / (g("rows") if spec.gate.level == "seq" else g("n"))}
    N, R, V = g("n"), g("rows"), g("valid_rows")
    out: dict[str, float] = {}
    if spec.weights and spec.raw_metrics:
        out.update(_legacy_ratio_metrics(g, "L:is:", "rollout_is", spec.level, N, R, spec.upper, spec.metric_lower,
                                         dtype, token_fractions=spec.level == "geometric"))
        if spec.icepop and spec.zero_weights:
            out["rollout_is_masked_fraction"] = _mmean(g("L:ism:tok"), N)
            out["rollout_is_seq_masked_fraction"] = g("L:ism:rows") / R
        if spec.batch_normalize:
            out["rollout_is_batch_norm_factor"] = 1.0 if factor is None else factor
    elif spec.weights:
        out["rollout_is_mean"] = _mmean(g("w"), N)
        if spec.level == "token":
            out["rollout_is_max"], out["rollout_is_min"] = g("w_max"), g("w_min")
            out["rollout_is_ratio_fraction_high"] = _mmean(g("is_high"), N)
            out["rollout_is_ratio_fraction_low"] = _mmean(g("is_low"), N)
        else:
            out["rollout_is_max"] = math.exp(min(g("S_max"), SAFETY_BOUND))
            out["rollout_is_min"] = math.exp(g("S_min"))  # not clamped (L710)
            out["rollout_is_ratio_fraction_high"] = g("is_high") / R
            out["rollout_is_ratio_fraction_low"] = g("is_low") / R
        mc = _mmean(g("wc"), N)
        if N > 1:
            out["rollout_is_std"] = _std_of_means(mc, _mmean(g("wc2"), N), dtype)
        else:
            out["rollout_is_std"] = 0.0
        ess = _mmean(g("wc2"), N) / (mc + 1e-8) ** 2  # 0 when every weight is: verl divides by zero
        out["rollout_is_eff_sample_size"] = 1.0 / ess if ess > 0 else None
        out["rollout_is_seq_mean"] = g("q") / R
        out["rollout_is_seq_std"] = _std_unbiased(g("q"), g("q2"), R)
        out["rollout_is_seq_max"], out["rollout_is_seq_min"] = g("q_max"), g("q_min")
        out["rollout_is_seq_max_deviation"] = g("q_dev")
        out["rollout_is_seq_fraction_high"] = g("q_high") / R
        out["rollout_is_seq_fraction_low"] = g("q_low") / R
        if spec.icepop:
            out["rollout_is_oob_ratio"] = _mmean(g("oob"), N)
        if spec.batch_normalize:
            out["rollout_is_batch_norm_factor"] = 1.0 if factor is None else factor
    for opt in spec.rs:
        if opt.kind == "ratio":  # verl 0.6.1-0.7.0: one option, its figures named rollout_rs_*
            out.update(_legacy_ratio_metrics(g, "L:rs:", "rollout_rs", "token" if opt.agg == "token" else
                                             "sequence", N, R, opt.hi, opt.lo, dtype))
            out["rollout_rs_masked_fraction"] = _mmean(g("L:rsm:tok"), N)
            out["rollout_rs_seq_masked_fraction"] = g("L:rsm:rows") / R
            continue
        p, k = f"rs:{opt.name}:", f"rollout_rs_{opt.name}"
        seq_level = opt.agg != "token"
        out[f"{k}_mean"] = _mmean(g(p + "sum"), N)
        out[f"{k}_max"], out[f"{k}_min"] = g(p + "max"), g(p + "min")
        if seq_level:
            out[f"{k}_fraction_high"] = g(p + "high") / V
            out[f"{k}_fraction_low"] = g(p + "low") / V if opt.lo is not None else 0.0
        else:
            out[f"{k}_fraction_high"] = _mmean(g(p + "high"), N)
            out[f"{k}_fraction_low"] = _mmean(g(p + "low"), N) if opt.lo is not None else 0.0
        if N > 1:
            mc = _mmean(g(p + "c"), N)
            out[f"{k}_std"] = _std_of_means(mc, _mmean(g(p + "c2"), N), dtype)
        else:
            out[f"{k}_std"] = 0.0
        out[f"{k}_seq_mean"] = g(p + "s") / V
        out[f"{k}_seq_std"] = _std_unbiased(g(p + "s"), g(p + "s2"), V)
        out[f"{k}_seq_max"], out[f"{k}_seq_min"] = g(p + "s_max"), g(p + "s_min")
        out[f"{k}_seq_max_deviation"] = g(p + "s_dev")
        out[f"{k}_seq_fraction_high"] = g(p + "s_high") / V
        if opt.lo is not None:
            out[f"{k}_seq_fraction_low"] = g(p + "s_low") / V
        out[f"{k}_masked_fraction"] = _mmean(g(p + "rej"), N)
        out[f"{k}_seq_masked_fraction"] = g(p + "rej_rows") / V
    if spec.veto_metrics:  # 0 when the veto is off (rollout_corr_helper.py @v0.7.0 L656-680)
        out["rollout_is_veto_fraction"] = g("veto_rows") / R if spec.veto is not None else 0.0
        out["rollout_is_catastrophic_token_fraction"] = _mmean(g("veto_tok"), N) if spec.veto is not None else 0.0
    if spec.rs and spec.rs[0].kind != "ratio":
        out["rollout_rs_masked_fraction"] = _mmean(g("rs_rejected"), N)
        out["rollout_rs_seq_masked_fraction"] = g("rs_rows_hit") / R
    out["training_ppl"] = g("train_ppl") / R
    out["training_log_ppl"] = g("train_log_ppl") / R
    out["kl"] = _mmean(g("kl"), N)
    out["k3_kl"] = _mmean(g("k3_kl"), N)
    out["rollout_ppl"] = g("roll_ppl") / R
    out["rollout_log_ppl"] = g("roll_log_ppl") / R
    out["log_ppl_diff"] = g("lpd") / R
    out["log_ppl_abs_diff"] = g("lpd_abs") / R
    out["log_ppl_diff_max"], out["log_ppl_diff_min"] = g("lpd_max"), g("lpd_min")
    out["ppl_ratio"] = g("ppl_ratio") / R
    out["chi2_token"] = _mmean(g("chi2_tok"), N) - 1.0
    out["chi2_seq"] = g("chi2_seq") / R - 1.0
    if spec.names == "mismatch":  # verl 0.6.0 (mismatch_helper.py compute_mismatch_metrics): no χ², mismatch_*
        for k in _OFFPOLICY:
            v = out.pop(k)
            if not k.startswith("chi2"):
                out["mismatch_" + k] = v
    return {f"{spec.names}/{k}": v for k, v in out.items()}


_OFFPOLICY = ("training_ppl", "training_log_ppl", "kl", "k3_kl", "rollout_ppl", "rollout_log_ppl", "log_ppl_diff",
              "log_ppl_abs_diff", "log_ppl_diff_max", "log_ppl_diff_min", "ppl_ratio", "chi2_token", "chi2_seq")


def spec_from_config(section) -> CorrectionSpec | None:
    """The run spec's ``rollout_correction`` section (:class:`advcli.config.runspec.Correction`, read by its fields)
    -> :class:`CorrectionSpec` (None when ``mode`` is off). Bounds are checked by the flavors; here only their
    shape."""
    from ..config.runspec import thawed  # the spec holds lists as tuples: messages show them as written
    from ..errors import AdvcliError

    if section is None or section.mode == "off":
        return None
    opts = []
    for entry in section.rs or []:
        if isinstance(entry, (list, tuple)) and len(entry) == 3 and entry[0] in LEGACY_RS:
            name, lo, hi = entry  # verl 0.6.1-0.7.0: bounds on the ratio
            if lo is None or hi is None:
                raise AdvcliError(f"key rollout_correction.rs: option {name} (verl 0.6.1-0.7.0) needs both ratio "
                                  "bounds")
            opts.append(RSOption(name, "ratio", LEGACY_RS[name], float(lo), float(hi)))
            continue
        if not isinstance(entry, (list, tuple)) or len(entry) != 3 or entry[0] not in RS_OPTIONS:
            raise AdvcliError(f"key rollout_correction.rs: entry {thawed(entry)!r} is not [name, lo, hi] with name "
                              f"one of {', '.join(RS_OPTIONS)}")
        name, lo, hi = entry
        if hi is None:
            raise AdvcliError(f"key rollout_correction.rs: option {name} needs an upper bound")
        kind, agg = RSOption.parse_name(name)
        opts.append(RSOption(name, kind, agg, None if lo is None else float(lo), float(hi)))
    upper, lower = section.is_upper, section.is_lower
    if section.gate_level is not None:
        if section.is_level is not None or opts:
            raise AdvcliError("key rollout_correction.gate_level: OpenRLHF's gated coefficient and verl's IS "
                              "weights / rejection (is_level, rs) are two trainers' corrections; set one")
        bounds = section.gate_bounds
        try:
            low, high = (float(x) for x in bounds)
        except (TypeError, ValueError):
            raise AdvcliError("key rollout_correction.gate_bounds: expected [low, high], got "
                              f"{thawed(bounds)!r}") from None
        gate = Gate(level=section.gate_level, mode=section.gate_mode, stat=section.gate_stat, low=low, high=high)
        if gate.mode == "clip" and (gate.level != "token" or gate.stat != "ratio"):
            raise AdvcliError("key rollout_correction.gate_mode=clip needs gate_level=token and gate_stat=ratio "
                              "(only the token ratio is a weight that can be clamped)")
        return CorrectionSpec(gate=gate)
    if any(o.kind == "ratio" for o in opts) and len(opts) > 1:
        raise AdvcliError("key rollout_correction.rs: verl 0.6.1-0.7.0's options (token, sequence, geometric) "
                          "take one entry, alone")
    lm = section.is_metrics_lower
    return CorrectionSpec(level=section.is_level, upper=None if upper is None else float(upper),
                          lower=None if lower is None else float(lower),
                          batch_normalize=bool(section.is_batch_normalize), rs=tuple(opts),
                          raw_metrics=section.is_metrics == "raw", rows_applied=section.is_metrics == "applied_rows",
                          lower_metrics=None if lm is None else float(lm),
                          norm_all_rows=section.norm_rows == "all",
                          veto=None if section.veto is None else float(section.veto),
                          veto_metrics=bool(section.veto_metrics), zero_weights=section.rejects == "weights",
                          write_weights=bool(section.write_weights), names=section.metric_names)
