"""AReaL's ``Normalization`` (areal/utils/data.py L1382-1638 @cbff54d6): one NormConfig, two uses.

AReaL normalises the row rewards (``actor.reward_norm``, no mask) and the token advantages
(``actor.adv_norm``, with the loss mask) with the same class. For an element ``j`` with mask ``m_j``
(1 for rows), over a *scope* (one training step: the batch) split into *groups* (AReaL's per-prompt
trajectory dicts)::

    mean_j   batch: μ_B = Σxm/Σm                    (float64; Σm = 0 → 0)
             group: μ_g = Σ_g xm/Σ_g m              (float64, stored in a float32 tensor: rounded)
             null : 0
             leave-one-out: (S − x_j·m_j)/max(N − m_j, 1) where m_j > 0 (N ≤ 1 → 0); a group of
             one row uses itself as its mean (→ 0)
    ss       Σ ((x_j − mean_j)·m_j)² over the std level (batch or group), about the chosen mean
    std      unbiased: sqrt(ss/(N − 1)), N ≤ 1 → 1 (a group of one row → 1); biased: sqrt(ss/N), N = 0 → 1
             std level null: std = 1 and eps = 0
    out_j    ((x_j − mean_j)·m_j)/(std + eps)        cast to float32

``x − mean`` is taken in float64 for a batch mean and in float32 for a group (or null) mean: the
float64 group mean is first rounded to float32 (``mean = torch.zeros_like(x)``). That rounding is the
framework's one float32 artefact: ``round32=True`` reproduces it (the float32
run); ``round32=False`` (``--precision float64``) keeps the float64 mean. A scope whose Σm is 0 is
returned unchanged.

The token statistics come from a pass over chunks: per group the count ``N``, a shift ``c`` (the
group's first trained value) and the exact sums ``S' = Σ(x − c)m`` and ``Q' = Σ(x − c)²m``
(``ExactSums``: the same totals in any chunking). Every ``ss`` above is then
``Q' − 2(a − c)S' + N(a − c)²`` for the group's mean ``a``, with no cancellation for tight groups,
and a leave-one-out ``ss`` is ``(N/(N − 1))²`` times the ``ss`` about the plain mean (exact algebra;
for token advantages AReaL's float32 rounding of each group leave-one-out mean is not reproduced
inside the std). The rows of ``reward_norm`` are all in memory: their ``ss`` is summed from the
elements themselves, about the means exactly as AReaL stores them (:func:`normalize_rows`).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import AdvcliError
from ..lazy_torch import torch
from .whiten import ExactSums

LEVELS = ("batch", "group", None)
FIELDS = ("mean_level", "mean_leave1out", "std_level", "std_unbiased", "eps", "group_size")


@dataclass(frozen=True)
class NormSpec:
    """AReaL ``NormConfig`` (cli_args.py L43-97 @cbff54d6) with its defaults."""

    mean_level: str | None = "batch"
    leave1out: bool = False
    std_level: str | None = "batch"
    unbiased: bool = True
    eps: float = 1e-5
    # AReaL <= 1.0.4's fixed slices of this many rows (0: per-prompt groups): a group of fewer rows is the
    # remainder past the last whole slice, whose group mean and group std AReaL left at 0 (#1673)
    slices: int = 0

    @staticmethod
    def parse(value, key: str) -> NormSpec | None:
        """A mapping of NormConfig fields (missing ones take the defaults), or None (off)."""
        if value is None:
            return None
        if isinstance(value, NormSpec):
            return value
        if not isinstance(value, dict):
            raise AdvcliError(f"key {key}: expected a mapping of NormConfig fields ({', '.join(FIELDS)}) or null, "
                              f"got {value!r}")
        unknown = [k for k in value if k not in FIELDS + ("slices",)]
        if unknown:
            raise AdvcliError(f"key {key}.{unknown[0]}: not a NormConfig field; fields: {', '.join(FIELDS)}")
        out = {}
        for name in ("mean_level", "std_level"):
            v = value.get(name, "batch")
            if v in ("none", "None", "null"):
                v = None
            if v not in LEVELS:
                raise AdvcliError(f"key {key}.{name}: {v!r} is not a level; use batch, group or null")
            out[name] = v
        for name in ("mean_leave1out", "std_unbiased"):
            v = value.get(name, name == "std_unbiased")
            if not isinstance(v, bool):
                raise AdvcliError(f"key {key}.{name}: {v!r} is not a boolean (true or false)")
            out[name] = v
        eps = value.get("eps", 1e-5)
        if isinstance(eps, str):  # PyYAML reads 1e-5 (no dot) as a string
            try:
                eps = float(eps)
            except ValueError:
                raise AdvcliError(f"key {key}.eps: {eps!r} is not a number") from None
        if isinstance(eps, bool) or not isinstance(eps, (int, float)):
            raise AdvcliError(f"key {key}.eps: {eps!r} is not a number")
        gs = value.get("group_size", 1)
        if isinstance(gs, bool) or not isinstance(gs, int) or gs < 1:
            raise AdvcliError(f"key {key}.group_size: {gs!r} is not a positive integer")
        slices = value.get("slices", 0)
        if isinstance(slices, bool) or not isinstance(slices, int) or slices < 0:
            raise AdvcliError(f"key {key}.slices: {slices!r} is not a row count (0 = per-prompt groups)")
        return NormSpec(out["mean_level"], out["mean_leave1out"], out["std_level"], out["std_unbiased"], float(eps),
                        slices)

    def as_dict(self) -> dict:
        out = {"mean_level": self.mean_level, "mean_leave1out": self.leave1out, "std_level": self.std_level,
               "std_unbiased": self.unbiased, "eps": self.eps}
        return {**out, "slices": self.slices} if self.slices else out

    @property
    def uses_groups(self) -> bool:
        return "group" in (self.mean_level, self.std_level)


@dataclass
class GroupMoments:
    """Per group (codes 0..G-1, each inside one scope): N = Σm, shift c, S' = Σ(x − c)m, Q' = Σ(x − c)²m,
    the smallest and largest trained x, and the group's row count."""

    count: torch.Tensor  # float64 [G]
    shift: torch.Tensor  # float64 [G]
    s1: torch.Tensor  # float64 [G]
    s2: torch.Tensor  # float64 [G]
    lo: torch.Tensor  # float64 [G]
    hi: torch.Tensor  # float64 [G]
    rows: torch.Tensor  # int64 [G]
    scope: torch.Tensor  # int64 [G]
    num_scopes: int


