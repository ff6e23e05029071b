"""Per-token KL estimators between the policy and the reference, one registry for every kind.

``d = logp − ref_logp`` (the sampled token's log-ratio). Each kind is registered once with its
formula; the clamps are parameters because the frameworks differ:

| framework | input clamp on −d | output clamp | source |
|---|---|---|---|
| verl ``kl_penalty_forward`` | ±20 (k3 only) | ±10 (k3 only) | core_algos.py L2215-2250 @1dda039b |
| NeMo RL ``calculate_kl`` | ±20 (all kinds) | ±10 (all kinds) | nemo_rl/algorithms/utils.py L42-101 @7ea279ab |
| ROLL ``compute_approx_kl`` | none | ±10 (k3 only) | roll/utils/functionals.py L181-211 @8eb27cc2 |
| OpenRLHF ``compute_approx_kl`` | none | ±10 (all kinds) | openrlhf/models/utils.py L64-95 @3c3be623 |
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..lazy_torch import torch
from .ragged import Ragged

KL_KINDS: dict[str, KLKind] = {}


@dataclass(frozen=True)
class KLKind:
    name: str
    formula: str
    fn: Callable[[torch.Tensor], torch.Tensor]  # of x = −d = ref − logp, already input-clamped
    # |fn| is non-decreasing in |x| on each side of 0 (fn(0) = 0): over any interval of x its largest
    # |value| is at one of the two ends — lets kl_clamp_flags rule out the output clamp from min/max x
    ends_bound: bool = False


def register_kl(name: str, formula: str, ends_bound: bool = False):
    def deco(fn):
        KL_KINDS[name] = KLKind(name, formula, fn, ends_bound)
        return fn
    return deco


@register_kl("k1", "d = logp − ref", ends_bound=True)
def _k1(x):
    return -x


@register_kl("abs", "|logp − ref|", ends_bound=True)
def _abs(x):
    return x.abs()


@register_kl("k2", "½·(logp − ref)²", ends_bound=True)
def _k2(x):
    return 0.5 * x * x


@register_kl("k3", "e^x − x − 1, x = ref − logp", ends_bound=True)
def _k3(x):
    return torch.exp(x) - x - 1


def kl_per_token(logp: torch.Tensor, ref_logp: torch.Tensor, kind: str, input_clamp: float | None = None,
                 output_clamp: float | None = None) -> torch.Tensor:
    """The per-token KL estimate of ``kind`` (k1, abs, k2, k3), with optional symmetric clamps.

    ``x = clamp(ref − logp, ±input_clamp)``; ``kl = clamp(f(x), ±output_clamp)``.
    """
    x = ref_logp - logp
    if input_clamp is not None:
        x = x.clamp(-input_clamp, input_clamp)
    kl = KL_KINDS[kind].fn(x)
    if output_clamp is not None:
        kl = kl.clamp(-output_clamp, output_clamp)
    return kl


def kl_clamp_flags(logp: torch.Tensor, ref_logp: torch.Tensor, kind: str, input_clamp: float | None,
                   output_clamp: float | None) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """Per-token flags of where :func:`kl_per_token`'s input clamp and output clamp changed the value
    (None for a clamp that is off). For the diagnostics: the same rule as the estimate itself.

    A clamp that provably changed nothing in the chunk gives a 0-dim ``False`` instead of a per-token
    tensor (it broadcasts the same): the input clamp when max|x| ≤ input_clamp; the output clamp,
    for kinds whose |f| is largest at the ends of x's range (``ends_bound``), when |f| at min x and
    max x stays below the clamp by a 1e-3 margin (so an ulp of rounding in f cannot matter). One
    min/max pass instead of the ~8 element-wise passes of the flags, on every chunk with no clamp."""
    x = ref_logp - logp
    if x.numel():
        lo, hi = torch.aminmax(x)
        lo, hi = float(lo), float(hi)
        no = torch.zeros((), dtype=torch.bool, device=x.device)
        inside = input_clamp is None or max(-lo, hi) <= input_clamp
        if inside and (output_clamp is None or KL_KINDS[kind].ends_bound):
            flag_in = None if input_clamp is None else no
            if output_clamp is None:
                return flag_in, None
            ends = KL_KINDS[kind].fn(torch.tensor([lo, hi], dtype=x.dtype, device=x.device)).abs()
            if float(ends.max()) <= output_clamp * (1 - 1e-3):
                return flag_in, no
    flag_in = x.abs() > input_clamp if input_clamp is not None else None
    if input_clamp is not None:
        x = x.clamp(-input_clamp, input_clamp)
    flag_out = KL_KINDS[kind].fn(x).abs() > output_clamp if output_clamp is not None else None
    return flag_in, flag_out


def row_kl_sums(layout: Ragged, kld: torch.Tensor, mask: torch.Tensor,
                masked: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """(Σ_t kld, verl apply_kl_penalty's masked_mean(kld, m, axis=-1) = Σ kld·m / (Σm + 1e-8)) per row;
    ``kld`` is the KL term as it enters the rewards. ``masked``: ``kld`` is already ``kld·m`` (0/1
    mask), so ``kld·m`` is ``kld`` bit for bit and Σ kld is taken once; Σm, a count, is the same
    float from an integer prefix sum."""
    total = layout.row_sum(kld)
    if masked:
        count = layout.count_per_row(mask).to(mask.dtype)
        return total, total / (count + 1e-8)
    return total, layout.row_sum(kld * mask) / (layout.row_sum(mask) + 1e-8)


@dataclass
class KLController:
    """The KL coefficient of the reward from scope to scope: verl's ``FixedKLController`` and
    ``AdaptiveKLController`` (verl/trainer/ppo/core_algos.py: ``value *= 1 + clip(current/target − 1, ±0.2)
    · n_steps / horizon`` after each batch, n_steps = the batch's rows; OpenRLHF's, ppo_trainer.py L250-253
    @3c3be623, counts rollout.batch_size × n_samples_per_prompt: ``update_rows``). The one object every route steps:
    the local engine over every scope of the run (``advcli.pipeline.rows.kl_coefs``), Ray's per-step driver
    carrying it from one step to the next (``advcli.engines.ray_steps``), ``advcli stats`` replaying an
    output's run (``advcli.figures.of_file``), so all make the same float operations in the same order.
    ``value``: the coefficient before the next update."""

    value: float
    adaptive: bool  # kl.controller=adaptive with KL in the reward (no KL in the reward: nothing to update)
    target: float
    horizon: float
    coef_min: float | None = None
    update_rows: int | None = None  # n_steps of every update (None: the scope's rows)

    @classmethod
    def of_section(cls, kl, kl_on: bool, value: float | None = None) -> KLController:
        """The controller of a run spec's KL section ``kl`` (``kl_on``: KL enters the reward), starting at
        kl.coef (or ``value``, a coefficient carried in)."""
        return cls(float(kl.coef) if value is None else value, kl.controller == "adaptive" and kl_on,
                   kl.target, kl.horizon, kl.coef_min, kl.update_rows)

    @classmethod
    def of(cls, plan, value: float | None = None) -> KLController:
        """The controller of a run's plan (``plan.run.kl``, ``plan.kl_on``)."""
        return cls.of_section(plan.run.kl, plan.kl_on, value)

    def beta(self) -> float:
        """The coefficient the next scope uses (SkyRL: max(coef_min, β))."""
        return self.value if self.coef_min is None else max(self.value, float(self.coef_min))

    def update(self, current: float, rows: int) -> None:
        """After a scope of ``rows`` rows whose mean KL was ``current`` (n_steps: ``update_rows`` where set)."""
        if self.adaptive:
            err = float(np.clip(current / self.target - 1, -0.2, 0.2))
            n = rows if self.update_rows is None else self.update_rows
            self.value *= 1 + err * n / self.horizon


def scope_coefficients(ctl: KLController, scope_codes: torch.Tensor, num_scopes: int,
                       kl_mean: torch.Tensor | None) -> tuple[list[float], list[float]]:
    """(β each scope uses, each scope's current_kl = the mean of its rows' ``kl_mean`` in their dtype), stepping
    ``ctl`` over the scopes in order (0.0 where ``kl_mean`` is None: not known yet, or a fixed controller)."""
    betas, kls = [], []
    for s in range(num_scopes):  # one update per scope (a step): the controller is sequential by definition
        rows = scope_codes == s
        current = float(kl_mean[rows].mean()) if kl_mean is not None and bool(rows.any()) else 0.0
        betas.append(ctl.beta())
        kls.append(current)
        ctl.update(current, int(rows.sum()))
    return betas, kls


def replay_reward_kl(kl, precision: str, chunks, scope_codes, num_scopes: int, flat=None):
    """The reward KL of a run (``kl``: its run spec's KL section; ``precision``: float32 or float64) replayed
    from its log-prob columns, for ``advcli stats`` of its output: (each row's verl ``masked_mean(kld, m)``
    [R] in the run's dtype, each scope's β, each scope's current_kl), by the run's own operations
    (:func:`kl_per_token`, :func:`row_kl_sums`, :class:`KLController` over the scopes in order), so the same
    floats. ``chunks``: ``(offsets [B+1] from 0, mask values, {role: values})`` numpy arrays per chunk, the
    roles among ``kl.policy`` and ``ref_log_probs`` (a missing one counts as zeros, ``kl.missing=zeros``).
    ``flat``: (each row's reward in float64, its Σ mask, its group code) numpy arrays where the run left the KL
    term out of flat groups (``kl.skip_flat_groups``): those rows' KL is 0 (:func:`.groups.flat_group_rows`)."""
    dtype = torch.float64 if precision == "float64" else torch.float32
    means = []
    for offsets, mask01, columns in chunks:
        mask = torch.from_numpy(np.asarray(mask01) != 0).to(dtype)
        # (an Arrow buffer is read-only: copied into the run's dtype, which torch may write)
        tok = {r: torch.from_numpy(np.array(v, dtype=np.float64 if dtype == torch.float64 else np.float32))
               for r, v in columns.items()}
        lp, ref = (tok.get(r, torch.zeros_like(mask)) for r in (kl.policy, "ref_log_probs"))
        kld = kl_per_token(lp, ref, kl.estimator, kl.input_clamp, kl.output_clamp)
        if kl.mask:
            kld = kld * mask
        means.append(row_kl_sums(Ragged(torch.from_numpy(np.array(offsets, np.int64))), kld, mask, kl.mask)[1])
    kl_row = torch.cat(means) if means else torch.zeros(0, dtype=dtype)
    if flat is not None:
        from .groups import GroupIndex, flat_group_rows
        reward, valid, group_codes = (torch.from_numpy(np.asarray(x)) for x in flat)
        skipped = flat_group_rows(reward.to(torch.float64), valid > 0, GroupIndex.from_codes(group_codes),
                                  kl.skip_flat_groups, float(kl.flat_tol))
        kl_row = torch.where(skipped, torch.zeros_like(kl_row), kl_row)
    betas, kls = scope_coefficients(KLController.of_section(kl, True), torch.as_tensor(scope_codes, dtype=torch.int64),
                                    num_scopes, kl_row)
    return kl_row, betas, kls
