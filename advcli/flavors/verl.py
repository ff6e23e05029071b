"""``--flavor verl``: verl's trainer semantics (verl-project/verl @ 1dda039b, ``AlgoConfig`` /
``ppo_trainer.yaml``): ``apply_kl_penalty`` when ``use_kl_in_reward``, then
``ray_trainer.compute_advantage`` with the arguments the trainer passes.
"""
from __future__ import annotations

from ..config import Key, default_config
from ..correction import verl_keys as rollout_correction
from ..errors import AdvcliError, did_you_mean
from . import Flavor
from ._releases import Change, Release

ESTIMATORS = ("gae", "grpo", "grpo_vectorized", "grpo_passk", "gdpo", "reinforce_plus_plus",
              "reinforce_plus_plus_baseline", "rloo", "rloo_vectorized", "remax", "opo", "gpg",
              "optimal_token_baseline", "tir_optimal_token_baseline")
KL_NAMES = ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3")

DAPO = "reward.reward_manager."
DAPO_KW = "reward.reward_kwargs."
KEYS = {
    "algorithm.adv_estimator": Key("gae", "advantage estimator", ESTIMATORS, "str"),
    "algorithm.gamma": Key(1.0, "discount factor (gae, reinforce_plus_plus)", None, "float"),
    "algorithm.lam": Key(1.0, "GAE λ", None, "float"),
    "algorithm.norm_adv_by_std_in_grpo": Key(True, "divide by the group std (grpo, grpo_passk; the trainer "
                                             "does not forward it to grpo_vectorized or gdpo)", None, "bool"),
    "advcli.reinforce_holes": Key("skip", "advcli extension (verl's releases): reinforce_plus_plus over mask=0 "
                                  "tokens inside a response: `skip` (the return jumps over them and is 0 there: "
                                  "verl ≥ 0.9.0, #7300) or `reset` (a mask=0 token keeps its reward and the return "
                                  "after it, the tokens before it start afresh: verl 0.8.0); the estimator's holes",
                                  ("skip", "reset"), "str"),
    "advcli.reward_dtype": Key("run", "advcli extension: the dtype of the scores (verl's estimators compute "
                               "in it): `run` (the run's precision: verl's reward managers write every score into a "
                               "float32 tensor, workers/reward_manager/naive.py L98, agent_loop.py L143 and L1066 "
                               "@1dda039b, so a float16 column computes as float32), `input` (a float16 reward "
                               "column stays float16), `bfloat16` / `float16` (a custom reward manager or a reward "
                               "model gave "
                               "bf16 scores: every estimator sees them rounded; grpo, rloo, gpg, opo and grpo_passk "
                               "round every step to it, rloo_vectorized returns float64 (#7964); reinforce_plus_plus "
                               "and its baseline variant whiten in float32, not in bf16 as verl does), `run`; with "
                               "use_kl_in_reward the rewards are the rounded scores − β·KL in float32",
                               ("input", "run", "bfloat16", "float16"), "str"),
    "advcli.gae_holes": Key("skip", "advcli extension (verl's releases): gae over mask=0 tokens: `skip` (the scan "
                            "jumps over them: verl ≥ 0.5.0) or `step` (every position is a step with its own value "
                            "and reward: verl ≤ 0.4.1)", ("skip", "step"), "str"),
    "advcli.group_var": Key("two_pass", "advcli extension (verl's releases): grpo_vectorized's group variance: "
                            "`two_pass` (verl ≥ 0.8.0) or `one_pass` (Σs² − (Σs)²/n, σ = sqrt(max(var, 1e-6)): "
                            "verl 0.6.0-0.7.1)", ("two_pass", "one_pass"), "str"),
    "advcli.kl_in_reward_when": Key("use_kl_in_reward", "advcli extension (verl's releases): what puts the KL in "
                                    "the reward: `use_kl_in_reward` (algorithm.use_kl_in_reward: verl ≥ 0.4.0), "
                                    "`no_kl_loss` (unless actor_rollout_ref.actor.use_kl_loss: verl 0.2-0.3) or "
                                    "`always` (verl 0.1)", ("use_kl_in_reward", "no_kl_loss", "always"), "str"),
    "advcli.k3_input_clamp": Key(True, "advcli extension (verl's releases): low_var_kl/k3 clamps ref − logp to ±20 "
                                 "before the estimate (verl ≥ 0.4.1; before, only the estimate is clamped to ±10)",
                                 None, "bool"),
    "actor_rollout_ref.actor.use_kl_loss": Key(False, "the actor's KL loss: no effect on advantages from verl 0.4.0; "
                                               "verl ≤ 0.3 puts the KL in the reward unless it is true", None, "bool"),
    "algorithm.use_kl_in_reward": Key(False, "token_level_rewards = scores − β·kld·mask", None, "bool"),
    "algorithm.kl_penalty": Key("kl", "KL estimator: kl/k1, abs, mse/k2, low_var_kl/k3 (a trailing + is the "
                                "straight-through variant: same value)", None, "str"),
    "algorithm.kl_ctrl.type": Key("fixed", "fixed or adaptive", None, "str"),
    "algorithm.kl_ctrl.kl_coef": Key(0.001, "β (initial β for adaptive)", None, "float"),
    "algorithm.kl_ctrl.target_kl": Key(0.1, "adaptive target", None, "float"),
    # KLControlConfig.horizon: int (verl/trainer/config/algorithm.py L38 @1dda039b)
    "algorithm.kl_ctrl.horizon": Key(10000, "adaptive horizon", None, "int"),
    "algorithm.gdpo_reward_keys": Key(None, "component reward columns for gdpo", None, "list"),
    "algorithm.gdpo_reward_weights": Key(None, "component weights (default all 1)", None, "list"),
    "algorithm.use_pf_ppo": Key(False, "PF-PPO: verl resamples the batch's rows after GAE (other estimators: no "
                                "effect); the output holds each row's GAE advantage before the resampling", None,
                                "bool"),
    # the DAPO reward manager's overlong penalty, at the trainer's keys (`+reward.reward_kwargs...`; the examples of
    # 1dda039b also write them under reward_model: LEGACY below): the reward manager scores each response before the
    # advantages (workers/reward_manager/dapo.py L119-132, experimental/reward_loop/reward_manager/dapo.py L105-116)
    DAPO + "name": Key("naive", "the reward manager; `dapo` adds the overlong penalty of reward.reward_kwargs."
                       "overlong_buffer_cfg to each response's score (any other name: no change to given scores)",
                       None, "str"),
    DAPO_KW + "overlong_buffer_cfg.enable": Key(False, "dapo's overlong penalty: r += min(−(n − (max_resp_len − "
                                                "len))/len·penalty_factor, 0), n the response's tokens (its "
                                                "attention mask), in float32; not applied again to a verl dump's "
                                                "scores (advcli.rewards_shaped)", None, "bool"),
    DAPO_KW + "overlong_buffer_cfg.len": Key(None, "dapo's overlong buffer length (> 0)", None, "int"),
    DAPO_KW + "overlong_buffer_cfg.penalty_factor": Key(None, "dapo's overlong penalty factor", None, "float"),
    DAPO_KW + "overlong_buffer_cfg.log": Key(False, "dapo logs overlong_reward and overlong beside the score (no "
                                             "effect on the rewards; a verl dump's overlong_reward column is read)",
                                             None, "bool"),
    DAPO_KW + "max_resp_len": Key(None, "dapo's maximum response length (≥ overlong_buffer_cfg.len)", None, "int"),
    "advcli.rewards_shaped": Key(False, "advcli extension: the reward column holds the reward manager's rewards, "
                                 "the DAPO overlong penalty in them (a verl dump: set for it), so it is not "
                                 "applied again", None, "bool"),
}
KEYS.update(rollout_correction.KEYS)  # algorithm.rollout_correction.* (flavors/_verl_correction_keys.py)
# the reward section's keys as the examples of 1dda039b also give them (+reward_model.reward_kwargs...,
# reward_model.reward_manager=dapo), and as the releases before the reward section took them: verl migrates them,
# a legacy value that is not null replacing the new one, reward_kwargs as a whole (experimental/reward_loop/
# reward_loop.py L48-72 @1dda039b)
LEGACY = "reward_model."
KEYS[LEGACY + "reward_manager"] = Key(None, "the reward manager by its legacy key: not null, it replaces "
                                      "reward.reward_manager.name", None, "str")
