"""``--flavor openrlhf``: OpenRLHF's ``compute_advantages_and_returns`` (OpenRLHF/OpenRLHF @ 3c3be623,
``openrlhf/trainer/ppo_utils/experience_maker.py`` L237-330, ``openrlhf/models/utils.py`` L64-126,
flags of ``openrlhf/cli/train_ppo_ray.py``):

0. the length penalties on the scalar reward (L243, ``ppo_utils/length_penalty.py``): DAPO's overlong penalty on
   the span of the action mask, capped, then ProRL's stop-properly factor on the truncated rows;
1. group shaping of the scalar reward on the positional ``[G, n]`` reshape of the step (L246-270):
   ``rloo`` r − (Σ_g r − r)/(n − 1); ``reinforce_baseline``, ``dr_grpo`` r − mean_g;
   ``group_norm`` (r − mean_g)/(std_g + 1e-9) (torch.std, unbiased); ``flash_reinforce`` (release 0.11.2)
   r − mean of the whole step (no group); ``gae``, ``reinforce`` unchanged;
2. ``compute_reward``: clamp to ``reward.clip_range``; the reward at the last mask=1 token plus
   ``−β·k_t`` at **every** position (k1/k2/k3 clamped to ±10 at the output, no input clamp); no reward
   KL when β ≤ 0 (no reference model) or with ``algo.kl.use_loss``;
3. ``gae``: GAE on M·R and M·V over every position (no hole skipping), returns = A + M·V; the others:
   cumulative returns of M·R (holes carry the next valid token's return), γ forced to 1.0 except for
   ``reinforce``;
4. ``gae``, ``reinforce``, ``reinforce_baseline``: normalisation over all action tokens of the step,
   biased variance, ``max(var, 1e-8)^-½``, applied at every position (``no_std_norm``: centre only).
5. the IS correction (``algo.advantage.is_correction_*``; ``PolicyLoss.forward`` in ``openrlhf/models/loss.py``
   L214-247 of release 0.11.2, L196-219 of 0.10.4): a coefficient on the per-token loss, after the
   advantages, written as ``rollout_is_weights`` (canonical ``rollout_correction.gate_*``; the math is
   ``advcli.correction.weights.gate_chunk``).

A flavor holds no math: this module only maps OpenRLHF's flags onto the canonical configuration.
"""
from __future__ import annotations

from ..config import Key, default_config
from ..errors import AdvcliError, GroupSizeNeeded, did_you_mean
from . import Flavor
from ._releases import Change, Release

ESTIMATORS = ("gae", "reinforce", "rloo", "reinforce_baseline", "group_norm", "dr_grpo", "flash_reinforce")
GROUP_ESTIMATORS = ("rloo", "reinforce_baseline", "group_norm", "dr_grpo")
NORMALISED = ("gae", "reinforce", "reinforce_baseline")
KL_NAMES = ("k1", "k2", "k3")
LEVELS, MODES, GATINGS = ("off", "token", "seq"), ("mask", "clip"), ("ratio", "binary_kl", "tv")
OLD_TYPES = ("tis", "icepop", "seq-mask-tis", "mis")
# is_correction_type (0.10.x) as the 0.11.2 flags: (level, mode), gating ratio (loss.py @0.10.4 L198-219); "mis" is
# release 0.9.3's name of seq-mask-tis (models/loss.py @v0.9.3 L161-168, the same code as @v0.9.4 under the new name)
OLD_AS_NEW = {"tis": ("token", "clip"), "icepop": ("token", "mask"), "seq-mask-tis": ("seq", "mask"),
              "mis": ("seq", "mask")}
C = "algo.advantage.is_correction_"

