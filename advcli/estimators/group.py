"""Group estimators on the row score ``s_i``: GRPO and its variants, RLOO, OPO, GPG, RF++-baseline,
pass@k and GDPO. All are row-level: exact over every member of a group, then broadcast to tokens.

Each matches a function of verl ``verl/trainer/ppo/core_algos.py`` at commit 1dda039b (line numbers
there); the float32 operation order is kept so all-equal non-dyadic groups give verl's artefacts.
"""
from __future__ import annotations

from ..config import Key
from ..errors import AdvcliError
from ..lazy_torch import torch
from ..ops.batch import RowTable
from . import EstimatorSpec, register

MASK_OUTPUT = Key(True, "multiply the broadcast advantage by the response mask (NeMo RL: false)", None, "bool")
EPS = Key(1e-6, "epsilon added to the group std", None, "float")


def _groups(table: RowTable):
    if table.groups is None:
        raise AdvcliError("this estimator needs groups: give a prompt_id column (or grouping.by=position "
                          "with grouping.size)")
    return table.groups


def _mean_singleton_zero(table: RowTable, s: torch.Tensor) -> torch.Tensor:
    """[R] per-row group mean (torch.mean of the stacked group), 0 for groups of one."""
    g = _groups(table)
    mean = g.mean_f32(s)
    mean = torch.where(g.sizes > 1, mean, torch.zeros_like(mean))
    return g.per_row(mean)


def _half(s: torch.Tensor) -> bool:
    """Scores in a 16-bit dtype (reward.dtype; keeps_reward_dtype): verl's per-row loops then round each step
    to it, while torch's reductions (mean, std, bincount) accumulate in float32 or float64."""
    return s.dtype in (torch.bfloat16, torch.float16)


# ------------------------------------------------------------------------------------------- grpo
def grpo_row(table: RowTable, p: dict) -> torch.Tensor:
    """verl ``compute_grpo_outcome_advantage`` (L267-331): n=1 → μ=0, σ=1; else torch.mean/std (unbiased), or
    with ``std=population`` the biased std, as open-instruct's ``scores_per_prompt.std(axis=-1)`` (numpy,
    ddof 0; allenai/open-instruct @ e6c3044a ``open_instruct/data_loader.py`` L1471-1484)."""
    g = _groups(table)
    s = table.score
    multi = g.sizes > 1
    mean = torch.where(multi, g.mean_f32(s), torch.zeros(g.num_groups, dtype=s.dtype))
    if p["std"] == "two_pass":  # verl group_mean_std (groupwise.py L164-222), eps=0
        std = torch.where(multi, g.std_two_pass(s, mean), torch.ones(g.num_groups, dtype=s.dtype))
    elif _half(s) and p["std"] == "torch":  # bf16 scores: torch.std's own float32 pass, rounded to bf16
        std = torch.where(multi, g.std_dim(s), torch.ones(g.num_groups, dtype=s.dtype))
    else:  # torch.std of each group, or numpy's population std (open-instruct)
        std = torch.where(multi, g.std_1d(s, mean, population=p["std"] == "population"),
                          torch.ones(g.num_groups, dtype=s.dtype))
    centred = s - g.per_row(mean)
    adv = centred / (g.per_row(std) + p["eps"]) if p["norm_by_std"] else centred
    if p.get("singleton") == "zero":  # open-instruct: s − mean over the sample itself
        adv = torch.where(g.per_row(multi), adv, torch.zeros_like(adv))
    return adv


register(EstimatorSpec(
    name="grpo", level="row", uses_groups=True, row_constant=True, keeps_reward_dtype=True, row_fn=grpo_row,
    zero_for_uniform_groups=True,
    # verl v1/utils.py L148-193 @1dda039b: only GRPO takes a multi-output session's last output and broadcasts
    # its advantage; every other estimator gets all the outputs as rows of the prompt's group
    last_step_of_sessions=True,
    formula="A_i = (s_i − mean_g(s)) / (std_g(s) + eps)  [or s_i − mean_g(s) without std]; n=1: s_i/(1+eps) "
            "(singleton=zero: 0)",
    source="verl core_algos.compute_grpo_outcome_advantage (L267-331 @1dda039b)",
    params={"norm_by_std": Key(True, "divide by the group std (false: Dr.GRPO)", None, "bool"), "eps": EPS,
            "std": Key("torch", "`torch` (torch.std of each group, verl grpo), `two_pass` (verl "
                       "group_mean_std, grpo_vectorized) or `population` (numpy's std, ddof 0: open-instruct)",
                       ("torch", "two_pass", "population"), "str"),
            "singleton": Key("score", "a group of one: `score` (μ = 0, σ = 1: s/(1 + eps), verl) or `zero` "
                             "(s − its own mean: open-instruct)", ("score", "zero"), "str"),
            "mask_output": MASK_OUTPUT}))