KEYS.update({LEGACY + k[len("reward."):]: Key(None, f"the legacy {LEGACY}reward_kwargs: any of them given, "
                                              "they replace reward.reward_kwargs as a whole", None, KEYS[k].kind)
             for k in list(KEYS) if k.startswith(DAPO_KW)})


def kl_settings(name: str, input_clamp: bool = True) -> dict:
    """verl ``kl_penalty`` (core_algos.py L2187-2250): strip a trailing '+', then dispatch. ``input_clamp``
    false: low_var_kl/k3 without the ±20 clamp of ref − logp (verl ≤ 0.4.0's kl_penalty)."""
    base = name[:-1] if name.endswith("+") else name
    if base == "full":
        raise AdvcliError("key algorithm.kl_penalty=full needs full-vocabulary log-probs, which a rollout dump "
                          "does not hold (verl raises NotImplementedError)")
    if base not in KL_NAMES:
        raise AdvcliError(f"key algorithm.kl_penalty: unknown value {name!r}.{did_you_mean(base, KL_NAMES)} "
                          f"Valid: {', '.join(KL_NAMES)} (optionally with a trailing +)")
    kind = {"kl": "k1", "k1": "k1", "abs": "abs", "mse": "k2", "k2": "k2", "low_var_kl": "k3", "k3": "k3"}[base]
    clamp = kind == "k3"
    return {"estimator": kind, "input_clamp": 20.0 if clamp and input_clamp else None,
            "output_clamp": 10.0 if clamp else None}


