"""Group estimators that divide by the group *mean* instead of its std: MaxRL.

MaxRL ("maximum likelihood RL") normalises the group-relative reward by the group's mean reward,
``A_i = (s_i − μ_g)/(μ_g + eps)``: for 0/1 rewards μ is the pass rate, so a rare success gets a large
advantage. Row-level (exact over every member of a group, then broadcast to tokens).
"""
from __future__ import annotations

from ..batch import RowTable
from ..config import Key
from ..errors import AdvcliError
from ..lazy_torch import torch
from . import EstimatorSpec, register


def maxrl_row(table: RowTable, p: dict) -> torch.Tensor:
    """SkyRL ``compute_maxrl_advantage`` (skyrl/backends/skyrl_train/utils/ppo_utils.py L1396-1428
    @a9564572)::

        n > 1:  μ = torch.mean(group scores)        (float32, the group's stacked values)
                A_i = (s_i − μ)/(μ + eps)
        n = 1:  A_i = s_i − 0 = s_i

    There is no guard on μ: μ = 0 with non-zero scores (``[−1, 1, −1, 1]``) gives ±(1/eps), a
    negative μ flips the sign, an all-zero group gives 0 — as in SkyRL.
    """
    g = table.groups
    if g is None:
        raise AdvcliError("maxrl needs groups: give a prompt_id column")
    s = table.score
    multi = g.row_size > 1
    mean = g.per_row(g.mean_f32(s))  # torch.mean of each stacked group (bit for bit)
    adv = (s - mean) / (mean + p["eps"])
    return torch.where(multi, adv, s)


register(EstimatorSpec(
    name="maxrl", level="row", uses_groups=True, row_constant=True, row_fn=maxrl_row,
    zero_for_uniform_groups=True,
    formula="A_i = (s_i − μ_g)/(μ_g + eps); a group of one: A_i = s_i (no guard on μ_g ≤ 0)",
    source="SkyRL ppo_utils.compute_maxrl_advantage (L1396-1428 @a9564572)",
    params={"eps": Key(1e-6, "epsilon added to the group mean (SkyRL has no key for it)", None, "float"),
            "mask_output": Key(True, "multiply the broadcast advantage by the response mask (SkyRL: false, its "
                               "estimators write every response position)", None, "bool")}))