class MomentAccumulator:
    """Accumulates :class:`GroupMoments` over chunks of elements given in input order."""

    def __init__(self, group_rows: torch.Tensor, group_scope: torch.Tensor, num_scopes: int):
        G = group_rows.numel()
        self.rows, self.scope, self.num_scopes = group_rows, group_scope, num_scopes
        self.count = torch.zeros(G, dtype=torch.int64)
        self.shift = torch.zeros(G, dtype=torch.float64)
        self.has_shift = torch.zeros(G, dtype=torch.bool)
        self.lo = torch.full((G,), float("inf"), dtype=torch.float64)
        self.hi = torch.full((G,), float("-inf"), dtype=torch.float64)
        self.sums = (ExactSums(G), ExactSums(G))

    def add(self, x: torch.Tensor, mask: torch.Tensor | None, group: torch.Tensor) -> None:
        """Elements ``x`` (their mask, their group code), the next ones in input order."""
        x = x.detach().to("cpu", torch.float64)
        group = group.to("cpu", torch.int64)
        keep = torch.ones_like(x, dtype=torch.bool) if mask is None else mask.detach().to("cpu") > 0
        if not bool(keep.any()):
            return
        xk, gk = x[keep], group[keep]
        G = self.count.numel()
        self.count.index_add_(0, gk, torch.ones_like(gk))
        # the shift: each group's first trained value in input order (independent of the chunking)
        first = torch.full((G,), xk.numel(), dtype=torch.int64).scatter_reduce_(
            0, gk, torch.arange(xk.numel()), "amin")
        new = (~self.has_shift) & (first < xk.numel())
        self.shift[new] = xk[first[new]]
        self.has_shift |= new
        d = xk - self.shift[gk]
        self.sums[0].add(d, gk)
        self.sums[1].add(d * d, gk)
        self.lo.scatter_reduce_(0, gk, xk, "amin")
        self.hi.scatter_reduce_(0, gk, xk, "amax")

    def finish(self) -> GroupMoments:
        return GroupMoments(count=self.count.to(torch.float64), shift=self.shift, s1=_totals(self.sums[0]),
                            s2=_totals(self.sums[1]), lo=self.lo, hi=self.hi, rows=self.rows, scope=self.scope,
                            num_scopes=self.num_scopes)