def kl_in_reward(v: dict) -> bool:
    """Whether the run puts β·KL in the reward, the only place verl reads algorithm.kl_penalty and
    algorithm.kl_ctrl (apply_kl_penalty, get_kl_controller: ray_trainer.py L364-365, L1639-1644 @1dda039b): verl 0.1
    always, 0.2-0.3 unless the actor's KL loss (ray_trainer.fit @v0.2), from 0.4.0 with algorithm.use_kl_in_reward
    (``advcli.kl_in_reward_when``, set by the release)."""
    when = v["advcli.kl_in_reward_when"]
    return True if when == "always" else not v["actor_rollout_ref.actor.use_kl_loss"] if when == "no_kl_loss" \
        else bool(v["algorithm.use_kl_in_reward"])


def _num(x) -> str:
    """A config number as the user wrote it: 0 not 0.0, None as null."""
    return "null" if x is None else format(x, "g") if isinstance(x, (int, float)) else repr(x)


def reward_manager_values(v: dict) -> dict:
    """``v`` with verl's migration of the legacy reward_model keys done (reward_loop.py L48-72 @1dda039b):
    ``reward_model.reward_manager`` not null replaces ``reward.reward_manager.name``; any
    ``reward_model.reward_kwargs.*`` given replaces ``reward.reward_kwargs`` as a whole (its keys not given:
    unset)."""
    v = dict(v)
    if v.get(LEGACY + "reward_manager") is not None:
        v[DAPO + "name"] = v[LEGACY + "reward_manager"]
    legacy = {k: LEGACY + k[len("reward."):] for k in v if k.startswith(DAPO_KW)}
    if any(v.get(old) is not None for old in legacy.values()):
        for new, old in legacy.items():
            v[new] = v.get(old) if v.get(old) is not None or not new.endswith((".enable", ".log")) else False
    return v


def _half_limit(v: dict, in_reward: bool) -> float | None:
    """The float16 maximum where reinforce_plus_plus and its baseline variant whiten float16 scores: verl keeps the
    returns in the scores' dtype and masked_whiten sums them there (core_algos.py L721-728, torch_functional.py
    masked_mean / masked_var @1dda039b), so a sum past 65504 is inf (rsqrt(inf) = 0: every advantage 0). With the
    KL in the reward the rewards are float32 and nothing overflows."""
    return 65504.0 if v["advcli.reward_dtype"] == "float16" and not in_reward else None


def _dapo_overlong(cfg: dict, v: dict) -> None:
    """The DAPO reward manager's overlong penalty (``reward.reward_manager.name=dapo`` with
    ``reward.reward_kwargs.overlong_buffer_cfg.enable``), as ``reward.overlong``: verl adds ``min(−(n −
    (max_resp_len − len))/len·penalty_factor, 0)`` to the reward function's score, n = the response's attention
    mask (its tokens, tool output included), the int64 tensor's true division in float32 (workers/reward_manager/
    dapo.py L119-132, experimental/reward_loop/reward_manager/dapo.py L105-116 @1dda039b). None on a dump's
    rewards, which hold it (``advcli.rewards_shaped``)."""
    v = reward_manager_values(v)
    if v[DAPO + "name"] != "dapo" or not v[DAPO_KW + "overlong_buffer_cfg.enable"] or v["advcli.rewards_shaped"]:
        return
    names = ("overlong_buffer_cfg.len", "overlong_buffer_cfg.penalty_factor", "max_resp_len")
    missing = [DAPO_KW + k for k in names if v[DAPO_KW + k] is None]
    if missing:  # DAPORewardManager asserts max_resp_len; the buffer's len and penalty_factor are read as given
        raise AdvcliError(f"key {DAPO_KW}overlong_buffer_cfg.enable=true without {', '.join(missing)}: verl's DAPO "
                          "reward manager needs them (dapo.py L45-56, L121-126), so the trainer itself would not run",
                          hint=f"set {', '.join(missing)}")
    length, factor, longest = (v[DAPO_KW + k] for k in names)
    if length <= 0 or longest < length:  # the manager's asserts (dapo.py L49-56)
        raise AdvcliError(f"keys {DAPO_KW}overlong_buffer_cfg.len={length} and {DAPO_KW}max_resp_len={longest}: "
                          "verl's DAPO reward manager asserts len > 0 and max_resp_len >= len (dapo.py L49-56), so "
                          "the trainer itself would not run")
    cfg["reward"]["overlong"].update(tokens=float(length), factor=float(factor), max_tokens=int(longest),
                                     length="tokens", cap=False, exact=False)


