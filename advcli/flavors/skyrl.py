"""``--flavor skyrl``: NovaSky-AI/SkyRL's trainer (@ a9564572, ``SkyRLTrainConfig``):
``postprocess_generator_output`` → ``apply_reward_kl_penalty`` (when ``use_kl_in_reward``) →
``compute_advantages_and_returns`` → step 1 of ``_normalize_advantages`` (``advantage_batch_normalize``).

What sets SkyRL apart, and the canonical switches it maps to:

- Its estimators take SkyRL's own ``response_mask``, 1 on *every* response position (observation
  tokens included); the input's ``response_mask`` column is SkyRL's ``loss_mask``, which only masks
  the KL term. So ``advantage.whiten_mask=all`` and: outcome estimators write their value on every position
  (``mask_output`` false), reinforce++/gae scan every position (``holes=step``) and whiten over all
  of them (``masked_whiten``: unbiased, ``rsqrt(var + 1e-8)``, ``masked_mean`` divides by
  ``max(Σm, 1)``), not re-masked.
- The reward sits on the last response token (L_i − 1) whatever its loss mask; groups are uids
  (``prompt_id``) anywhere in the batch; each ``step`` is one training batch.
- KL: ``compute_approx_kl`` (k1/abs/k2/k3; k3 clamps ref − old to ±20 and the value to ±10), × loss
  mask, ``rewards −= kl·max(0, β)``; β from ``kl_loss_coef`` (fixed) or verl's adaptive controller
  (``n_steps`` = rows of the step, the value from before the step's update).
- ``zero_variance_filter`` with ``use_kl_in_reward``: the flat groups' loss masks are zeroed before the penalty
  (``kl.skip_flat_groups``: ``range`` from 0.3.0, ``std`` before; ``advcli.zero_variance_rule``).
- ``advantage_batch_normalize``: mean over the step's whole ``[B, T = max L_i]`` grid (padding cells
  0), biased variance over all response positions, ``(A − mean)·rsqrt(max(var, 1e-8))``; returns kept.
- ``generator.step_wise_trajectories``: the estimator runs on the ``is_last_step`` rows only, each
  trajectory (a contiguous run of rows ending at its last step) gets its last step's value; at 0.1.0
  (``advcli.step_wise_copy=last_row``) as the last step's padded row: 0 from the last step's length on.
"""
from __future__ import annotations

from ..config import Key, default_config
from ..errors import AdvcliError
from . import Flavor
from ._releases import Change, Release

COMMIT = "a9564572"
ESTIMATORS = ("grpo", "rloo", "maxrl", "reinforce++", "gae")
KL_TYPES = ("k1", "abs", "k2", "k3")
LOSS_REDUCTIONS = ("token_mean", "sequence_mean", "seq_mean_token_sum_norm", "prompt_mean", "token_mean_legacy")
A = "trainer.algorithm."

