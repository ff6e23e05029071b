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
# the old online RLOOTrainer (TRL 0.9.2-0.21.0)'s RLOOConfig / OnPolicyConfig fields; rloo_config.py @v0.21.0
OLD_RLOO_KEYS = ("rloo_k", "kl_coef", "normalize_reward", "normalize_advantage", "token_level_kl",
                 "missing_eos_penalty", "non_eos_penalty", "penalty_reward_value")

# the releases whose GRPO/RLOO advantage code changed, oldest first (advcli.trl_code)
CODES = ("0.9.2", "0.11.0", "0.14.0", "0.15.0", "0.16.0", "0.22.0", "0.22.2", "0.27.0", "1.6.0")

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
    "mask_truncated_completions": Key(False, "GRPO (0.17.0 on) and RLOO (0.22.0 on): a truncated completion's "
                                      "completion_mask is zeroed (its loss; RLOO: its KL sum, rloo_trainer.py "
                                      "L1386-1391). advcli reads the mask from the input's response_mask: give those "
                                      "rows mask 0 there. GRPO's advantages do not read it", None, "bool"),
    "reward_clip_range": Key(None, "RLOO: [lo, hi] clamp of the weighted reward, before the KL term", None, "clip"),
    "rloo_k": Key(None, "old RLOOTrainer (TRL before 0.22.0): completions per prompt, laid out as rloo_k copies "
                  "of the batch (row r of a step of S rows is a completion of prompt r mod S/rloo_k; default 2)",
                  None, "int"),
    "kl_coef": Key(None, "old RLOOTrainer: score −= kl_coef·Σ_t (logprob − ref_logprob) over the response "
                   "(default 0.05)", None, "float"),
    "normalize_reward": Key(False, "old RLOOTrainer (0.14.0-0.21.0): scores z-scored over the batch (torch's std "
                            "+ 1e-8), then clamped to ±reward_clip_range (default 10)", None, "bool"),
    "normalize_advantage": Key(False, "old RLOOTrainer (0.14.0-0.21.0): advantages z-scored over the batch (torch's "
                               "std + 1e-8)", None, "bool"),
    "token_level_kl": Key(False, "old RLOOTrainer (0.14.0-0.21.0): the KL as per-token rewards; their sum, which "
                          "the advantage reads, is the same", None, "bool"),
    "missing_eos_penalty": Key(None, "old RLOOTrainer (0.11.0-0.21.0): the score of a response without EOS (the "
                               "truncated column) is lowered by this", None, "float"),
    "non_eos_penalty": Key(False, "old RLOOTrainer (0.9.2-0.10.1): a response without EOS (the truncated column) "
                           "scores penalty_reward_value", None, "bool"),
    "penalty_reward_value": Key(-1, "old RLOOTrainer (0.9.2-0.10.1): the score of a response without EOS under "
                                "non_eos_penalty", None, "float"),
    "advcli.trl_code": Key("1.6.0", "advcli extension (TRL's releases, set by --flavor trl@RELEASE): the advantage "
                           "code of TRL release 0.9.2, 0.11.0, 0.14.0, 0.15.0, 0.16.0, 0.22.0, 0.22.2, 0.27.0 or "
                           "1.6.0 (`advcli explain --flavor trl --history` says what each changed)", CODES, "str"),
}
# TRL 0.22.0-0.22.1 (#3935, fixed by #3992): scale_rewards=group took the batch std and did not divide,
# batch and none divided by the group std (grpo_trainer.py L1391-1423 @v0.22.0)
SWAPPED = {"group": "none", "batch": "group", "none": "group"}


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


def _code(v: dict) -> str:
    code = str(v["advcli.trl_code"])
    if code not in CODES:
        raise AdvcliError(f"key advcli.trl_code: unknown value {code!r}.{did_you_mean(code, CODES)} "
                          f"Valid: {', '.join(CODES)}", hint="--flavor trl@RELEASE sets it from TRL's release")
    return code


