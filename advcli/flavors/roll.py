"""``--flavor roll``: ROLL's RLVR chain (alibaba/ROLL @ 8eb27cc2, ``PPOConfig`` / ``RLVRConfig``).

Per step and per ``domain`` (in order of first appearance; ``rlvr_pipeline.py`` L680-723), as
``roll/utils/functionals.py`` does it:

1. ``reward_postprocess`` (L650-678): ``reward_norm`` (L564-600) on the positional ``[G, n]``
   reshape of the domain's rewards (``grpo`` forces group/group), then ``reward_clip`` ±c, both in the
   rewards' dtype: float16 on ROLL's own dump (every reward worker ROLL ships emits float16), a reward
   column's own dtype otherwise (``advcli.reward_dtype``, below);
2. ``compute_token_reward`` (L614-647): reward at position L_i−1, ``− β·kld`` with ``kld`` masked
   (``add_token_level_kl``; kinds kl/abs/mse/k3, k3 clamped to ±10 at the output only), ``reward_clip``
   again on the token rewards; one KL controller (fixed, or adaptive when ``target_kl`` is set)
   stepped after each domain with n_steps = rows of the domain;
3. ``compute_advantage`` (L1085-1193): ``whiten_rewards`` (masked_whiten, unbiased, var+1e-8), × mask;
   ``gae`` over every column with unmasked values (values beyond L_i: 0) or ``reinforce``/``grpo``
   (``A_t = r_t + γA_{t+1}`` over every column: masked columns count as discount steps);
   ``whiten_advantages`` over the domain's valid tokens (both whitenings skipped when the domain has
   ≤ 1 valid token); × mask; ``advantage_clip``. Returns are neither masked, whitened nor clipped.

A flavor holds no math: this module only maps ROLL's keys onto the canonical configuration.
"""
from __future__ import annotations

from typing import Any

from ..config import Key, default_config
from ..errors import AdvcliError, did_you_mean
from . import Flavor
from ._releases import Change, Release

ESTIMATORS = ("gae", "reinforce", "grpo")
# names of the agentic pipeline's estimators that RLVR's compute_advantage takes into its reinforce branch
# (functionals.py L1168 @8eb27cc2; reward_postprocess special-cases grpo only): reinforce there
AS_REINFORCE = ("gigpo", "step_reinforce")
AGENTIC = ("agentic_reinforce",)  # compute_advantage raises NotImplementedError (agentic/utils.py has its own)
KL_NAMES = ("kl", "abs", "mse", "k3")
NORM_TYPES = ("batch", "group", "running")
N_KEY = "actor_infer.generating_args.num_return_sequences"