KEYS = {
    "algo.advantage.estimator": Key("gae", "advantage estimator: " + ", ".join(ESTIMATORS) + " (group_norm is "
                                    "OpenRLHF's GRPO; flash_reinforce, from release 0.11.2: r − the step's mean "
                                    "reward, no group, no whitening)", None, "str"),
    "rollout.n_samples_per_prompt": Key(1, "group size n: n consecutive rows form a group", None, "int"),
    "algo.advantage.gamma": Key(1.0, "discount (forced to 1.0 for rloo, reinforce_baseline, group_norm, dr_grpo)",
                                None, "float"),
    "algo.advantage.lambd": Key(1.0, "GAE λ", None, "float"),
    "algo.advantage.no_std_norm": Key(False, "centre only in the global normalisation (gae, reinforce, "
                                      "reinforce_baseline)", None, "bool"),
    "algo.kl.init_coef": Key(0.01, "β; 0 means no reference model and no reward KL", None, "float"),
    "algo.kl.estimator": Key("k1", "KL estimator: k1 (lp−ref), k2 (½Δ²), k3 (e^(ref−lp) − 1 + lp − ref); output "
                             "clamp ±10", KL_NAMES, "str"),
    "algo.kl.use_loss": Key(False, "the KL goes to the actor loss: no reward KL", None, "bool"),
    "algo.kl.target": Key(None, "adaptive controller target: β ← β·(1 + clip(kl/target − 1, ±0.2)·n/horizon) after "
                          "each step, kl the mean over the step's rows of each row's masked-mean KL, n = "
                          "rollout.batch_size × rollout.n_samples_per_prompt; null or 0: fixed β", None, "float"),
    "algo.kl.horizon": Key(10000, "adaptive controller horizon", None, "int"),
    "rollout.batch_size": Key(None, "prompts per step: the adaptive controller's n is rollout.batch_size × "
                              "rollout.n_samples_per_prompt (OpenRLHF's default 1024); null: the step's rows, that "
                              "product when the dump holds every row of the step", None, "int"),
    "reward.clip_range": Key([-10.0, 10.0], "clamp [lo, hi] of the group-shaped scalar reward", None, "list"),
    # DAPO dynamic filtering (ppo_utils/samples_generator.py _generate_vllm L168-177 @3c3be623): at generation
    "algo.dynamic_filtering_enable": Key(False, "DAPO dynamic filtering: the groups whose mean reward is not strictly "
                                         "inside algo.dynamic_filtering_range are taken out before anything is "
                                         "computed, as if never sampled (OpenRLHF samples others in their place); "
                                         "the output holds the kept rows", None, "bool"),
    "algo.dynamic_filtering_range": Key([0.0, 1.0], "LOW HIGH of the dynamic filtering: a group is kept when LOW < "
                                        "its mean reward < HIGH", None, "list"),
    "advcli.dynamic_filtering_margin": Key(0.0, "advcli extension (OpenRLHF's releases): the margin inside the dynamic "
                                           "filtering's range: 1e-6 in 0.8.1-0.9.0 (ppo_trainer.py @v0.8.1 L487: "
                                           "LOW + 1e-6 < mean < HIGH − 1e-6), 0 from 0.9.1", None, "float"),
    # the length penalties on the reward, first in compute_advantages_and_returns (ppo_utils/length_penalty.py)
    "reward.overlong_buffer_len": Key(None, "DAPO overlong penalty's buffer L: a response of span n (last − first "
                                      "action token + 1) beyond max − L loses min(n − (max − L), L)/L·factor, max "
                                      "being rollout.max_new_tokens or else data.max_len; null: off", None, "float"),
    "reward.overlong_penalty_factor": Key(1.0, "DAPO overlong penalty's factor (the most a response loses)", None,
                                          "float"),
    "reward.stop_properly_penalty_coef": Key(None, "ProRL stop-properly penalty on the responses vLLM stopped at "
                                             "the length limit (the input's `truncated` column): c in [0, 1] scales "
                                             "their reward, c < 0 replaces it; null: off", None, "float"),
    "rollout.max_new_tokens": Key(None, "max tokens generated per sample: the overlong penalty's max (null or 0: "
                                  "data.max_len)", None, "int"),
    "data.max_len": Key(2048, "max total sequence length: the overlong penalty's max when rollout.max_new_tokens is "
                        "not set", None, "int"),
    # the train/rollout log-prob mismatch correction, applied by PolicyLoss.forward to the per-token loss
    # (openrlhf/models/loss.py; flags of train_ppo_ray.py): release 0.11.2 (#1339) ...
    "algo.advantage.is_correction_level": Key("off", "IS correction (release 0.11.2): off, token (each token's "
                                              "statistic), seq (the row's masked mean: the ratio's geometric "
                                              "mean, a divergence's mean; mask mode only)", LEVELS, "str"),
    "algo.advantage.is_correction_mode": Key("mask", "(0.11.2) mask: a unit outside [LOW, HIGH] gets coefficient "
                                             "0, the others their token ratio e^lr; clip: clamp(e^lr, LOW, HIGH) "
                                             "(token level, ratio gating)", MODES, "str"),
    "algo.advantage.is_correction_gating": Key("ratio", "(0.11.2) the gated statistic: ratio π_train/π_rollout, "
                                               "binary_kl p·log(p/q) + (1−p)·log((1−p)/(1−q)), tv |p − q| (p, q "
                                               "the sampled token's rollout / train probabilities clamped to "
                                               "[1e-6, 1 − 1e-6]; divergences take a single HIGH)", GATINGS, "str"),
    "algo.advantage.is_correction_threshold": Key([0.5, 5.0], "[LOW, HIGH] on the gated statistic, or HIGH alone "
                                                  "(LOW = 0; release 0.11.2); 0.9.1-0.11.1: exactly LOW HIGH; "
                                                  "0.8.9-0.9.0: HIGH alone (default 2)", None, "any"),
    # ... and releases 0.10.x-0.11.1 (is_correction_type: tis = token clip, icepop = token mask,
    # seq-mask-tis = seq mask, all on the ratio)
    "algo.advantage.is_correction_enable": Key(False, "IS correction (releases 0.8.9-0.11.1, before 0.10.2 "
                                               "--enable_vllm_is_correction; 0.11.2: is_correction_level)", None,
                                               "bool"),
    "algo.advantage.is_correction_type": Key("tis", "(0.9.3-0.11.1) tis: clamp(e^lr, LOW, HIGH); icepop: e^lr "
                                             "inside [LOW, HIGH], else 0; seq-mask-tis: e^lr where the row's "
                                             "geometric mean ratio is inside [LOW, HIGH], else 0 (0.9.3: "
                                             "named mis)", OLD_TYPES, "str"),
    "advcli.reward_dtype": Key("run", "advcli extension: the dtype of the reward model's scores: `bfloat16` / "
                               "`float16` (a bf16 reward model), `run` (the run's precision). Releases 0.10.4-0.11.1 "
                               "shape them in that dtype (the [G, n] group mean, std, leave-one-out baseline); "
                               "0.11.2 promotes them to float32 first: their rounding stays, the arithmetic is "
                               "float32",
                               ("run", "bfloat16", "float16"), "str"),
    "advcli.reward_promote": Key(True, "advcli extension (OpenRLHF's releases): rewards promoted to at least "
                                 "float32 before the group shaping (0.11.2); false: shaped in their own dtype "
                                 "(0.10.4-0.11.1)", None, "bool"),
    "advcli.is_correction_keys": Key("0.11.2", "advcli extension (OpenRLHF's releases): which is_correction_* flags "
                                     "the release has: `0.11.2` (is_correction_level/mode/gating), `0.10.4` "
                                     "(releases 0.9.1-0.11.1: is_correction_enable/type, threshold LOW HIGH) or "
                                     "`0.8.9` (releases 0.8.9-0.9.0: --enable_vllm_is_correction, a single "
                                     "--vllm_is_truncated_threshold HIGH, tis only)", ("0.8.9", "0.10.4", "0.11.2"),
                                     "str"),
    "advcli.use_icepop": Key(False, "advcli extension: OpenRLHF 0.9.1-0.9.2's --use_icepop (alias use_icepop): "
                             "icepop instead of tis; later releases name it is_correction_type=icepop", None, "bool"),
    "advcli.kl_clamp": Key(True, "advcli extension (OpenRLHF's releases): compute_approx_kl clamps the KL estimate "
                           "to ±10 (release 0.8.6 on); false: no clamp (0.7.1-0.8.5)", None, "bool"),
    "advcli.dr_grpo_n1": Key(False, "advcli extension (OpenRLHF's releases): dr_grpo runs at n_samples_per_prompt "
                             "1 (its group mean is the reward itself: the shaped reward is 0), as releases "
                             "0.7.1-0.10.4 do (set by their entries); 0.11.0 added dr_grpo to the CLI's n > 1 "
                             "check", None, "bool"),
    "advcli.whiten_mean_span": Key("mask", "advcli extension (OpenRLHF's releases): the positions the whitening's mean "
                                   "sums, its count being Σ mask: `mask` (0.7.1 on: Σ A·m / Σ m in "
                                   "compute_advantages_and_returns), `row` (0.7.0: the replay buffer's normalize sums "
                                   "A over every position, holes included), `prefix` (before 0.7.0: the buffer keeps "
                                   "each row's first Σm positions only, sums A over them, writes 0 beyond)",
                                   ("mask", "row", "prefix"), "str"),
    "advcli.gamma_forced": Key(True, "advcli extension (OpenRLHF's releases): γ forced to 1.0 for rloo, "
                               "reinforce_baseline, group_norm, dr_grpo (0.6.3 on); false: they discount with "
                               "algo.advantage.gamma (before 0.6.3)", None, "bool"),
    "advcli.kl_masked": Key(False, "advcli extension (OpenRLHF's releases): compute_approx_kl multiplies the log-ratio "
                            "by the action mask (before 0.7.0); the returns mask the rewards anyway, so only the token "
                            "rewards written at mask=0 positions change", None, "bool"),
    "advcli.overlong_length": Key("span", "advcli extension (OpenRLHF's releases): the response length of the "
                                  "overlong penalty: `span` (0.9.1 on: last − first action token + 1), `tokens` "
                                  "(0.8.9-0.9.0: the generated ids, the row's tokens), `tokens_eos` (0.8.7-0.8.8: "
                                  "+ 1 where the `truncated` column is true, the EOS appended to a response without "
                                  "one)", ("span", "tokens", "tokens_eos"), "str"),
    "advcli.stop_properly_replace": Key(True, "advcli extension (OpenRLHF's releases): a stop_properly_penalty_coef "
                                        "below 0 replaces the truncated rows' reward (0.9.8 on); false: OpenRLHF "
                                        "asserts 0 <= c <= 1 (0.9.2-0.9.7)", None, "bool"),
    "advcli.kl_adaptive_replay": Key(True, "advcli extension (OpenRLHF's releases): the adaptive KL controller is "
                                     "fed the sample-weighted mean of the step's row KLs (0.9.8 on: ppo_actor.py "
                                     "ppo_train), which the dump's log-probs give; false (before 0.9.8): the "
                                     "unweighted mean over the training pass's shuffled micro-batches of their "
                                     "length-weighted KL, which no dump gives (an adaptive controller with the reward "
                                     "KL on is refused)", None, "bool"),
    "advcli.whiten_rloo": Key(False, "advcli extension (OpenRLHF's releases): rloo's advantages are normalised "
                              "over the step like gae/reinforce/reinforce_baseline (0.7.1-0.8.4: every estimator "
                              "but group_norm and dr_grpo)", None, "bool"),
}
ALIASES = {
    "advantage_estimator": "algo.advantage.estimator", "n_samples_per_prompt": "rollout.n_samples_per_prompt",
    "gamma": "algo.advantage.gamma", "lambd": "algo.advantage.lambd",
    "no_advantage_std_norm": "algo.advantage.no_std_norm", "init_kl_coef": "algo.kl.init_coef",
    "kl_estimator": "algo.kl.estimator", "use_kl_loss": "algo.kl.use_loss", "kl_target": "algo.kl.target",
    "kl_horizon": "algo.kl.horizon", "reward_clip_range": "reward.clip_range",
    "rollout_batch_size": "rollout.batch_size",
    # dynamic filtering's flags of releases 0.8.1-0.10.1 (cli/train_ppo_ray.py @v0.8.1 L430-433)
    "dynamic_filtering": "algo.dynamic_filtering_enable",
    "dynamic_filtering_reward_range": "algo.dynamic_filtering_range",
    # the IS correction's flags of releases 0.8.9-0.10.1 (cli/train_ppo_ray.py @v0.8.9 ... @v0.10.1)
    "enable_vllm_is_correction": C + "enable", "vllm_is_truncated_threshold": C + "threshold",
    "vllm_is_correction_type": C + "type", "use_icepop": "advcli.use_icepop",
    # the length penalties' flags before 0.10.2; --generate_max_len (0.8.7-0.9.7, default 1024) became
    # --max_new_tokens in 0.9.8 (cli/train_ppo_ray.py @v0.9.7 L348, @v0.9.8 L346-348)
    "overlong_buffer_len": "reward.overlong_buffer_len", "overlong_penalty_factor": "reward.overlong_penalty_factor",
    "stop_properly_penalty_coef": "reward.stop_properly_penalty_coef", "generate_max_len": "rollout.max_new_tokens",
    "max_new_tokens": "rollout.max_new_tokens", "max_len": "data.max_len",
}