def translate(v: dict) -> dict:
    cfg = default_config()
    est = v["algorithm.adv_estimator"]
    ctrl = v["algorithm.kl_ctrl.type"]
    in_reward = kl_in_reward(v)
    if ctrl not in ("fixed", "adaptive") and in_reward:  # get_kl_controller raises NotImplementedError
        raise AdvcliError(f"key algorithm.kl_ctrl.type: unknown value {ctrl!r}."
                          f"{did_you_mean(ctrl, ['fixed', 'adaptive'])}"
                          " Valid: fixed, adaptive")
    cfg["reward"]["placement"] = "last"
    cfg["reward"]["dtype"] = v["advcli.reward_dtype"]  # core_algos computes in the scores' dtype
    # an empty response: the naive reward manager (workers/reward_manager/naive.py L153 @1dda039b) and the
    # agent loop's rm_scores (agent_loop.py L1067) write reward_tensor[i, L_i - 1] with L_i = 0, i.e. the last
    # column of the padded batch: outside the mask, but in the row sum the group estimators take
    cfg["reward"]["empty_row"] = "score"
    _dapo_overlong(cfg, v)
    if in_reward:  # verl reads kl_penalty and kl_ctrl.type only there: any value runs without it
        cfg["kl"].update(kl_settings(v["algorithm.kl_penalty"], v["advcli.k3_input_clamp"]))
    elif ctrl not in ("fixed", "adaptive"):
        ctrl = "fixed"
    cfg["kl"].update({"in_reward": in_reward, "coef": v["algorithm.kl_ctrl.kl_coef"],
                      "controller": ctrl, "target": v["algorithm.kl_ctrl.target_kl"],
                      "horizon": v["algorithm.kl_ctrl.horizon"], "mask": True,
                      # every outcome estimator takes scores = token_level_rewards.sum(dim=-1) of the float32
                      # [B, T] batch (core_algos.py L304, L612 @1dda039b): summed as torch sums it there
                      "score_sum": "left_aligned"})
    if ctrl == "adaptive" and in_reward:  # verl builds the controller only then
        horizon, target = v["algorithm.kl_ctrl.horizon"], v["algorithm.kl_ctrl.target_kl"]
        if not (horizon and horizon > 0):  # get_kl_controller asserts it (core_algos.py)
            raise AdvcliError(f"key algorithm.kl_ctrl.horizon must be > 0 (got {_num(horizon)})")
        if not target:  # AdaptiveKLController.update divides by it (a negative target runs: β shrinks)
            raise AdvcliError(f"key algorithm.kl_ctrl.target_kl must not be 0 or null for the adaptive controller "
                              f"(got {_num(target)}): verl's update divides the step's KL by it",
                              hint="set algorithm.kl_ctrl.target_kl, or algorithm.kl_ctrl.type=fixed")
    whiten = {"whiten": True, "whiten_unbiased": True, "whiten_eps": 1e-8, "whiten_eps_mode": "add"}
    norm = v["algorithm.norm_adv_by_std_in_grpo"]
    gamma, lam = v["algorithm.gamma"], v["algorithm.lam"]
    e: dict = {"name": est}
    if est == "gae":
        e.update(gamma=gamma, lam=lam, holes=v["advcli.gae_holes"])  # step: every position, values as given
        cfg["advantage"].update(whiten)  # masked_whiten, not re-masked
    elif est == "grpo":
        e.update(norm_by_std=norm, eps=1e-6, std="torch")
    elif est == "grpo_vectorized":
        e.update(norm_by_std=True, eps=1e-6)  # the trainer does not pass the flag (PR #7893 open)
        if v["advcli.group_var"] == "one_pass":  # verl 0.6.0-0.7.1: group_mean_std(eps=epsilon), one pass
            e.update(var="one_pass", var_floor=1e-6)
    elif est == "grpo_passk":
        e.update(norm_by_std=norm, eps=1e-6)  # read from config
    elif est == "gdpo":
        keys = v["algorithm.gdpo_reward_keys"]
        if not keys:
            raise AdvcliError("gdpo needs algorithm.gdpo_reward_keys, the component reward columns, "
                              "e.g. --set 'algorithm.gdpo_reward_keys=[acc,fmt]'")
        # the components are the estimator's rewards; token_level_rewards (output) stay the scores − β·KL
        cfg["reward"]["components"] = list(keys)
        e.update(weights=v["algorithm.gdpo_reward_weights"], norm_by_std=True, eps=1e-6)
        cfg["advantage"].update(whiten, remask=True, returns="advantages")  # returns = advantages (L468)
    elif est == "reinforce_plus_plus":
        e.update(gamma=gamma, holes=v["advcli.reinforce_holes"])
        cfg["advantage"].update(whiten, remask=True, whiten_overflow=_half_limit(v, in_reward))
    elif est == "reinforce_plus_plus_baseline":  # returns = advantages (L584)
        cfg["advantage"].update(whiten, remask=True, returns="advantages", whiten_overflow=_half_limit(v, in_reward))
    elif est in ("optimal_token_baseline", "tir_optimal_token_baseline"):
        if v["advcli.reward_dtype"] in ("bfloat16", "float16") and not in_reward:
            # compute_optimal_token_baseline_advantage index_puts the float32 baselines into a tensor of the
            # scores' dtype: "Index put requires the source and destination dtypes match"
            raise AdvcliError(f"algorithm.adv_estimator={est} with {v['advcli.reward_dtype']} scores "
                              "(advcli.reward_dtype): verl raises here (its float32 baselines cannot be put into "
                              "the 16-bit scores' tensor)",
                              hint="with float32 scores it runs: --set advcli.reward_dtype=run")
        e.update(handle_zero_tail=True, eps=1e-8)
    # rloo, rloo_vectorized, opo, gpg, remax take no parameters from the trainer
    cfg["estimator"] = e
    rollout_correction.translate(v, cfg)  # between the KL penalty and the estimator, as verl's trainer
    return cfg