KEYS = {
    "adv_estimator": Key("gae", "advantage estimator: gae, reinforce, grpo (grpo forces the group/group "
                         "reward norm); gigpo and step_reinforce run as reinforce in the RLVR pipeline", None,
                         "str"),
    N_KEY: Key(1, "group size n: consecutive blocks of n rows of a domain form a group (RLVRConfig sets it "
               "from num_return_sequences_in_group)", None, "int"),
    "gamma": Key(1.0, "discount (reinforce/grpo count masked columns as discount steps)", None, "float"),
    "lambd": Key(0.95, "GAE λ", None, "float"),
    "norm_mean_type": Key(None, "response-reward mean: batch, group or null", NORM_TYPES, "str"),
    "norm_std_type": Key(None, "response-reward std (unbiased) + 1e-6: batch, group (only with mean group) "
                         "or null", NORM_TYPES, "str"),
    "reward_clip": Key(None, "clamp ±c of the normalised response reward and again of the token rewards "
                       "after the KL term (0/null: off)", None, "float"),
    "add_token_level_kl": Key(False, "token_level_rewards −= β·kld", None, "bool"),
    "kl_penalty": Key("kl", "KL estimator: kl (lp−ref), abs, mse (½Δ²), k3 (output clamp ±10)", None, "str"),
    "init_kl_coef": Key(0.2, "β (initial β of the adaptive controller)", None, "float"),
    "target_kl": Key(None, "null: fixed controller; a value: adaptive, updated after each domain", None, "float"),
    "kl_horizon": Key(10000, "adaptive horizon", None, "int"),
    "whiten_advantages": Key(False, "masked whitening of the advantages over the domain batch", None, "bool"),
    "whiten_rewards": Key(False, "masked whitening of the token-level rewards before the estimator", None, "bool"),
    "advantage_clip": Key(None, "clamp ±c of the advantages after masking (0 zeroes them; null: off)", None, "float"),
    # get_sample_level_mask (functionals.py L681-738): rows left out of compute_advantage's mask, not of the
    # reward norm or the KL
    "max_len_mask": Key(False, "leave out the rows whose valid length equals the maximum (cut there): "
                        "actor_infer.generating_args.max_new_tokens", None, "bool"),
    "actor_infer.generating_args.max_new_tokens": Key(8192, "the maximum response length max_len_mask compares "
                                                      "with", None, "int"),
    "difficulty_mask": Key(False, "leave out the groups (num_return_sequences > 1) whose mean raw score is not "
                           "strictly inside (difficulty_low_threshold, difficulty_high_threshold)", None, "bool"),
    "difficulty_low_threshold": Key(0.0, "difficulty_mask: low bound (excluded)", None, "float"),
    "difficulty_high_threshold": Key(1.0, "difficulty_mask: high bound (excluded)", None, "float"),
    "error_max_len_clip": Key(False, "keep only the rows scored 1, or 0 with a valid length below "
                              "error_max_len_threshold", None, "bool"),
    "error_max_len_threshold": Key(9999999999, "error_max_len_clip: the length bound", None, "int"),
    # ROLL's own reward workers (every one in roll/pipeline/rlvr/rewards @ 8eb27cc2: math_rule L307-313,
    # code_sandbox L854-856, llm_judge L240-242, ifeval L651-654, crossthinkqa L233-239, detection L1706-1708,
    # remote_reward_system L516-518, video_r1 L172-174) build scores and response_level_rewards as float16
    # tensors; reward_scheduler.py and generate_scheduler.py only concatenate and reorder them, and the dump's
    # `scores` are those float16 values (rlvr/utils.py dump_rollout_to_specific_path: .tolist()). reward_postprocess
    # runs reward_norm and the reward_clip clamp on that float16 tensor (functionals.py L651-677),
    # expand_to_token_level keeps its dtype (L554), the KL term (float32 kld) promotes it, compute_advantage casts
    # to float32 (L1157). So ROLL's own dump (roll-dump: its scores are the workers') runs in float16 (FLAVOR's
    # dump_settings); a reward column of another file runs in its own dtype, as ROLL's functions run on the tensor
    # they are given (a custom worker's float32 rewards: float32)
    "advcli.reward_dtype": Key("input", "advcli extension: the dtype of the rewards ROLL's reward_postprocess "
                               "(reward_norm's group/batch mean and std, then the reward_clip clamp) runs in: "
                               "`input` (the default: a float16 reward column keeps float16, any other the run's "
                               "precision; ROLL's own rollout dump sets `float16`, since every reward worker ROLL "
                               "ships emits float16 rewards), `float16`, `bfloat16` or `run` (the run's precision: "
                               "float32 rewards, a custom worker's)",
                               ("input", "float16", "bfloat16", "run"), "str"),
    # compute_advantage's guard (utils/functionals.py L1101 @8eb27cc2, #476): a domain with <= 1 valid token skips
    # both whitenings; before #476 (v0.2.0-v0.3.0: L770/L787/L1099) only 0 tokens skip, and with 1 token masked_var
    # raises ValueError("The sum of the mask is one, ...") (L300/L311/L312): the step stops
    "advcli.whiten_one_token": Key("skip", "advcli extension: a domain left with exactly one valid token while "
                                   "whiten_advantages or whiten_rewards is on: `skip` (ROLL after #476: that "
                                   "domain is left unwhitened) or `error` (ROLL v0.2.0 to v0.3.0: masked_var "
                                   "raises and the step stops; a domain with no valid token is skipped)",
                                   ("skip", "error"), "str"),
}
ALIASES = {"num_return_sequences_in_group": N_KEY}


def _kl_settings(name: str) -> dict:
    """ROLL ``compute_approx_kl`` (functionals.py L181-211): no input clamp; k3 output clamp ±10."""
    if name == "full":
        raise AdvcliError("key kl_penalty=full: ROLL itself stops here: compute_token_reward computes the KL on every "
                          "step (with add_token_level_kl or not), and full's F.kl_div(...).sum(-1) gives one value a "
                          "row, which the [B, T] action mask cannot multiply (functionals.py L203-208)",
                          hint="kl, abs, mse or k3")
    if name not in KL_NAMES:
        raise AdvcliError(f"key kl_penalty: unknown value {name!r}.{did_you_mean(name, KL_NAMES)} "
                          f"Valid: {', '.join(KL_NAMES)} (ROLL raises NotImplementedError for others)")
    kind = {"kl": "k1", "abs": "abs", "mse": "k2", "k3": "k3"}[name]
    return {"estimator": kind, "input_clamp": None, "output_clamp": 10.0 if kind == "k3" else None}


