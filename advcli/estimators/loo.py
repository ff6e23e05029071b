"""Group estimators with a leave-one-out (or mean) baseline and a per-row one-pass std: the GRPO and
GDPO estimators of NVIDIA NeMo RL's GRPO loop.

Both match ``nemo_rl/algorithms/advantage_estimator.py`` at NVIDIA-NeMo/RL @ 7ea279ab (line numbers
there) and take their statistics from :meth:`GroupIndex.onepass_baseline_std` (NeMo
``calculate_baseline_and_std_per_prompt``), float32 residues included. NeMo broadcasts the advantage
over every position of the row, masked ones too (``mask_output`` false).
"""
from __future__ import annotations

from ..config import Key
from ..errors import AdvcliError
from ..lazy_torch import torch
from ..ops.batch import RowTable
from . import EstimatorSpec, register

LOO = Key(True, "leave-one-out baseline and per-row leave-one-out std (false: group mean and group std)",
          None, "bool")
NORMALIZE = Key(True, "divide by std + eps, only on rows whose std is > 0", None, "bool")
EPS = Key(1e-6, "epsilon added to the std (where the std is > 0)", None, "float")
MASK_OUTPUT = Key(False, "multiply the broadcast advantage by the response mask (NeMo RL: false)", None, "bool")


def _groups(table: RowTable):
    """The row groups: present, since these estimators' specs say uses_groups and the plan refuses a run
    without groups before any math (:func:`advcli.pipeline.plan.make_plan`)."""
    return table.groups


SKIP_SINGLE_VALUED = Key(True, "normalize only where the rewards feeding the row's std are not all one value "
                         "(NeMo RL #4158; false: where the std is > 0, as before it)", None, "bool")
VALID_MASK = Key(True, "leave rows whose sample_mask column is 0 out of the group baseline and std (NeMo RL #3837; "
                 "false, or no sample_mask column: every row counts)", None, "bool")


def grpo_loo_adv(groups, r: torch.Tensor, leave_one_out: bool, normalize: bool, eps: float,
                 valid: torch.Tensor | None = None, skip_single_valued: bool = False) -> torch.Tensor:
    """NeMo ``GRPOAdvantageEstimator.compute_advantage`` (advantage_estimator.py L57-98 @7ea279ab)::

        b, σ = baseline_and_std(r, valid)      (leave-one-out or group; ≤ 1 valid row: b = r, σ = 0)
        A_i  = r_i − b_i
        A_i  = A_i / (σ_i + eps)   only where σ_i > 0 [and the set feeding σ_i is not single-valued]

    Rows whose std is 0 keep the unnormalised ``r − b`` (LOO ``[1,0,0,0]``: row 0 gets 1.0; LOO
    n = 2: ±(r_1 − r_2)); a group of one gets 0. ``skip_single_valued`` is NVIDIA-NeMo/RL #4158
    (merged 2026-09): ``normalize_mask = (std > 0) & ~is_trivial_distribution``, so a float32 residue
    std of identical leave-one-out peers no longer divides (``7×0.3 + 1×0.9``: the 0.9 row gets 0.6,
    not ≈ 6367). ``valid`` is ``valid_mask`` (#3837: the sample mask, GRPO only).
    """
    base, std = groups.onepass_baseline_std(r, leave_one_out, valid)
    adv = r - base
    if normalize:
        pos = std > 0
        if skip_single_valued:
            pos = pos & ~groups.single_valued_std_sets(r, leave_one_out, valid)
        adv = torch.where(pos, adv / (std + torch.tensor(eps, dtype=r.dtype)), adv)
    return adv


def sample_valid(table: RowTable, p: dict) -> torch.Tensor | None:
    """bool [R] NeMo's ``valid_mask`` from the sample_mask column (NeMo dumps: ``sample_loss_mask``) when
    ``valid_mask`` is on and the input has the column; None (every row valid) otherwise."""
    col = table.columns.get("sample_mask")
    if not p.get("valid_mask") or col is None:
        return None
    return col != 0


def grpo_loo_row(table: RowTable, p: dict) -> torch.Tensor:
    return grpo_loo_adv(_groups(table), table.score, p["leave_one_out"], p["normalize"], p["eps"],
                        sample_valid(table, p), p["skip_single_valued"])


