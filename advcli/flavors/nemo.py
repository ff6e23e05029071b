"""``--flavor nemo``: NVIDIA NeMo RL's advantage estimators (NVIDIA-NeMo/RL @ 7ea279ab;
``AdvEstimatorConfig``, ``ClippedPGLossConfig``, ``ppo.py``).

Without ``ppo.adv_estimator.name`` the GRPO loop runs: ``grpo.adv_estimator.name`` (grpo, gdpo,
reinforce_plus_plus, opd), then ``grpo.advantage_clip_low/high`` (``_clip_grpo_advantages``). With it,
the PPO estimator runs (gae or raw_reward). Groups are the rows sharing a ``prompt_id`` (NeMo groups
the rows whose initial-prompt token ids are equal), anywhere in the file; each step is one batch.

The defaults are NeMo RL's newest state advcli verified: 7ea279ab plus #3837 (grpo's ``valid_mask``) and
#4158 (``is_trivial_distribution``), behind ``advcli.grpo_valid_mask`` and ``advcli.skip_trivial_std``;
``RELEASES`` sets them back for ``--flavor nemo@7ea279a``.
"""
from __future__ import annotations

from ..config import Key, default_config
from ..errors import AdvcliError
from . import Flavor
from ._releases import Change, Release

GRPO_ESTIMATORS = ("grpo", "gdpo", "reinforce_plus_plus", "opd")
PPO_ESTIMATORS = ("gae", "raw_reward")
KL_TYPES = ("k1", "k2", "k3")