def translate(v: dict) -> dict:
    cfg = default_config()
    est = v["adv_estimator"]
    if est in AGENTIC:
        raise AdvcliError(f"key adv_estimator={est}: an estimator of ROLL's agentic pipeline (trajectory and step "
                          "rewards, keyed groups), which the RLVR chain --flavor roll reproduces raises "
                          "NotImplementedError on (functionals.py compute_advantage). "
                          f"Valid: {', '.join(ESTIMATORS + AS_REINFORCE)}")
    if est in AS_REINFORCE:
        est = "reinforce"
    if est not in ESTIMATORS:
        raise AdvcliError(f"key adv_estimator: unknown value {est!r}.{did_you_mean(est, ESTIMATORS)} "
                          f"Valid: {', '.join(ESTIMATORS)}")
    n = v[N_KEY]
    mean_t, std_t = v["norm_mean_type"], v["norm_std_type"]
    if est == "grpo":  # reward_postprocess L655-656: overrides the configured types
        mean_t = std_t = "group"
    if "running" in (mean_t, std_t):
        raise AdvcliError("norm_mean_type/norm_std_type=running is not supported: ROLL's reward_norm reads "
                          "running_ctrl['domain'] (the literal key) while the RLVR pipeline stores one "
                          "RunningMoments per domain name, so ROLL itself raises KeyError: 'domain' "
                          "(functionals.py L571, rlvr_pipeline.py L373-375)",
                          hint="use batch or group")
    if std_t == "group" and mean_t != "group":
        raise AdvcliError(f"norm_std_type=group with norm_mean_type={mean_t}: ROLL cannot run this pairing — a "
                          "flat [B] reward combined with the [G, 1] group std broadcasts to [G, B] and fails "
                          "(functionals.py L590-600)",
                          hint="norm_std_type=group works only with norm_mean_type=group (GRPO)")
    grouped = "group" in (mean_t, std_t)
    if grouped and (n is None or n < 1):
        raise AdvcliError(f"key {N_KEY} must be at least 1 for a group reward norm (got {n})")
    # difficulty_mask reshapes the scores to [-1, n] itself (L603-611), with or without a group reward norm; n <= 1:
    # every row kept
    difficulty = bool(v["difficulty_mask"] and n is not None and n > 1)
    grouped = grouped or difficulty
    cfg["grouping"].update(by="position" if grouped else "none", size=n if grouped else None, scope="step_domain")
    clip = v["reward_clip"]
    if clip is not None and clip < 0:  # torch.clamp(min=-c, max=c) with min > max: every token becomes c < 0
        raise AdvcliError(f"key reward_clip must be ≥ 0 (got {clip:g}): ROLL clamps to [−c, c], and with c < 0 "
                          "torch.clamp sets every reward token, the zeros after the response too, to c",
                          hint="set the bound as a positive number (reward_clip=0 or null: no clip)")
    clip = [-clip, clip] if clip else None  # `if pipeline_config.reward_clip:` (0 and null: off)
    cfg["reward"].update(source="reward", clip=clip, placement="last", mask_placed=True,
                         whiten_tokens=v["whiten_rewards"])
    cfg["reward"]["normalize"].update(mean=mean_t or "none", std=std_t or "none", eps=1e-6)
    cfg["reward"]["dtype"] = v["advcli.reward_dtype"]  # reward_norm and clamp in the workers' float16 (above)
    target, horizon = v["target_kl"], v["kl_horizon"]
    # compute_token_reward updates the controller on every step, with add_token_level_kl or not (functionals.py
    # L626-632): a target of 0 stops ROLL (current / 0 in Python floats: ZeroDivisionError), a null horizon too
    # (TypeError); a horizon of 0 makes β infinite from the second step, which only the token KL reads
    if target == 0:
        raise AdvcliError("key target_kl=0: ROLL's AdaptiveKLController.update divides the step's KL by it on every "
                          "step (ZeroDivisionError), so the trainer itself would not run it",
                          hint="leave target_kl unset (null) for a fixed β, or set the target KL")
    if target is not None and (horizon is None or (horizon == 0 and v["add_token_level_kl"])):
        raise AdvcliError(f"key kl_horizon must not be {'null' if horizon is None else 0} for the adaptive "
                          "controller: its update divides by it" + ("" if horizon is None else ", so every step "
                          "after the first would take an infinite β"))
    cfg["kl"].update(_kl_settings(v["kl_penalty"]))
    cfg["kl"].update({"in_reward": v["add_token_level_kl"], "coef": v["init_kl_coef"],
                      "controller": "fixed" if target is None else "adaptive",
                      "target": target if target is not None else 0.1, "horizon": v["kl_horizon"],
                      "mask": True, "token_clip": clip})
    if est == "gae":
        e = {"name": "gae", "gamma": v["gamma"], "lam": v["lambd"], "holes": "step", "zero_masked": False}
    else:  # compute_reinforce_return (L488-499): lambd unused
        e = {"name": "reinforce_plus_plus", "gamma": v["gamma"], "holes": "step", "mask_rewards": True}
    cfg["estimator"] = e
    aclip = v["advantage_clip"]
    cfg["advantage"].update(whiten=v["whiten_advantages"], whiten_unbiased=True, whiten_eps=1e-8,
                            whiten_eps_mode="add", whiten_scale=True,
                            whiten_small="skip" if v["advcli.whiten_one_token"] == "skip" else "error_one", remask=True,
                            clip=None if aclip is None else [-aclip, aclip])
    if v["max_len_mask"]:
        cfg["advantage"]["drop_length"] = v["actor_infer.generating_args.max_new_tokens"]
    if difficulty:
        cfg["advantage"]["drop_group_mean"] = [v["difficulty_low_threshold"], v["difficulty_high_threshold"]]
    if v["error_max_len_clip"]:
        cfg["advantage"]["keep_scores_below"] = float(v["error_max_len_threshold"])
    return cfg