KEYS = {
    A + "advantage_estimator": Key("grpo", "advantage estimator", ESTIMATORS, "str"),
    A + "grpo_norm_by_std": Key(True, "grpo: divide by the group std + 1e-6 (false: s − μ, Dr. GRPO)", None, "bool"),
    A + "gamma": Key(1.0, "discount (reinforce++, gae)", None, "float"),
    A + "lambd": Key(1.0, "GAE λ (SkyRL spells it lambd)", None, "float"),
    A + "use_kl_in_reward": Key(False, "token rewards −= max(0, β)·kl·loss_mask before the estimator", None, "bool"),
    A + "use_kl_loss": Key(True, "KL in the policy loss (no effect on advantages); SkyRL refuses it together "
                           "with use_kl_in_reward", None, "bool"),
    A + "kl_estimator_type": Key("k3", "KL estimate of old − ref: k1, abs, k2 (½d²), k3 (clamped e^x − x − 1)",
                                 KL_TYPES, "str"),
    A + "kl_loss_coef": Key(0.001, "β of the fixed controller, initial β of the adaptive one", None, "float"),
    A + "kl_ctrl.type": Key("fixed", "KL controller: fixed or adaptive", ("fixed", "adaptive"), "str"),
    A + "kl_ctrl.kl_target": Key(0.1, "adaptive controller target KL", None, "float"),
    A + "kl_ctrl.horizon": Key(10000, "adaptive controller horizon (must be > 0)", None, "int"),
    A + "advantage_batch_normalize": Key(False, "z-score the advantages over the step after the estimator "
                                         "(unmasked grid mean, masked biased variance)", None, "bool"),
    A + "zero_variance_filter": Key(False, "zero the loss mask of the groups whose rewards carry no signal before "
                                    "the KL penalty: with use_kl_in_reward their rows get no KL term (and count as "
                                    "KL 0 in the adaptive controller); without it, no effect on the advantages",
                                    None, "bool"),
    A + "zero_variance_filter_tol": Key(1e-6, "zero_variance_filter: a group whose live rows' (Σ loss_mask > 0) "
                                        "rewards lie within this of each other, more than one of them, is flat "
                                        "(SkyRL 0.3.0 on)", None, "float"),
    A + "loss_reduction": Key("token_mean", "loss-side rescaling of the advantages per mini-batch, applied after "
                              "the values advcli writes (accepted, not applied)", LOSS_REDUCTIONS, "str"),
    A + "max_seq_len": Key(None, "normaliser of loss_reduction=seq_mean_token_sum_norm (loss side)", None, "int"),
    "generator.n_samples_per_prompt": Key(5, "samples per prompt (SkyRL groups by uid, not by this number)",
                                          None, "int"),
    "generator.apply_overlong_filtering": Key(False, "the generator zeroes the loss mask of a response that did not "
                                              "stop (generators/utils.py apply_overlong_filtering); advcli reads that "
                                              "mask from the input's response_mask "
                                              "(a SkyRL dump holds it; in your own Parquet give those rows mask 0): "
                                              "accepted, nothing else changes", None, "bool"),
    "generator.step_wise_trajectories": Key(False, "step-wise trajectories: one row per turn, the estimator runs on "
                                            "the is_last_step rows and each trajectory's value is broadcast to "
                                            "all of its turns", None, "bool"),
    "advcli.zero_variance_rule": Key("range", "advcli extension (SkyRL's releases): which groups zero_variance_filter "
                                     "finds flat: `range` (more than one live row, max − min of their rewards <= "
                                     "zero_variance_filter_tol; from 0.3.0) or `std` (more than one row, numpy's "
                                     "float64 std of the rewards == 0, every row counted; SkyRL 0.1.0-0.2.0)",
                                     ("range", "std"), "str"),
    "advcli.step_wise_copy": Key("own_mask", "advcli extension (SkyRL's releases): how a step-wise turn takes its "
                                 "last step's advantages: `own_mask` (on each of the turn's own positions, from "
                                 "0.2.0) or `last_row` (the last step's padded row copied column by column: 0 from "
                                 "the last step's length on, the turn's mask not applied; SkyRL 0.1.0)",
                                 ("own_mask", "last_row"), "str"),
}

# The framework function each estimator matches, and its float32 rule (named by the diagnostics).
_PPO = f"skyrl/backends/skyrl_train/utils/ppo_utils.py @{COMMIT}"
RULES = {
    "grpo": f"SkyRL compute_grpo_outcome_advantage ({_PPO} L1343-1393) divides by (torch.std + 1e-6) of the "
            "float32 group scores: for equal non-dyadic scores the float32 torch.mean lands an ulp away from the "
            "value and the std comes out as a tiny residue instead of 0, which 1e-6 does not absorb",
    "rloo": f"SkyRL compute_rloo_outcome_advantage ({_PPO} L1259-1309) computes (s − torch.mean)·n/(n − 1) in "
            "float32: for equal non-dyadic scores the mean is an ulp off and leaves a residue",
    "maxrl": f"SkyRL compute_maxrl_advantage ({_PPO} L1396-1428) divides (s − μ) by (μ + 1e-6) with μ the float32 "
             "torch.mean: for equal non-dyadic scores μ is an ulp off and leaves a residue, and a group mean "
             "near 0 amplifies it by up to 1e6",
}