KEYS = {
    "grpo.adv_estimator.name": Key("grpo", "GRPO-loop estimator", GRPO_ESTIMATORS, "str"),
    "grpo.adv_estimator.normalize_rewards": Key(True, "grpo/gdpo: divide by std + 1e-6 where the std is > 0",
                                                None, "bool"),
    "grpo.adv_estimator.use_leave_one_out_baseline": Key(True, "grpo/gdpo: leave-one-out baseline and per-sample "
                                                         "leave-one-out std", None, "bool"),
    "grpo.adv_estimator.minus_baseline": Key(True, "reinforce_plus_plus: subtract the group mean", None, "bool"),
    "grpo.adv_estimator.reward_weights": Key(None, "gdpo: weights in the sorted order of the reward/* names "
                                             "(default all 1.0)", None, "list"),
    "grpo.advantage_clip_low": Key(None, "lower clamp of the final advantages (GRPO loop)", None, "float"),
    "grpo.advantage_clip_high": Key(None, "upper clamp of the final advantages (GRPO loop)", None, "float"),
    "loss_fn.use_kl_in_reward": Key(False, "reinforce_plus_plus / gae: subtract β·KL from the reward", None, "bool"),
    "loss_fn.reference_policy_kl_penalty": Key(0.01, "β", None, "float"),
    "loss_fn.reference_policy_kl_type": Key("k3", "calculate_kl estimator (input clamp 20, output clamp 10)",
                                            KL_TYPES, "str"),
    "ppo.adv_estimator.name": Key(None, "PPO estimator: gae or raw_reward (unset: the GRPO loop runs)",
                                  PPO_ESTIMATORS, "str"),
    "ppo.adv_estimator.gae_lambda": Key(0.95, "GAE λ", None, "float"),
    "ppo.adv_estimator.gae_gamma": Key(1.0, "GAE γ", None, "float"),
    "ppo.adv_estimator.normalize_advantages": Key(True, "gae: masked whitening (unbiased, var+1e-8); raw_reward: "
                                                  "global z-score (biased, max(var,1e-8))", None, "bool"),
    "ppo.adv_estimator.gae_lambda_value": Key(None, "VAPO: λ of the returns (default gae_lambda)", None, "float"),
    "ppo.adv_estimator.gae_lambda_policy": Key(None, "VAPO: λ of the advantages (default gae_lambda)", None, "float"),
    "ppo.adv_estimator.length_adaptive_alpha": Key(0.0, "VAPO: α > 0 gives row i the policy λ 1 − 1/max(α·L_i, 1)",
                                                   None, "float"),
    # what the GRPO (grpo.*) and PPO (ppo.*) loops do to the rewards and masks before the estimator (grpo.py
    # L3020-3031, L3139-3145; ppo.py L1446-1456 @7ea279ab); a train_data_step dump holds their result
    **{f"{loop}.{k}": key for loop in ("grpo", "ppo") for k, key in {
        "reward_scaling.enabled": Key(False, "scale_rewards: r ← tmin + (clamp(r, smin, smax) − smin)/(smax − smin)·"
                                      "(tmax − tmin), the reward and each reward/* component, first", None, "bool"),
        "reward_scaling.source_min": Key(0.0, "reward_scaling: smin", None, "float"),
        "reward_scaling.source_max": Key(1.0, "reward_scaling: smax", None, "float"),
        "reward_scaling.target_min": Key(0.0, "reward_scaling: tmin", None, "float"),
        "reward_scaling.target_max": Key(1.0, "reward_scaling: tmax", None, "float"),
        "reward_shaping.enabled": Key(False, "apply_reward_shaping, after reward_scaling: with "
                                      "stop_properly_penalty_coef c, r·c on the rows of the `truncated` column (the "
                                      "DAPO keys then ignored); else the DAPO overlong penalty r += min(−(n − (max − "
                                      "L))/L·penalty, 0), n the first assistant message's tokens (the mask's first run "
                                      "of ones); "
                                      "taken as done in a train_data_step dump", None, "bool"),
        "reward_shaping.overlong_buffer_length": Key(None, "reward_shaping: DAPO buffer length L", None, "int"),
        "reward_shaping.overlong_buffer_penalty": Key(None, "reward_shaping: DAPO penalty (≥ 0)", None, "float"),
        "reward_shaping.max_response_length": Key(None, "reward_shaping: DAPO maximum length", None, "int"),
        "reward_shaping.stop_properly_penalty_coef": Key(None, "reward_shaping: truncated rows' reward factor, in "
                                                         "[0, 1]", None, "float"),
        "overlong_filtering": Key(False, "truncated rows get sample mask 0 (out of the loss and, from #3837, of "
                                  "grpo's group statistics): give them response_mask 0, or run on the dump, whose "
                                  "sample_loss_mask holds it", None, "bool"),
        "seq_logprob_error_threshold": Key(None, "rows whose mean exp|generation − train log-prob| over their "
                                           "tokens exceeds it get sample mask 0 before the estimator (grpo.py "
                                           "compute_and_apply_seq_logprob_error_masking L2513-2610): give them "
                                           "response_mask 0 in a Parquet input; taken as done in a train_data_step "
                                           "dump", None, "float"),
        "use_dynamic_sampling": Key(False, "drops from the batch the rows whose reward std is 0 (with "
                                    "use_leave_one_out_baseline the std of the other rows of the group: the lone 1 of "
                                    "[1, 0, 0, 0] goes), refills it, then runs the estimator on the rows kept "
                                    "(grpo.py dynamic_sampling L1699-1828): a train_data_step dump holds those rows, "
                                    "so nothing is dropped again; a dump of rollouts not yet filtered is read whole",
                                    None, "bool"),
    }.items()},
    "grpo.invalid_tool_call_advantage": Key(None, "the advantage NeMo writes over rows with an invalid tool call "
                                            "(found in their messages, which a dump does not hold)", None, "float"),
    "grpo.malformed_thinking_advantage": Key(None, "the advantage NeMo writes over rows with malformed thinking "
                                             "(found in their messages)", None, "float"),
    "advcli.rewards_shaped": Key(False, "advcli extension: the reward column holds the rewards after reward_scaling, "
                                 "reward_shaping and overlong_filtering (NeMo's train_data_step dump: set for it), "
                                 "so those keys are not applied again", None, "bool"),
    # semantic switches of changes merged after 7ea279ab, with no key of NeMo's own (RELEASES below)
    "advcli.skip_trivial_std": Key(True, "advcli extension (NeMo RL #4158): grpo/gdpo with normalize_rewards divide "
                                   "only where the rewards feeding the row's std are not all one value, so a "
                                   "float32 residue std no longer divides; false: wherever std > 0 (7ea279a)",
                                   None, "bool"),
    "advcli.gdpo_reward_keys": Key("named", "advcli extension: the reward components gdpo sums: `named` (every "
                                   "reward/* column, sorted by name: NeMo RL from #2597) or `numbered` (reward1, "
                                   "reward2, ... sorted by number: v0.6.0-v0.7.0)", ("named", "numbered"), "str"),
    "advcli.grpo_valid_mask": Key(True, "advcli extension (NeMo RL #3837): grpo's group baseline and std leave out "
                                  "rows whose sample_loss_mask is 0 (gdpo and reinforce_plus_plus keep every row); "
                                  "false: every row counts (7ea279a)", None, "bool"),
}

# grpo_math_1B.yaml: adv_estimator.normalize_rewards: ${grpo.normalize_rewards}, likewise the LOO flag
ALIASES = {"grpo.normalize_rewards": "grpo.adv_estimator.normalize_rewards",
           "grpo.use_leave_one_out_baseline": "grpo.adv_estimator.use_leave_one_out_baseline"}