# verl's releases on the package index, run by tests/conformance/test_conformance_verl.py (the estimators, the reward
# KL,
# verl/trainer/ppo/core_algos.py) and tools/conformance_matrix.py: 0.9.0 and 0.9.1 give the numbers of commit
# 1dda039b; 0.8.0 differs in reinforce_plus_plus only (its compute_reinforce_plus_plus_outcome_advantage resets
# the return at mask=0 tokens); #7794 (rloo_vectorized singletons) is not in 0.9.1.
# The releases before 0.8.0 were read at their tags (verl-project/verl, verl/trainer/ppo/core_algos.py,
# ray_trainer.py's apply_kl_penalty / compute_advantage / fit, verl/utils/groupwise.py, trainer/config/
# ppo_trainer.yaml): the estimators each one has, its KL estimators and its switches. The estimators' math is
# otherwise that of 1dda039b (the group statistics moved from torch.tensor(list) to torch.stack in 0.6.0: same
# float32 values), and so are the adaptive controller, masked_whiten and the reward placement.
_CODE = "verl/trainer/ppo/ray_trainer.py compute_advantage and core_algos.py"
E01 = ("gae",)
E02 = E01 + ("grpo", "reinforce_plus_plus", "remax")
E03 = E02 + ("rloo",)
E040 = E03 + ("grpo_passk", "reinforce_plus_plus_baseline", "opo")
E050 = E040 + ("gpg",)
E060 = E050 + ("grpo_vectorized", "rloo_vectorized")
E071 = E060 + ("gdpo",)
K01 = ("kl", "abs", "mse")
K02 = K01 + ("low_var_kl",)
# the k-names from 0.4.0; a trailing "+" (straight-through) from 0.6.0, which raises until 0.8.0 strips it
K040 = K02 + ("k1", "k2", "k3")


def _accepts(tag: str, estimators: tuple, kls: tuple, *, old_config: bool = False) -> dict:
    """What verl at ``tag`` runs: its estimators and KL estimators; ``old_config``: no
    algorithm.norm_adv_by_std_in_grpo / use_kl_in_reward yet (0.1-0.3). (The rollout correction's keys of each
    release are checked by ``correction.verl_keys.translate`` after ``advcli.rollout_corr_api``.)"""
    out = {"algorithm.adv_estimator": (estimators, f"verl {tag}'s {_CODE} @v{tag} have no such estimator, so the "
                                                    "trainer itself would not run it"),
           "algorithm.kl_penalty": (kls, f"verl {tag}'s kl_penalty (core_algos.py @v{tag}) raises "
                                         "NotImplementedError on it", kl_in_reward)}
    if old_config:
        out["algorithm.norm_adv_by_std_in_grpo"] = ((True,), f"verl {tag} has no such key (ppo_trainer.yaml @v{tag}): "
                                                             "its grpo always divides by the group std")
        out["algorithm.use_kl_in_reward"] = ((False,), f"verl {tag} has no such key (ppo_trainer.yaml @v{tag}): the "
                                                       "KL goes in the reward " + ("always" if tag == "0.1" else
                                                       "unless actor_rollout_ref.actor.use_kl_loss is true"))
        out["algorithm.use_pf_ppo"] = ((False,), f"verl {tag} has no such key (ppo_trainer.yaml @v{tag}): PF-PPO came "
                                                 "with 0.4.0 (ray_trainer.py compute_advantage @v0.4.0 L249)")
    return out


_OLD_KL = {"advcli.kl_in_reward_when": "no_kl_loss", "advcli.k3_input_clamp": False}
_RC = rollout_correction.API
_NO_RC = {_RC: "none"}  # no rollout correction before 0.6.0
# verl 0.1-0.3's critic kept its value one position past a shorter response (compute_values multiplies by
# attention_mask[:, -response_length - 1:-1], shifted by one: workers/critic/dp_critic.py @v0.3.0.post1) and gae
# steps through the whole padded width (core_algos.compute_gae_advantage_return @v0.3.0.post1), so that value
# bootstraps the response's last token. A padded dump holding it (as verl's batch does) reproduces this (--padded:
# every position is a step, values as given); a ragged row of the response's own length has no such value.
_PAD_VALUE = ("; gae there bootstraps a response's last token with the critic's value at the padding position "
              "after it: a padded dump that holds it (fixed-width lists, or --padded) gets verl's numbers; a ragged "
              "row of the response's length has none, and advcli takes 0 (gae can then differ on shorter "
              "responses)")