def _check(v: dict) -> None:
    """The combinations SkyRL itself refuses (``validate_cfg``, skyrl/train/utils/utils.py L307-395
    @a9564572; ``get_kl_controller``, ppo_utils.py L73-85), with its reasons."""
    est = v[A + "advantage_estimator"]
    if v[A + "use_kl_in_reward"] and v[A + "use_kl_loss"]:
        raise AdvcliError(f"keys {A}use_kl_in_reward=true and {A}use_kl_loss=true: SkyRL asserts that they are "
                          "mutually exclusive (validate_cfg: the KL goes either into the reward or into the loss)",
                          hint=f"add --set {A}use_kl_loss=false")
    if v["generator.step_wise_trajectories"] and est in ("gae", "reinforce++") and \
            v["advcli.step_wise_copy"] == "last_row":
        raise AdvcliError(f"key {A}advantage_estimator={est} with generator.step_wise_trajectories=true at SkyRL "
                          "0.1.0 (advcli.step_wise_copy=last_row): 0.1.0's validate_cfg lets it run, and its "
                          "trainer copies the last step's per-token advantages onto each earlier turn column by "
                          "column (trainer.py compute_advantages_and_returns L784-815 @skyrl-v0.1.0), so a turn's "
                          "token t gets the last turn's token-t advantage, whatever its own tokens were: numbers "
                          "with no meaning for that turn, which SkyRL's validate_cfg refuses from 0.2.0 on; advcli "
                          "does not reproduce that copy of token-level advantages across rows",
                          hint="use grpo or rloo (reproduced at 0.1.0), or turn step_wise_trajectories off")
    if v["generator.step_wise_trajectories"] and est in ("gae", "reinforce++"):
        raise AdvcliError(f"key {A}advantage_estimator={est} is not supported with "
                          "generator.step_wise_trajectories=true: SkyRL refuses it (validate_cfg) because the "
                          "step-wise branch collapses each trajectory to one scalar advantage, which discards the "
                          "per-token structure of gae/reinforce++",
                          hint="use grpo, rloo or maxrl, or turn step_wise_trajectories off")
    if v["generator.step_wise_trajectories"] and v[A + "loss_reduction"] == "token_mean_legacy":
        raise AdvcliError(f"key {A}loss_reduction=token_mean_legacy is not supported with step-wise training "
                          "(SkyRL validate_cfg refuses it)", hint=f"use {A}loss_reduction=token_mean")
    if v[A + "use_kl_in_reward"] and v[A + "kl_ctrl.type"] == "adaptive":
        horizon = v[A + "kl_ctrl.horizon"]
        if horizon is None or horizon <= 0:  # get_kl_controller raises ValueError
            raise AdvcliError(f"key {A}kl_ctrl.horizon must be larger than 0 for the adaptive controller "
                              f"(got {horizon}; SkyRL get_kl_controller raises ValueError)")
        if not v[A + "kl_ctrl.kl_target"]:  # AdaptiveKLController.update divides by it
            raise AdvcliError(f"key {A}kl_ctrl.kl_target must not be 0 for the adaptive controller: its update "
                              "divides the step's KL by it (ZeroDivisionError in SkyRL)")
    if v[A + "advantage_batch_normalize"] and est == "gae":
        raise AdvcliError(f"keys {A}advantage_estimator=gae with {A}advantage_batch_normalize=true cannot be "
                          "reproduced from a rollout dump: SkyRL's batch mean averages the whole padded [B, T] "
                          "grid, and for gae its padding cells hold the GAE recursion continued over the critic's "
                          "values at positions the dump does not hold (prompt positions from 0.2.0, right-aligned; "
                          "the cells after the response at 0.1.0)",
                          hint="recompute gae without advantage_batch_normalize")


def translate(v: dict) -> dict:
    _check(v)
    cfg = default_config()
    est = v[A + "advantage_estimator"]
    cfg["grouping"].update(by="id", scope="step")  # uids, one training batch per step
    # postprocess_generator_output L1103-1106: the reward on the last response token whatever its mask
    cfg["reward"].update(source="reward", placement="last", mask_placed=False)
    # L1105: per_token_reward[-1] = float(reward) on an empty response is an IndexError: SkyRL stops
    cfg["reward"]["empty_row"] = "error"
    kind = v[A + "kl_estimator_type"]
    k3 = kind == "k3"
    # apply_reward_kl_penalty (trainer.py L1409-1464): compute_approx_kl(old, ref, loss_mask) · max(0, β)
    cfg["kl"].update(in_reward=v[A + "use_kl_in_reward"], estimator=kind, input_clamp=20.0 if k3 else None,
                     output_clamp=10.0 if k3 else None, coef=v[A + "kl_loss_coef"], coef_min=0.0,
                     controller=v[A + "kl_ctrl.type"], target=v[A + "kl_ctrl.kl_target"],
                     horizon=v[A + "kl_ctrl.horizon"], mask=True, score_sum="right_aligned",
                     # postprocess_generator_output (trainer.py L1086-1101): zero_variance_filter zeroes the loss
                     # masks of flat groups before apply_reward_kl_penalty reads them
                     skip_flat_groups=v["advcli.zero_variance_rule"] if v[A + "zero_variance_filter"] else "off",
                     flat_tol=v[A + "zero_variance_filter_tol"])
    # the estimators see SkyRL's response_mask: every response position
    cfg["advantage"]["whiten_mask"] = "all"
    gamma, lam = v[A + "gamma"], v[A + "lambd"]
    if est == "grpo":
        e = {"name": "grpo", "norm_by_std": v[A + "grpo_norm_by_std"], "eps": 1e-6, "std": "torch",
             "mask_output": False}
    elif est == "rloo":  # (s − μ)·n/(n−1) in SkyRL's float32 form, a group of one 0
        e = {"name": "rloo", "form": "centred", "singleton": "zero", "mask_output": False}
    elif est == "maxrl":
        e = {"name": "maxrl", "eps": 1e-6, "mask_output": False}
    elif est == "reinforce++":  # every column a discount step (the reset only acts on the left padding)
        e = {"name": "reinforce_plus_plus", "gamma": gamma, "holes": "step", "mask_rewards": False}
    else:  # gae: vanilla over every position, returns = A + V before whitening
        e = {"name": "gae", "gamma": gamma, "lam": lam, "holes": "step", "zero_masked": False}
    if est in ("reinforce++", "gae"):  # masked_whiten(x, response_mask) (ppo_utils.py L129-153)
        cfg["advantage"].update(whiten=True, whiten_unbiased=True, whiten_eps=1e-8, whiten_eps_mode="add",
                                whiten_divisor="max1", whiten_small="error", remask=False)
    cfg["advantage"]["batch_normalize"] = v[A + "advantage_batch_normalize"]
    if v["generator.step_wise_trajectories"]:  # trainer.py L1142-1180 (0.1.0: L784-815, advcli.step_wise_copy)
        cfg["grouping"].update(trajectories="last_step", trajectory_copy=v["advcli.step_wise_copy"])
    cfg["estimator"] = e
    cfg["diagnostics"] = {"rule": RULES.get(est)}
    return cfg