def _adaptive_kl(v: dict, n: int) -> dict | None:
    """OpenRLHF's adaptive KL controller (``if args.algo.kl.target:`` AdaptiveKLController, ppo_trainer.py L171-176
    @3c3be623; kl_controller.py): a step's rewards take β = kl_ctl.value (compute_reward: β ≤ 0 counts as 0), then
    after its PPO pass ``kl_ctl.update(status["kl"], rollout.batch_size × n_samples_per_prompt)`` (L250-253), with
    status["kl"] the sample-weighted mean (ppo_actor.py ppo_train L247-258, all-reduced over the ranks) of each
    row's ``masked_mean(kl, action_mask)`` taken when the experience was made (experience_maker.py L205-226): the
    mean over the step's rows of each row's masked-mean KL, advcli's adaptive controller. Only with the reward KL on:
    otherwise β never reaches the advantages. None: a fixed β."""
    target = v["algo.kl.target"]
    if not target:
        return None
    if not v["advcli.kl_adaptive_replay"]:
        raise AdvcliError("key algo.kl.target: this OpenRLHF release feeds its adaptive controller the unweighted "
                          "mean over the training pass's micro-batches of their length-weighted KL (ppo_actor.py "
                          "ppo_train @v0.9.7 L185-215), micro-batches the DataLoader shuffles, so no dump gives the β "
                          "a step used (from 0.9.8 the mean is weighted by rows and advcli replays it)",
                          hint="give the step's β with algo.kl.init_coef (one step per run) and leave algo.kl.target "
                               "unset")
    horizon = v["algo.kl.horizon"]
    if not horizon:  # a negative one runs (no check in OpenRLHF): the update turns the other way
        raise AdvcliError(f"key algo.kl.horizon must not be 0 or null for OpenRLHF's adaptive controller (got "
                          f"{'null' if horizon is None else horizon}): AdaptiveKLController.update divides by it, so "
                          "every step after the first would take an infinite or NaN β",
                          hint="set algo.kl.horizon (OpenRLHF's default 10000), or leave algo.kl.target unset")
    batch = v["rollout.batch_size"]
    if batch is not None and batch < 1:
        raise AdvcliError(f"key rollout.batch_size must be at least 1 (got {batch})")
    return {"controller": "adaptive", "target": float(target), "horizon": float(horizon), "coef_min": 0.0,
            "update_rows": None if batch is None else int(batch) * n}


def _threshold(value, keys: str) -> list[float]:
    """``--algo.advantage.is_correction_threshold``: 0.11.2 takes HIGH or LOW HIGH (nargs='+'; one value means
    LOW = 0, train_ppo_ray.py L639-642); 0.9.1-0.11.1 exactly LOW HIGH (nargs=2); 0.8.9-0.9.0 one float HIGH
    (``--vllm_is_truncated_threshold``, default 2: ``clamp(max=HIGH)``, models/loss.py @v0.8.9 L140-142)."""
    vals = list(value) if isinstance(value, (list, tuple)) else [value]
    try:
        vals = [float(x) for x in vals]
    except (TypeError, ValueError):
        raise AdvcliError(f"key {C}threshold: expected numbers, got {value!r}") from None
    if len(vals) == 1 and keys != "0.10.4":
        vals.insert(0, 0.0)  # e^lr > 0: clamp(max=HIGH) is clamp(0, HIGH)
    if len(vals) != 2 or (keys == "0.8.9" and vals[0] != 0.0):
        raise AdvcliError(f"key {C}threshold: got {value!r}; "
                          + {"0.10.4": "releases 0.9.1-0.11.1 take exactly LOW HIGH",
                             "0.8.9": "releases 0.8.9-0.9.0 take one number, the upper clamp "
                                      "(--vllm_is_truncated_threshold, type=float)"}.get(keys,
                                                                                       "it takes HIGH or LOW HIGH"))
    return vals


def _correction(v: dict, cfg: dict) -> None:
    """The is_correction_* flags of the release (``advcli.is_correction_keys``) -> the canonical
    ``rollout_correction`` section: OpenRLHF's gated coefficient (advcli.correction.weights.gate_chunk)."""
    keys = v["advcli.is_correction_keys"]
    old_keys = keys != "0.11.2"
    new_given = [k for k in ("level", "mode", "gating") if v[C + k] != KEYS[C + k].default]
    old_given = [k for k in ("enable", "type") if v[C + k] != KEYS[C + k].default]
    if old_keys and new_given:
        raise AdvcliError(f"key {C}{new_given[0]}: OpenRLHF releases before 0.11.2 have no such flag (0.11.2 added "
                          "it, #1339); they take is_correction_enable and is_correction_type tis|icepop|seq-mask-tis "
                          "(before 0.10.2: --enable_vllm_is_correction, --vllm_is_correction_type)",
                          hint="drop the @release suffix (or use @0.11.2) to run the 0.11.2 flags")
    if not old_keys and old_given:
        lvl, mode = OLD_AS_NEW.get(v[C + "type"], ("token", "clip"))
        raise AdvcliError(f"key {C}{old_given[0]}: OpenRLHF 0.11.2 replaced is_correction_enable/is_correction_type "
                          "by is_correction_level/mode/gating (#1339)",
                          hint=f"is_correction_type={v[C + 'type']} is --set {C}level={lvl} --set {C}mode={mode}; "
                               "or name the release that has the old flags, --flavor openrlhf@0.10.4")
    if not old_keys and v["advcli.use_icepop"]:
        raise AdvcliError("key advcli.use_icepop (--use_icepop): OpenRLHF 0.11.2 has no such flag (it exists in "
                          "releases 0.9.1-0.9.2 only, cli/train_ppo_ray.py @v0.9.1 L253-258)",
                          hint=f"--set {C}level=token --set {C}mode=mask is IcePop at 0.11.2")
    if old_keys:
        kind = "icepop" if v["advcli.use_icepop"] else v[C + "type"]  # --use_icepop: 0.9.1-0.9.2
        level, mode, gating = (*OLD_AS_NEW[kind], "ratio") if v[C + "enable"] else ("off", "mask", "ratio")
    else:
        level, mode, gating = v[C + "level"], v[C + "mode"], v[C + "gating"]
    for name, val, valid in (("level", level, LEVELS), ("mode", mode, MODES), ("gating", gating, GATINGS)):
        if val not in valid:
            raise AdvcliError(f"key {C}{name}: unknown value {val!r}.{did_you_mean(str(val), valid)} "
                              f"Valid: {', '.join(valid)}")
    rc = cfg.setdefault("rollout_correction", {})
    if level == "off":
        flag = f"{C}enable" if old_keys else f"{C}level"
        rc.update(mode="off", unused=[("rollout_log_probs", f"OpenRLHF reads the rollout log-probs only for its IS "
                                       f"correction, which is off ({flag}); set it to recompute the coefficient")])
        return
    low, high = _threshold(v[C + "threshold"], keys)
    # PolicyLoss.__init__ (loss.py @0.11.2 L158-172): what the trainer refuses
    if mode == "clip" and (level == "seq" or gating != "ratio"):
        raise AdvcliError(f"{C}mode=clip requires {C}level=token and {C}gating=ratio (OpenRLHF's PolicyLoss raises "
                          "ValueError: only the per-token ratio is a weight that can be clamped)")
    if gating != "ratio" and low > 0:
        raise AdvcliError(f"{C}gating={gating} takes an upper bound only (a single delta): OpenRLHF's PolicyLoss "
                          f"raises ValueError with LOW = {low:g} > 0",
                          hint=f"--set {C}threshold=DELTA (e.g. 0.01)")
    rc.update(mode="on", is_level=None, rs=None, gate_level=level, gate_mode=mode, gate_stat=gating,
              gate_bounds=[low, high])



def _clip_range(value) -> list[float] | None:
    if value is None or value is False or (isinstance(value, (list, tuple)) and len(value) == 0):
        return None  # `if reward_clip_range:` in compute_reward
    try:
        lo, hi = (float(x) for x in value)
    except (TypeError, ValueError):
        raise AdvcliError(f"key reward.clip_range: expected two numbers [lo, hi], got {value!r}") from None
    return [lo, hi]