def grpo_vectorized_row(table: RowTable, p: dict) -> torch.Tensor:
    """verl ``compute_grpo_vectorized_outcome_advantage`` (L334-358) with ``group_mean_std`` (eps=0):
    float32 ``mean = Σ/n``, two-pass ``var = Σ(x−mean)²/max(n−1,1)``; singletons mean 0, std 1.
    ``var=one_pass``, ``var_floor=1e-6``: verl 0.6.0-0.7.1 (``verl/utils/groupwise.py`` group_mean_std
    @v0.7.1, called with eps=epsilon): ``var = (Σx² − (Σx)²/n)/max(n−1,1)``, ``std = sqrt(max(var, 1e-6))``."""
    g = _groups(table)
    s = table.score
    n = g.sizes.to(s.dtype)
    total = g.sum(s)
    mean = total / n
    if p.get("var", "two_pass") == "one_pass":
        var = (g.sum(s * s) - total * total / n) / (g.sizes - 1).clamp(min=1).to(s.dtype)
    else:
        dev = s - g.per_row(mean)
        var = g.sum(dev * dev) / (g.sizes - 1).clamp(min=1).to(s.dtype)
    std = torch.sqrt(var.clamp(min=float(p.get("var_floor") or 0.0)))
    single = g.sizes <= 1
    mean = torch.where(single, torch.zeros_like(mean), mean)
    std = torch.where(single, torch.ones_like(std), std)
    centred = s - g.per_row(mean)
    if not p["norm_by_std"]:
        return centred
    return centred / (g.per_row(std) + p["eps"])


register(EstimatorSpec(
    name="grpo_vectorized", level="row", uses_groups=True, row_constant=True, row_fn=grpo_vectorized_row,
    zero_for_uniform_groups=True,
    formula="A_i = (s_i − μ_g)/(σ_g + eps), μ = Σs/n, σ² = Σ(s−μ)²/max(n−1,1) in float32; n=1: μ=0, σ=1",
    source="verl core_algos.compute_grpo_vectorized_outcome_advantage (L334-358 @1dda039b)",
    params={"norm_by_std": Key(True, "divide by the group std (verl's trainer never passes false)", None, "bool"),
            "eps": EPS, "mask_output": MASK_OUTPUT,
            "var": Key("two_pass", "the group variance: `two_pass` Σ(x−μ)² (verl ≥ 0.8.0) or `one_pass` Σx² − (Σx)²/n "
                       "(verl 0.6.0-0.7.1), over max(n−1, 1)", ("two_pass", "one_pass"), "str"),
            "var_floor": Key(0.0, "σ = sqrt(max(var, var_floor)) (verl 0.6.0-0.7.1: 1e-6, its epsilon)", None,
                             "float")}))


# ------------------------------------------------------------------------------------------- rloo
def rloo_row(table: RowTable, p: dict) -> torch.Tensor:
    """verl ``compute_rloo_outcome_advantage`` (L587-636): n>1: s·n/(n−1) − μ·n/(n−1); n=1: raw s.

    ``form=centred``, ``singleton=zero``: SkyRL ``compute_rloo_outcome_advantage`` (ppo_utils.py
    L1259-1309 @a9564572): ``(s − μ)·f`` with the Python float ``f = n/(n−1)`` (float32 in the product),
    a group of one 0 — the same math, SkyRL's float32 residues for equal non-dyadic scores."""
    g = _groups(table)
    s = table.score
    n = g.row_size
    mean = _mean_singleton_zero(table, s)
    if p.get("form", "split") == "centred":
        factor = (n.to(torch.float64) / (n - 1).clamp(min=1).to(torch.float64)).to(s.dtype)
        adv = (s - mean) * factor
    else:
        nf = n.to(s.dtype)
        adv = s * nf / (nf - 1) - mean * nf / (nf - 1)
    return torch.where(n > 1, adv, s if p.get("singleton", "score") == "score" else torch.zeros_like(s))


register(EstimatorSpec(
    name="rloo", level="row", uses_groups=True, row_constant=True, keeps_reward_dtype=True, row_fn=rloo_row,
    zero_for_uniform_groups=True,
    formula="A_i = s_i − mean_{j≠i} s_j = n/(n−1)·(s_i − μ_g); n=1: A_i = s_i",
    source="verl core_algos.compute_rloo_outcome_advantage (L587-636 @1dda039b); form=centred, singleton=zero: "
           "SkyRL ppo_utils.compute_rloo_outcome_advantage (L1259-1309 @a9564572)",
    params={"mask_output": MASK_OUTPUT,
            "singleton": Key("score", "a group of one: `score` (the raw s, verl) or `zero` (SkyRL)", ("score", "zero"),
                             "str"),
            "form": Key("split", "the float32 form: `split` s·n/(n−1) − μ·n/(n−1) (verl) or `centred` (s − μ)·n/(n−1) "
                        "(SkyRL)", ("split", "centred"), "str")}))


