"""Group statistics over the per-row table, vectorised, with the frameworks' float32 behaviour.

The row table holds one entry per response of the whole input (a few bytes per row), so group
statistics are computed exactly over every member of a group, wherever its rows sit in the file.

Bit-level behaviour matters for all-equal groups of non-dyadic rewards, so
the reductions reproduce how torch reduces in each framework:

- ``mean_f32``: ``torch.mean`` of a group's float32 values. Groups of equal size are stacked to
  ``[G_n, n]`` and reduced along dim 1, which gives the same bits as ``torch.mean`` of each 1-D
  group (checked over sizes 2..257).
- ``std_1d``: ``torch.std`` of a 1-D float32 tensor, as verl's ``grpo`` calls it on each stacked
  group. torch's full reduction (``std_var_all_cpu``) takes the float32 mean, then sums the
  squared deviations in float64: ``sqrt(Σ(x − mean_f32)² / (n − 1))`` — reproduced here exactly.
- ``std_dim``: ``torch.std(R, dim=1)`` on a ``[G, n]`` reshape (ROLL ``reward_norm``, OpenRLHF
  ``group_norm``), whose Welford kernel can differ from the 1-D result in the last bits.
- ``std_two_pass``: float32 ``sqrt(Σ(x − mean)² / (n − 1))`` (verl ``group_mean_std``, TRL ``nanstd``).

The loop in :meth:`GroupIndex.buckets` is over the distinct group *sizes* (a handful), never over
groups or rows.

**On a GPU** (:func:`advcli.ops.fused.enabled` for the values' device): the group sums of :meth:`sum`, and
so :meth:`std_two_pass`'s squares, and :meth:`std_1d`'s float64 squared deviations, are one launch of the
fused group-sum kernel each, adding each group's rows in input order as ``index_add_`` does on the CPU:
the same bits as the CPU path (``tests/unit/test_fused.py``). The means and :meth:`std_dim` stay torch
reductions of the stacked groups (torch's own order, which a kernel would not reproduce), on the values'
device. The codes stay on the host; their sort order is copied to the device once per index.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..lazy_torch import torch
from . import fused


@dataclass
class GroupIndex:
    """Rows grouped by an int64 code (0..G-1, any order of rows)."""

    codes: torch.Tensor  # int64 [R]
    num_groups: int
    _sizes: torch.Tensor | None = field(default=None, repr=False)
    _buckets: list | None = field(default=None, repr=False)
    _sorted: dict = field(default_factory=dict, repr=False)  # device -> (order, starts) for the kernels

    @staticmethod
    def from_codes(codes: torch.Tensor) -> GroupIndex:
        codes = codes.to(torch.int64)
        g = int(codes.max()) + 1 if codes.numel() else 0
        return GroupIndex(codes, g)

    @property
    def sizes(self) -> torch.Tensor:
        """int64 [G] rows per group."""
        if self._sizes is None:
            self._sizes = torch.bincount(self.codes, minlength=self.num_groups)
        return self._sizes

    @property
    def row_size(self) -> torch.Tensor:
        """int64 [R] size of each row's group."""
        return self.sizes[self.codes]

    def buckets(self) -> list[tuple[int, torch.Tensor, torch.Tensor]]:
        """[(n, group ids [G_n], row matrix [G_n, n])] for every distinct group size n.

        Row ``k`` of the matrix lists the rows of group ``ids[k]`` in their input order.
        """
        if self._buckets is None:
            order = torch.argsort(self.codes, stable=True)
            starts = torch.zeros(self.num_groups + 1, dtype=torch.int64)
            torch.cumsum(self.sizes, 0, out=starts[1:])
            out = []
            for n in torch.unique(self.sizes).tolist():
                if n == 0:
                    continue
                ids = torch.nonzero(self.sizes == n, as_tuple=True)[0]
                mat = order[starts[ids][:, None] + torch.arange(n)[None, :]]
                out.append((n, ids, mat))
            self._buckets = out
        return self._buckets

    # ---------------------------------------------------------------------------------- reductions
    def _kernel(self, x: torch.Tensor) -> bool:
        """Whether x's group sums run as the fused kernel (a float tensor where the kernels run)."""
        return x.dtype in (torch.float32, torch.float64) and fused.enabled(x)

    def _sorted_on(self, device) -> tuple[torch.Tensor, torch.Tensor]:
        """(rows in group order, stable [R]; group starts [G+1]) on ``device``, made once per index."""
        key = str(device)
        if key not in self._sorted:
            order = torch.argsort(self.codes, stable=True)
            starts = torch.zeros(self.num_groups + 1, dtype=torch.int64)
            torch.cumsum(self.sizes, 0, out=starts[1:])
            self._sorted[key] = (order.to(device), starts.to(device))
        return self._sorted[key]

    def _kernel_sums(self, x: torch.Tensor, mean: torch.Tensor | None = None):
        order, starts = self._sorted_on(x.device)
        return fused.group_sums(x, order, starts, self.num_groups, mean)

    def sum(self, x: torch.Tensor) -> torch.Tensor:
        """[G] Σ over each group (sequential index_add in x's dtype; on a GPU the fused kernel, same order)."""
        if self._kernel(x):
            return self._kernel_sums(x)[0]
        return torch.zeros(self.num_groups, dtype=x.dtype, device=x.device).index_add_(
            0, self.codes.to(x.device), x)

    def mean_f32(self, x: torch.Tensor) -> torch.Tensor:
        """[G] group means reduced as ``torch.mean`` on each group's stacked values."""
        out = torch.zeros(self.num_groups, dtype=x.dtype, device=x.device)
        for _, ids, mat in self.buckets():
            out[ids.to(x.device)] = x[mat.to(x.device)].mean(dim=1)
        return out

    def std_1d(self, x: torch.Tensor, mean: torch.Tensor, population: bool = False) -> torch.Tensor:
        """[G] unbiased std as ``torch.std`` of a 1-D tensor (float32 mean, float64 squares); NaN for n=1.
        ``population``: the biased std sqrt(Σ(x − μ)²/n) (numpy's ``std``, ddof 0); 0 for n=1."""
        if self._kernel(x):  # Σ (x − μ)² in float64, each group's rows in input order, one launch
            ss = self._kernel_sums(x, mean)[1]
        else:
            codes = self.codes.to(x.device)
            dev = x.to(torch.float64) - mean[codes].to(torch.float64)
            ss = torch.zeros(self.num_groups, dtype=torch.float64, device=x.device).index_add_(0, codes, dev * dev)
        n = self.sizes.to(device=x.device, dtype=torch.float64)
        if population:
            return torch.sqrt(ss / n).to(x.dtype)
        var = ss / (n - 1)
        var = torch.where(n > 1, var, torch.full_like(var, float("nan")))
        return torch.sqrt(var).to(x.dtype)

    def std_dim(self, x: torch.Tensor) -> torch.Tensor:
        """[G] ``torch.std(R, dim=1)`` with R the [G_n, n] stack of each size (ROLL/OpenRLHF shapes)."""
        out = torch.zeros(self.num_groups, dtype=x.dtype, device=x.device)
        for n, ids, mat in self.buckets():  # torch.std of one value is NaN (said here, not by torch's warning)
            out[ids.to(x.device)] = x[mat.to(x.device)].std(dim=1) if n > 1 else float("nan")
        return out

    def std_two_pass(self, x: torch.Tensor, mean: torch.Tensor, min_denominator: int = 1) -> torch.Tensor:
        """[G] ``sqrt(Σ(x − mean)² / max(n − 1, min_denominator))`` in x's dtype."""
        dev = x - mean[self.codes.to(x.device)]
        ss = self.sum(dev * dev)
        denom = (self.sizes - 1).clamp(min=min_denominator).to(device=x.device, dtype=x.dtype)
        return torch.sqrt(ss / denom)

    def per_row(self, per_group: torch.Tensor) -> torch.Tensor:
        return per_group[self.codes.to(per_group.device)]

    # ------------------------------------------------------------- leave-one-out / NaN-aware forms
    def stacked(self, x: torch.Tensor, fn) -> torch.Tensor:
        """[R] ``fn(x[mat])`` per size bucket, where ``fn`` maps a ``[G_n, n]`` stack (groups in code
        order, rows in input order — the shape of a framework's ``view(-1, n)``) to ``[G_n, n]``."""
        out = torch.empty_like(x)
        for _, _, mat in self.buckets():
            out[mat] = fn(x[mat])
        return out

    def onepass_baseline_std(self, x: torch.Tensor, leave_one_out: bool,
                             valid: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """[R] baseline and [R] std as NeMo RL ``calculate_baseline_and_std_per_prompt``
        (nemo_rl/algorithms/utils.py L104-198 @7ea279ab).

        ``valid`` (bool [R], default all true) is NeMo's ``valid_mask``: the rows it leaves out add nothing
        to the sums and are not counted (GRPO passes the sample mask from NVIDIA-NeMo/RL #3837 on). For a
        group whose valid rows number ``c`` > 1, with ``W = 1 − I`` (leave-one-out) or all ones,
        ``v`` the valid flags and ``k = c − [loo]``::

            b = W·(x·v) / k,   q = W·(x²·v) / k,   std = nan_to_num(sqrt((q − b²)·(k/(k−1))), 0)

        so the non-LOO std is the unbiased group std by the one-pass ``E[x²] − E[x]²`` and the LOO
        std is per row: the unbiased std of the *other* rows (LOO n = 2: k/(k−1) = inf, q − b² = 0 →
        NaN → 0). A left-out row gets the same sums over every valid row of its group, divided by
        ``k``, as NeMo's matmul gives it. ``c`` ≤ 1: baseline = x, std = 0 for the whole group.

        NeMo forms ``W·x`` with one ``torch.matmul`` (a BLAS gemv) per group, whose summation order
        depends on the row's position; in float32 the order decides the residue of ``q − b²`` for
        all-equal non-dyadic rewards (``7×0.3 + 1×0.9`` → std 9.3e-5 for the 0.9 row, A ≈ 6367).
        Each bucket of equal-size groups is summed in one fixed order (:func:`_weighted_row_sums`, not a
        batched BLAS product, whose bits for a group depend on its row's place in the product: a step
        alone and the same step inside a larger dump would differ in the last bit); the groups whose
        result can depend on the order — float32, ``q − b²`` below 1% of ``q`` on some row, and values
        whose partial sums are not all exact (:func:`order_free`) — are recomputed with NeMo's own
        per-group call, so the artefacts come out bit for bit. That loop visits only those groups.
        In float64 (``--precision float64``, the intended math) the std is two-pass over each row's
        set (a ``[G_n, n, n]`` product): an all-equal set gives exactly 0. A left-out row sums its group's
        ``m = c`` valid values but divides by ``k = c − 1``; its ``k·(q − b²)`` is then
        ``Σ (x − b)² + (k − m)·b²``, the same formula's exact value.
        """
        base = x.clone()
        std = torch.zeros_like(x)
        exact_needed = x.dtype == torch.float32
        free = order_free(x, self) if exact_needed else None
        for n, ids, mat in self.buckets():
            if n <= 1:
                continue
            w = (1 - torch.eye(n, dtype=x.dtype)) if leave_one_out else torch.ones((n, n), dtype=x.dtype)
            vals = x[mat]
            if valid is None:
                keep = None
                k = torch.tensor(float(n), dtype=x.dtype) - int(leave_one_out)
                vx, sq = vals, torch.pow(vals, 2)
            else:  # NeMo: rewards·valid_mask and pow(rewards, 2)·valid_mask, num_valid = Σ valid − [loo]
                vmask = valid[mat].to(x.dtype)
                keep = vmask.sum(dim=1) > 1
                k = vmask.sum(dim=1, keepdim=True) - int(leave_one_out)
                vx, sq = vals * vmask, torch.pow(vals, 2) * vmask
            s1 = _weighted_row_sums(vx, w)
            s2 = _weighted_row_sums(sq, w)
            if exact_needed:
                b, q = s1 / k, s2 / k
                degenerate = ((q - b.square()) < 1e-2 * q.abs()).any(dim=1) & ~free[ids]
                for gi in torch.nonzero(degenerate, as_tuple=True)[0].tolist():
                    v = vx[gi].clone()  # a fresh, aligned vector as NeMo passes to matmul
                    s1[gi] = torch.matmul(w, v)
                    s2[gi] = torch.matmul(w, sq[gi].clone())
            b, q = s1 / k, s2 / k
            if exact_needed:
                sd = ((q - b.square()) * (k / (k - 1))).sqrt().nan_to_num(0)
            else:  # float64, the intended math: two-pass over each row's set, so equal values give 0
                dev = vals[:, None, :] - b[:, :, None]  # [G_n, n, n]: value j against row i's baseline
                weight = w if valid is None else w * vmask[:, None, :]
                # k·(q − b²) = Σ_j (x_j − b)² + (k − m)·b² over the m values row i sums: the one-pass formula's
                # exact value also where m ≠ k (a left-out row's sums run over every valid row, c = k + 1)
                spread = (dev * dev * weight).sum(dim=2) + (k - weight.sum(dim=-1)) * b.square()
                sd = (spread / (k - 1)).sqrt().nan_to_num(0)
            if keep is not None:  # c ≤ 1 valid rows: NeMo sets the baseline to the reward, std stays 0
                b = torch.where(keep[:, None], b, vals)
                sd = torch.where(keep[:, None], sd, torch.zeros_like(sd))
            base[mat] = b
            std[mat] = sd
        return base, std

    def single_valued_std_sets(self, x: torch.Tensor, leave_one_out: bool,
                               valid: torch.Tensor | None = None) -> torch.Tensor:
        """bool [R]: the rewards that feed row i's std in :meth:`onepass_baseline_std` hold at most one
        distinct value, NeMo RL's ``is_trivial_distribution`` (NVIDIA-NeMo/RL #4158, merged 2026-09,
        ``calculate_baseline_and_std_per_prompt``). The set is the group's valid rows, less row i
        itself with the leave-one-out baseline; a group with at most one valid row is flagged whole.
        Equality is exact (``0.0 == -0.0``): the true std of such a set is 0, so any std float32
        leaves there is rounding residue.

        With ``d`` distinct values and ``c`` valid rows in the group, row i is flagged when ``d ≤ 1``;
        with leave-one-out and i valid, also when ``c ≤ 2`` or (``d = 2`` and i's value occurs once)."""
        r = x.numel()
        v = torch.ones(r, dtype=torch.bool) if valid is None else valid.to(torch.bool)
        idx = torch.nonzero(v, as_tuple=True)[0]
        bits = (x.to(torch.float64) + 0.0).view(torch.int64)  # + 0.0 folds -0.0 into 0.0
        pairs = torch.stack([self.codes[idx], bits[idx]], dim=1)
        distinct = torch.zeros(self.num_groups, dtype=torch.int64)
        occurs = torch.zeros(r, dtype=torch.int64)
        if idx.numel():
            uniq, inverse, counts = torch.unique(pairs, dim=0, return_inverse=True, return_counts=True)
            distinct.index_add_(0, uniq[:, 0], torch.ones(len(uniq), dtype=torch.int64))
            occurs[idx] = counts[inverse]
        n_valid = torch.zeros(self.num_groups, dtype=torch.int64).index_add_(0, self.codes, v.to(torch.int64))
        d, c = distinct[self.codes], n_valid[self.codes]
        flagged = d <= 1
        if leave_one_out:
            flagged |= v & ((c <= 2) | ((d == 2) & (occurs == 1)))
        return flagged


def _weighted_row_sums(vals: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """[G, n] ``out[g, i] = Σ_j w[i, j]·vals[g, j]``, added j = 0, 1, …, n−1 in that order, one elementwise
    multiply and add per j, so every element's bits depend on its group's values alone: not on the
    number of groups beside it, its place among them, the thread count or the CPU's BLAS kernels (a
    ``vals @ w.T`` product gives a row different last bits by the parity of its index on some CPUs).
    The loop runs over the n positions of a group, not over rows or groups."""
    out = torch.zeros_like(vals)
    for j in range(vals.shape[1]):
        out += vals[:, j:j + 1] * w[:, j]
    return out


def order_free(x: torch.Tensor, groups: GroupIndex) -> torch.Tensor:
    """[G] bool: every partial sum of the group's values and of their squares is exact in x's dtype,
    whatever the order (e.g. binary or 0.5-step rewards), so no summation order can change a result.

    Each value is a multiple of 2^-f (f = its fractional bits); a group with f_max fractional bits is
    order-free when Σ|x|·2^f_max and Σx²·2^(2·f_max) stay below 2^p (p = 24 for float32)."""
    p = 24 if x.dtype == torch.float32 else 53
    m, e = torch.frexp(x.to(torch.float64))
    mant = (m.abs() * 2.0 ** p).to(torch.int64)
    low = mant & (-mant)  # lowest set bit
    tz = torch.where(mant > 0, torch.log2(low.to(torch.float64)).round().to(torch.int64), torch.zeros_like(mant))
    frac = torch.where(mant > 0, (p - e.to(torch.int64) - tz).clamp(min=0), torch.zeros_like(mant))
    fmax = torch.zeros(groups.num_groups, dtype=torch.int64).scatter_reduce_(0, groups.codes, frac, "amax")
    scale = torch.pow(2.0, fmax.to(torch.float64))
    xd = x.to(torch.float64)
    s_abs = groups.sum(xd.abs()) * scale
    s_sq = groups.sum(xd * xd) * scale * scale
    lim = 2.0 ** p
    return (s_abs < lim) & (s_sq < lim) & (fmax <= p)


def flat_group_rows(reward: torch.Tensor, live: torch.Tensor, groups: GroupIndex, rule: str,
                    tol: float = 0.0) -> torch.Tensor:
    """[R] bool: the rows of the groups that carry no reward signal, as SkyRL's ``zero_variance_filter`` finds
    them (then it zeroes their loss masks, so their KL penalty is 0). ``reward``: each row's reward, float64 (SkyRL
    holds them as Python floats); ``live``: [R] bool, the row has a trained token (Σ loss_mask > 0).

    - ``range`` (skyrl/train/utils/trainer_utils.py ``zero_variance_filter`` @a9564572, SkyRL 0.3.0 on): a group
      with more than one live row whose live rows' rewards satisfy ``max − min <= tol``; rows that are not live
      neither count nor keep their group, but are flat with it.
    - ``std`` (the same function at skyrl-v0.1.0 and 0.2.0): a group of more than one row with ``np.std`` of its
      rewards, in row order, equal to 0 (numpy's float64 mean of equal non-dyadic rewards can land an ulp away,
      leaving a std > 0 that keeps the group). The groups of each size are stacked ``[G_n, n]`` and reduced along
      axis 1, which numpy sums pairwise per row as it sums one group's list (the same bits)."""
    import numpy as np

    codes = groups.codes
    if rule == "range":
        x = reward.to(torch.float64)
        inf = torch.full((groups.num_groups,), float("inf"), dtype=torch.float64)
        hi = (-inf).scatter_reduce(0, codes[live], x[live], "amax")
        lo = inf.scatter_reduce(0, codes[live], x[live], "amin")
        n_live = torch.zeros(groups.num_groups, dtype=torch.int64).index_add_(0, codes, live.to(torch.int64))
        flat = (n_live > 1) & (hi - lo <= tol)
        return flat[codes]
    if rule == "std":
        flat = torch.zeros(groups.num_groups, dtype=torch.bool)
        values = reward.to(torch.float64).numpy()
        for n, ids, rows in groups.buckets():  # over the distinct group sizes
            if n > 1:
                flat[ids] = torch.from_numpy(np.std(values[rows.numpy()], axis=1) == 0)
        return flat[codes]
    raise ValueError(f"unknown flat-group rule {rule!r}")