def _totals(es: ExactSums) -> torch.Tensor:
    """Every group's exact total, correctly rounded (``ExactSums.totals`` in one walk over the bins)."""
    from fractions import Fraction

    per: dict[int, list] = {}
    for (g, e), v in es.bins.items():
        if v:
            per.setdefault(g, []).append((e, v))
    out = torch.zeros(es.num_scopes, dtype=torch.float64)
    for g, ints in per.items():
        e0 = min(e for e, _ in ints)
        num = sum(v << (e - e0) for e, v in ints)
        out[g] = float(Fraction(num) * Fraction(2) ** (e0 - 53))
    return out + es.special


def _ss(mom: GroupMoments, a: torch.Tensor) -> torch.Tensor:
    """Σ (x − a)²m per group, for a per-group constant ``a`` (float64)."""
    d = a - mom.shift
    return (mom.s2 - 2 * d * mom.s1 + mom.count * d * d).clamp(min=0)


@dataclass
class GroupNorm:
    """Per-group constants of one normalisation: the mean rule and the divisor ``std + eps``."""

    mean: torch.Tensor  # float64 [G]: the per-group mean (non leave-one-out), already rounded where round32
    loo: str  # "" (plain), "batch" or "group": the mean is per element, from total/count below
    total: torch.Tensor  # float64 [G]: S of the leave-one-out level (scope or group) of each group
    n: torch.Tensor  # float64 [G]: N of that level
    self_mean: torch.Tensor  # bool [G]: group of one row with leave-one-out: the mean is x itself
    denom: torch.Tensor  # float64 [G]: std + eps (float32-rounded std where round32 and std is group level)
    identity: torch.Tensor  # bool [G]: the scope has no trained element: x unchanged
    center32: bool  # x − mean in float32 (group / null mean in a float32 run)
    a64: torch.Tensor  # float64 [G]: the float64 mean (diagnostics)
    std64: torch.Tensor  # float64 [G]: the std from the float64 mean (diagnostics)


