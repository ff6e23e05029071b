"""``--flavor verl``: verl's trainer semantics (verl-project/verl @ 1dda039b, ``AlgoConfig`` /
``ppo_trainer.yaml``): ``apply_kl_penalty`` when ``use_kl_in_reward``, then
``ray_trainer.compute_advantage`` with the arguments the trainer passes.
"""
from __future__ import annotations

from ..config import Key, default_config
from ..errors import AdvcliError, did_you_mean
from . import Flavor
from . import _verl_correction_keys as rollout_correction
from ._releases import Change, Release

ESTIMATORS = ("gae", "grpo", "grpo_vectorized", "grpo_passk", "gdpo", "reinforce_plus_plus",
              "reinforce_plus_plus_baseline", "rloo", "rloo_vectorized", "remax", "opo", "gpg",
              "optimal_token_baseline", "tir_optimal_token_baseline")
KL_NAMES = ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3")

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
    "advcli.reward_dtype": Key("input", "advcli extension: the dtype of the scores verl's grpo, rloo, gpg and "
                               "rloo_vectorized compute in (they keep it): `input` (a float16 reward column stays "
                               "float16, any other runs at the run's precision), `bfloat16` / `float16` (a custom "
                               "reward manager or a reward model gave bf16 scores: every step rounds to it; "
                               "rloo_vectorized returns float64, #7964), `run`; with use_kl_in_reward the rewards are "
                               "float32", ("input", "run", "bfloat16", "float16"), "str"),
    "algorithm.use_kl_in_reward": Key(False, "token_level_rewards = scores − β·kld·mask", None, "bool"),
    "algorithm.kl_penalty": Key("kl", "KL estimator: kl/k1, abs, mse/k2, low_var_kl/k3 (a trailing + is the "
                                "straight-through variant: same value)", None, "str"),
    "algorithm.kl_ctrl.type": Key("fixed", "fixed or adaptive", None, "str"),
    "algorithm.kl_ctrl.kl_coef": Key(0.001, "β (initial β for adaptive)", None, "float"),
    "algorithm.kl_ctrl.target_kl": Key(0.1, "adaptive target", None, "float"),
    "algorithm.kl_ctrl.horizon": Key(10000, "adaptive horizon", None, "float"),
    "algorithm.gdpo_reward_keys": Key(None, "component reward columns for gdpo", None, "list"),
    "algorithm.gdpo_reward_weights": Key(None, "component weights (default all 1)", None, "list"),
    "algorithm.use_pf_ppo": Key(False, "PF-PPO resampling (not supported offline: it resamples rows)", None, "bool"),
}
KEYS.update(rollout_correction.KEYS)  # algorithm.rollout_correction.* (flavors/_verl_correction_keys.py)


def kl_settings(name: str) -> dict:
    """verl ``kl_penalty`` (core_algos.py L2187-2250): strip a trailing '+', then dispatch."""
    base = name[:-1] if name.endswith("+") else name
    if base == "full":
        raise AdvcliError("key algorithm.kl_penalty=full needs full-vocabulary log-probs, which a rollout dump "
                          "does not hold (verl raises NotImplementedError)")
    if base not in KL_NAMES:
        raise AdvcliError(f"key algorithm.kl_penalty: unknown value {name!r}.{did_you_mean(base, KL_NAMES)} "
                          f"Valid: {', '.join(KL_NAMES)} (optionally with a trailing +)")
    kind = {"kl": "k1", "k1": "k1", "abs": "abs", "mse": "k2", "k2": "k2", "low_var_kl": "k3", "k3": "k3"}[base]
    clamp = kind == "k3"
    return {"estimator": kind, "input_clamp": 20.0 if clamp else None, "output_clamp": 10.0 if clamp else None}


def _num(x) -> str:
    """A config number as the user wrote it: 0 not 0.0, None as null."""
    return "null" if x is None else format(x, "g") if isinstance(x, (int, float)) else repr(x)