def rloo_vectorized_row(table: RowTable, p: dict) -> torch.Tensor:
    """verl ``compute_rloo_vectorized_outcome_advantage`` (L833-868): ((c·s − Σ_g s)/max(c−1,1))·[c>1]."""
    g = _groups(table)
    s = table.score
    c = g.row_size.to(s.dtype)
    if _half(s):  # torch.bincount(weights=bf16) returns float64 (verl #7964): the rest runs in float64
        total = g.per_row(g.sum(s.to(torch.float64)))
        return (((c * s).to(torch.float64) - total) / (c - 1).clamp(min=1).to(torch.float64)) * (c > 1)
    total = g.per_row(g.sum(s.to(torch.float64)).to(s.dtype))  # np.bincount sums in float64
    return ((c * s - total) / (c - 1).clamp(min=1)) * (c > 1).to(s.dtype)


register(EstimatorSpec(
    name="rloo_vectorized", level="row", uses_groups=True, row_constant=True, keeps_reward_dtype=True,
    row_fn=rloo_vectorized_row,
    zero_for_uniform_groups=True,
    formula="A_i = (c·s_i − Σ_g s)/max(c−1, 1)·[c > 1]  (groups of one get 0)",
    source="verl core_algos.compute_rloo_vectorized_outcome_advantage (L833-868 @1dda039b)",
    params={"mask_output": MASK_OUTPUT}))


# -------------------------------------------------------------------------------------------- opo
def opo_row(table: RowTable, p: dict) -> torch.Tensor:
    """verl ``compute_opo_outcome_advantage`` (L639-690): b = Σ L_j s_j / Σ L_j (n=1: b=0)."""
    g = _groups(table)
    s = table.score
    length = table.valid_len.to(s.dtype)
    num = torch.zeros(g.num_groups, dtype=s.dtype)
    den = torch.zeros(g.num_groups, dtype=s.dtype)
    for _, ids, mat in g.buckets():  # torch .sum() of each stacked group
        num[ids] = (length[mat] * s[mat]).sum(dim=1)
        den[ids] = length[mat].sum(dim=1)
    b = torch.where(g.sizes > 1, num / den, torch.zeros_like(num))
    return s - g.per_row(b)


register(EstimatorSpec(
    name="opo", level="row", uses_groups=True, row_constant=True, keeps_reward_dtype=True, row_fn=opo_row,
    needs_lengths="the response lengths (OPO weights each response by its token count)",
    zero_for_uniform_groups=True,
    formula="A_i = s_i − Σ_g L_j s_j / Σ_g L_j  (L = valid tokens; n=1: A_i = s_i)",
    source="verl core_algos.compute_opo_outcome_advantage (L639-690 @1dda039b)",
    params={"mask_output": MASK_OUTPUT}))


# -------------------------------------------------------------------------------------------- gpg
def gpg_row(table: RowTable, p: dict) -> torch.Tensor:
    """verl ``compute_gpg_outcome_advantage`` (L770-830): α = B/max(#{s≠0},1) per batch; α·(s − μ_g)/f_norm."""
    s = table.score
    sc = table.scopes
    nonzero = sc.sum((s != 0).to(torch.int64)).clamp(min=1)
    mean = _mean_singleton_zero(table, s)
    if _half(s):  # α = bsz / count_nonzero is float32; α·(s − μ) promotes to it, rounded back into the scores
        alpha = sc.sizes.to(torch.float32) / nonzero.to(torch.float32)
        return (sc.per_row(alpha) * (s - mean).to(torch.float32) / p["f_norm"]).to(s.dtype)
    alpha = (sc.sizes.to(s.dtype) / nonzero.to(s.dtype))
    return sc.per_row(alpha) * (s - mean) / p["f_norm"]


register(EstimatorSpec(
    name="gpg", level="row", uses_groups=True, row_constant=True, keeps_reward_dtype=True, row_fn=gpg_row,
    zero_for_uniform_groups=True,
    formula="A_i = α·(s_i − μ_g)/f_norm, α = B / max(#{i: s_i ≠ 0}, 1) over the batch; n=1: μ=0",
    source="verl core_algos.compute_gpg_outcome_advantage (L770-830 @1dda039b)",
    params={"f_norm": Key(1.0, "divisor (verl never passes another value)", None, "float"),
            "mask_output": MASK_OUTPUT}))