def plan_norm(mom: GroupMoments, spec: NormSpec, round32: bool, ss_direct: torch.Tensor | None = None) -> GroupNorm:
    """The constants of :func:`apply_norm` from the group moments (module docstring). ``ss_direct``:
    Σ((x − mean_j)·m)² per group computed from the elements themselves (the rows, in memory: exact,
    the float32 rounding of leave-one-out means included) instead of from the moments."""
    G = mom.count.numel()
    S = mom.num_scopes
    f64 = torch.float64
    n_g = mom.count
    tot_g = mom.shift * n_g + mom.s1
    mu_g = torch.where(n_g > 0, tot_g / n_g.clamp(min=1), torch.zeros_like(tot_g))
    n_s = torch.zeros(S, dtype=f64).index_add_(0, mom.scope, n_g)
    tot_s = torch.zeros(S, dtype=f64).index_add_(0, mom.scope, tot_g)
    mu_s = torch.where(n_s > 0, tot_s / n_s.clamp(min=1), torch.zeros_like(tot_s))
    n_sg, tot_sg, mu_sg = n_s[mom.scope], tot_s[mom.scope], mu_s[mom.scope]
    zeros = torch.zeros(G, dtype=f64)
    # AReaL 1.0.4 (areal/utils/data.py Normalization.__call__): its group loops run over bs // group_size whole
    # slices, so the rows past them keep the group mean and the group std of torch.zeros_like(x) (#1673)
    tail = (mom.rows < spec.slices) if spec.slices else torch.zeros(G, dtype=torch.bool)
    # 1.0.4 with group_size 1 and mean_leave1out: a slice's leave-one-out mean is 0 (its special case)
    zero_mean = tail | (mom.rows == 1) if spec.slices == 1 else tail
    loo, self_mean = "", torch.zeros(G, dtype=torch.bool)
    total, n = zeros, zeros
    if spec.mean_level == "batch":
        if spec.leave1out:
            small = n_sg <= 1
            loo = "batch"
            total, n = tot_sg, n_sg
            k = n_sg / (n_sg - 1).clamp(min=1)
            ss = torch.where(small, _ss(mom, zeros), k * k * _ss(mom, mu_sg))
            mean = torch.where(small, zeros, mu_sg)
            n = torch.where(small, zeros, n)  # N ≤ 1: mean 0 everywhere
        else:
            mean = mu_sg
            ss = _ss(mom, mean)
        a64, ss64 = mean, ss
    elif spec.mean_level == "group":
        if spec.leave1out:
            loo = "group"
            self_mean = (mom.rows == 1) & ~zero_mean
            small = ((n_g <= 1) & ~self_mean) | zero_mean
            total, n = tot_g, torch.where(small, zeros, n_g)
            k = n_g / (n_g - 1).clamp(min=1)
            ss = torch.where(self_mean, zeros, torch.where(small, _ss(mom, zeros), k * k * _ss(mom, mu_g)))
            mean = torch.where(small, zeros, mu_g)
            a64, ss64 = mean, ss
        else:
            a64 = torch.where(tail, zeros, mu_g)
            ss64 = _ss(mom, a64)
            mean = a64.to(torch.float32).to(f64) if round32 else a64
            ss = _ss(mom, mean)
    else:
        mean = a64 = zeros
        ss = ss64 = _ss(mom, zeros)

    def std_of(ss_: torch.Tensor):
        if spec.std_level is None:
            return torch.ones(G, dtype=f64)
        if spec.std_level == "batch":
            ss_s = torch.zeros(S, dtype=f64).index_add_(0, mom.scope, ss_)[mom.scope]
            nn = n_sg
        else:
            ss_s, nn = ss_, n_g
        if spec.unbiased:
            std = torch.where(nn <= 1, torch.ones_like(nn), (ss_s / (nn - 1).clamp(min=1)).sqrt())
            if spec.std_level == "group":  # group_sz == 1 and std_unbiased: std 1
                std = torch.where(mom.rows == 1, torch.ones_like(std), std)
        else:
            std = torch.where(nn == 0, torch.ones_like(nn), (ss_s / nn.clamp(min=1)).sqrt())
        if spec.std_level == "group":  # the remainder past AReaL 1.0.4's slices: std 0, divided by eps
            std = torch.where(tail, torch.zeros_like(std), std)
        return std

    eps = 0.0 if spec.std_level is None else spec.eps
    std = std_of(ss if ss_direct is None else ss_direct)
    if round32 and spec.std_level == "group":  # std = torch.zeros_like(x): float32, then + eps in float32
        denom = (std.to(torch.float32) + torch.tensor(eps, dtype=torch.float32)).to(f64)
    else:
        denom = std + eps
    identity = n_sg == 0
    return GroupNorm(mean=mean, loo=loo, total=total, n=n, self_mean=self_mean, denom=denom, identity=identity,
                     center32=round32 and spec.mean_level != "batch", a64=a64, std64=std_of(ss64) + eps)


def apply_norm(x: torch.Tensor, mask: torch.Tensor | None, group: torch.Tensor, gn: GroupNorm,
               out_dtype: torch.dtype) -> torch.Tensor:
    """``((x − mean)·m)/(std + eps)`` per element (``group``: each element's group code)."""
    centred = _centred(x, mask, group, gn)
    g = group.to(x.device)
    out = centred / gn.denom.to(x.device)[g]
    out = torch.where(gn.identity.to(x.device)[g], x.to(torch.float64), out)
    return out.to(out_dtype)