def _dynamic_filtering(v: dict, cfg: dict, n: int) -> None:
    """DAPO dynamic filtering: OpenRLHF drops, at generation, the prompt groups whose ``sum(scores) / len(scores)``
    (Python floats) is not strictly inside (LOW, HIGH) (samples_generator.py L167-177 @3c3be623; 0.8.1-0.9.0
    ppo_trainer.py: inside (LOW + 1e-6, HIGH − 1e-6)) and samples other prompts in their place, so the step it
    trains on never held them: advcli takes those groups out before the run (``grouping.keep_mean_between``)."""
    if not v["algo.dynamic_filtering_enable"]:
        return
    rng = v["algo.dynamic_filtering_range"]
    try:
        lo, hi = (float(x) for x in rng)
    except (TypeError, ValueError):
        raise AdvcliError(f"key algo.dynamic_filtering_range: expected two numbers LOW HIGH, got {rng!r}") from None
    if not lo < hi:
        raise AdvcliError(f"key algo.dynamic_filtering_range={rng!r}: OpenRLHF asserts LOW < HIGH "
                          "(cli/train_ppo_ray.py L700-703), so the trainer itself would not run it")
    if n <= 1:
        raise GroupSizeNeeded(f"algo.dynamic_filtering_enable with rollout.n_samples_per_prompt={n}: OpenRLHF "
                              "asserts n_samples_per_prompt > 1 with dynamic filtering (cli/train_ppo_ray.py "
                              "L707-709), so the trainer itself would not run it", key="rollout.n_samples_per_prompt")
    margin = float(v["advcli.dynamic_filtering_margin"])
    cfg["grouping"]["keep_mean_between"] = [lo + margin, hi - margin]  # as OpenRLHF adds them, in Python floats
    if cfg["grouping"]["by"] == "none":  # gae, reinforce: no groups in the math; the filter's are n consecutive rows
        cfg["grouping"]["size"] = n


def _length_penalties(v: dict, cfg: dict) -> None:
    """``apply_length_penalties`` (openrlhf/trainer/ppo_utils/length_penalty.py @3c3be623 L16-153): the DAPO
    overlong penalty on the span of the action mask, capped at L, computed in Python floats; then the ProRL
    stop-properly penalty on the truncated rows; both on the reward before the group shaping."""
    buffer_len = v["reward.overlong_buffer_len"]
    if buffer_len is not None:
        longest = v["rollout.max_new_tokens"] or v["data.max_len"]
        if longest is None or longest < buffer_len:
            raise AdvcliError(f"key reward.overlong_buffer_len={buffer_len:g} is over the maximum length {longest} "
                              "(rollout.max_new_tokens, else data.max_len); OpenRLHF asserts max_new_tokens >= "
                              "overlong_buffer_len (length_penalty.py L37-39), so the trainer itself would not run it",
                              hint="set rollout.max_new_tokens (or data.max_len) to the run's")
        length = v["advcli.overlong_length"]
        if length not in ("span", "tokens", "tokens_eos"):
            raise AdvcliError(f"key advcli.overlong_length: unknown value {length!r}. Valid: span, tokens, tokens_eos")
        cfg["reward"]["overlong"].update(tokens=float(buffer_len), factor=float(v["reward.overlong_penalty_factor"]),
                                         max_tokens=int(longest), length=length, cap=True, exact=True)
    coef = v["reward.stop_properly_penalty_coef"]
    if coef is not None:
        if coef > 1 or (coef < 0 and not v["advcli.stop_properly_replace"]):
            valid = ("[0, 1] (a factor) or below 0 (the reward itself) (length_penalty.py L84-86)"
                     if v["advcli.stop_properly_replace"] else
                     "[0, 1] (releases 0.9.2-0.9.7: length_penalty.py @v0.9.2 L78-80)")
            raise AdvcliError(f"key reward.stop_properly_penalty_coef={coef:g}: OpenRLHF asserts a coefficient in "
                              f"{valid}, so the trainer itself would not run it")
        cfg["reward"]["truncated_factor"] = float(coef)


def translate(v: dict) -> dict:
    cfg = default_config()
    est = v["algo.advantage.estimator"]
    if est not in ESTIMATORS:
        extra = " OpenRLHF's GRPO is group_norm (Dr. GRPO: dr_grpo)." if "grpo" in est.lower() else ""
        raise AdvcliError(f"key algo.advantage.estimator: unknown value {est!r}.{did_you_mean(est, ESTIMATORS)}"
                          f"{extra} Valid: {', '.join(ESTIMATORS)}")
    n = v["rollout.n_samples_per_prompt"]
    if n is None or n < 1:
        raise AdvcliError(f"key rollout.n_samples_per_prompt must be at least 1 (got {n})")
    # cli/train_ppo_ray.py asserts n > 1 for rloo, reinforce_baseline, group_norm (@v0.10.1 L557); dr_grpo joined
    # the list in 0.11.0 (@v0.11.0 L612), so earlier releases run it at n = 1
    if est in GROUP_ESTIMATORS and n <= 1 and not (est == "dr_grpo" and v["advcli.dr_grpo_n1"]):
        raise GroupSizeNeeded(f"{est} requires rollout.n_samples_per_prompt > 1 (got {n}); OpenRLHF's CLI refuses "
                              "it too (cli/train_ppo_ray.py: its assert on n_samples_per_prompt for the group "
                              "estimators, L371-372 @v0.5.7, L612-615 @v0.11.0)", key="rollout.n_samples_per_prompt")
    kl_name = v["algo.kl.estimator"]
    if kl_name not in KL_NAMES:
        raise AdvcliError(f"key algo.kl.estimator: unknown value {kl_name!r}.{did_you_mean(kl_name, KL_NAMES)}")
    beta = max(float(v["algo.kl.init_coef"]), 0.0)  # compute_reward: kl_coef <= 0 → 0
    kl_on = beta > 0 and not v["algo.kl.use_loss"]
    adaptive = _adaptive_kl(v, n) if kl_on else None
    if est in GROUP_ESTIMATORS:
        cfg["grouping"].update(by="position", size=n, scope="step")
    else:
        cfg["grouping"].update(by="none", size=None, scope="step")
    # flash_reinforce (0.11.2, experience_maker.py L275-278): rewards − rewards.mean() over the whole step
    mean, std, eps = {"rloo": ("loo", "none", 1e-6), "reinforce_baseline": ("group", "none", 1e-6),
                      "flash_reinforce": ("batch", "none", 1e-6),
                      "dr_grpo": ("group", "none", 1e-6), "group_norm": ("group", "group", 1e-9)}.get(
        est, ("none", "none", 1e-6))
    cfg["reward"].update(source="reward", clip=_clip_range(v["reward.clip_range"]), placement="last_valid",
                         mask_placed=False, whiten_tokens=False)
    cfg["reward"]["normalize"].update(mean=mean, std=std, eps=eps)
    _length_penalties(v, cfg)
    _dynamic_filtering(v, cfg, n)
    # the group shaping runs in the rewards' dtype before 0.11.2 (experience_maker.py @0.10.4 L248-270); 0.11.2
    # promotes them to float32 first (L242-245): their 16-bit rounding stays, the arithmetic is float32
    cfg["reward"]["dtype"] = v["advcli.reward_dtype"]
    cfg["reward"]["promote"] = bool(v["advcli.reward_promote"])
    cfg["kl"].update({"in_reward": kl_on, "estimator": kl_name, "input_clamp": None,
                      # compute_approx_kl's clamp(-10, 10) of the estimate came with 0.8.6 (models/utils.py @v0.8.6 L40)
                      "output_clamp": 10.0 if v["advcli.kl_clamp"] else None,
                      "coef": beta, "controller": "fixed", "mask": bool(v["advcli.kl_masked"]),
                      "token_clip": None})
    if adaptive:
        cfg["kl"].update(adaptive)
    if est == "gae":
        e = {"name": "gae", "gamma": v["algo.advantage.gamma"], "lam": v["algo.advantage.lambd"], "holes": "step",
             "zero_masked": True}
    else:
        # γ forced to 1.0 for the group estimators from 0.6.3 (experience_maker.py @v0.6.3 L540-548); before,
        # every cumulative estimator discounted with --gamma (@v0.6.2 get_cumulative_returns(reward, mask, gamma))
        forced = est != "reinforce" and v["advcli.gamma_forced"]
        gamma = 1.0 if forced else v["algo.advantage.gamma"]
        e = {"name": "reinforce_plus_plus", "gamma": gamma, "holes": "step", "mask_rewards": True}
    cfg["estimator"] = e
    # 0.7.1-0.8.4 whiten every estimator but group_norm/dr_grpo (experience_maker.py @v0.8.4 L695: `not in
    # ["group_norm", "dr_grpo"]`); 0.8.5 on: gae, reinforce, reinforce_baseline only
    whiten = est in NORMALISED or (est == "rloo" and v["advcli.whiten_rloo"])
    cfg["advantage"].update(whiten=whiten, whiten_unbiased=False, whiten_eps=1e-8, whiten_eps_mode="max",
                            whiten_divisor="n",  # Σ(A·m)/num_actions, no epsilon (L318-323)
                            whiten_scale=not v["algo.advantage.no_std_norm"], whiten_small="compute",
                            remask=False, clip=None)
    # the replay buffer's normalize before 0.7.1 (replay_buffer.py @v0.7.0 L209-237, @v0.6.4 L215-246): μ = Σ over
    # the items' positions / Σ action_mask, var = Σ (A − μ)²·m / Σ m, all-reduced over the data-parallel ranks
    span = v["advcli.whiten_mean_span"]
    if span not in ("mask", "row", "prefix"):
        raise AdvcliError(f"key advcli.whiten_mean_span: unknown value {span!r}. Valid: mask, row, prefix")
    cfg["advantage"]["whiten_mean_span"] = span
    _correction(v, cfg)
    return cfg