def _old_scale(value: Any, code: str) -> str:
    """scale_rewards as the release ``code`` read it (grpo_config.py / grpo_trainer.py at that tag)."""
    if code in ("0.14.0", "0.15.0"):  # no scale_rewards: always the group std (L507 @v0.14.0)
        if value is True or str(value) == "group":
            return "group"
        raise AdvcliError(f"key scale_rewards={value!r}: TRL before 0.16.0 has no scale_rewards (GRPOTrainer always "
                          "divides by the group std; the option came in 0.16.0, #3135)",
                          hint="drop scale_rewards, or use --flavor trl@0.16.0 or newer")
    if code == "0.16.0":  # a bool: `if self.scale_rewards:` (L1088 @v0.17.0); TRL's parser takes true/false
        if value is True or str(value) == "group":
            return "group"
        if value is False:
            return "none"
        raise AdvcliError(f"key scale_rewards={value!r}: TRL 0.16.0-0.21.0's scale_rewards is a bool (true: divide by "
                          "the group std, false: do not; the values group/batch/none came in 0.22.0, #3935)",
                          hint="--set scale_rewards=true or false")
    scale = _scale(value)
    return SWAPPED[scale] if code == "0.22.0" else scale


def translate(v: dict) -> dict:
    cfg = default_config()
    # every completion's reward enters the group statistics, an empty one's too: TRL's rewards are per completion,
    # its mask never read by the advantage (grpo_trainer.py L2682-2707 @f2cd577; the old RLOOTrainer's score)
    cfg["reward"]["empty_row"] = "score"
    trainer = v["trainer"]
    code = _code(v)
    old = CODES.index(code) < CODES.index("1.6.0")
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
    if trainer == "rloo" and CODES.index(code) < CODES.index("0.22.0"):
        return _old_rloo(v, code, cfg)
    if trainer == "grpo" and CODES.index(code) < CODES.index("0.14.0"):
        raise AdvcliError(f"trainer=grpo: TRL {code}'s release has no GRPOTrainer (it came in 0.14.0); its "
                          "RLOOTrainer is the trainer advcli reproduces there",
                          hint="--set trainer=rloo, or --flavor trl@0.14.0 or newer for GRPO")
    given_old = [k for k in OLD_RLOO_KEYS if v[k] != KEYS[k].default]
    if given_old:
        raise AdvcliError(f"key {given_old[0]}: a field of the old RLOOTrainer (TRL 0.9.2-0.21.0, --set trainer=rloo "
                          f"with --flavor trl@0.21.0 or older), not of TRL {code}'s {trainer.upper()}Config",
                          hint="the RLOOConfig of 0.22.0 on names the KL coefficient beta and has "
                               "normalize_advantages" if trainer == "rloo" else None)
    if code == "0.14.0" and weights is not None:
        raise AdvcliError("key reward_weights: TRL 0.14.0's GRPOTrainer has no reward weights (the reward functions' "
                          "outputs are summed; reward_weights came in 0.15.0, #2676)",
                          hint="drop reward_weights, or use --flavor trl@0.15.0 or newer")
    if CODES.index(code) < CODES.index("0.27.0") and v["multi_objective_aggregation"] != "sum_then_normalize":
        raise AdvcliError(f"key multi_objective_aggregation={v['multi_objective_aggregation']}: TRL before 0.27.0 "
                          "sums the weighted rewards and normalizes (normalize_then_sum came in 0.27.0, #4785)",
                          hint="use --flavor trl@0.27.0 or newer")
    # normalize_then_sum without reward_funcs: the reward column is the one reward function (GDPO over K=1, as TRL
    # runs a single function); a TRL completions dump with several functions names them itself (its records show
    # reward_funcs: formats/trl.py), so its summed reward column is never z-scored as if it were one function
    # a reward function's None is NaN (grpo_trainer.py L1663); 1.6.0+ (#5902): nan-aware stats. 0.16.0-1.5.1:
    # nansum counts it 0 (a row with none at all scores 0); before 0.16.0 (#3079) TRL cannot take a None
    # (torch.tensor raises), so a NaN reward is refused as advcli does by default
    cfg["reward"]["nan"] = "allow" if not old else "zero" if CODES.index(code) >= CODES.index("0.16.0") else "refuse"
    stats = {"stats": "plain"} if old else {}
    # a group of one before #4662's guard (0.27.0): torch.std of one value, and RLOO's (Σ − R)/(n − 1), are NaN
    if CODES.index(code) < CODES.index("0.27.0"):
        stats["single"] = "nan"
    if funcs:
        # rewards_per_func · weights, nansum over functions
        cfg["reward"].update(source="components", components=funcs, weights=weights)
    else:
        cfg["reward"]["source"] = "reward"
    if v["mask_truncated_completions"] and CODES.index(code) < CODES.index("0.16.0"):  # (0.16.x lacks it too)
        raise AdvcliError(f"key mask_truncated_completions: not a field of TRL {code}'s {trainer.upper()}Config (it "
                          "came with GRPOConfig 0.17.0 and the RLOOTrainer of 0.22.0)")
    if trainer == "grpo":
        if v["normalize_advantages"] or v["reward_clip_range"] is not None:
            raise AdvcliError("keys normalize_advantages and reward_clip_range are RLOOConfig fields; GRPOConfig has "
                              "neither (use --set trainer=rloo)")
        scale = _old_scale(v["scale_rewards"], code) if CODES.index(code) < CODES.index("0.22.2") else \
            _scale(v["scale_rewards"])
        cfg["estimator"] = {"name": "grpo_nan", "scale": scale,
                            "aggregation": v["multi_objective_aggregation"], "weights": weights, "eps": 1e-4,
                            "mask_output": False, **stats}
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
                        "mask_output": False, **stats}
    return cfg