RELEASES = (
    Release("0.1", "2024-12-11", note="verl 0.1: gae only, the KL always in the reward (kl, abs, mse)" + _PAD_VALUE,
            settings={**_NO_RC, "advcli.gae_holes": "step", "advcli.reinforce_holes": "reset",
                      "advcli.kl_in_reward_when": "always", "advcli.k3_input_clamp": False},
            accepts=_accepts("0.1", E01, K01, old_config=True)),
    Release("0.2", "2025-02-15", aliases=("0.2.0.post1", "0.2.0.post2"),
            note="verl 0.2: gae, grpo, reinforce_plus_plus, remax; the KL in the reward unless the actor's KL loss "
                 "(its GRPO examples turn it on: --set actor_rollout_ref.actor.use_kl_loss=true)" + _PAD_VALUE,
            settings={**_NO_RC, "advcli.gae_holes": "step", "advcli.reinforce_holes": "reset", **_OLD_KL},
            accepts=_accepts("0.2", E02, K02, old_config=True), changes=(
                Change("", ("algorithm.adv_estimator",), "grpo (group mean and unbiased std of the row sums, "
                       "(s−μ)/(σ+1e-6), a group of one: s/(1+1e-6)), reinforce_plus_plus and remax join gae"),
                Change("", ("algorithm.kl_penalty",), "low_var_kl (k3, the estimate clamped to ±10, no clamp of "
                       "ref − logp yet)"),
                Change("", ("advcli.kl_in_reward_when", "actor_rollout_ref.actor.use_kl_loss"),
                       "the KL goes in the reward only when actor_rollout_ref.actor.use_kl_loss is false "
                       "(ray_trainer.fit @v0.2)"))),
    Release("0.3.0.post0", "2025-03-30", aliases=("0.3.0.post1",), note="verl 0.3: rloo joins" + _PAD_VALUE,
            settings={**_NO_RC, "advcli.gae_holes": "step", "advcli.reinforce_holes": "reset", **_OLD_KL},
            accepts=_accepts("0.3.0.post0", E03, K02, old_config=True), changes=(
                Change("", ("algorithm.adv_estimator",), "rloo (s·n/(n−1) − μ·n/(n−1); a group of one keeps s)"),)),
    Release("0.4.0", "2025-06-09", note="verl 0.4.0: algorithm.use_kl_in_reward and norm_adv_by_std_in_grpo",
            settings={**_NO_RC, "advcli.gae_holes": "step", "advcli.reinforce_holes": "reset",
                      "advcli.k3_input_clamp": False},
            accepts=_accepts("0.4.0", E040, K040), changes=(
                Change("", ("algorithm.use_kl_in_reward", "advcli.kl_in_reward_when"),
                       "the KL goes in the reward only with algorithm.use_kl_in_reward=true (default false): a run "
                       "without the actor's KL loss no longer gets β·KL subtracted by default"),
                Change("", ("algorithm.norm_adv_by_std_in_grpo",), "grpo and grpo_passk can skip the std division "
                       "(Dr. GRPO)"),
                Change("", ("algorithm.adv_estimator",), "grpo_passk, reinforce_plus_plus_baseline, opo"),
                Change("", ("algorithm.kl_penalty",), "k1, k2, k3 name kl, mse, low_var_kl"))),
    Release("0.4.1", "2025-06-27", note="verl 0.4.1: low_var_kl clamps ref − logp to ±20 first",
            settings={**_NO_RC, "advcli.gae_holes": "step", "advcli.reinforce_holes": "reset"},
            accepts=_accepts("0.4.1", E040, K040), changes=(
                Change("", ("advcli.k3_input_clamp",), "low_var_kl/k3 clamps ref − logp to ±20 before the estimate "
                       "(core_algos.py kl_penalty @v0.4.1); the estimate is clamped to ±10 either way, so only an "
                       "infinite log-ratio (logp = −inf) differs: 10 instead of NaN (advcli runs a −inf log-prob "
                       "from here on, and refuses it before, where it poisons the step)"),)),
    Release("0.5.0", "2025-07-23", note="verl 0.5.0: gae skips mask=0 tokens; gpg",
            settings={**_NO_RC, "advcli.reinforce_holes": "reset"},
            accepts=_accepts("0.5.0", E050, K040), changes=(
                Change("", ("advcli.gae_holes",), "gae jumps over mask=0 tokens (the next trained token's value and "
                       "advantage carried across them) instead of stepping through every position: multi-turn "
                       "responses get other advantages"),
                Change("", ("algorithm.adv_estimator",), "gpg"))),
    Release("0.6.0", "2025-10-16",
            note="verl 0.6.0: grpo_vectorized (one-pass group variance) and rloo_vectorized; the rollout IS weights "
                 "(algorithm.rollout_is_*, mismatch_helper.py)",
            settings={"advcli.reinforce_holes": "reset", "advcli.group_var": "one_pass", _RC: "0.6.0"},
            accepts=_accepts("0.6.0", E060, K040), changes=(
                Change("", ("algorithm.adv_estimator", "advcli.group_var"),
                       "grpo_vectorized (group_mean_std: one-pass variance (Σs² − (Σs)²/n)/max(n−1,1), "
                       "σ = sqrt(max(var, 1e-6))) and rloo_vectorized"),
                Change("", ("algorithm.rollout_is_threshold", "algorithm.rollout_is", _RC),
                       "rollout IS weights (mismatch_helper.py compute_rollout_importance_weights @v0.6.0): with "
                       "algorithm.rollout_is_threshold set, the level's ratio (token, sequence, geometric) truncated "
                       "or masked to [lower, upper], 0 on a row with a token below rollout_is_veto_threshold (1e-4 "
                       "by default); the mask is unchanged; mismatch/* metrics, with rollout_is_p25 ... p99 (the "
                       "quantiles of the weights before truncation); the weights reach the loss with "
                       "algorithm.rollout_is=true"))),
    Release("0.6.1", "2025-11-14", note="verl 0.6.1: the algorithm.rollout_correction section (IS weights, "
            "rejection by a ratio level, the per-token veto)",
            settings={"advcli.reinforce_holes": "reset", "advcli.group_var": "one_pass", _RC: "0.6.1"},
            accepts=_accepts("0.6.1", E060, K040), changes=(
                Change("", ("algorithm.rollout_correction.rollout_is", "algorithm.rollout_correction.rollout_rs",
                            "algorithm.rollout_correction.rollout_token_veto_threshold", _RC),
                       "algorithm.rollout_correction (rollout_corr_helper.py @v0.6.1) replaces algorithm.rollout_is_*: "
                       "TIS weights (token, sequence), rejection sampling by a ratio level (token, sequence, "
                       "geometric) and the veto change the mask the estimator sees; rollout_corr/* metrics"),)),
    Release("0.7.0", "2026-01-05", note="verl 0.7.0: the sequence batch normalisation averages the non-empty rows",
            settings={"advcli.reinforce_holes": "reset", "advcli.group_var": "one_pass", _RC: "0.7.0"},
            accepts=_accepts("0.7.0", E060, K040), changes=(
                Change("", ("algorithm.rollout_correction.rollout_is_batch_normalize", _RC),
                       "the sequence-level batch mean counts the rows with a mask=1 token only (0.6.1: every row, "
                       "an empty row's 0 included)"),)),
    Release("0.7.1", "2026-03-16", note="verl 0.7.1: gdpo; rollout_rs takes divergence options",
            settings={"advcli.reinforce_holes": "reset", "advcli.group_var": "one_pass", _RC: "0.7.1"},
            accepts=_accepts("0.7.1", E071, K040), changes=(
                Change("", ("algorithm.adv_estimator", "algorithm.gdpo_reward_keys"),
                       "gdpo (optimal_token_baseline is registered but its compute_advantage call lacks "
                       "old_log_probs: the trainer fails on it, so it is refused here)"),
                Change("", ("algorithm.rollout_correction.rollout_rs", _RC),
                       "rollout_rs takes comma-separated divergence options (token_k1 ... seq_max_k3) with "
                       "rollout_rs_threshold per option; rollout_rs_threshold_lower and the veto are gone "
                       "(rollout_corr_helper.py @v0.7.1)"))),
    Release("0.8.0", "2026-06-01", settings={"advcli.reinforce_holes": "reset", _RC: "0.8.0"},
            note="verl 0.8.0: reinforce_plus_plus restarts its return at every mask=0 token", changes=(
                Change("", ("advcli.group_var",), "grpo_vectorized's group variance in two passes, no 1e-6 floor "
                       "(groupwise.py group_mean_std @v0.8.0)"),
                Change("", ("algorithm.adv_estimator",), "optimal_token_baseline and tir_optimal_token_baseline run "
                       "(the trainer passes old_log_probs)"),
                Change("", ("algorithm.kl_penalty",), "a trailing + (k3+: the straight-through variant) is "
                       "stripped before the dispatch; before, kl_penalty raised on it"),
                Change("", ("algorithm.rollout_correction.rollout_is_threshold", _RC),
                       "a 'lo_hi' threshold string (IcePop); the IS metrics are of the weights as applied "
                       "(before, of the ratios before truncation, std and ESS clamped to [1/u, u]) "
                       "(rollout_corr_helper.py @v0.8.0)"))),
    Release("0.9.0", "2026-08-14", note="verl 0.9.0: the advantage and reward-KL code of commit 1dda039b", changes=(
        Change("", (_RC,), "rollout_is_seq_fraction_high/low count the rows whose mean raw ratio is out of bounds "
               "(0.8.0: the applied weights' mean, which truncation keeps below the threshold); a k1 threshold "
               "'lo_hi' with lo > hi is refused (rollout_corr_helper.py @v0.9.0)"),
        Change("#7300", ("advcli.reinforce_holes",),
               "reinforce_plus_plus skips mask=0 tokens inside a response (their rewards dropped, the return "
               "carried across them, 0 there) instead of restarting the return at each of them: multi-turn "
               "responses get other advantages and returns"),)),
    Release("1dda039", "2026-08-22", aliases=("1dda039b9c6311889a9c9a26040677e1254814f9",),
            note="verl at commit 1dda039b (advcli's first match)"),
    Release("0.9.1", "2026-09-20", note="verl 0.9.1: the advantage and reward-KL code of commit 1dda039b"),
)