# SkyRL's releases on the package index (``skyrl``; no ``skyrl-train`` is published): 0.1.0, 0.2.0, 0.3.0 and 0.4.0
# are run by tests/conformance/test_conformance_skyrl.py (tools/conformance_matrix.py --all skyrl: 34 passed, 3
# skipped each; 0.4.0 declares Python ≥ 3.12, its files are compiled under the running Python); 0.4.0's ppo_utils.py
# estimators and KL and trainer.py compute_advantages_and_returns / apply_reward_kl_penalty / _normalize_advantages
# read the same as 0.3.0's (annotations and docstrings aside). None has #1443 (grpo_norm_by_std default false) or
# #1445 (k3 → k2), still open. 0.0.1 is the name reservation (no trainer).
# 0.1.0 read from its wheel (skyrl-0.1.0: skyrl/backends/skyrl_train/utils/ppo_utils.py, skyrl/train/trainer.py,
# skyrl/train/config/config.py, skyrl/train/utils/utils.py validate_cfg) against 0.2.0's: the same estimators less
# maxrl, the same compute_approx_kl, apply_reward_kl_penalty and batch normalisation (normalize_advantages_dict,
# 0.2.0's _normalize_advantages step 1), the same AlgorithmConfig defaults; its step-wise path differs (below).
_V010 = "SkyRL 0.1.0"
_TOL = A + "zero_variance_filter_tol"
_NO_TOL = ((1e-6,), "SkyRL before 0.3.0 has no zero_variance_filter_tol (its zero_variance_filter compares numpy's std "
                    "with 0; the key came with #1802), so its config would refuse the key")
RELEASES = (
    Release("0.1.0", "2026-03-11", note="SkyRL 0.1.0: the advantage code of 0.2.0 less maxrl; its step-wise copy of "
                                        "the last step's padded row; responses left-aligned (preprocess.py L98-100 "
                                        "@skyrl-v0.1.0), so gae bootstraps a row shorter than its step's longest "
                                        "with the critic's value at the cell after it, which a dump does not hold: "
                                        "advcli takes 0 there, so with lambd < 1 gae differs on those rows (by "
                                        "up to γ(1 − λ)·V/(1 − γλ) at the last token, less by γλ a position "
                                        "before it; the default λ = 1 telescopes it away)",
            settings={"advcli.step_wise_copy": "last_row", "advcli.zero_variance_rule": "std"},
            accepts={_TOL: _NO_TOL, A + "advantage_estimator": (tuple(e for e in ESTIMATORS if e != "maxrl"),
                                                 f"{_V010}'s AdvantageEstimator (ppo_utils.py) has no maxrl (it came "
                                                 "with 0.2.0), so the trainer itself would not run it"),
                     A + "loss_reduction": (("token_mean", "sequence_mean", "seq_mean_token_sum_norm"),
                                            f"{_V010}'s validate_cfg (train/utils/utils.py) refuses it")}),
    Release("0.2.0", "2026-04-22", settings={"advcli.zero_variance_rule": "std"}, accepts={_TOL: _NO_TOL},
            note="the package run: the advantage code of commit a9564572; 0.1.0's zero_variance_filter", changes=(
                Change("", (A + "advantage_estimator",), "maxrl: (s − μ)/(μ + 1e-6) (ppo_utils.py "
                       "compute_maxrl_advantage @0.2.0)"),
                Change("", ("generator.step_wise_trajectories", "advcli.step_wise_copy"), "step-wise "
                       "trajectories: the estimator runs on the last steps with an all-ones mask and each step's "
                       "advantages are masked by its own response mask (trainer.py compute_advantages_and_returns "
                       "@0.2.0); 0.1.0 copied the last step's padded row to each turn (0 from the last step's "
                       "length on, the turn's mask not applied)"))),
    Release("0.3.0", "2026-07-16", note="the package run: the advantage code of commit a9564572", changes=(
                Change("#1802", (A + "zero_variance_filter", _TOL, "advcli.zero_variance_rule"),
                       "zero_variance_filter finds a group flat when more than one of its rows is live (Σ loss_mask > "
                       "0) and their rewards lie within zero_variance_filter_tol (1e-6); before, when numpy's std of "
                       "all its rewards was 0, which an ulp's residue of equal non-dyadic rewards (e.g. 0.1 three "
                       "times) escapes: with use_kl_in_reward, the rows of such groups lose their KL term from "
                       "here on"),)),
    Release(COMMIT, "2026-08-21", aliases=("a956457",), note="SkyRL at commit a9564572 (advcli's first match)"),
    Release("0.4.0", "2026-10-01", note="the package run: the advantage code of commit a9564572"),
)