def estimator_note(v: dict) -> str | None:
    """Why the chosen estimator runs as advcli's reinforce_plus_plus (translate above)."""
    est = v["algo.advantage.estimator"]
    shaping = {"rloo": "leave-one-out baseline", "reinforce_baseline": "group-mean baseline",
               "dr_grpo": "group-mean baseline", "group_norm": "group norm (r − mean)/(std + 1e-9)",
               "flash_reinforce": "step-mean baseline (r − the mean reward of the step)"}.get(est)
    ret = ("cumulative return of the token rewards (compute_advantages_and_returns): advcli's "
           "reinforce_plus_plus")
    if est == "reinforce":
        return f"algo.advantage.estimator=reinforce is OpenRLHF's {ret}"
    if shaping:
        return f"algo.advantage.estimator={est} is OpenRLHF's {shaping} on the reward, then {ret} on that reward"
    return None


# Read from the released wheels' openrlhf/trainer/ppo_utils/experience_maker.py and openrlhf/models/utils.py:
# 0.10.4, 0.11.0 and 0.11.1 hold the same advantage code as commit 3c3be623; 0.11.2 is the newest release, and
# tests/conformance/test_conformance_openrlhf.py runs its own code against this flavor.
# The releases before, read at their tags (OpenRLHF/OpenRLHF v0.7.1 ... v0.10.3: compute_advantages_and_returns
# with get_advantages_and_returns and get_cumulative_returns in experience_maker.py, compute_approx_kl and
# compute_reward in models/utils.py, the flags of cli/train_ppo_ray.py, PolicyLoss in models/loss.py):
# - from v0.7.1 the driver (ppo_trainer.py: make_experience_list) shapes the whole step: the rewards of the
#   experiences concatenated in generation order (prompts repeated n times before generation, _generate_vllm, so a
#   prompt's rows sit together), reshape(-1, n), the same [G, n] shaping, compute_reward, the cumulative returns /
#   GAE and the step-wide masked whitening as 0.10.4; k1/k2/k3 unmasked; the rewards in their own dtype;
# - v0.7.1 ... v0.8.4 whiten every estimator but group_norm and dr_grpo (rloo too): advcli.whiten_rloo;
# - v0.8.5 whitens gae, reinforce, reinforce_baseline only;
# - v0.8.6 clamps the KL estimate to ±10 (models/utils.py L40) and maps dynamic-batch experiences back to the
#   generation order before the reshape (experiences' `index`; without --use_dynamic_batch the identity): the
#   numbers of 0.8.7 (whose only change, the --overlong_buffer_len penalty, is off by default);
# - v0.8.9 adds --enable_vllm_is_correction: the loss times clamp(e^(old − rollout), max=--vllm_is_truncated_threshold)
#   (one float, default 2; models/loss.py @v0.8.9 L140-142); v0.9.1 takes LOW HIGH (default 0.5 5.0) and --use_icepop;
#   v0.9.3 --vllm_is_correction_type tis|icepop|mis, renamed seq-mask-tis in v0.9.4 (the same code), which
#   0.10.2 moved to --algo.advantage.is_correction_* (the same weights to 0.11.1);
# - 0.10.2 moved the flags under --algo.* / --rollout.* (the old names are this flavor's aliases).
# Before v0.7.1 the advantages were whitened in the replay buffer (the entries before 0.7.1 below). Post-releases
# without a tag go with the tag before them.
_NO_IS = ("OpenRLHF {v} has no IS correction (--enable_vllm_is_correction came with 0.8.9: cli/train_ppo_ray.py "
          "@v0.8.9 L250, models/loss.py @v0.8.9 L140-142), so the trainer itself would not run it")
_NO_FLASH = (tuple(e for e in ESTIMATORS if e != "flash_reinforce"),
             "its --advantage_estimator choices (cli/train_ppo_ray.py) have no flash_reinforce (it came with 0.11.2), "
             "so the trainer itself would not run it")
_OLD = {"advcli.is_correction_keys": "0.10.4", "advcli.reward_promote": False, "advcli.dr_grpo_n1": True}
# before 0.9.8 the adaptive controller's input is the mean over shuffled micro-batches (ppo_actor.py @v0.9.7 L186-214)
_OLD_KL = {**_OLD, "advcli.kl_adaptive_replay": False}
_NO_ICEPOP_FLAG = ((False,), "--use_icepop exists in OpenRLHF 0.9.1-0.9.2 only (cli/train_ppo_ray.py @v0.9.1 "
                             "L253-258); other releases name it is_correction_type=icepop (0.9.3 on)")


def _no_penalty(v: str, overlong: bool = True) -> dict:
    """What a release without the length penalties refuses: --overlong_buffer_len (0.8.7, experience_maker.py
    @v0.8.7 L664-683) and --stop_properly_penalty_coef (0.9.2, length_penalty.py @v0.9.2 L61-95)."""
    out = {"reward.stop_properly_penalty_coef": ((None,), f"OpenRLHF {v} has no --stop_properly_penalty_coef (it came "
                                                          "with 0.9.2: length_penalty.py @v0.9.2 L61-95), so the "
                                                          "trainer itself would not run it")}
    if overlong:
        out["reward.overlong_buffer_len"] = ((None,), f"OpenRLHF {v} has no overlong penalty (--overlong_buffer_len "
                                                      "came with 0.8.7: experience_maker.py @v0.8.7 L664-683), so "
                                                      "the trainer itself would not run it")
    return out


def _no_filter(v: str) -> dict:
    """What a release before 0.8.1 refuses: --dynamic_filtering (0.8.1, ppo_trainer.py @v0.8.1 L472-501)."""
    return {"algo.dynamic_filtering_enable": ((False,), f"OpenRLHF {v} has no dynamic filtering (--dynamic_filtering "
                                                        "came with 0.8.1: ppo_trainer.py @v0.8.1 L472-501), so the "
                                                        "trainer itself would not run it")}


# 0.8.1-0.9.0 keep a group when LOW + 1e-6 < mean < HIGH − 1e-6 (ppo_trainer.py @v0.8.1 L487, @v0.9.0 L489)
_DF_MARGIN = {"advcli.dynamic_filtering_margin": 1e-6}
# the length penalties' defaults before 0.9.8: the max is --generate_max_len (default 1024), c < 0 is refused
_LP_OLD = {"rollout.max_new_tokens": 1024, "advcli.stop_properly_replace": False}


def _types(*kinds: str, at: str) -> tuple[tuple, str]:
    return kinds, (f"OpenRLHF {at}'s PolicyLoss (models/loss.py @v{at}) has the IS correction types "
                   f"{', '.join(kinds)} only, so the trainer itself would not run it")


def _no_is(v: str) -> dict:
    return {"algo.advantage.estimator": _NO_FLASH, C + "enable": ((False,), _NO_IS.format(v=v)),
            C + "level": (("off",), _NO_IS.format(v=v)), "advcli.use_icepop": _NO_ICEPOP_FLAG}


def _pre(last: str, estimators: tuple, kl: tuple = KL_NAMES, std_norm: bool = False, kl_loss: bool = True) -> dict:
    """What a release before 0.7.1 runs (cli/train_ppo_ray.py @v``last``): its --advantage_estimator choices, its KL
    estimators, no IS correction, and --no_advantage_std_norm (0.6.4) / --use_kl_loss (0.6.0) only where they exist."""
    why = (f"OpenRLHF {last} has no --advantage_estimator (cli/train_ppo_ray.py @v{last}): PPO with GAE only, so "
           "the trainer itself would not run it") if estimators == ("gae",) else (
        f"OpenRLHF {last}'s --advantage_estimator (cli/train_ppo_ray.py @v{last}) has {', '.join(estimators)} only, "
        "so the trainer itself would not run it")
    out = {**_no_is(last), **_no_penalty(last), **_no_filter(last), "algo.advantage.estimator": (estimators, why),
           "algo.kl.estimator": (kl, f"OpenRLHF {last} computes the KL with {' or '.join(kl)} only "
                                     f"(models/utils.py compute_approx_kl @v{last})")}
    if not std_norm:
        out["algo.advantage.no_std_norm"] = ((False,), f"--no_advantage_std_norm came with 0.6.4; OpenRLHF {last} "
                                                       "always divides by the std (replay_buffer.py normalize)")
    if not kl_loss:
        out["algo.kl.use_loss"] = ((False,), f"--use_kl_loss came with 0.6.0; OpenRLHF {last} has no KL loss")
    return out