CALCULATE_KL_CLAMPS = {"input_clamp": 20.0, "output_clamp": 10.0}  # calculate_kl defaults (utils.py L42-101)


def _kl(v: dict, mask: bool) -> dict:
    return {"estimator": v["loss_fn.reference_policy_kl_type"], **CALCULATE_KL_CLAMPS, "mask": mask,
            "coef": v["loss_fn.reference_policy_kl_penalty"], "controller": "fixed"}


LENGTH_PENALTY = "grpo.length_penalty."  # #3852 (after 7ea279ab): nemo_rl/utils/length_penalty.py


def _reward_shaping(cfg: dict, v: dict, at: str) -> None:
    """``apply_reward_shaping`` (nemo_rl/algorithms/reward_functions.py L50-172 @7ea279ab), on the reward after
    reward_scaling: ``stop_properly_penalty_coef`` c (asserted in [0, 1]) scales the truncated rows' reward,
    ``torch.where(truncated, r·c, r)``, and nothing else runs; else the DAPO overlong penalty
    ``r + min(−(n − (max_response_length − L))/L·penalty, 0)`` per row in Python floats (not capped), n the token
    count of the first assistant message (llm_message_utils.py L773-774: ``response_token_lengths``), whose tokens
    are the first run of the row's mask=1 tokens (a multi-turn row's tool turns are mask 0)."""
    coef = v[at + "stop_properly_penalty_coef"]
    if coef is not None:
        if not 0 <= coef <= 1:
            raise AdvcliError(f"key {at}stop_properly_penalty_coef={coef:g}: NeMo RL asserts it is in [0, 1] "
                              "(reward_functions.py L69-71), so the trainer itself would not run it")
        cfg["reward"]["truncated_factor"] = float(coef)
        return
    names = ("overlong_buffer_length", "overlong_buffer_penalty", "max_response_length")
    missing = [at + k for k in names if v[at + k] is None]
    if missing:
        raise AdvcliError(f"key {at}enabled=true without {', '.join(missing)}: NeMo RL raises ValueError (only DAPO "
                          "reward shaping is supported: reward_functions.py L120-128), so the trainer itself would "
                          "not run it", hint=f"set {', '.join(missing)}, or stop_properly_penalty_coef")
    length, penalty, longest = (v[at + k] for k in names)
    if length == 0:  # −exceed_length / overlong_buffer_length in Python ints (reward_functions.py L165)
        raise AdvcliError(f"key {at}overlong_buffer_length=0: NeMo RL divides each row's excess length by it "
                          "(ZeroDivisionError), so the trainer itself would not run it")
    if penalty < 0:
        raise AdvcliError(f"key {at}overlong_buffer_penalty={penalty:g}: NeMo RL asserts it is >= 0 "
                          "(reward_functions.py L130), so the trainer itself would not run it")
    cfg["reward"]["overlong"].update(tokens=float(length), factor=float(penalty), max_tokens=int(longest),
                                     length="first_run", cap=False, exact=True)


def _loop_rewards(cfg: dict, v: dict, loop: str) -> None:
    """The loop's reward and mask steps before the estimator (``loop``: grpo or ppo): reward_scaling as
    ``reward.range_map``, reward_shaping (:func:`_reward_shaping`); none on a dump's rewards, which hold them.
    overlong_filtering and seq_logprob_error_threshold only zero rows' sample mask (grpo.py L3136-3145, L2581-2618
    @7ea279ab): the estimator sees mask = token_mask·sample_mask (L3289-3299), which advcli reads from the input's
    response_mask (a train_data_step dump's sample_loss_mask holds it); said by :func:`estimator_note`."""
    if v["advcli.rewards_shaped"]:
        return
    if v[f"{loop}.reward_scaling.enabled"]:
        cfg["reward"]["range_map"] = [v[f"{loop}.reward_scaling.{b}"]
                                      for b in ("source_min", "source_max", "target_min", "target_max")]
        smin, smax = cfg["reward"]["range_map"][:2]
        if smax <= smin:  # scale_rewards (grpo.py L1862-1867 @7ea279ab): clamp(min > max) gives max everywhere
            at = f"{loop}.reward_scaling."
            raise AdvcliError(f"keys {at}source_min={smin:g} and {at}source_max={smax:g}: NeMo RL clamps every reward "
                              "to [source_min, source_max] and divides by source_max − source_min, so "
                              + ("it divides by 0 (NaN rewards)" if smax == smin else
                                 "every reward becomes target_max and every advantage 0")
                              + " (grpo.py scale_rewards L1862-1867)",
                              hint=f"set {at}source_max above {at}source_min")
    penalty = {k: x for k, x in v.items() if k.startswith(LENGTH_PENALTY)}
    if penalty and v.get(LENGTH_PENALTY + "enabled") is not False:
        raise AdvcliError(f"keys {', '.join(sorted(penalty))}: NeMo RL's length penalties (#3852, "
                          "nemo_rl/utils/length_penalty.py) change the rewards before the estimator; advcli does not "
                          "reproduce them",
                          hint="run on NeMo's train_data_step dump, whose rewards hold them, or give the penalised "
                               "rewards and --set advcli.rewards_shaped=true")
    if v[f"{loop}.reward_shaping.enabled"]:
        _reward_shaping(cfg, v, f"{loop}.reward_shaping.")


