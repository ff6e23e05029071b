"""Token-level whitening over a scope (a training step): masked, token-weighted statistics.

Statistics are accumulated per scope across chunks (float64 sums of ``v·m``, ``v²·m`` and ``m``),
so a scope split over many chunks gets exactly the statistics of the whole scope. The variants the
frameworks use are parameters:

- ``unbiased``: var × N/(N−1) (verl ``masked_var``, ROLL, NeMo PPO gae) or not (NeMo RF++/raw_reward,
  OpenRLHF);
- ``eps_mode``: ``add`` → ``(var + eps)^-½`` (verl, ROLL, NeMo gae) or ``max`` → ``max(var, eps)^-½``
  (NeMo RF++, OpenRLHF);
- ``shift_mean``: subtract the mean (always) and ``scale`` (divide by the std; OpenRLHF's
  ``no_std_norm`` centres only);
- ``divisor``: what the masked mean and variance divide their sums by: ``n_eps`` → ``Σm + 1e-8``
  (verl and ROLL ``masked_mean``, NeMo gae), ``n`` → ``Σm`` exactly (OpenRLHF
  experience_maker.py L318-323 @3c3be623, NeMo reinforce_plus_plus advantage_estimator.py L262-263
  @7ea279ab: a scope without a valid token gives 0/0 = NaN, as there), ``max1`` → ``max(Σm, 1)``
  (NeMo raw_reward L292-293).

verl ``masked_whiten`` (verl/utils/torch_functional.py L273-346 @1dda039b):
``(v − μ)·rsqrt(var + 1e-8)``, ``μ = Σvm/(Σm + 1e-8)``, ``var = Σ(v−μ)²m/(Σm + 1e-8) · N/(N−1)``.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..lazy_torch import torch
from . import fused


class ExactSums:
    """Exact per-scope sums of float64 values, whatever their order, chunking, device or threads.

    A float64 ``x = M·2^(e−53)`` (``torch.frexp``: ``|M| < 2^53`` an integer). Each value's ``M``
    is split into 27 + 26 bits and added, as int64, into a bin per (scope, exponent ``e``): integer
    addition is associative, so the bins hold the exact sums in any order (int64 holds 2^36 values
    per bin and chunk). ``totals()`` adds the bins exactly (Python integers) and rounds once. So a
    scope split over any chunks gets the same correctly rounded Σ, and the output bytes do not
    depend on --chunk-rows (plain float64 ``index_add_`` differed by one ulp between chunkings).
    Non-finite values are summed apart in float64 and added at the end (NaN and ±inf propagate).
    """

    _NE = 2200  # frexp exponents of float64 lie in [-1073, 1024]
    _BIAS = 1100

    def __init__(self, num_scopes: int):
        self.num_scopes = num_scopes
        self.bins: dict[tuple[int, int], int] = {}
        self.special = torch.zeros(num_scopes, dtype=torch.float64)

    _MAX = 1 << 25  # values per call: bin sums of 27-bit halves stay exact integers in float64

    def add(self, x: torch.Tensor, scope: torch.Tensor) -> list[int]:
        """Accumulate ``x`` (float64) into ``scope`` (int64, same shape); returns the scopes touched."""
        if x.numel() == 0:
            return []
        if x.numel() > self._MAX:
            touched: set[int] = set()
            for i in range(0, x.numel(), self._MAX):
                touched.update(self.add(x[i:i + self._MAX], scope[i:i + self._MAX]))
            return sorted(touched)
        lo_s, hi_s = int(scope.min()), int(scope.max())
        local = scope - lo_s
        plain = torch.zeros(hi_s - lo_s + 1, dtype=torch.float64, device=x.device).index_add_(0, local, x)
        if not bool(torch.isfinite(plain).all()):  # NaN/inf: summed apart, so that they propagate
            finite = torch.isfinite(x)
            bad = ~finite
            self.special.index_add_(0, scope[bad].cpu(), x[bad].cpu())
            x = torch.where(finite, x, torch.zeros_like(x))
        mant, exp = torch.frexp(x)  # x = mant·2^exp, 0.5 <= |mant| < 1
        m = mant * 9007199254740992.0  # ·2^53: an integer-valued float64, |m| < 2^53
        hi = torch.floor(m * (1.0 / 67108864.0))  # m = hi·2^26 + lo, exactly
        lo = m - hi * 67108864.0
        key = local * self._NE + (exp.to(torch.int64) + self._BIAS)
        acc = torch.zeros(2, (hi_s - lo_s + 1) * self._NE, dtype=torch.float64, device=x.device)
        acc[0].index_add_(0, key, hi)  # integer-valued partial sums < 2^53: exact in any order
        acc[1].index_add_(0, key, lo)
        nz = torch.nonzero((acc[0] != 0) | (acc[1] != 0)).flatten()
        for k, h, lw in zip(nz.tolist(), acc[0, nz].tolist(), acc[1, nz].tolist()):
            s, e = divmod(k, self._NE)
            b = (s + lo_s, e - self._BIAS)
            self.bins[b] = self.bins.get(b, 0) + (int(h) << 26) + int(lw)
        return list(range(lo_s, hi_s + 1))

    def total(self, s: int) -> float:
        from fractions import Fraction

        ints = [(e, v) for (sc, e), v in self.bins.items() if sc == s and v]
        exact = 0.0
        if ints:
            e0 = min(e for e, _ in ints)
            num = sum(v << (e - e0) for e, v in ints)  # Σ v·2^(e−53) = num·2^(e0−53)
            exact = float(Fraction(num) * Fraction(2) ** (e0 - 53))
        return exact + float(self.special[s]) if float(self.special[s]) != 0 else exact

    def totals(self, scopes: list[int] | None = None) -> torch.Tensor:
        return torch.tensor([self.total(s) for s in (scopes if scopes is not None else range(self.num_scopes))],
                            dtype=torch.float64)


@dataclass
class MomentSums:
    """Per-scope sums Σm, Σvm, Σv²m: exact (``ExactSums``), held as float64 tensors; with ``mean_sum``
    a fourth, ``total_mean`` = Σv·u, the mean's numerator under its own weights ``u`` where they differ
    from the variance's ``m`` (OpenRLHF's replay buffer before 0.7.1 sums every position but counts the
    mask: ``advantage.whiten_mean_span``)."""

    count: torch.Tensor
    total: torch.Tensor
    total_sq: torch.Tensor
    _exact: list | None = None
    ordered: tuple | None = None  # (count, total, total_sq) of ordered_float32_sums, where a pass kept them
    # Σ of the values over SkyRL's whole padded grid where it is not ``total`` (SkyRL 0.1.0's step-wise copy puts
    # the last step's value in a turn's padding cells: advcli.ops.batchnorm.compose); None: ``total``
    grid_total: torch.Tensor | None = None
    total_mean: torch.Tensor | None = None  # Σv·u (the mean's own weights), where kept

    @staticmethod
    def zeros(num_scopes: int, mean_sum: bool = False) -> MomentSums:
        z = lambda: torch.zeros(num_scopes, dtype=torch.float64)  # noqa: E731
        return MomentSums(z(), z(), z(), [ExactSums(num_scopes) for _ in range(4 if mean_sum else 3)],
                          total_mean=z() if mean_sum else None)

    def tensors(self) -> tuple:
        """The float64 totals, in the order of ``_exact``."""
        base = (self.count, self.total, self.total_sq)
        return base if self.total_mean is None else (*base, self.total_mean)

    @property
    def mean_total(self) -> torch.Tensor:
        """The mean's numerator: Σv·u where kept, else Σv·m."""
        return self.total if self.total_mean is None else self.total_mean

    def add(self, values: torch.Tensor, weights: torch.Tensor, scope_of_token: torch.Tensor) -> None:
        """Accumulate values token by token (any device; the sums stay on the CPU). For a chunk of
        rows, :meth:`row_partials` + :meth:`add_rows` reduce each row on its own first: cheaper, and a
        row's sum depends only on that row, never on where its chunk starts."""
        self.add_rows(MomentSums._terms(values, weights), scope_of_token.to(torch.int64))

    @staticmethod
    def _terms(values: torch.Tensor, weights: torch.Tensor) -> tuple:
        """(m, v·m, v²·m) per token in float64: what Σm, Σvm, Σv²m sum."""
        v = values.to(torch.float64)
        w = weights.to(torch.float64)
        vw = v * w
        return w, vw, v * vw

    @staticmethod
    def row_partials(values: torch.Tensor, weights: torch.Tensor, layout, scope_row: torch.Tensor,
                     mean_weights: torch.Tensor | None = None):
        """(Σm, Σvm, Σv²m per non-empty row in float64, those rows' scopes) of a chunk laid out by
        ``layout``: the per-token work, with no shared state — a worker thread can run it; the caller
        then hands the result to :meth:`add_rows` in row order. ``mean_weights`` ``u``: a fourth, Σv·u.

        The result is on the host, whatever the values' device: the exact accumulation is host work (its bins
        are Python integers), and on a GPU each of its steps on device tensors made the host wait (a scope's
        range, the finite check, the bins' indices: about 18 waits and 45 launches a chunk). Here the row sums
        and the row lengths come back in one copy, on the worker that computed them."""
        if mean_weights is None and values.numel() and values.is_floating_point() and fused.enabled(values):
            stacked = fused.row_moments(values, weights, layout.offsets.to(values.device), layout.num_rows)
        else:  # the torch path (and the fourth sum, which the kernel does not make)
            terms = MomentSums._terms(values, weights)
            if mean_weights is not None:
                terms = (*terms, values.to(torch.float64) * mean_weights.to(torch.float64))
            stacked = torch.stack([layout.row_sum(x) for x in terms])
        lengths = layout.lengths
        if stacked.device.type != "cpu":  # one copy back: the sums and the lengths (exact in float64)
            host = torch.cat([stacked, lengths.to(device=stacked.device, dtype=torch.float64)[None]]).cpu()
            stacked, keep = host[:-1], host[-1] > 0
        else:
            keep = lengths.cpu() > 0
        return tuple(stacked[:, keep].unbind(0)), scope_row.cpu()[keep]

    def merge(self, other: MomentSums) -> None:
        """Add ``other``'s sums (the same scopes, made elsewhere: a Ray worker's batch) exactly: its
        integer bins into these, then each touched scope rounded once, so that the totals are those of
        one accumulation of every value, whatever the parts (:class:`ExactSums`)."""
        touched: set[int] = set()
        if len(other._exact) > len(self._exact):  # a fourth sum (the mean's own weights) from the parts
            self._exact.append(ExactSums(self.count.numel()))
            self.total_mean = torch.zeros_like(self.count)
        for mine, theirs in zip(self._exact, other._exact):
            for key, v in theirs.bins.items():
                mine.bins[key] = mine.bins.get(key, 0) + v
                touched.add(key[0])
            if bool((theirs.special != 0).any()):
                mine.special += theirs.special
                touched.update(torch.nonzero(theirs.special).flatten().tolist())
        if touched:
            idx = sorted(touched)
            where = torch.tensor(idx, dtype=torch.int64)
            for tensor, acc in zip(self.tensors(), self._exact):
                tensor[where] = acc.totals(idx)

    def add_rows(self, parts: tuple, scope: torch.Tensor) -> None:
        """Accumulate (Σm, Σvm, Σv²m[, Σvu]) values, each with its scope, exactly."""
        if len(parts) > len(self._exact):
            self._exact.append(ExactSums(self.count.numel()))
            self.total_mean = torch.zeros_like(self.count)
        touched: set[int] = set()
        for acc, x in zip(self._exact, parts):
            touched.update(acc.add(x, scope))
        if not touched:
            return
        idx = sorted(touched)
        where = torch.tensor(idx, dtype=torch.int64)
        for tensor, acc in zip(self.tensors(), self._exact):
            tensor[where] = acc.totals(idx)


