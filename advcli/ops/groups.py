"""Group statistics over the per-row table, vectorised, with the frameworks' float32 behaviour.

The row table holds one entry per response of the whole input (a few bytes per row), so group
statistics are computed exactly over every member of a group, wherever its rows sit in the file.

Bit-level behaviour matters for all-equal groups of non-dyadic rewards (``spec/README.md`` §3), so
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
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class GroupIndex:
    """Rows grouped by an int64 code (0..G-1, any order of rows)."""

    codes: torch.Tensor  # int64 [R]
    num_groups: int
    _sizes: torch.Tensor | None = field(default=None, repr=False)
    _buckets: list | None = field(default=None, repr=False)

    @staticmethod
    def from_codes(codes: torch.Tensor) -> "GroupIndex":
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
    def sum(self, x: torch.Tensor) -> torch.Tensor:
        """[G] Σ over each group (sequential index_add in x's dtype)."""
        return torch.zeros(self.num_groups, dtype=x.dtype).index_add_(0, self.codes, x)

    def mean_f32(self, x: torch.Tensor) -> torch.Tensor:
        """[G] group means reduced as ``torch.mean`` on each group's stacked values."""
        out = torch.zeros(self.num_groups, dtype=x.dtype)
        for _, ids, mat in self.buckets():
            out[ids] = x[mat].mean(dim=1)
        return out

    def std_1d(self, x: torch.Tensor, mean: torch.Tensor) -> torch.Tensor:
        """[G] unbiased std as ``torch.std`` of a 1-D tensor (float32 mean, float64 squares); NaN for n=1."""
        dev = x.to(torch.float64) - mean[self.codes].to(torch.float64)
        ss = torch.zeros(self.num_groups, dtype=torch.float64).index_add_(0, self.codes, dev * dev)
        n = self.sizes.to(torch.float64)
        var = ss / (n - 1)
        var = torch.where(n > 1, var, torch.full_like(var, float("nan")))
        return torch.sqrt(var).to(x.dtype)

    def std_dim(self, x: torch.Tensor) -> torch.Tensor:
        """[G] ``torch.std(R, dim=1)`` with R the [G_n, n] stack of each size (ROLL/OpenRLHF shapes)."""
        out = torch.zeros(self.num_groups, dtype=x.dtype)
        for _, ids, mat in self.buckets():
            out[ids] = x[mat].std(dim=1)
        return out

    def std_two_pass(self, x: torch.Tensor, mean: torch.Tensor, min_denominator: int = 1) -> torch.Tensor:
        """[G] ``sqrt(Σ(x − mean)² / max(n − 1, min_denominator))`` in x's dtype."""
        dev = x - mean[self.codes]
        ss = self.sum(dev * dev)
        denom = (self.sizes - 1).clamp(min=min_denominator).to(x.dtype)
        return torch.sqrt(ss / denom)

    def per_row(self, per_group: torch.Tensor) -> torch.Tensor:
        return per_group[self.codes]
