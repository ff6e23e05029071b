"""``--flavor trl``: Hugging Face TRL's GRPOTrainer and RLOOTrainer advantages (huggingface/trl @
f2cd5771; ``GRPOConfig`` / ``RLOOConfig``).

TRL groups by position: each prompt's ``num_generations`` completions are consecutive rows
(``view(-1, G)``), so the canonical grouping is ``grouping.by=position`` with ``grouping.size=G``.
Advantages are one value per sample, broadcast over all L_i positions (not masked), as TRL
broadcasts them over the completion tokens in its loss.
"""
from __future__ import annotations

from typing import Any

from ..config import Key, default_config, normalize_clip
from ..errors import AdvcliError, did_you_mean
from . import Flavor
from ._releases import Change, Release

TRAINERS = ("grpo", "rloo")
SCALES = ("group", "batch", "none")
AGGREGATIONS = ("sum_then_normalize", "normalize_then_sum")
DEFAULT_G = {"grpo": 8, "rloo": 2}  # grpo_config.py L474-475, rloo_config.py L297-298
DEFAULT_BETA = {"grpo": 0.0, "rloo": 0.05}  # grpo_config.py L671, rloo_config.py L494-495

KEYS = {
    "trainer": Key("grpo", "advcli selector (not a TRL field): grpo = GRPOTrainer, rloo = RLOOTrainer", TRAINERS,
                   "str"),
    "num_generations": Key(None, "group size G: consecutive rows per prompt (GRPO default 8, RLOO 2)", None, "int"),
    "reward_funcs": Key(None, "trainer argument: the reward columns, in the order the weights refer to "
                        "(default: the single reward column)", None, "list"),
    "reward_weights": Key(None, "weight per reward function (default all 1)", None, "list"),
    "scale_rewards": Key("group", "GRPO: group, batch (group mean, batch std) or none; true = group, false = none",
                         None, "any"),
    "multi_objective_aggregation": Key("sum_then_normalize", "GRPO: sum_then_normalize or normalize_then_sum (GDPO; "
                                       "scale_rewards is then ignored)", AGGREGATIONS, "str"),
    "beta": Key(None, "RLOO: reward −= β·Σ_t (old_lp − ref_lp)·mask before the baseline (default 0.05). GRPO's "
                "beta acts only in the loss and is not used", None, "float"),
    "normalize_advantages": Key(False, "RLOO: batch z-score of the advantages (std + 1e-4)", None, "bool"),
    "reward_clip_range": Key(None, "RLOO: [lo, hi] clamp of the weighted reward, before the KL term", None, "clip"),
}


def _scale(value: Any) -> str:
    """GRPOConfig.__post_init__ (L1057): True → "group", False → "none"."""
    if value is True:
        return "group"
    if value is False:
        return "none"
    s = str(value)
    if s not in SCALES:
        raise AdvcliError(f"key scale_rewards: unknown value {value!r}.{did_you_mean(s, SCALES)} "
                          "Valid: group, batch, none, true, false")
    return s


def translate(v: dict) -> dict:
    cfg = default_config()
    trainer = v["trainer"]
    g = v["num_generations"] if v["num_generations"] is not None else DEFAULT_G[trainer]
    if g < 1:
        raise AdvcliError(f"key num_generations must be at least 1 (got {g})")
    cfg["grouping"].update(by="position", size=g)
    funcs, weights = v["reward_funcs"], v["reward_weights"]
    if funcs:
        funcs = [str(f) for f in funcs]
        if weights is not None and len(weights) != len(funcs):
            raise AdvcliError(f"key reward_weights: {len(weights)} weights for {len(funcs)} reward_funcs {funcs} "
                              "(TRL raises ValueError here)")
    elif weights is not None:
        if len(weights) != 1:
            raise AdvcliError(f"key reward_weights: {len(weights)} weights but one reward function (the reward "
                              "column); name the reward columns with reward_funcs, e.g. --set 'reward_funcs=[acc,fmt]'")
        funcs = ["reward"]
    cfg["reward"]["nan"] = "allow"  # a reward function's None is NaN (grpo_trainer.py L1663); nan-aware stats
    if funcs:
        # rewards_per_func · weights, nansum over functions
        cfg["reward"].update(source="components", components=funcs, weights=weights)
    else:
        cfg["reward"]["source"] = "reward"
    if trainer == "grpo":
        if v["normalize_advantages"] or v["reward_clip_range"] is not None:
            raise AdvcliError("keys normalize_advantages and reward_clip_range are RLOOConfig fields; GRPOConfig has "
                              "neither (use --set trainer=rloo)")
        cfg["estimator"] = {"name": "grpo_nan", "scale": _scale(v["scale_rewards"]),
                            "aggregation": v["multi_objective_aggregation"], "weights": weights, "eps": 1e-4,
                            "mask_output": False}
        return cfg
    # RLOOTrainer
    if v["multi_objective_aggregation"] != "sum_then_normalize" or _scale(v["scale_rewards"]) != "group":
        raise AdvcliError("keys scale_rewards and multi_objective_aggregation are GRPOConfig fields; RLOOConfig has "
                          "neither (its options: beta, normalize_advantages, reward_clip_range)")
    clip = normalize_clip(v["reward_clip_range"]) if v["reward_clip_range"] is not None else None
    cfg["reward"]["clip"] = clip
    beta = v["beta"] if v["beta"] is not None else DEFAULT_BETA["rloo"]
    if beta != 0.0:  # rloo_trainer.py L1526-1535: k1 summed over the completion tokens, unclamped
        cfg["kl"].update(in_reward=True, estimator="k1", input_clamp=None, output_clamp=None, mask=True,
                         coef=beta, controller="fixed")
    cfg["estimator"] = {"name": "rloo_nan", "normalize": v["normalize_advantages"], "eps": 1e-4,
                        "mask_output": False}
    return cfg