def estimator_note(v: dict) -> str | None:
    """The DAPO overlong penalty a legacy dump may not hold (:func:`_reward_of_record` in formats/verl.py reads it where
    it was logged). PF-PPO (``algorithm.use_pf_ppo``): verl's compute_advantage resamples the batch with
    compute_pf_ppo_reweight_data after GAE's advantages, whitening included, are computed, in its GAE branch only
    (ray_trainer.py L218-234 @1dda039b, L239-253 @v0.4.0): the advantages of the rows are GAE's; the resampling picks
    which rows train."""
    v = reward_manager_values(v)
    if (v.get("advcli.rewards_shaped") and v.get(DAPO + "name") == "dapo"
            and v.get(DAPO_KW + "overlong_buffer_cfg.enable") and not v.get(DAPO_KW + "overlong_buffer_cfg.log")):
        return ("reward.reward_kwargs.overlong_buffer_cfg.log=false: verl's legacy trainer dumps a reward function's "
                "own score (a dict's 'score', as math_dapo returns) in place of the reward, and without the logged "
                "overlong_reward the penalty of a row past max_resp_len − len is not in it: such rows' groups differ "
                "from verl's (the v1 trainer's dump writes the reward, penalty included)")
    if not v.get("algorithm.use_pf_ppo"):
        return None
    est = v["algorithm.adv_estimator"]
    if est != "gae":
        return (f"algorithm.use_pf_ppo changes nothing with {est}: verl resamples the batch in its gae branch only "
                "(ray_trainer.py compute_advantage)")
    return ("algorithm.use_pf_ppo: verl resamples the batch's rows after GAE (compute_pf_ppo_reweight_data); the "
            "output holds each given row's GAE advantage, whitened over the rows given: give the batch from before "
            "the resampling for verl's numbers")