# ------------------------------------------------------------------------------- rf++ baseline
def rfpp_baseline_row(table: RowTable, p: dict) -> torch.Tensor:
    """verl ``compute_reinforce_plus_plus_baseline_outcome_advantage`` (L533-584) before whitening."""
    s = table.score
    return s - _mean_singleton_zero(table, s)


register(EstimatorSpec(
    name="reinforce_plus_plus_baseline", level="row", uses_groups=True, row_constant=True,
    row_fn=rfpp_baseline_row,
    formula="a_i = s_i − μ_g (n=1: μ=0); then whitened over the batch's valid tokens (advantage.whiten)",
    source="verl core_algos.compute_reinforce_plus_plus_baseline_outcome_advantage (L533-584 @1dda039b)",
    params={"mask_output": MASK_OUTPUT}))


# ---------------------------------------------------------------------------------------- pass@k
def passk_row(table: RowTable, p: dict) -> torch.Tensor:
    """verl ``compute_grpo_passk_outcome_advantage`` (L471-530): the group argmax gets r_max − r_2nd."""
    g = _groups(table)
    s = table.score
    if bool((g.sizes == 1).any()):
        bad = int(torch.nonzero(g.row_size == 1, as_tuple=True)[0][0])
        raise AdvcliError(f"grpo_passk needs at least 2 samples per group; row {bad} is alone in its group "
                          "(verl raises ValueError here)")
    out = torch.zeros_like(s)
    # torch.std(rewards) of each group's own 1-D stack (L525): a [G_n, n] std(dim=1) can differ in the last bits,
    # which a near-tie group's tiny std magnifies
    std = g.std_1d(s, g.mean_f32(s)) if p["norm_by_std"] else None
    for _n, ids, mat in g.buckets():
        vals = s[mat]  # [G_n, n]
        top, top_idx = torch.topk(vals, 2, dim=1)
        adv = top[:, 0] - top[:, 1]
        if std is not None:
            adv = adv / (std[ids.to(s.device)] + p["eps"])
        out[mat.gather(1, top_idx[:, :1]).squeeze(1)] = adv
    return out


register(EstimatorSpec(
    name="grpo_passk", level="row", uses_groups=True, row_constant=True, keeps_reward_dtype=True, row_fn=passk_row,
    zero_for_uniform_groups=True,
    formula="A_i = (r_max − r_2nd)[/(std_g + eps)] for the group argmax, 0 for the others",
    source="verl core_algos.compute_grpo_passk_outcome_advantage (L471-530 @1dda039b)",
    params={"norm_by_std": Key(True, "divide by the group std", None, "bool"), "eps": EPS,
            "mask_output": MASK_OUTPUT}))


# ------------------------------------------------------------------------------------------- gdpo
def check_gdpo(p: dict, components: list[str]) -> None:
    """At least one reward component, and one weight per component where weights are given."""
    if not components:
        raise AdvcliError("key reward.components: gdpo needs reward components (the reward columns it normalises "
                          "one by one)", hint="set reward.components (verl: algorithm.gdpo_reward_keys)")
    if p["weights"] and len(p["weights"]) != len(components):
        raise AdvcliError(f"gdpo: {len(p['weights'])} weights for {len(components)} reward components")


def gdpo_row(table: RowTable, p: dict) -> torch.Tensor:
    """verl ``compute_gdpo_outcome_advantage`` (L361-468) before the batch whitening:
    Σ_k w_k · grpo(r_k) with each component normalised in its group (norm=True, eps).
    Components and weights checked by the spec (:func:`check_gdpo`)."""
    comps = [k for k in table.columns if k.startswith("component:")]
    weights = p["weights"] or [1.0] * len(comps)
    total = None
    grpo_params = {"norm_by_std": p["norm_by_std"], "eps": p["eps"], "std": "torch"}
    for w, name in zip(weights, comps):
        sub = RowTable(table.columns[name], table.valid_len, table.length, table.scopes, table.groups, {})
        a = torch.tensor(w, dtype=table.score.dtype) * grpo_row(sub, grpo_params)
        total = a if total is None else total + a
    return total


register(EstimatorSpec(
    name="gdpo", level="row", uses_groups=True, row_constant=True, row_fn=gdpo_row, reward_from_components=True,
    check_components=check_gdpo,
    formula="A = Σ_k w_k · (r_k − μ_g(r_k))/(σ_g(r_k) + eps); verl then whitens A over the batch's valid tokens "
            "(its --flavor verl sets advantage.whiten; under --flavor advcli give advantage.whiten=true)",
    source="verl core_algos.compute_gdpo_outcome_advantage (L361-468 @1dda039b)",
    params={"weights": Key(None, "component weights, in reward.components order (default all 1)", None, "list"),
            "norm_by_std": Key(True, "normalise each component by its group std", None, "bool"),
            "eps": EPS, "mask_output": MASK_OUTPUT}))