def translate(v: dict) -> dict:
    cfg = default_config()
    cfg["grouping"]["by"] = "id"
    cfg["reward"]["source"] = "reward"
    # the estimators take one reward per sample (advantage_estimator.py L69-98 @7ea279ab), whatever its tokens: an
    # empty response (0 generated tokens) keeps its reward in the group statistics
    cfg["reward"]["empty_row"] = "score"
    ppo = v["ppo.adv_estimator.name"]
    _loop_rewards(cfg, v, "ppo" if ppo is not None else "grpo")
    for key in ("grpo.invalid_tool_call_advantage", "grpo.malformed_thinking_advantage"):
        if v[key] is not None and ppo is None:
            raise AdvcliError(f"key {key}={v[key]}: NeMo writes this advantage over the rows whose messages it finds "
                              "faulty, which a rollout dump does not mark",
                              hint=f"--set {key}=null recomputes the estimator's advantages (the rows NeMo "
                                   "overrode then differ)")
    beta = v["loss_fn.reference_policy_kl_penalty"]
    if ppo is not None:
        return _translate_ppo(cfg, v, ppo, beta)
    est = v["grpo.adv_estimator.name"]
    loo = v["grpo.adv_estimator.use_leave_one_out_baseline"]
    norm = v["grpo.adv_estimator.normalize_rewards"]
    if est == "grpo":  # GRPOAdvantageEstimator (L57-98)
        cfg["estimator"] = {"name": "grpo_loo", "leave_one_out": loo, "normalize": norm, "eps": 1e-6,
                            "mask_output": False, "skip_single_valued": v["advcli.skip_trivial_std"],
                            "valid_mask": v["advcli.grpo_valid_mask"]}
    elif est == "gdpo":  # GDPOAdvantageEstimator (L101-190): every reward/* key, sorted by name
        pattern = "reward/*" if v["advcli.gdpo_reward_keys"] == "named" else "reward{n}"
        cfg["reward"].update(source="components", components=[pattern])
        cfg["estimator"] = {"name": "gdpo_loo", "weights": v["grpo.adv_estimator.reward_weights"],
                            "leave_one_out": loo, "normalize": norm, "eps": 1e-6, "mask_output": False,
                            "skip_single_valued": v["advcli.skip_trivial_std"]}
    elif est == "reinforce_plus_plus":  # ReinforcePlusPlusAdvantageEstimator (L193-267)
        cfg["reward"]["placement"] = "all"
        if v["grpo.adv_estimator.minus_baseline"]:  # calculate_baseline_and_std_per_prompt's mean (L235-242)
            cfg["reward"]["normalize"].update(mean="group", std="none", onepass=True)
        cfg["kl"].update(_kl(v, mask=False), in_reward=v["loss_fn.use_kl_in_reward"])
        cfg["estimator"] = {"name": "token_rewards"}
        cfg["advantage"].update(whiten=True, whiten_unbiased=False, whiten_eps=1e-8, whiten_eps_mode="max",
                                whiten_divisor="n", remask=False,  # Σ a·M / Σ M (L262): Σ M = 0 → NaN
                                whiten_small="compute")  # NeMo never refuses a tiny batch
    elif est == "opd":  # OPDAdvantageEstimator (L551-627)
        cfg["estimator"] = {"name": "distill"}
    lo, hi = v["grpo.advantage_clip_low"], v["grpo.advantage_clip_high"]
    if lo is not None or hi is not None:  # _clip_grpo_advantages (grpo.py L2302-2313)
        # clamp(min=lo) then clamp(max=hi): with lo > hi every advantage is hi, as torch.clamp(min=lo, max=hi) gives
        cfg["advantage"]["clip"] = [lo, hi]
    return cfg