FLAVOR = Flavor(
    title="verl",  # the framework's name in prose (help, docs)
    kl_off="--set algorithm.use_kl_in_reward=false",
    name="verl", framework="verl-project/verl @ 1dda039b (verl/trainer/ppo/core_algos.py, ray_trainer.py)",
    keys=KEYS, translate=translate, estimator_key="algorithm.adv_estimator", response_estimator="grpo",
    estimator_note=estimator_note,
    pick_estimator=(("prompt_id", "grpo"), ("values", "gae")),
    audit_tries=lambda n: [{"algorithm.adv_estimator": "grpo"},
                           {"algorithm.adv_estimator": "grpo", "algorithm.norm_adv_by_std_in_grpo": False},
                           {"algorithm.adv_estimator": "rloo"},
                           {"algorithm.adv_estimator": "reinforce_plus_plus_baseline"},
                           {"algorithm.adv_estimator": "opo"}, {"algorithm.adv_estimator": "gpg"}],
    # ppo_trainer.yaml keys of the algorithm section that change no advantage of a saved batch: DAPO's
    # filter_groups drops and regenerates groups at rollout time (advcli run --drop-uniform drops them),
    # pf_ppo tunes the resampling use_pf_ppo turns on (after the advantages), debug_rollout_actor_probs only logs
    # ppo_trainer.yaml's actor_rollout_ref holds the whole actor, rollout and reference setup; advcli reads
    # actor.use_kl_loss (the KL in the reward at 0.2-0.3) and ignores the rest
    # reward / reward_model hold the whole reward setup (workers, custom_reward_function, the reward model); advcli
    # reads the DAPO reward manager's overlong keys there
    mixed_sections=("actor_rollout_ref", "reward", "reward_model"),
    # verl's dumps write each response's reward after the reward manager (the v1 trainer's rm_scores sum; the
    # legacy trainer's score, with the manager's logged overlong_reward added by the reader: formats/verl.py)
    dump_settings={"verl-jsonl": ((("advcli.rewards_shaped", True),),
                                  "verl's rollout dump (its scores are the reward manager's: DAPO's overlong penalty "
                                  "is in them, or in its logged overlong_reward)")},
    unread=("algorithm.filter_groups", "algorithm.pf_ppo", "algorithm.rollout_correction.debug_rollout_actor_probs"),
    notes="Group statistics on s_i = Σ_t token_level_rewards (mask not applied), torch.std unbiased, "
          "(s−μ)/(σ+1e-6); a group of one gets s/(1+1e-6) in grpo, raw s in rloo, 0 in rloo_vectorized; "
          "the reward sits at position L_i−1 even when that token is masked (row-sum estimators keep it, "
          "gae/rf++/remax drop it); gae skips masked tokens and is whitened (unbiased, var+1e-8) without "
          "re-masking; k3 KL clamps ref−logp to ±20 and the value to ±10; the adaptive controller uses β "
          "from before the step's update, n_steps = rows in the step.",
    releases=RELEASES)