@dataclass(frozen=True)
class WhitenSpec:
    unbiased: bool = True
    eps: float = 1e-8
    eps_mode: str = "add"  # "add": rsqrt(var + eps); "max": rsqrt(max(var, eps))
    divisor: str = "n_eps"  # μ = Σvm/D, var = Σ(v−μ)²m/D; D = Σm + 1e-8 ("n_eps"), Σm ("n"), max(Σm, 1) ("max1")
    scale: bool = True  # False: centre only
    one_pass: torch.dtype | None = None  # slime: E[x²] − E[x]² from the sums rounded to this dtype
    # n_eps in a float32 run: D = Σm + 1e-8 rounded to float32, as the frameworks' masked_mean adds it
    # (verl torch_functional.py L307 @1dda039b: an int64 mask sum + 1e-8 is a float32 tensor), so the 1e-8
    # vanishes for Σm ≥ 1 and a scope whose valid values are all equal is centred to exactly 0
    count32: bool = False


DIVISORS = ("n_eps", "n", "max1")


def scope_mean_rstd(sums: MomentSums, spec: WhitenSpec) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-scope (mean, 1/std) in float64 from accumulated sums.

    With ``unbiased``, a scope of exactly one valid token gets a NaN variance: the frameworks that
    compute it (NeMo ``masked_var``, utils.py L260-274) multiply a variance of exactly 0 (in float32
    ``1 + 1e-8`` is 1, so μ is that token's value) by ``1/(1 − 1) = inf``. verl raises there and ROLL
    skips the scope; the caller decides (``advantage.whiten_small``)."""
    if spec.one_pass is not None:
        return one_pass_mean_rstd(sums, spec)
    n = sums.count
    if spec.divisor not in DIVISORS:
        raise ValueError(f"whitening divisor {spec.divisor!r}: expected one of {DIVISORS}")
    n_eps = (n + 1e-8).to(torch.float32).to(n.dtype) if spec.count32 else n + 1e-8
    denom = {"n_eps": n_eps, "n": n, "max1": n.clamp(min=1)}[spec.divisor]
    mean = sums.mean_total / denom  # Σvm/D, or Σvu/D where the mean has its own weights u
    # Σ(v−μ)²m = Σv²m − 2μΣvm + μ²Σm
    ss = (sums.total_sq - 2 * mean * sums.total + mean * mean * n).clamp(min=0)
    var = ss / denom
    if spec.unbiased:
        var = torch.where(n == 1, torch.full_like(var, float("nan")), var * n / (n - 1).clamp(min=1e-300))
    if not spec.scale:
        rstd = torch.ones_like(var)
    elif spec.eps_mode == "max":
        rstd = torch.rsqrt(var.clamp(min=spec.eps))
    else:
        rstd = torch.rsqrt(var + spec.eps)
    return mean, rstd


def one_pass_mean_rstd(sums: MomentSums, spec: WhitenSpec) -> tuple[torch.Tensor, torch.Tensor]:
    """slime ``distributed_masked_whiten`` (slime/utils/distributed_utils.py L111-170 @624b824a):
    the three sums ``[Σx·m, Σx²·m, Σm]`` become one float32 tensor (all-reduced), then, in float32,
    ``μ = S1/N``, ``var = S2/N − μ²``, ``var ·= N/(N − 1)`` only when ``N ≥ 2``, ``rstd =
    rsqrt(var + eps)``. In float32 ``S2/N − μ²`` cancels when ``|μ| ≫ σ`` (even to a negative variance
    and a NaN). Here the sums are exact (:class:`ExactSums`) and rounded once to ``spec.one_pass``
    (float32: the framework's rounding of its own float32 sums up to their summation order; float64:
    the intended math). A scope of one valid token keeps the biased variance 0 (``(x − μ)·1e4`` for
    eps 1e-8); a scope of none gives NaN here, and the caller refuses it (slime raises ValueError)."""
    dt = spec.one_pass
    n, s1, s2 = sums.count.to(dt), sums.total.to(dt), sums.total_sq.to(dt)
    mean = s1 / n
    var = s2 / n - mean * mean
    if spec.unbiased:
        var = torch.where(n >= 2, var * (n / (n - 1)), var)
    rstd = torch.rsqrt(var + spec.eps) if spec.scale else torch.ones_like(var)
    return mean.to(torch.float64), rstd.to(torch.float64)


def ordered_float32_sums(values: torch.Tensor, mask: torch.Tensor, scope_of_token: torch.Tensor,
                         num_scopes: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per scope ``(Σm, Σx·m, Σx²·m)`` as slime's ``distributed_masked_whiten`` takes them: each scope's
    tokens concatenated in row order (``torch.cat(advantages)``, loss.py L820), then float32
    ``(values * mask).sum()``, ``((values ** 2) * mask).sum()``, ``mask.sum()`` (distributed_utils.py
    L138-140), stacked into one float32 tensor. The same torch calls on the same tensor give the same
    bits, so even the residue of an all-equal step (whose exact variance is 0) is the framework's.
    Returned as float64 tensors holding those float32 values. ``values`` float32 [N] on the CPU, in row
    order; ``mask`` 0/1; ``scope_of_token`` int64 [N]."""
    out = torch.zeros(3, num_scopes, dtype=torch.float64)
    x = values.to(torch.float32)
    m = mask.to(torch.int32)
    for s in range(num_scopes):
        sel = scope_of_token == s
        v, w = (x, m) if num_scopes == 1 else (x[sel].contiguous(), m[sel].contiguous())
        stats = torch.tensor([(v * w).sum(), ((v ** 2) * w).sum(), w.sum()], dtype=torch.float32)
        out[:, s] = torch.stack([stats[2], stats[0], stats[1]]).to(torch.float64)
    return out[0], out[1], out[2]


def apply_whiten(values: torch.Tensor, mean_tok: torch.Tensor, rstd_tok: torch.Tensor) -> torch.Tensor:
    """``(v − μ)·rstd`` at every position (not re-masked: the caller decides)."""
    return ((values.to(torch.float64) - mean_tok) * rstd_tok).to(values.dtype)


def prefix_kept(layout, mask: torch.Tensor) -> torch.Tensor:
    """1 on each row's first Σm positions, else 0 (``whitening.mean_span: prefix``): what OpenRLHF's
    ``remove_padding_in_sequences`` keeps before 0.7.0 (replay_buffer.py @v0.6.4 L112-150: ``right_pad =
    (1 − action_mask).sum()``, every tensor cut to ``[:-right_pad]``), a row's valid tokens when its mask
    is 1s then 0s."""
    valid = layout.row_sum((mask > 0).to(torch.int64))
    return (layout.position < layout.broadcast(valid)).to(mask.dtype)