def estimator_note(v: dict) -> str | None:
    """Why ``adv_estimator=grpo``/``reinforce`` runs advcli's ``reinforce_plus_plus`` (translate above)."""
    est = v["adv_estimator"]
    ret = "its REINFORCE return A_t = r_t + γ·A_{t+1} (compute_reinforce_return): advcli's reinforce_plus_plus"
    if est == "grpo":
        return f"adv_estimator=grpo is ROLL's group reward norm (r − mean)/(std + 1e-6), then {ret} on those rewards"
    if est == "reinforce":
        return f"adv_estimator=reinforce is ROLL's {ret.removeprefix('its ')}"
    if est in AS_REINFORCE:
        return (f"adv_estimator={est} runs as reinforce in ROLL's RLVR pipeline (compute_advantage's reinforce "
                f"branch, the configured reward norm): {ret.removeprefix('its ')}; the agentic pipeline's step "
                "grouping is not in it")
    return None


# the releases and commits whose semantics advcli reproduces, oldest first (--flavor roll@RELEASE); nothing that
# changes advantages was merged after 8eb27cc2 (#447, masked critic values before GAE, is still open). The tags
# v0.2.0, v0.2.1 and v0.3.0 (GitHub releases; ROLL is not on the package index) have 8eb27cc2's estimators, KL,
# reward_norm, whitening and dump writer (rlvr/utils.py) function for function, except #476's one-token guard;
# OPD (#366 in v0.2.1, multi-teacher #463 in v0.3.0) is outside what advcli computes. v0.1.x is older (another
# get_pad_mask) and not reproduced
RELEASES = (
    Release("0.2.0", "2026-02-04", tag_only=True,
            aliases=("v0.2.0", "3077bef", "0.2.1", "v0.2.1", "2eba7c3", "0.3.0", "v0.3.0", "7f9d4d3"),
            settings={"advcli.whiten_one_token": "error"},
            note="ROLL v0.2.0 to v0.3.0 (GitHub releases, not on the package index): 8eb27cc's RLVR chain, except "
                 "that a domain left with one valid token stops whitening (masked_var raises)"),
    Release("8eb27cc", "2026-08-18", aliases=("8eb27cc2dc34c4d1310b169d9b86d339004d811a",),
            note="the commit advcli was matched against",
            changes=(Change("#476", ("advcli.whiten_one_token", "whiten_advantages", "whiten_rewards"),
                            "a domain whose mask holds exactly one valid token is left unwhitened (both "
                            "whitenings off, as with none); before, ROLL's masked_var raised ValueError and the step "
                            "stopped"),)),
)