def _translate_ppo(cfg: dict, v: dict, name: str, beta: float) -> dict:
    if name == "raw_reward":  # RawRewardAdvantageEstimator (L270-299): r_i everywhere, optional z-score
        cfg["reward"]["placement"] = "all"
        cfg["estimator"] = {"name": "token_rewards"}
        if v["ppo.adv_estimator.normalize_advantages"]:
            cfg["advantage"].update(whiten=True, whiten_unbiased=False, whiten_eps=1e-8, whiten_eps_mode="max",
                                    whiten_divisor="max1", whiten_small="compute")  # / ΣM.clamp(min=1)
        return cfg
    # GeneralizedAdvantageEstimator (L302-548)
    alpha = v["ppo.adv_estimator.length_adaptive_alpha"]
    lam = v["ppo.adv_estimator.gae_lambda"]
    lam_value = v["ppo.adv_estimator.gae_lambda_value"]
    lam_policy = v["ppo.adv_estimator.gae_lambda_policy"]
    lam_value = lam if lam_value is None else lam_value
    lam_policy = lam if lam_policy is None else lam_policy
    # _build_token_level_rewards: (−β·KL + r_i·[t = last M=1 token])·M, KL only when use_kl_in_reward and β > 0
    cfg["reward"].update(placement="last_valid", mask_placed=True)
    cfg["kl"].update(_kl(v, mask=True), in_reward=bool(v["loss_fn.use_kl_in_reward"] and beta > 0))
    # _resolve_lambda_policy (L412-422): length_adaptive_alpha > 0 takes precedence over gae_lambda_policy
    cfg["estimator"] = {"name": "gae", "gamma": v["ppo.adv_estimator.gae_gamma"], "lam": lam_policy,
                        "returns_lam": lam_value, "holes": "skip", "lam_length_alpha": alpha or 0.0}
    if v["ppo.adv_estimator.normalize_advantages"]:  # _reward_whiten: masked_mean/masked_var (unbiased)
        cfg["advantage"].update(whiten=True, whiten_unbiased=True, whiten_eps=1e-8, whiten_eps_mode="add",
                                whiten_small="compute")
    cfg["advantage"]["remask"] = "fill"  # masked_fill(~mask, 0), always (L495): a NaN there becomes 0
    return cfg


def estimator_note(v: dict) -> str | None:
    """Why the chosen estimator runs under another advcli name (translate above), and what the loop's row filters
    (overlong_filtering, seq_logprob_error_threshold) change."""
    own = _estimator_note(v)
    loop = "ppo" if v["ppo.adv_estimator.name"] is not None else "grpo"
    filters = [k for k in ("overlong_filtering", "seq_logprob_error_threshold")
               if v[f"{loop}.{k}"] not in (None, False)]
    if not filters:
        return own
    ignored = loop == "grpo" and v["grpo.adv_estimator.name"] in ("grpo", "gdpo") and not v["advcli.grpo_valid_mask"]
    said = (f"{loop}.{' and '.join(filters)} {'zero' if len(filters) > 1 else 'zeroes'} the filtered rows' sample "
            "mask (their loss), which "
            + ("this estimator does not read at this release: no advantage changes" if ignored else
               "the estimator reads with the token mask: give those rows response_mask 0 in the input (a "
               "train_data_step dump's sample_loss_mask holds them)"))
    return f"{own}; {said}" if own else said


def _estimator_note(v: dict) -> str | None:
    ppo, est = v["ppo.adv_estimator.name"], v["grpo.adv_estimator.name"]
    if ppo == "raw_reward":
        return ("ppo.adv_estimator.name=raw_reward is NeMo RL's RawRewardAdvantageEstimator, the reward on every "
                "token: advcli's token_rewards")
    if ppo is not None:
        return None
    if est == "grpo":
        base = "leave-one-out" if v["grpo.adv_estimator.use_leave_one_out_baseline"] else "group-mean"
        return (f"grpo.adv_estimator.name=grpo is NeMo RL's GRPOAdvantageEstimator with its {base} baseline: "
                "advcli's grpo_loo")
    if est == "gdpo":
        return "grpo.adv_estimator.name=gdpo is NeMo RL's GDPOAdvantageEstimator: advcli's gdpo_loo"
    if est == "reinforce_plus_plus":
        minus = " minus its group mean" if v["grpo.adv_estimator.minus_baseline"] else ""
        return (f"grpo.adv_estimator.name=reinforce_plus_plus is NeMo RL's ReinforcePlusPlusAdvantageEstimator, the "
                f"reward{minus} on every token, whitened over the batch: advcli's token_rewards")
    if est == "opd":
        return "grpo.adv_estimator.name=opd is NeMo RL's OPDAdvantageEstimator: advcli's distill"
    return None