def estimator_note(v: dict) -> str | None:
    """Why trainer=grpo/rloo runs advcli's NaN-aware grpo_nan/rloo_nan (translate above)."""
    t = v["trainer"]
    return (f"trainer={t} is TRL's {t.upper()}Trainer advantage, whose statistics skip a reward function's None "
            f"(NaN): advcli's {t}_nan")


# Read from the released wheels' trl/trainer/grpo_config.py, grpo_trainer.py and rloo_trainer.py, and run by
# tests/test_conformance_trl.py against every published release from 1.6.0 (tools/conformance_matrix.py --all
# trl: each wheel in its own environment, with the settings of the entry it is listed under). Default changes
# before 1.6 (0.19.0: GRPO beta 0.04 → 0.0; 0.22.0: scale_rewards True → "group", loss_type "bnpo" → "dapo", the
# RLOOTrainer of today) act in the loss or keep the advantages; releases before 1.6.0 (1.5.1 and older) have
# advantage code without the None-aware statistics (no unscorable mask) and are not covered. From 1.6.0 to 1.16.0
# the GRPO advantage block is the same statement for statement, the RLOO one differs by a comment (1.10.0).
RELEASES = (
    Release("1.6.0", "2026-06-11", aliases=("1.7.0", "1.7.1", "1.8.0", "1.9.0", "1.9.1", "1.9.2", "f2cd577",
                                            "f2cd5771"),
            note="TRL 1.6.0 to 1.9.2 (each run), the advantage code of commit f2cd5771 (advcli's first match)"),
    Release("1.10.0", "2026-08-13", aliases=("1.11.0", "1.12.0", "1.13.0", "1.14.0", "1.14.1", "1.14.2"),
            note="TRL 1.10.0 to 1.14.2 (each run): use_bias_correction_kl defaults to true", changes=(
                Change("#6503", (),
                       "GRPOConfig.use_bias_correction_kl defaults to true: with beta ≠ 0 the loss's per-token KL is "
                       "multiplied by the importance ratio, which changes the loss, its gradient and the logged kl "
                       "metric; the advantages are unchanged"),)),
    Release("1.15.0", "2026-10-08", note="TRL 1.15.0: the completions parquet logs conversations", changes=(
        Change("#5309", (),
               "the completions table (completions_*.parquet, log_completions) holds the prompts and completions as "
               "given to and returned by the model: conversation lists ([{role, content}]) for a conversational "
               "dataset instead of decoded text; advcli groups by runs of equal conversations. The advantages are "
               "unchanged"),)),
    Release("1.16.0", "2026-10-15", note="TRL 1.16.0: the advantage code of 1.10.0", changes=(
        Change("", (),
               "changes outside the advantage code (vLLM's importance-sampling setup, vision-language and PEFT "
               "models); the GRPO and RLOO advantage blocks are those of 1.15.0"),)),
)

FLAVOR = Flavor(
    title="TRL",  # the framework's name in prose (help, docs)
    name="trl", framework="huggingface/trl @ f2cd5771 (trl/trainer/grpo_trainer.py, rloo_trainer.py, utils.py)",
    keys=KEYS, translate=translate, estimator_note=estimator_note, group_size_key="num_generations", releases=RELEASES,
    estimator_key="trainer",
    audit_switches={"scale_rewards": ("group", "batch", "none")},
    audit_tries=lambda n: [{"scale_rewards": s, "num_generations": n, "advcli.group_by": "id"}
                           for s in ("group", "batch", "none")]
    + [{"trainer": "rloo", "beta": 0.0, "num_generations": n, "advcli.group_by": "id"}],
    notes="Groups are num_generations consecutive rows. GRPO: R = Σ_k w_k r_k, A = (R − nanmean_g R)/(σ + 1e-4) "
          "with σ the two-pass unbiased nanstd of the group (scale_rewards=group), of the batch (batch: group "
          "mean, batch std) or no division (none); the 1e-4 is always added (no σ>0 guard), so an all-equal "
          "non-dyadic group gives ~6e-4 instead of 0. normalize_then_sum z-scores each reward in its group, sums "
          "with the weights and z-scores over the batch. RLOO: R = clip(Σ w r) − β·Σ_t (old_lp − ref_lp)·mask "
          "(k1, unclamped) before the leave-one-out baseline; optional batch z-score (std + 1e-4). NaN rewards "
          "are skipped by the statistics and get 0 (nan_to_num). One advantage per sample, broadcast over all "
          "L_i positions (masked ones included).")