AGENTIC_SECTIONS = ("train_env_manager", "val_env_manager", "custom_envs")  # AgenticConfig's, not RLVRConfig's


def _file_settings(values: dict, path: str) -> list[tuple[str, Any]]:
    """What ROLL's config code derives from a config file: RLVRConfig.__post_init__ overwrites actor_infer's
    num_return_sequences with num_return_sequences_in_group (roll/pipeline/rlvr/rlvr_config.py L163 @8eb27cc2),
    so where the file gives both the latter is the group size. (Where it gives actor_infer's alone, ROLL runs its
    default of 1; advcli takes it as --set takes it, the group size the file evidently means.) An agentic
    pipeline's config (its env managers) is refused: that pipeline scores trajectories with agentic_reward_norm
    (roll/pipeline/agentic/utils.py L99-152: reward_normalization.grouping, 0 where the group's std ≤ 1e-6) and its
    own estimators, not the RLVR chain."""
    agentic = sorted({k.split(".")[0] for k in values} & set(AGENTIC_SECTIONS))
    if agentic:
        raise AdvcliError(f"config file {path}: {', '.join(agentic)} make it a config of ROLL's agentic pipeline, "
                          "whose reward normalisation (agentic_reward_norm, by trajectory group) and estimators advcli "
                          "does not reproduce; --flavor roll is ROLL's RLVR pipeline",
                          hint="give the RLVR pipeline's config (examples/*/rlvr_config*.yaml)")
    if N_KEY not in values or "num_return_sequences_in_group" not in values:
        return []
    return [(N_KEY, values["num_return_sequences_in_group"])]


FLAVOR = Flavor(
    title="ROLL",  # the framework's name in prose (help, docs)
    kl_off="--set add_token_level_kl=false",
    name="roll", framework="alibaba/ROLL @ 8eb27cc2 (roll/utils/functionals.py, roll/pipeline/rlvr/rlvr_pipeline.py)",
    keys=KEYS, translate=translate, aliases=ALIASES, estimator_key="adv_estimator", response_estimator="grpo",
    estimator_names=ESTIMATORS + AS_REINFORCE,
    # a ROLL pipeline config's actor_infer holds the inference worker's whole setup (model_args, strategy_args,
    # the other generating_args) beside the group size: ignored there, a near miss of it still refused
    mixed_sections=("actor_infer",),
    audit_tries=lambda n: [{"adv_estimator": "grpo", "actor_infer.generating_args.num_return_sequences": n,
                            "advcli.group_by": "id"}],
    # ROLL's own workers' float16 rewards, or a custom worker's float32 ones: audit tries both dtypes
    audit_switches={"advcli.reward_dtype": ("float16", "run")},
    dump_settings={"roll-dump": ((("advcli.reward_dtype", "float16"),),
                                 "ROLL's rollout dump (its scores come from ROLL's reward workers, which emit "
                                 "float16)")},
    group_size_key=N_KEY, estimator_note=estimator_note, file_settings=_file_settings,
    notes="RLVR chain run once per domain of each step (domains in order of first appearance; every batch "
          "statistic is per domain); groups are positional blocks of n rows of a domain; reward norm on the "
          "[G, n] reshape: (r − μ)/(σ + 1e-6) with torch.std unbiased, a group of one gives NaN with a group "
          "std and 0 with a group mean; the reward norm and reward_clip run in the rewards' dtype: float16 on "
          "ROLL's own dump (its reward workers emit float16), a reward column's own dtype otherwise "
          "(advcli.reward_dtype; with float32 rewards all-equal non-dyadic groups are not 0: 0.9×3 → 0.0596); "
          "reward_clip clamps the response reward and again the token rewards "
          "after KL; the reward sits at "
          "L_i−1 and is then × mask (a row ending in a masked token loses it); KL kinds kl/abs/mse/k3, k3 "
          "clamped to ±10 at the output only; the controller steps after every domain with n_steps = its "
          "rows; reinforce/grpo returns count masked columns as discount steps; gae uses unmasked values over "
          "every column; optional whitening (unbiased, var+1e-8, skipped at ≤ 1 valid token); advantages × "
          "mask, then advantage_clip; returns unmasked, unwhitened, unclipped.",
    releases=RELEASES)