def _release_check(v: dict, release: Release, asked: str | None) -> None:
    """loss_reduction=seq_mean_token_sum_norm without max_seq_len: SkyRL's validate_cfg refuses it from 0.2.0 on
    (train/utils/utils.py L323 @skyrl-v0.2.0); 0.1.0's SkyRLTrainConfig.__post_init__ fills it in as
    max_input_length + max_generate_length (skyrl/train/config/config.py L713-722 @skyrl-v0.1.0)."""
    if v[A + "loss_reduction"] == "seq_mean_token_sum_norm" and v[A + "max_seq_len"] is None \
            and release.name != "0.1.0":
        raise AdvcliError(f"key {A}loss_reduction=seq_mean_token_sum_norm needs {A}max_seq_len: SkyRL's "
                          "validate_cfg refuses it without one (from 0.2.0)", hint=f"set {A}max_seq_len")


FLAVOR = Flavor(
    title="SkyRL",  # the framework's name in prose (help, docs)
    kl_off="--set trainer.algorithm.use_kl_in_reward=false",
    name="skyrl", framework=f"NovaSky-AI/SkyRL @ {COMMIT} (skyrl/backends/skyrl_train/utils/ppo_utils.py, "
                            "skyrl/train/trainer.py)",
    keys=KEYS, translate=translate, releases=RELEASES, estimator_key=A + "advantage_estimator",
    # SkyRL's whole config (ppo_base_config.yaml, or a run's saved config): trainer holds the placement, the
    # models and the loss besides trainer.algorithm, generator the sampling besides n_samples_per_prompt
    mixed_sections=("trainer", "generator"), release_check=_release_check,
    # named on its own in a --config file's summary: it drops (filter) or replaces (replace) the flat groups
    # before compute_advantages_and_returns (trainer.py L372 @a9564572); the group estimators give those groups
    # 0 anyway, and advantage_batch_normalize spans the rows given (a dump holds the rows kept)
    unread=(A + "dynamic_sampling",),
    notes="Groups by uid (prompt_id) anywhere in the step. The estimators see every response position "
          "(observation tokens included): grpo/rloo/maxrl write their value on all L_i positions, reinforce++ "
          "and gae scan every position and whiten over all of them (unbiased, rsqrt(var + 1e-8)), not re-masked; "
          "the response_mask column (SkyRL's loss_mask) masks only the KL term. grpo = (s−μ)/(torch.std+1e-6), "
          "a group of one s/(1+1e-6); rloo = (s−μ)·n/(n−1), a group of one 0; maxrl = (s−μ)/(μ+1e-6), a group "
          "of one s. The reward sits on position L_i−1 even when it is loss-masked. KL: k3 by default (clamps "
          "20/10), rewards −= kl·max(0, β), β = kl_loss_coef (fixed) or the adaptive controller (n_steps = "
          "rows of the step); zero_variance_filter takes it from the rows of flat groups. "
          "advantage_batch_normalize: grid mean Σ A/(B·max L_i), biased variance over the "
          "response positions, (A − mean)·rsqrt(max(var, 1e-8)). Step-wise: trajectories end at is_last_step "
          "rows; each gets its last step's value.")