_OLD = {"advcli.skip_trivial_std": False, "advcli.grpo_valid_mask": False}  # before #3837 and #4158
_NO_PPO = ((None,), "NeMo RL before v0.7.0 has no PPO trainer (nemo_rl/algorithms/ppo.py came with #2530)")
_NO_CLIP = "advantages are not clipped before #2686 (v0.7.0)"
_NO_OVERRIDES = "no message-level advantage overrides before #2656 (v0.7.0)"
_UNWEIGHTED = "gdpo sums its components unweighted before #2680"

# the releases and commits whose semantics advcli reproduces, oldest first (--flavor nemo@RELEASE); the KEYS
# defaults above are the newest. The tags v0.5.0, v0.6.0 and v0.7.0 are GitHub releases on release branches cut
# from main (at 48dbb37, c8d167a and 2206ae1); their estimators were read and run against advcli at each tag
# (nemo_rl/algorithms/grpo.py, advantage_estimator.py, utils.py). NeMo RL's configs take keys a release does not
# read, so those are `ignores`, not refusals. After 7ea279ab, states of main named by their pull requests.
RELEASES = (
    Release("0.5.0", "2026-01-30", aliases=("v0.5.0", "6c70893"), tag_only=True, settings=_OLD,
            accepts={"ppo.adv_estimator.name": _NO_PPO},
            ignores={"grpo.adv_estimator.name": "v0.5.0 computes GRPO inline in grpo_train (grpo.py L1232-1274 "
                                                "@v0.5.0); grpo.adv_estimator came with #1809",
                     "grpo.adv_estimator.minus_baseline": "no reinforce_plus_plus at v0.5.0 (#1809)",
                     "grpo.adv_estimator.reward_weights": "no gdpo at v0.5.0 (#2069)",
                     "grpo.advantage_clip_low": _NO_CLIP, "grpo.advantage_clip_high": _NO_CLIP,
                     "grpo.reward_shaping.stop_properly_penalty_coef": "no such key at v0.5.0 (#1809): its "
                                                                       "reward_shaping is the DAPO penalty",
                     "grpo.seq_logprob_error_threshold": "no sequence log-prob error masking at v0.5.0 (#1838)",
                     "grpo.invalid_tool_call_advantage": _NO_OVERRIDES,
                     "grpo.malformed_thinking_advantage": _NO_OVERRIDES},
            note="NeMo RL v0.5.0 (GitHub release, not on the package index): GRPO only, inline in grpo_train; its "
                 "train_data_step dump holds no tokens (not readable); with dynamic sampling the rows kept keep "
                 "the whole generated batch's baseline and std: run it on the batch before filtering"),
    Release("0.6.0", "2026-04-29", aliases=("v0.6.0", "5fb5889"), tag_only=True,
            settings={**_OLD, "advcli.gdpo_reward_keys": "numbered"},
            accepts={"grpo.adv_estimator.name": (("grpo", "gdpo", "reinforce_plus_plus"),
                                                 "v0.6.0's _create_advantage_estimator knows grpo, gdpo and "
                                                 "reinforce_plus_plus (grpo.py L1027-1072 @v0.6.0) and raises "
                                                 "for another; opd came with #2780"),
                     "ppo.adv_estimator.name": _NO_PPO},
            ignores={"grpo.adv_estimator.reward_weights": _UNWEIGHTED,
                     "grpo.advantage_clip_low": _NO_CLIP, "grpo.advantage_clip_high": _NO_CLIP,
                     "grpo.invalid_tool_call_advantage": _NO_OVERRIDES,
                     "grpo.malformed_thinking_advantage": _NO_OVERRIDES},
            changes=(
                Change("#1809", ("grpo.adv_estimator.name", "grpo.adv_estimator.minus_baseline",
                                 "loss_fn.use_kl_in_reward", "grpo.reward_shaping.stop_properly_penalty_coef"),
                       "estimators behind grpo.adv_estimator: grpo as before, reinforce_plus_plus (with the KL in "
                       "the reward); truncated rows' reward × stop_properly_penalty_coef; with dynamic sampling "
                       "the baseline and std are taken over the rows kept"),
                Change("#1838", ("grpo.seq_logprob_error_threshold",),
                       "rows over the sequence log-prob error get sample mask 0 (out of reinforce_plus_plus's "
                       "statistics)"),
                Change("#1989", (), "the train_data_step dump gains token_ids, token_loss_mask, sample_loss_mask and "
                                    "advantages: readable from here on"),
                Change("#2069", ("grpo.adv_estimator.name", "advcli.gdpo_reward_keys"),
                       "gdpo: leave-one-out advantages of the reward1, reward2, ... columns in number order, summed "
                       "unweighted, then a batch z-score"),
                Change("", (), "the estimators group the rows by all their user and system messages, not the "
                               "initial prompt: on a NeMo-Gym multi-turn dump, whose later turns are user messages, "
                               "advcli's initial-prompt groups can differ from the run's"),
            ),
            note="NeMo RL v0.6.0 (GitHub release, not on the package index): grpo, gdpo over reward1..N, "
                 "reinforce_plus_plus; no clip, no PPO"),
    Release("0.7.0", "2026-07-29", aliases=("v0.7.0", "81aa43d"), tag_only=True,
            settings={**_OLD, "advcli.gdpo_reward_keys": "numbered"},
            ignores={"grpo.adv_estimator.reward_weights": _UNWEIGHTED,
                     "ppo.seq_logprob_error_threshold": "v0.7.0's PPOConfig has no such key (#3262)"},
            changes=(
                Change("#2176", (), "the estimators group by the initial prompt again; token_loss_mask is 1 only on "
                                    "the generated assistant messages"),
                Change("#2686", ("grpo.advantage_clip_low", "grpo.advantage_clip_high"),
                       "advantages clamped after the estimator"),
                Change("#2656", ("grpo.invalid_tool_call_advantage", "grpo.malformed_thinking_advantage"),
                       "message-level advantage overrides"),
                Change("#2530", ("ppo.adv_estimator.name", "ppo.adv_estimator.gae_lambda",
                                 "ppo.adv_estimator.gae_gamma", "ppo.adv_estimator.normalize_advantages",
                                 "ppo.adv_estimator.gae_lambda_value", "ppo.adv_estimator.gae_lambda_policy",
                                 "ppo.adv_estimator.length_adaptive_alpha"),
                       "a PPO trainer: gae (with VAPO's λ keys) and raw_reward, over the token mask only (rows a "
                       "filter dropped stay in the statistics: keep their response_mask)"),
                Change("#2780", ("grpo.adv_estimator.name",), "opd"),
            ),
            note="NeMo RL v0.7.0 (GitHub release, not on the package index): 7ea279a's estimators, gdpo over "
                 "reward1..N unweighted"),
    Release("7ea279a", "2026-08-22", aliases=("7ea279abfbeb698b092856d0dab61e7cf39bc909", "pre-3837"),
            settings=_OLD,
            changes=(
                Change("#2597", ("advcli.gdpo_reward_keys",), "gdpo's components are the reward/* columns, "
                                                              "sorted by name"),
                Change("#2680", ("grpo.adv_estimator.reward_weights",), "gdpo weighs its components"),
                Change("#3262", ("ppo.seq_logprob_error_threshold",),
                       "PPO's estimator mask is token mask · sample mask: rows a filter dropped leave gae's "
                       "whitening and raw_reward's z-score"),
            ),
            note="the commit advcli was first matched against, before #3837 and #4158"),
    Release("post-3837", "2026-09-02", aliases=("pre-4158",), settings={"advcli.skip_trivial_std": False},
            changes=(
                Change("#3852", (), "new length penalties (nemo_rl/utils/length_penalty.py) applied to the rewards "
                                    "before the estimator, off unless configured; not covered by advcli: a run that "
                                    "used them is reproduced only where the dump's rewards already hold the penalty"),
                Change("#3766", (), "single-controller path: advantage mask = token mask · sample mask, which the "
                                    "legacy loop's dump already gives (response_mask 0 on a dropped row); no change "
                                    "offline"),
                Change("#3927", ("grpo.advantage_clip_low", "grpo.advantage_clip_high"),
                       "the single-controller path clips the advantages as the legacy loop does; no change offline "
                       "(advcli clips wherever the keys are set)"),
                Change("#3837", ("advcli.grpo_valid_mask",),
                       "grpo: rows whose sample mask is 0 (the dump's sample_loss_mask) leave the group baseline and "
                       "std (valid_mask); their own advantage uses the sums over the valid rows; gdpo and "
                       "reinforce_plus_plus unchanged. Upstream this is the single-controller path's; the legacy "
                       "grpo_train loops pass all ones until #4160 (open), and they write the train_data_step "
                       "dumps: on such a dump advcli.grpo_valid_mask is false unless set"),
            ),
            note="with #3837 (grpo's valid_mask), before #4158"),
    Release("post-4158", "2026-09-19", aliases=("newest",),
            changes=(
                Change("#4158", ("advcli.skip_trivial_std",),
                       "grpo/gdpo with normalize_rewards divide by the std only where it is > 0 and the rewards "
                       "feeding it are not all one value: a float32 residue std of identical leave-one-out peers "
                       "no longer divides (7×0.3 + 1×0.9: the 0.9 row gets 0.6, not ≈ 6367)"),
            ),
            note="with #4158 and #3837"),
)