register(EstimatorSpec(
    name="grpo_loo", level="row", uses_groups=True, row_constant=True, row_fn=grpo_loo_row,
    zero_for_uniform_groups=True, optional=("sample_mask",),
    formula="A_i = r_i − b_i, / (σ_i + eps) where σ_i > 0 (and, with skip_single_valued, the rewards feeding σ_i "
            "are not all equal); b_i = mean of the other rows (leave_one_out) or of the group, σ_i their unbiased "
            "one-pass std sqrt((E[r²] − E[r]²)·k/(k−1)), over the rows whose sample_mask is 1 (valid_mask); "
            "≤ 1 such row: 0",
    source="NeMo RL GRPOAdvantageEstimator + calculate_baseline_and_std_per_prompt "
           "(advantage_estimator.py L57-98, utils.py L104-198 @7ea279ab; #3837 valid_mask, #4158 trivial sets)",
    params={"leave_one_out": LOO, "normalize": NORMALIZE, "eps": EPS, "mask_output": MASK_OUTPUT,
            "skip_single_valued": SKIP_SINGLE_VALUED, "valid_mask": VALID_MASK}))


def batch_zscore_rows(x: torch.Tensor, scopes) -> torch.Tensor:
    """Per scope: ``(x − mean(x))/std(x)`` if ``std(x) > 0`` else ``x − mean(x)`` (torch.std unbiased,
    no eps; one row: std NaN → centred → 0). NeMo ``GDPOAdvantageEstimator`` L184-188. The loop is
    over scopes (training steps), each reduced with the same full-tensor torch calls NeMo makes."""
    out = torch.empty_like(x)
    for s in range(scopes.num_groups):
        idx = torch.nonzero(scopes.codes == s, as_tuple=True)[0]
        a = x[idx]
        sd = a.std()
        out[idx] = (a - a.mean()) / sd if bool(sd > 0) else a - a.mean()
    return out


def check_gdpo_loo_weights(p: dict, components: list[str]) -> None:
    """One weight per reward component (in the sorted order of the names) where weights are given."""
    if p["weights"] is not None and len(p["weights"]) != len(components):
        raise AdvcliError(f"gdpo: {len(p['weights'])} reward weights for {len(components)} reward components "
                          f"{list(components)} (one weight per component, in the sorted order of the names)")


def gdpo_loo_row(table: RowTable, p: dict) -> torch.Tensor:
    """NeMo ``GDPOAdvantageEstimator.compute_advantage`` (L101-190): every component through
    :func:`grpo_loo_adv`, ``A = Σ_k w_k A^k`` in component order, then a z-score over the rows of the
    batch (:func:`batch_zscore_rows`); every row counts (GDPO takes no ``valid_mask``, #3837 left it
    so), and ``skip_single_valued`` is #4158's guard, which GDPO got too. NeMo takes the ``reward/*``
    keys sorted by name; the flavor passes them in that order."""
    g = _groups(table)
    comps = [k for k in table.columns if k.startswith("component:")]  # >= 2, checked by the spec
    weights = p["weights"] if p["weights"] is not None else [1.0] * len(comps)
    total = None
    for w, name in zip(weights, comps):
        r = table.columns[name].to(table.score.dtype)
        a = torch.tensor(float(w), dtype=r.dtype) * grpo_loo_adv(g, r, p["leave_one_out"], p["normalize"], p["eps"],
                                                                 skip_single_valued=p["skip_single_valued"])
        total = a if total is None else total + a
    return batch_zscore_rows(total, table.scopes)


register(EstimatorSpec(
    name="gdpo_loo", level="row", uses_groups=True, row_constant=True, row_fn=gdpo_loo_row, min_components=2,
    check_components=check_gdpo_loo_weights,
    formula="A = zscore_batch(Σ_k w_k · grpo_loo(r_k)), zscore over the batch's rows: (A − mean)/std if "
            "std > 0 (unbiased, no eps), else A − mean",
    source="NeMo RL GDPOAdvantageEstimator (advantage_estimator.py L101-190 @7ea279ab)",
    params={"weights": Key(None, "component weights in reward.components order (default all 1)", None, "list"),
            "leave_one_out": LOO, "normalize": NORMALIZE, "eps": EPS, "mask_output": MASK_OUTPUT,
            "skip_single_valued": SKIP_SINGLE_VALUED}))