def _element_mean(x: torch.Tensor, mask: torch.Tensor | None, group: torch.Tensor, gn: GroupNorm) -> torch.Tensor:
    """Each element's mean (float64 values; float32-representable where ``gn.center32``: AReaL stores a
    group or null mean in ``torch.zeros_like(x)``)."""
    dev = x.device
    g = group.to(dev)
    x64 = x.to(torch.float64)
    if gn.loo:
        m64 = torch.ones_like(x64) if mask is None else mask.to(torch.float64)
        total, n = gn.total.to(dev)[g], gn.n.to(dev)[g]
        loo_mean = (total - x64 * m64) / (n - m64).clamp(min=1)
        plain = torch.where(n > 0, total / n.clamp(min=1), torch.zeros_like(total))
        mean = torch.where(n <= 0, torch.zeros_like(total), torch.where(m64 > 0, loo_mean, plain))
        mean = torch.where(gn.self_mean.to(dev)[g], x64, mean)
    else:
        mean = gn.mean.to(dev)[g]
    if gn.center32:
        mean = mean.to(torch.float32).to(torch.float64)
    return mean


def _centred(x: torch.Tensor, mask: torch.Tensor | None, group: torch.Tensor, gn: GroupNorm) -> torch.Tensor:
    """``(x − mean_j)·m_j`` as AReaL's output takes it: in float32 where ``gn.center32``, else float64."""
    mean = _element_mean(x, mask, group, gn)
    m64 = torch.ones_like(mean) if mask is None else mask.to(torch.float64)
    if gn.center32:
        return (x.to(torch.float32) - mean.to(torch.float32)).to(torch.float64) * m64
    return (x.to(torch.float64) - mean) * m64


def normalize_rows(x: torch.Tensor, group: torch.Tensor, group_rows: torch.Tensor, group_scope: torch.Tensor,
                   num_scopes: int, spec: NormSpec, round32: bool) -> tuple[torch.Tensor, GroupNorm, GroupMoments]:
    """AReaL ``reward_norm`` on the row rewards (no mask): (normalised [R] in x's dtype, constants, moments)."""
    acc = MomentAccumulator(group_rows, group_scope, num_scopes)
    acc.add(x, None, group)
    mom = acc.finish()
    gn = plan_norm(mom, spec, round32)
    if spec.std_level is not None:  # the rows are all here: Σ(x − mean_j)² from the elements themselves,
        # in float64 about the stored (float32-rounded) means, as AReaL's _compute_std takes it
        c = x.to(torch.float64) - _element_mean(x, None, group, gn)
        ss = torch.zeros(mom.count.numel(), dtype=torch.float64).index_add_(0, group, c * c)
        gn = plan_norm(mom, spec, round32, ss_direct=ss)
    return apply_norm(x, None, group, gn, x.dtype), gn, mom


def hazard_groups(mom: GroupMoments, gn: GroupNorm, noise_ulps: float = 0.0, rtol: float = 1e-4,
                  atol: float = 1e-5) -> torch.Tensor:
    """Groups whose float32 result a float64 computation would not reproduce to ``atol + rtol·|A64|``
    (|A64| the group's largest float64 output): the float32 rounding of the group mean (where
    ``gn.center32``) plus ``noise_ulps`` float32 ulps of the values (the error the float32 computation
    of x itself carries, e.g. AReaL's float32 GAE), divided by ``std + eps``."""
    big = torch.maximum(mom.hi.abs(), mom.lo.abs()).nan_to_num(0.0, 0.0, 0.0)
    err = noise_ulps * big * 2.0 ** -24
    if gn.center32:
        err = err + (gn.mean - gn.a64).abs()
    spread = torch.maximum((mom.hi - gn.a64).abs(), (mom.lo - gn.a64).abs())
    a64max = torch.where(mom.count > 0, spread / gn.std64, torch.zeros_like(spread))
    flag = (mom.count > 0) & ~gn.identity & (err / gn.denom > atol + rtol * a64max)
    return torch.nonzero(flag, as_tuple=True)[0]