def _old_rloo(v: dict, code: str, cfg: dict) -> dict:
    """TRL 0.9.2-0.21.0's online RLOOTrainer (rloo_trainer.py L388-440 @v0.21.0, L301-323 @v0.9.3): the batch is
    the prompts repeated rloo_k times, scored by one reward model; ``score`` (no EOS: penalty_reward_value at
    0.9.2-0.10.1, − missing_eos_penalty from 0.11.0), from 0.14.0 optionally z-scored over the batch (torch's std +
    1e-8) and clamped to ±reward_clip_range; R = score − kl_coef·Σ_t (logprob − ref_logprob) (padding tokens
    count 0: both are INVALID_LOGPROB); A = R − mean of the other rloo_k − 1 copies (reshape(rloo_k, -1)); from
    0.14.0 optionally A z-scored over the batch (torch's std + 1e-8)."""
    since14 = CODES.index(code) >= CODES.index("0.14.0")
    wrong = [k for k in ("beta", "reward_funcs", "reward_weights") if v[k] is not None]
    wrong += [k for k in ("normalize_advantages",) if v[k]]
    if not since14:
        wrong += [k for k in ("normalize_reward", "normalize_advantage", "token_level_kl") if v[k]]
        wrong += ["reward_clip_range"] if v["reward_clip_range"] is not None else []
    wrong += ["non_eos_penalty"] if v["non_eos_penalty"] and code != "0.9.2" else []
    wrong += ["missing_eos_penalty"] if v["missing_eos_penalty"] is not None and code == "0.9.2" else []
    if wrong:
        raise AdvcliError(f"key {wrong[0]}: not a field of TRL {code}'s RLOOConfig (the old online RLOOTrainer: "
                          "rloo_k, kl_coef, one reward model's score"
                          + (", normalize_reward, reward_clip_range, normalize_advantage, token_level_kl, "
                             "missing_eos_penalty)" if since14 else
                             ", non_eos_penalty / penalty_reward_value)" if code == "0.9.2" else
                             ", missing_eos_penalty)"),
                          hint="map the reward model's score with --column reward=NAME; the KL coefficient is kl_coef")
    if v["multi_objective_aggregation"] != "sum_then_normalize" or _scale(v["scale_rewards"]) != "group":
        raise AdvcliError("keys scale_rewards and multi_objective_aggregation are GRPOConfig fields; the old "
                          "RLOOConfig has neither")
    k = v["rloo_k"] if v["rloo_k"] is not None else v["num_generations"] if v["num_generations"] is not None else 2
    if k < 2:  # (Σ − R)/(rloo_k − 1) divides by 0
        raise AdvcliError(f"key rloo_k must be at least 2 (got {k}): the leave-one-out baseline divides by rloo_k − 1")
    cfg["grouping"].update(by="position", size=k, layout="strided")
    cfg["reward"]["source"] = "reward"
    if code == "0.9.2" and v["non_eos_penalty"]:
        cfg["reward"]["no_eos_value"] = float(v["penalty_reward_value"])
    elif v["missing_eos_penalty"] is not None:
        cfg["reward"]["no_eos_penalty"] = float(v["missing_eos_penalty"])
    if v["normalize_reward"]:
        cfg["reward"]["normalize"].update(mean="batch", std="batch", eps=1e-8)
        rng = v["reward_clip_range"] if v["reward_clip_range"] is not None else 10.0
        cfg["reward"]["clip"] = normalize_clip(rng)
    coef = v["kl_coef"] if v["kl_coef"] is not None else 0.05
    if coef != 0.0:
        cfg["kl"].update(in_reward=True, estimator="k1", input_clamp=None, output_clamp=None, mask=True,
                         coef=coef, controller="fixed")
    cfg["estimator"] = {"name": "rloo_nan", "normalize": bool(v["normalize_advantage"]), "eps": 1e-8,
                        "mask_output": False, "stats": "plain"}
    return cfg