# Releases before 0.7.1 (read at their tags, OpenRLHF/OpenRLHF v0.3.6 ... v0.7.0.post1): each data-parallel rank
# makes its own share of the step (make_experience_list of its prompts, repeated n times each, so a prompt's n
# samples stay together on one rank: the [G, n] group shaping of the dump's positional groups is the rank's), the
# advantages are whitened in the replay buffer with sums all-reduced over the ranks (the whole step, whatever the
# number of ranks): μ = Σ A over the buffer's positions / Σ action_mask, var = Σ (A − μ)²·m / Σ m, max(var, 1e-8).
# Before 0.7.0 the buffer holds each row's first Σm positions (remove_padding_in_sequences); 0.7.0 every position.
_PRE = {**_OLD_KL, "advcli.kl_clamp": False, "advcli.whiten_rloo": True, "advcli.whiten_mean_span": "prefix",
        "advcli.kl_masked": True, "advcli.gamma_forced": False}
_PRE_G1 = {k: v for k, v in _PRE.items() if k != "advcli.gamma_forced"}  # 0.6.3 on: γ forced (the default)
_PRE_NOTE = "whitened in the replay buffer over each row's first Σm positions; KL masked; "
# --lambd's default (cli/train_ppo_ray.py and train_ppo.py): 0.95 to 0.5.6 and in 0.6.0-0.6.3.post2 (L247 @v0.3.6.post1,
# L269 @v0.5.6, L300 @v0.6.0, L314 @v0.6.3.post2); 1.0 in 0.5.7-0.5.9.post1 (L272 @v0.5.7) and from 0.6.4 (L317)
_L95 = {"algo.advantage.lambd": 0.95}
_PRE95, _PRE_G1_95 = {**_PRE, **_L95}, {**_PRE_G1, **_L95}
RELEASES = (
    Release("0.3.6.post1", "2024-07-16", aliases=(
        "0.3.6.post2", "0.3.6.post3", "0.3.7", "0.3.7.post1", "0.3.7.post2", "0.3.7.post3", "0.3.8", "0.4.0",
        "0.4.0.post1", "0.4.0.post2", "0.4.0.post3", "0.4.1", "0.4.2", "0.4.2.post1", "0.4.3", "0.4.4", "0.4.5"),
            settings=_PRE95,
            accepts={**_pre("0.4.5", ("gae",), kl=("k1",), kl_loss=False), "reward.clip_range": (
                ([-10.0, 10.0], (-10.0, 10.0)), "OpenRLHF 0.4.5 clamps the reward to [-10, 10] (models/utils.py "
                "compute_reward @v0.4.5 L44); --reward_clip_range came with 0.4.6")},
            note="OpenRLHF 0.3.6 to 0.4.5: PPO with GAE only, " + _PRE_NOTE + "k1 only"),
    Release("0.4.6", "2024-10-31", aliases=("0.5.0",), settings=_PRE95,
            accepts=_pre("0.5.0", ("gae",), kl=("k1", "k3"), kl_loss=False),
            note="OpenRLHF 0.4.6 to 0.5.0: GAE, " + _PRE_NOTE + "k3 by --use_kl_estimator_k3", changes=(
                Change("", ("algo.kl.estimator", "reward.clip_range"),
                       "--use_kl_estimator_k3 (k3 of the masked log-ratio, models/utils.py @v0.4.6) and "
                       "--reward_clip_range (default -10 10, the clamp earlier releases hard-code)"),)),
    Release("0.5.1", "2024-11-14", aliases=("0.5.2", "0.5.2.post1"), settings=_PRE95,
            accepts=_pre("0.5.2", ("gae", "reinforce"), kl=("k1", "k3"), kl_loss=False),
            note="OpenRLHF 0.5.1 to 0.5.2: gae, reinforce; " + _PRE_NOTE.rstrip("; "), changes=(
                Change("", ("algo.advantage.estimator",),
                       "--advantage_estimator gae|reinforce: reinforce is the cumulative return of the masked "
                       "rewards with --gamma (experience_maker.py @v0.5.1 get_cumulative_returns)"),)),
    Release("0.5.3", "2024-12-07", aliases=("0.5.4", "0.5.5", "0.5.5.post1", "0.5.5.post2", "0.5.6"),
            settings=_PRE95, accepts=_pre("0.5.6", ("gae", "reinforce", "rloo"), kl=("k1", "k3"),
                                                 kl_loss=False),
            note="OpenRLHF 0.5.3 to 0.5.6: + rloo (γ not forced to 1, whitened); " + _PRE_NOTE.rstrip("; "), changes=(
                Change("", ("algo.advantage.estimator",),
                       "rloo: the leave-one-out baseline on the rank's [G, n] reshape (process_experiences, "
                       "experience_maker.py @v0.5.3 L341-348), then the cumulative return with --gamma and the "
                       "buffer's whitening"),)),
    Release("0.5.7", "2025-02-04", aliases=("0.5.8", "0.5.9", "0.5.9.post1"), settings=_PRE,
            accepts=_pre("0.5.9", ("gae", "reinforce", "rloo"), kl=("k1", "k3"), kl_loss=False),
            note="OpenRLHF 0.5.7 to 0.5.9.post1: the advantage code of 0.5.3, --lambd defaulting to 1.0; "
                 + _PRE_NOTE.rstrip("; "), changes=(
                Change("", ("algo.advantage.lambd",),
                       "--lambd defaults to 1.0 (cli/train_ppo_ray.py L272 @v0.5.7), 0.95 before"),)),
    Release("0.6.0", "2025-02-28", settings=_PRE95,
            accepts=_pre("0.6.0", ("gae", "reinforce", "rloo", "reinforce_baseline", "group_norm"), kl=("k1", "k3")),
            note="OpenRLHF 0.6.0: + reinforce_baseline, group_norm (not whitened); γ not forced to 1; "
                 + _PRE_NOTE.rstrip("; "), changes=(
                Change("", ("algo.advantage.estimator", "algo.kl.use_loss"),
                       "reinforce_baseline (r − group mean), group_norm ((r − mean)/(std + 1e-9), left out of the "
                       "buffer's whitening: ppo_trainer.py @v0.6.0 L243), --use_kl_loss"),
                Change("", ("algo.advantage.lambd",), "--lambd defaults to 0.95 again (cli/train_ppo_ray.py L300 "
                       "@v0.6.0)"),)),
    Release("0.6.0.post1", "2025-03-02", aliases=("0.6.0.post2", "0.6.0.post3", "0.6.1", "0.6.1.post1", "0.6.2"),
            settings=_PRE95,
            accepts=_pre("0.6.2", ("gae", "reinforce", "rloo", "reinforce_baseline", "group_norm")),
            note="OpenRLHF 0.6.0.post1 to 0.6.2: --kl_estimator k1|k2|k3; " + _PRE_NOTE.rstrip("; "), changes=(
                Change("", ("algo.kl.estimator",),
                       "--kl_estimator k1|k2|k3 replaces --use_kl_estimator_k3 (models/utils.py @v0.6.0.post1 "
                       "compute_approx_kl: k2 = ½(masked log-ratio)²)"),)),
    Release("0.6.3", "2025-03-24", aliases=("0.6.3.post1",), settings=_PRE_G1_95,
            accepts=_pre("0.6.3", ("gae", "reinforce", "rloo", "reinforce_baseline", "group_norm")),
            note="OpenRLHF 0.6.3: γ forced to 1 for the group estimators; " + _PRE_NOTE.rstrip("; "), changes=(
                Change("", ("algo.advantage.gamma",),
                       "γ is forced to 1.0 for rloo, reinforce_baseline and group_norm (experience_maker.py "
                       "@v0.6.3); before, they discounted with --gamma"),)),
    Release("0.6.3.post2", "2025-03-24", settings=_PRE_G1_95,
            accepts=_pre("0.6.3.post2", ("gae", "reinforce", "rloo", "reinforce_baseline", "group_norm", "dr_grpo")),
            note="OpenRLHF 0.6.3.post2: + dr_grpo (not whitened); " + _PRE_NOTE.rstrip("; "), changes=(
                Change("", ("algo.advantage.estimator",),
                       "dr_grpo: r − group mean, left out of the buffer's whitening with group_norm "
                       "(trainer/ray/ppo_actor.py @v0.6.3.post2 L212)"),)),
    Release("0.6.4", "2025-04-02", settings=_PRE_G1,
            accepts=_pre("0.6.4", ESTIMATORS[:-1], std_norm=True),
            note="OpenRLHF 0.6.4: --no_advantage_std_norm; " + _PRE_NOTE.rstrip("; "), changes=(
                Change("", ("algo.advantage.no_std_norm",),
                       "--no_advantage_std_norm: the buffer's normalize centres only (replay_buffer.py @v0.6.4 "
                       "L215-246, divide_by_std)"),
                Change("", ("algo.advantage.lambd",), "--lambd defaults to 1 (cli/train_ppo_ray.py L317 @v0.6.4), "
                       "as it has since"),)),
    Release("0.7.0", "2025-04-14", aliases=("0.7.0.post1",),
            settings={**{k: v for k, v in _PRE_G1.items() if k != "advcli.kl_masked"},
                      "advcli.whiten_mean_span": "row"},
            accepts=_pre("0.7.0", ESTIMATORS[:-1], std_norm=True),
            note="OpenRLHF 0.7.0: whitened in the replay buffer, μ = Σ A over every position / Σm; KL not masked",
            changes=(
                Change("", ("advcli.whiten_mean_span",),
                       "the replay buffer keeps every position of a row (remove_padding_in_sequences no longer runs, "
                       "replay_buffer.py @v0.7.0): the mean sums A over all of them, holes included, and the "
                       "whitened values are written at every position"),
                Change("", ("advcli.kl_masked", "algo.kl.estimator"),
                       "compute_approx_kl no longer masks the log-ratio (models/utils.py @v0.7.0)"))),
    Release("0.7.1", "2025-04-17", aliases=("0.7.1.post1", "0.7.1.post2", "0.7.2", "0.7.2.post1", "0.7.3", "0.7.4",
                                            "0.7.4.post1", "0.7.4.post2", "0.7.5", "0.8.0", "0.8.0.post1"),
            settings={**_OLD_KL, "advcli.kl_clamp": False, "advcli.whiten_rloo": True},
            accepts={**_no_is("0.8.0.post1"), **_no_penalty("0.8.0.post1"), **_no_filter("0.8.0.post1")},
            note="OpenRLHF 0.7.1 to 0.8.0: the step shaped by the driver; rloo whitened too; KL not clamped; no IS "
                 "correction", changes=(
                Change("", ("advcli.whiten_mean_span",),
                       "the whitening moved from the replay buffer to compute_advantages_and_returns: μ = Σ A·m / Σm "
                       "over the step (experience_maker.py @v0.7.1), written at every position"),)),
    Release("0.8.1", "2025-05-20", aliases=("0.8.1.post1", "0.8.2", "0.8.3", "0.8.4"),
            settings={**_OLD_KL, **_DF_MARGIN, "advcli.kl_clamp": False, "advcli.whiten_rloo": True},
            accepts={**_no_is("0.8.4"), **_no_penalty("0.8.4")},
            note="OpenRLHF 0.8.1 to 0.8.4: the advantage code of 0.7.1, + --dynamic_filtering", changes=(
                Change("#1018", ("algo.dynamic_filtering_enable", "algo.dynamic_filtering_range",
                                 "advcli.dynamic_filtering_margin"),
                       "--dynamic_filtering, --dynamic_filtering_reward_range LOW HIGH (default 0 1): the groups of n "
                       "samples whose mean reward is not inside (LOW + 1e-6, HIGH − 1e-6) are dropped at generation "
                       "and others sampled in their place (ppo_trainer.py @v0.8.1 L472-501)"),)),
    Release("0.8.5", "2025-06-16", settings={**_OLD_KL, **_DF_MARGIN, "advcli.kl_clamp": False},
            accepts={**_no_is("0.8.5"), **_no_penalty("0.8.5")},
            note="OpenRLHF 0.8.5: rloo no longer whitened; KL not clamped; no IS correction", changes=(
                Change("", ("algo.advantage.estimator",),
                       "rloo's advantages are no longer whitened over the step: only gae, reinforce and "
                       "reinforce_baseline are (experience_maker.py @v0.8.5 L695)"),)),
    Release("0.8.6", "2025-07-14", settings={**_OLD_KL, **_DF_MARGIN},
            accepts={**_no_is("0.8.6"), **_no_penalty("0.8.6")},
            note="OpenRLHF 0.8.6: the advantage code of 0.10.4 under the flat flags (--advantage_estimator, "
                 "--init_kl_coef, ...); no IS correction, no length penalty", changes=(
                Change("", ("algo.kl.estimator",),
                       "compute_approx_kl clamps the KL estimate (k1, k2, k3) to ±10 (0.8.6, models/utils.py @v0.8.6 "
                       "L40); before it the estimate entered the reward unclamped"),)),
    Release("0.8.7", "2025-07-24", aliases=("0.8.8",),
            settings={**_OLD_KL, **_LP_OLD, **_DF_MARGIN, "advcli.overlong_length": "tokens_eos"},
            accepts={**_no_is("0.8.8"), **_no_penalty("0.8.8", overlong=False)},
            note="OpenRLHF 0.8.7 to 0.8.8: + the overlong penalty on the generated ids (an EOS appended where "
                 "missing); no IS correction", changes=(
                Change("", ("reward.overlong_buffer_len", "reward.overlong_penalty_factor", "advcli.overlong_length"),
                       "--overlong_buffer_len L, --overlong_penalty_factor f: r −= min(n − (generate_max_len − L), "
                       "L)/L·f where positive, n the generated ids with the EOS appended to a response without one "
                       "(experience_maker.py @v0.8.7 L664-683)"),)),
    Release("0.8.9", "2025-08-06", aliases=("0.8.9.post1", "0.8.10", "0.8.11", "0.9.0"),
            settings={**_OLD_KL, **_LP_OLD, **_DF_MARGIN, "advcli.overlong_length": "tokens",
                      "advcli.is_correction_keys": "0.8.9",
                      C + "threshold": 2.0},
            accepts={"algo.advantage.estimator": _NO_FLASH, C + "type": _types("tis", at="0.9.0"),
                     "advcli.use_icepop": _NO_ICEPOP_FLAG, **_no_penalty("0.9.0", overlong=False)},
            note="OpenRLHF 0.8.9 to 0.9.0: --enable_vllm_is_correction, clamp(e^(old − rollout), max=HIGH)",
            changes=(Change("", (C + "enable", C + "threshold"),
                            "--enable_vllm_is_correction: the per-token loss times clamp(e^(old − rollout), "
                            "max=--vllm_is_truncated_threshold), one float, default 2 (models/loss.py @v0.8.9 "
                            "L140-142)"),
                     Change("", ("advcli.overlong_length",), "the overlong penalty's n is the generated ids, no EOS "
                            "added (experience_maker.py @v0.8.9 L676-695)"))),
    Release("0.9.1", "2026-01-05", aliases=("0.9.1.post1",), settings={**_OLD_KL, **_LP_OLD},
            accepts={"algo.advantage.estimator": _NO_FLASH, C + "type": _types("tis", at="0.9.1.post1"),
                     **_no_penalty("0.9.1.post1", overlong=False)},
            note="OpenRLHF 0.9.1: IS correction clamp(e^lr, LOW, HIGH), or --use_icepop",
            changes=(Change("", (C + "threshold", "advcli.use_icepop"),
                            "--vllm_is_truncated_threshold takes LOW HIGH (default 0.5 5.0): clamp(e^lr, LOW, HIGH); "
                            "--use_icepop: e^lr inside [LOW, HIGH], else 0 (models/loss.py @v0.9.1 L147-159)"),
                     Change("", ("advcli.dynamic_filtering_margin",),
                            "dynamic filtering keeps a prompt's samples when LOW < their mean score < HIGH, no margin "
                            "(samples_generator.py @v0.9.1 L331-333)"),
                     Change("", ("advcli.overlong_length",), "the overlong penalty's n is the span of the action mask, "
                            "last − first action token + 1 (samples_generator.py)"))),
    Release("0.9.2", "2026-02-03", settings={**_OLD_KL, **_LP_OLD},
            accepts={"algo.advantage.estimator": _NO_FLASH, C + "type": _types("tis", at="0.9.2")},
            note="OpenRLHF 0.9.2: + --stop_properly_penalty_coef (a factor in [0, 1])",
            changes=(Change("", ("reward.stop_properly_penalty_coef",),
                            "--stop_properly_penalty_coef c: the rewards of the responses vLLM stopped at the length "
                            "limit times c, c in [0, 1], after the overlong penalty (length_penalty.py @v0.9.2 "
                            "L61-95)"),)),
    Release("0.9.3", "2026-02-05", settings={**_OLD_KL, **_LP_OLD},
            accepts={"algo.advantage.estimator": _NO_FLASH, C + "type": _types("tis", "icepop", "mis", at="0.9.3"),
                     "advcli.use_icepop": _NO_ICEPOP_FLAG},
            note="OpenRLHF 0.9.3: --vllm_is_correction_type tis|icepop|mis",
            changes=(Change("", (C + "type", "advcli.use_icepop"),
                            "--vllm_is_correction_type tis|icepop|mis replaces --use_icepop; mis: e^lr where the "
                            "row's geometric mean ratio is inside [LOW, HIGH], else 0 (models/loss.py @v0.9.3 "
                            "L152-172)"),)),
    Release("0.9.4", "2026-03-03", aliases=("0.9.5", "0.9.6", "0.9.7"), settings={**_OLD_KL, **_LP_OLD},
            accepts={"algo.advantage.estimator": _NO_FLASH,
                     C + "type": _types("tis", "icepop", "seq-mask-tis", at="0.9.7"),
                     "advcli.use_icepop": _NO_ICEPOP_FLAG},
            note="OpenRLHF 0.9.4 to 0.9.7: the advantage and IS code of 0.10.4 under the flat flags; the overlong "
                 "penalty's max --generate_max_len",
            changes=(Change("", (C + "type",), "mis renamed seq-mask-tis (models/loss.py @v0.9.4 L109), the same "
                                               "weights"),)),
    Release("0.9.8", "2026-03-25", aliases=("0.9.9", "0.9.10", "0.10.0", "0.10.1", "0.10.1.post1", "0.10.1.post2"),
            settings=_OLD,
            accepts={"algo.advantage.estimator": _NO_FLASH,
                     C + "type": _types("tis", "icepop", "seq-mask-tis", at="0.10.1"),
                     "advcli.use_icepop": _NO_ICEPOP_FLAG},
            note="OpenRLHF 0.9.8 to 0.10.1: the advantage, IS and length-penalty code of 0.10.4 under the flat flags",
            changes=(Change("", ("advcli.kl_adaptive_replay", "algo.kl.target"),
                            "ppo_train averages the step's metrics weighted by rows (ppo_actor.py @v0.9.8 L237-248): "
                            "the adaptive KL controller gets the mean over the step's rows of each row's masked-mean "
                            "KL, which advcli replays from the dump; before, the unweighted mean over shuffled "
                            "micro-batches"),
                     Change("", ("rollout.max_new_tokens", "data.max_len", "advcli.stop_properly_replace"),
                            "--generate_max_len became --max_new_tokens (default None) beside --max_len (default "
                            "2048): the overlong penalty's max is max_new_tokens or else max_len; a "
                            "stop_properly_penalty_coef below 0 replaces the truncated rows' reward (length_penalty.py "
                            "@v0.9.8 L80-106)"),)),
    Release("0.10.4", "2026-06-08", aliases=("0.10.2", "0.10.3"), settings=_OLD,
            accepts={"algo.advantage.estimator": _NO_FLASH,
                     C + "type": _types("tis", "icepop", "seq-mask-tis", at="0.10.4"),
                     "advcli.use_icepop": _NO_ICEPOP_FLAG},
            note="OpenRLHF 0.10.2 to 0.10.4, the advantage code of commit 3c3be623 under the dotted flags",
            changes=(
                Change("", ("algo.advantage.estimator", "rollout.n_samples_per_prompt", "algo.kl.init_coef"),
                       "the flags moved under --algo.* / --rollout.* / --reward.* (0.10.2, cli/train_ppo_ray.py "
                       "@v0.10.2); the numbers are unchanged (experience_maker.py compute_advantages_and_returns "
                       "@v0.10.1 and @v0.10.2 differ only in the names)"),
                Change("", (C + "enable", C + "type", C + "threshold"),
                       "the IS correction's flags are --algo.advantage.is_correction_enable/type/threshold (0.10.2; "
                       "before: --enable_vllm_is_correction / --vllm_is_truncated_threshold / "
                       "--vllm_is_correction_type, the same weights)"))),
    Release("0.11.0", "2026-08-13", aliases=("0.11.1", "3c3be62", "3c3be623"),
            settings={"advcli.is_correction_keys": "0.10.4", "advcli.reward_promote": False},
            accepts={"algo.advantage.estimator": _NO_FLASH,
                     C + "type": _types("tis", "icepop", "seq-mask-tis", at="0.11.1"),
                     "advcli.use_icepop": _NO_ICEPOP_FLAG},
            note="OpenRLHF 0.11.0 to 0.11.1 (each run), the advantage code of commit 3c3be623: no flash_reinforce",
            changes=(Change("", ("algo.advantage.estimator", "rollout.n_samples_per_prompt", "advcli.dr_grpo_n1"),
                            "dr_grpo joined the CLI's n_samples_per_prompt > 1 check (cli/train_ppo_ray.py @v0.11.0 "
                            "L612): dr_grpo at n = 1, which earlier releases ran (every shaped reward 0), is "
                            "refused"),)),
    Release("0.11.2", "2026-09-14", note="OpenRLHF 0.11.2: flash_reinforce; k3's log-ratio clamped at -10", changes=(
        Change("", ("algo.advantage.estimator",),
               "new estimator flash_reinforce: r − the mean reward of the whole step (no group), then the "
               "cumulative return with γ = 1 and no whitening; earlier releases refuse the value"),
        Change("#1339", (C + "level", C + "mode", C + "gating", C + "threshold"),
               "the IS correction's flags: is_correction_level off|token|seq, mode mask|clip, gating "
               "ratio|binary_kl|tv (new: divergence gates, seq-level divergence means), threshold HIGH or LOW HIGH; "
               "is_correction_enable/is_correction_type are gone (tis = token clip, icepop = token mask, "
               "seq-mask-tis = seq mask); the loss logs is_filter_ratio beside vllm_kl"),
        Change("", ("algo.kl.estimator",),
               "k3 clamps the log-ratio at −10 before exp: the same values (the output clamp at 10 already "
               "holds there), only the gradient changes"),
        Change("", ("advcli.reward_promote", "advcli.reward_dtype"),
               "rewards promoted to at least float32 before the length penalties and group statistics: a "
               "bf16/fp16 reward no longer rounds the group mean and std (earlier releases with "
               "advcli.reward_dtype=bfloat16 shape in bf16, as they did)"),
    )),
)