def _ppo_config_estimator(values: dict, path: str) -> list[tuple[str, str]]:
    """A PPO training config (a ppo section, no grpo one) that names no ppo.adv_estimator runs PPOConfig's default,
    gae with λ 0.95, γ 1 and normalisation (ppo.py L197-207 @7ea279ab): the key advcli reads the loop from."""
    sections = {k.split(".")[0] for k in values}
    if "ppo" in sections and "grpo" not in sections and "ppo.adv_estimator.name" not in values:
        return [("ppo.adv_estimator.name", "gae")]
    return []


FLAVOR = Flavor(
    title="NeMo RL",  # the framework's name in prose (help, docs)
    kl_off="--set loss_fn.use_kl_in_reward=false",
    name="nemo", framework="NVIDIA-NeMo/RL @ 7ea279ab (nemo_rl/algorithms/advantage_estimator.py, utils.py, ppo.py)",
    keys=KEYS, translate=translate, aliases=ALIASES, estimator_note=estimator_note,
    # --flavor nemo is the commit the cross-check contract pins (docs: shared cli-contract): #3837 and #4158, merged
    # after it, change the numbers of leave-one-out groups of equal non-dyadic rewards and of sample-masked rows
    default_release="7ea279a",
    default_why="the commit advcli is cross-checked against; #3837 and #4158 came after it",
    estimator_key="grpo.adv_estimator.name",
    more_estimator_keys=("ppo.adv_estimator.name",),  # --estimator gae / raw_reward: NeMo's PPO estimators
    # a training config's grpo, ppo and loss_fn sections hold the loop's and the loss's settings beside the
    # advantage keys (grpo.num_prompts_per_step, loss_fn.ratio_clip_min, ...; examples/configs/*.yaml @7ea279ab):
    # ignored there, a near miss of one of the flavor's keys still refused
    mixed_sections=("grpo", "ppo", "loss_fn"),
    file_settings=_ppo_config_estimator,
    open_prefixes=(LENGTH_PENALTY,),  # taken whatever its keys, so that a length penalty is refused, not ignored
    # the train_data_step dumps are written by the legacy grpo_train / async_grpo_train loops (grpo.py L3651,
    # L5279 @7ea279ab), whose compute_advantage call passes no valid_mask (L3289-3301): #3837 reached the
    # single-controller path only, and #4160 (open) would bring the legacy loops in line
    dump_settings={"nemo-jsonl": ((("advcli.grpo_valid_mask", False), ("advcli.rewards_shaped", True)),
                                  "NeMo RL's train_data_step dump (written by the grpo_train loops, which give "
                                  "GRPO no valid_mask: every row is in the group statistics until #4160; its "
                                  "rewards are after reward_scaling and reward_shaping)")},
    audit_tries=lambda n: [{}, {"grpo.adv_estimator.use_leave_one_out_baseline": False},
                           {"grpo.adv_estimator.normalize_rewards": False},
                           {"grpo.adv_estimator.use_leave_one_out_baseline": False,
                            "grpo.adv_estimator.normalize_rewards": False}],
    notes="Groups by prompt id anywhere in the file. grpo/gdpo: leave-one-out baseline (default) with a per-row "
          "leave-one-out std from the one-pass E[r²]−E[r]² in float32 (so all-equal non-dyadic groups can give "
          "huge values, e.g. 7×0.3+1×0.9 → 6367 at 7ea279a), A/(σ+1e-6) only where σ>0 and (from #4158) the "
          "rewards σ is taken over are not all one value, groups of one 0, LOO n=2 "
          "unnormalised; gdpo sums the weighted reward/* components (sorted by name) and z-scores the rows of "
          "the batch (unbiased, no eps). reinforce_plus_plus: (r−μ_g) − β·KL_t per token (calculate_kl, clamps "
          "20/10, logr = ref − lp), then a biased z-score over all mask=1 tokens with max(var,1e-8). The GRPO-loop "
          "estimators do not zero masked positions; advantage_clip_low/high clamp them at the end. PPO gae skips "
          "masked spans, places r on the last mask=1 token, whitens (unbiased, var+1e-8) and zeroes M=0; "
          "returns = A + V before whitening. raw_reward: r_i everywhere, biased z-score.",
    releases=RELEASES)