def estimator_note(v: dict) -> str | None:
    """Why trainer=grpo/rloo runs advcli's NaN-aware grpo_nan/rloo_nan (translate above), and what
    mask_truncated_completions changes."""
    note = _estimator_note(v)
    code = str(v.get("advcli.trl_code", "1.6.0"))
    if v.get("num_generations") == 1 and code in CODES and CODES.index(code) >= CODES.index("0.22.2"):
        # a training run cannot have it: grpo_config.py L1137, rloo_config.py L700 (1.16.0) raise for n < 2;
        # an evaluation's num_generations_eval may be 1 (release_check)
        said = ("num_generations=1: TRL's training refuses it (\"GRPO requires at least 2 generations per prompt\", "
                "RLOO likewise), so groups of one are an evaluation's (num_generations_eval=1, TRL 0.26.0 and newer): "
                "these are its advantages")
        note = f"{note}; {said}" if note else said
    if not v.get("mask_truncated_completions"):
        return note
    said = ("mask_truncated_completions zeroes the truncated completions' mask, which "
            + ("only the loss reads: no advantage changes" if v["trainer"] == "grpo" else
               "RLOO's KL sum reads: give those rows response_mask 0 in the input (its KL is then 0, as TRL's)"))
    return f"{note}; {said}" if note else said


def _estimator_note(v: dict) -> str | None:
    t = v["trainer"]
    code = str(v.get("advcli.trl_code", "1.6.0"))
    if t == "rloo" and code in CODES and CODES.index(code) < CODES.index("0.22.0"):
        return (f"trainer=rloo is TRL {code}'s old online RLOOTrainer: rloo_k copies of the batch grouped strided "
                "(grouping.layout=strided), advcli's rloo_nan with stats=plain and eps 1e-8")
    if code != "1.6.0":
        return (f"trainer={t} is TRL {v['advcli.trl_code']}'s {t.upper()}Trainer advantage, torch's plain mean and "
                f"std of the rewards: advcli's {t}_nan with stats=plain")
    return (f"trainer={t} is TRL's {t.upper()}Trainer advantage, whose statistics skip a reward function's None "
            f"(NaN): advcli's {t}_nan")