def translate(v: dict) -> dict:
    cfg = default_config()
    est = v["algorithm.adv_estimator"]
    if v["algorithm.use_pf_ppo"]:
        raise AdvcliError("key algorithm.use_pf_ppo: PF-PPO resamples the batch at random after GAE; an offline "
                      "recomputation cannot reproduce it. Leave it false")
    ctrl = v["algorithm.kl_ctrl.type"]
    if ctrl not in ("fixed", "adaptive"):
        raise AdvcliError(f"key algorithm.kl_ctrl.type: unknown value {ctrl!r}."
                          f"{did_you_mean(ctrl, ['fixed', 'adaptive'])}"
                          " Valid: fixed, adaptive")
    cfg["reward"]["placement"] = "last"
    cfg["reward"]["dtype"] = v["advcli.reward_dtype"]  # core_algos computes in the scores' dtype
    # an empty response: the naive reward manager (workers/reward_manager/naive.py L153 @1dda039b) and the
    # agent loop's rm_scores (agent_loop.py L1067) write reward_tensor[i, L_i - 1] with L_i = 0, i.e. the last
    # column of the padded batch: outside the mask, but in the row sum the group estimators take
    cfg["reward"]["empty_row"] = "score"
    cfg["kl"].update(kl_settings(v["algorithm.kl_penalty"]))
    cfg["kl"].update({"in_reward": v["algorithm.use_kl_in_reward"], "coef": v["algorithm.kl_ctrl.kl_coef"],
                      "controller": ctrl, "target": v["algorithm.kl_ctrl.target_kl"],
                      "horizon": v["algorithm.kl_ctrl.horizon"], "mask": True})
    if ctrl == "adaptive" and v["algorithm.use_kl_in_reward"]:  # verl builds the controller only then
        horizon, target = v["algorithm.kl_ctrl.horizon"], v["algorithm.kl_ctrl.target_kl"]
        if not (horizon and horizon > 0):  # get_kl_controller asserts it (core_algos.py)
            raise AdvcliError(f"key algorithm.kl_ctrl.horizon must be > 0 (got {_num(horizon)})")
        if not (target and target > 0):  # AdaptiveKLController.update divides by it
            raise AdvcliError(f"key algorithm.kl_ctrl.target_kl must be > 0 for the adaptive controller (got "
                              f"{_num(target)}): verl's update divides the step's KL by it",
                              hint="set algorithm.kl_ctrl.target_kl, or algorithm.kl_ctrl.type=fixed")
    whiten = {"whiten": True, "whiten_unbiased": True, "whiten_eps": 1e-8, "whiten_eps_mode": "add"}
    norm = v["algorithm.norm_adv_by_std_in_grpo"]
    gamma, lam = v["algorithm.gamma"], v["algorithm.lam"]
    e: dict = {"name": est}
    if est == "gae":
        e.update(gamma=gamma, lam=lam, holes="skip")
        cfg["advantage"].update(whiten)  # masked_whiten, not re-masked
    elif est == "grpo":
        e.update(norm_by_std=norm, eps=1e-6, std="torch")
    elif est == "grpo_vectorized":
        e.update(norm_by_std=True, eps=1e-6)  # the trainer does not pass the flag (PR #7893 open)
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
        cfg["advantage"].update(whiten, remask=True)
    elif est == "reinforce_plus_plus_baseline":
        cfg["advantage"].update(whiten, remask=True, returns="advantages")  # returns = advantages (L584)
    elif est in ("optimal_token_baseline", "tir_optimal_token_baseline"):
        e.update(handle_zero_tail=True, eps=1e-8)
    # rloo, rloo_vectorized, opo, gpg, remax take no parameters from the trainer
    cfg["estimator"] = e
    rollout_correction.translate(v, cfg)  # between the KL penalty and the estimator, as verl's trainer
    return cfg


# verl's releases on the package index, run by tests/test_conformance_verl.py (the estimators, the reward KL,
# verl/trainer/ppo/core_algos.py) and tools/conformance_matrix.py: 0.9.0 and 0.9.1 give the numbers of commit
# 1dda039b; 0.8.0 differs in reinforce_plus_plus only (its compute_reinforce_plus_plus_outcome_advantage resets
# the return at mask=0 tokens); #7794 (rloo_vectorized singletons) is not in 0.9.1.
RELEASES = (
    Release("0.8.0", "2026-06-01", settings={"advcli.reinforce_holes": "reset"},
            note="verl 0.8.0: reinforce_plus_plus restarts its return at every mask=0 token"),
    Release("0.9.0", "2026-08-14", note="verl 0.9.0: the advantage and reward-KL code of commit 1dda039b", changes=(
        Change("#7300", ("advcli.reinforce_holes",),
               "reinforce_plus_plus skips mask=0 tokens inside a response (their rewards dropped, the return "
               "carried across them, 0 there) instead of restarting the return at each of them: multi-turn "
               "responses get other advantages and returns"),)),
    Release("1dda039", "2026-08-22", aliases=("1dda039b9c6311889a9c9a26040677e1254814f9",),
            note="verl at commit 1dda039b (advcli's first match)"),
    Release("0.9.1", "2026-09-20", note="verl 0.9.1: the advantage and reward-KL code of commit 1dda039b"),
)

FLAVOR = Flavor(
    title="verl",  # the framework's name in prose (help, docs)
    name="verl", framework="verl-project/verl @ 1dda039b (verl/trainer/ppo/core_algos.py, ray_trainer.py)",
    keys=KEYS, translate=translate, estimator_key="algorithm.adv_estimator", response_estimator="grpo",
    pick_estimator=(("prompt_id", "grpo"), ("values", "gae")),
    audit_tries=lambda n: [{"algorithm.adv_estimator": "grpo"},
                           {"algorithm.adv_estimator": "grpo", "algorithm.norm_adv_by_std_in_grpo": False},
                           {"algorithm.adv_estimator": "rloo"},
                           {"algorithm.adv_estimator": "reinforce_plus_plus_baseline"},
                           {"algorithm.adv_estimator": "opo"}, {"algorithm.adv_estimator": "gpg"}],
    # ppo_trainer.yaml keys of the algorithm section that change no advantage of a saved batch: DAPO's
    # filter_groups drops and regenerates groups at rollout time (advcli run --drop-uniform drops them),
    # pf_ppo tunes the resampling use_pf_ppo turns on (refused), debug_rollout_actor_probs only logs
    unread=("algorithm.filter_groups", "algorithm.pf_ppo", "algorithm.rollout_correction.debug_rollout_actor_probs"),
    notes="Group statistics on s_i = Σ_t token_level_rewards (mask not applied), torch.std unbiased, "
          "(s−μ)/(σ+1e-6); a group of one gets s/(1+1e-6) in grpo, raw s in rloo, 0 in rloo_vectorized; "
          "the reward sits at position L_i−1 even when that token is masked (row-sum estimators keep it, "
          "gae/rf++/remax drop it); gae skips masked tokens and is whitened (unbiased, var+1e-8) without "
          "re-masking; k3 KL clamps ref−logp to ±20 and the value to ±10; the adaptive controller uses β "
          "from before the step's update, n_steps = rows in the step.",
    releases=RELEASES)