FLAVOR = Flavor(
    title="OpenRLHF",  # the framework's name in prose (help, docs)
    kl_off="--set algo.kl.init_coef=0",
    name="openrlhf",
    framework="OpenRLHF/OpenRLHF @ 3c3be623 (openrlhf/trainer/ppo_utils/experience_maker.py, openrlhf/models/utils.py)",
    keys=KEYS, translate=translate, aliases=ALIASES, estimator_note=estimator_note, releases=RELEASES,
    estimator_key="algo.advantage.estimator", estimator_names=ESTIMATORS,
    audit_tries=lambda n: [{"algo.advantage.estimator": e, **({"algo.kl.init_coef": 0.0} if e == "rloo" else {}),
                            "rollout.n_samples_per_prompt": n, "advcli.group_by": "id"}
                           for e in ("group_norm", "dr_grpo", "rloo")],
    notes="Groups are n consecutive rows (no ids); the group shaping acts on the scalar reward (rloo: "
          "leave-one-out; reinforce_baseline/dr_grpo: group mean; flash_reinforce: the step's mean; group_norm: "
          "(r − μ)/(σ + 1e-9) with "
          "torch.std unbiased on the [G, n] reshape, so float32 all-equal groups can reach 59.6 before the "
          "clip), then reward.clip_range clamps the shaped scalar; the reward sits on the last mask=1 token; "
          "−β·KL is added at every position (unmasked in token_level_rewards), KL clamped to ±10 at the "
          "output only; returns are cumulative over M·R (holes carry the next token's return), γ forced to 1 "
          "except reinforce/gae; gae has no hole skipping (phantom γ·V terms); gae/reinforce/"
          "reinforce_baseline are normalised over the step's action tokens (biased, max(var, 1e-8)) at every "
          "position, so padding becomes (0 − μ)·rstd; the CLI refuses n = 1 for group estimators.")