# Read from the released code (trl/trainer/grpo_config.py, grpo_trainer.py, rloo_config.py and rloo_trainer.py at
# each tag of huggingface/trl) and run by tests/conformance/test_conformance_trl.py against the published releases
# (tools/conformance_matrix.py --all trl: each wheel in its own environment, with the settings of the entry it is
# listed under). The GRPO advantage block changed at 0.15.0, 0.16.0, 0.22.0, 0.22.2, 0.27.0 and 1.6.0 and between
# them only in logging (0.18.0's is_std_zero, 0.26.0's num_generations_eval) or in checks (0.15.0 to 0.25.1:
# num_generations >= 2, release_check); the RLOOTrainer of today came in 0.22.0 and its block changed at 1.6.0
# only (0.27.0's n = 1 guard aside).
# Default changes that act in the loss (0.19.0: GRPO beta 0.04 -> 0.0; 0.22.0: loss_type "bnpo" -> "dapo";
# num_iterations, epsilon) keep the advantages. Releases before 0.14.0 have no GRPOTrainer (NOT_REPRODUCED).
RELEASES = (
    Release("0.9.2", "2024-06-05", aliases=("0.9.3", "0.9.4", "0.9.6", "0.10.1"),
            settings={"advcli.trl_code": "0.9.2", "trainer": "rloo"},
            note="TRL 0.9.2 to 0.10.1: the first RLOOTrainer (rloo_trainer.py L290-323 @v0.9.3), no GRPOTrainer",
            changes=(
                Change("#1540", ("trainer", "rloo_k", "kl_coef", "non_eos_penalty", "penalty_reward_value"),
                       "the online RLOOTrainer: the batch is its prompts repeated rloo_k times (queries.repeat(rloo_k, "
                       "1)), so a prompt's completions are rloo_k rows a batch/rloo_k apart (grouping.layout=strided); "
                       "R = score − kl_coef·Σ_t (logprob − ref_logprob) with one reward model's score (with "
                       "non_eos_penalty, penalty_reward_value for a response without EOS); A = R − the mean of the "
                       "prompt's other completions. The only trainer advcli reproduces here (trainer=rloo)"),)),
    Release("0.11.0", "2024-09-19", aliases=("0.11.1", "0.11.2", "0.11.3", "0.11.4", "0.12.0", "0.12.1", "0.12.2",
                                             "0.13.0"),
            settings={"advcli.trl_code": "0.11.0", "trainer": "rloo"},
            note="TRL 0.11.0 to 0.13.0: RLOOTrainer's missing_eos_penalty (rloo_trainer.py L352-353 @v0.11.0)",
            changes=(
                Change("", ("missing_eos_penalty", "non_eos_penalty"),
                       "OnPolicyConfig.missing_eos_penalty (default off) lowers the score of a response without EOS "
                       "by its value, replacing non_eos_penalty/penalty_reward_value"),)),
    Release("0.14.0", "2025-01-29", settings={"advcli.trl_code": "0.14.0"},
            note="TRL 0.14.0: the first GRPOTrainer (grpo_trainer.py L497-507 @v0.14.0)", changes=(
                Change("", ("trainer",),
                       "GRPOTrainer: R = the sum of the reward functions' outputs (no weights), A = (R − mean_g)/"
                       "(std_g + 1e-4) with torch's unbiased std of the group, always divided; a group of one row has "
                       "std NaN and so advantage NaN (no num_generations >= 2 check). A reward function cannot return "
                       "None. From here the release's settings run GRPOTrainer (trainer=grpo)"),
                Change("", ("normalize_reward", "reward_clip_range", "normalize_advantage", "token_level_kl"),
                       "the old RLOOTrainer (trainer=rloo, to 0.21.0): normalize_reward z-scores the scores over the "
                       "batch (torch's std + 1e-8) and clamps them to ±reward_clip_range (10); normalize_advantage "
                       "z-scores the advantages (std + 1e-8); token_level_kl puts the KL on the tokens (the same "
                       "sum)"),)),
    Release("0.15.0", "2025-02-13", aliases=("0.15.1", "0.15.2"), settings={"advcli.trl_code": "0.15.0"},
            note="TRL 0.15.0 to 0.15.2: reward_weights", changes=(
                Change("#2676", ("reward_weights",),
                       "R = Σ_k w_k r_k with GRPOConfig.reward_weights (default all 1); rewards are gathered across "
                       "processes before the group statistics (the same numbers for whole groups). From here to "
                       "0.25.1 the trainer refuses num_generations < 2 (no groups of one)"),)),
    Release("0.16.0", "2025-03-22", aliases=("0.16.1", "0.17.0", "0.18.0", "0.18.1", "0.18.2", "0.19.0", "0.19.1",
                                             "0.20.0", "0.21.0"),
            settings={"advcli.trl_code": "0.16.0"},
            note="TRL 0.16.0 to 0.21.0 (each run): None rewards count 0, scale_rewards true/false", changes=(
                Change("#3079", ("reward_funcs",),
                       "a reward function may return None (NaN): R = nansum_k w_k r_k, so a missing value counts 0 "
                       "and a row with no reward at all scores 0 and counts in the group's mean and std"),
                Change("#3135", ("scale_rewards",),
                       "scale_rewards (a bool, default true): false subtracts the group mean without dividing "
                       "(Dr. GRPO)"),)),
    Release("0.22.0", "2025-08-29", aliases=("0.22.1",), settings={"advcli.trl_code": "0.22.0"},
            note="TRL 0.22.0 and 0.22.1: scale_rewards group/batch/none, swapped; the RLOOTrainer of today", changes=(
                Change("#3935", ("scale_rewards",),
                       "scale_rewards takes group, batch or none (true/false map to group/none), but the branches "
                       "are swapped: group subtracts the group mean without dividing, batch and none divide by the "
                       "group std (fixed in 0.22.2, #3992)"),
                Change("#3801", ("trainer", "beta", "normalize_advantages", "reward_clip_range"),
                       "RLOOTrainer rewritten on GRPOTrainer's lines (rloo_k, kl_coef, normalize_reward and "
                       "normalize_advantage are gone): consecutive groups of num_generations, "
                       "R = clip(nansum_k w_k r_k) − β·Σ_t (old_lp − ref_lp)·mask, leave-one-out baseline, optional "
                       "batch z-score with torch's std + 1e-4"),)),
    Release("0.22.2", "2025-09-03", aliases=("0.23.0", "0.23.1", "0.24.0", "0.25.0", "0.25.1", "0.26.0", "0.26.1",
                                             "0.26.2"),
            settings={"advcli.trl_code": "0.22.2"},
            note="TRL 0.22.2 to 0.26.2 (each run): scale_rewards as named", changes=(
                Change("#3992", ("scale_rewards",),
                       "scale_rewards does what it names: group and batch divide by the group's or the batch's std "
                       "(+ 1e-4), none does not divide; GRPOConfig maps true/false to group/none"),)),
    Release("0.27.0", "2026-01-16", aliases=("0.27.1", "0.27.2", "0.28.0", "0.29.0", "0.29.1", "1.0.0", "1.1.0",
                                             "1.2.0", "1.3.0", "1.4.0", "1.5.0", "1.5.1"),
            settings={"advcli.trl_code": "0.27.0"},
            note="TRL 0.27.0 to 1.5.1 (each run): multi_objective_aggregation", changes=(
                Change("#4785", ("multi_objective_aggregation",),
                       "multi_objective_aggregation=normalize_then_sum (GDPO): each reward function z-scored in its "
                       "group (nanmean/nanstd), the weighted nansum z-scored over the batch with torch's mean and std"),
                Change("#4662", ("num_generations",),
                       "a group (or batch) of one row has std 0 instead of NaN"),)),
    Release("1.6.0", "2026-06-11", aliases=("1.7.0", "1.7.1", "1.8.0", "1.9.0", "1.9.1", "1.9.2", "f2cd577",
                                            "f2cd5771"),
            note="TRL 1.6.0 to 1.9.2 (each run), the advantage code of commit f2cd5771 (advcli's first match)",
            changes=(Change("#5902", ("reward_funcs",),
                            "a row whose every reward function returned None is unscorable: left out of the group's "
                            "and the batch's statistics (nanmean/nanstd, RLOO's baseline counts the scorable rows) "
                            "and given advantage 0; before, it scored 0 and counted"),)),
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

def release_check(v: dict, release, asked: str | None) -> None:
    """TRL 0.15.0 to 0.25.1 refuse num_generations < 2: GRPOTrainer.__init__ takes it from range(2, global batch
    + 1) (grpo_trainer.py L344-350 @v0.15.0), then also GRPOConfig.__post_init__ (L592 @v0.17.0 in the trainer,
    grpo_config.py L556 @v0.19.0) and the new RLOOConfig (rloo_config.py L672 @v0.22.0): no run of theirs has
    groups of one. 0.14.0 has no check (NaN advantages); from 0.26.0 an evaluation's num_generations_eval may be 1
    (grpo_trainer.py L433 @v0.26.0; NaN, then 0 from 0.27.0)."""
    from ._releases import _version

    n = v.get("num_generations")
    ver = _version(asked) if asked else None
    if n is None or n >= 2 or ver is None or not (_version("0.15.0") <= ver < _version("0.26.0")):
        return
    if v.get("trainer") == "rloo" and ver < _version("0.22.0"):
        return  # the old RLOOTrainer: rloo_k (translate refuses k < 2 itself)
    raise AdvcliError(f"--flavor trl@{asked}: num_generations={n}: TRL 0.15.0 to 0.25.1 refuse num_generations < 2 "
                      "(GRPO: \"the valid values for the number of generations are\" 2 and up; from 0.17.0 \"GRPO "
                      "requires at least 2 generations per prompt\"), so no run of theirs has groups of one",
                      hint="groups of one come from an evaluation with num_generations_eval=1 (TRL 0.26.0 and newer: "
                           "--flavor trl@0.26.0 or newer); a training dump's groups have num_generations >= 2 rows")


FLAVOR = Flavor(
    title="TRL",  # the framework's name in prose (help, docs)
    kl_off="--set beta=0.0",
    name="trl", framework="huggingface/trl @ f2cd5771 (trl/trainer/grpo_trainer.py, rloo_trainer.py, utils.py)",
    keys=KEYS, translate=translate, estimator_note=estimator_note, group_size_key="num_generations",
    reward_columns_key="reward_funcs",
    releases=RELEASES,
    estimator_key="trainer", release_check=release_check,
    audit_switches={"scale_rewards": ("group", "batch", "none")},
    audit_tries=lambda n: [{"scale_rewards": s, "num_generations": n, "advcli.group_by": "id"}
                           for s in ("group", "batch", "none")]
    + [{"trainer": "rloo", "beta": 0.0, "num_generations": n, "advcli.group_by": "id"}],
    notes="Groups are num_generations consecutive rows (the old RLOOTrainer: strided, below). GRPO: R = Σ_k w_k "
          "r_k, A = (R − nanmean_g R)/(σ + 1e-4) with σ the two-pass unbiased nanstd of the group "
          "(scale_rewards=group), of the batch (batch: group mean, batch std) or no division (none); the 1e-4 "
          "is always added (no σ>0 guard), so an all-equal non-dyadic group gives ~6e-4 instead of 0. "
          "normalize_then_sum z-scores each reward in its group, sums with the weights and z-scores over the "
          "batch. RLOO: R = clip(Σ w r) − β·Σ_t (old_lp − ref_lp)·mask (k1, unclamped) before the leave-one-out "
          "baseline; optional batch z-score (std + 1e-4). NaN rewards are skipped by the statistics and get 0 "
          "(nan_to_num). One advantage per sample, broadcast over all L_i positions (masked ones included). The "
          "old online RLOOTrainer (trl@0.9.2 to trl@0.21.0 with trainer=rloo): the step is rloo_k copies of its "
          "prompts (row r in group r mod S/rloo_k, grouping.layout=strided), R = score − kl_coef·Σ_t (logprob − "
          "ref_logprob), the score with the missing-EOS penalty (a truncated column) and from 0.14.0 optionally "
          "z-scored over the batch (std + 1e-8) and clamped to ±reward_clip_range; optional batch z-score of "
          "the advantages (std + 1e-8). Releases before 1.6.0 (trl@0.14.0 to trl@0.27.0, advcli.trl_code): "
          "torch's plain mean and std, a row whose every reward function returned None scores 0 and counts; "
          "`advcli explain --flavor trl --history` lists what each changed.")
