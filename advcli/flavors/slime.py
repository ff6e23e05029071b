"""``--flavor slime``: THUDM/slime @ 624b824a (argparse dests of ``slime/utils/arguments.py``).

One rollout (one value of the ``step`` column) goes through:

1. ``RolloutManager._post_process_rewards`` (slime/ray/rollout.py L608-633): for grpo/gspo/cispo and
   reinforce_plus_plus_baseline with ``rewards_normalization``, the float32 rewards are reshaped to
   ``[-1, n]`` when the batch has ``rollout_batch_size·n`` rows and to ``[1, rows]`` otherwise (one
   group of the whole batch, silently), centred, and for grpo/gspo/cispo with
   ``grpo_std_normalization`` divided by ``(std(centred, unbiased) + 1e-6)``. ``n = 1`` turns the std
   off (``slime_validate_args`` L1981-1983), so each singleton gets 0.
2. ``compute_advantages_and_returns`` (slime/backends/megatron_utils/loss.py L704-880):
   ``compute_approx_kl`` (ppo_utils.py L11-51: k1, k2, k3 unclamped, low_var_kl = k3 clamped to
   ±10), then the estimator — grpo/gspo/cispo: the reward on every position, KL ignored
   (``get_grpo_returns`` L361); reinforce_plus_plus: ``−β·kl·m`` plus the reward at the last m=1
   token, discounted over every position (L371-445); reinforce_plus_plus_baseline: ``r̃ − β·kl``,
   token-local and unmasked (L448-475); ppo: ``−β·kl`` plus the reward at L_i−1, vanilla GAE over
   every position with V_L = 0 (L478-583, L695) — then the OPD term ``A −= coef·(lp − teacher)``
   on every position (L663-700), then, with ``normalize_advantages``, one-pass float32 whitening over
   the m=1 tokens applied to every position (``distributed_masked_whiten``, distributed_utils.py
   L111-170). Returns are never whitened.

A flavor holds no math: this module only maps slime's keys onto the canonical configuration.
"""
from __future__ import annotations

from ..config import Key, default_config
from ..errors import AdvcliError, did_you_mean
from . import Flavor
from ._releases import Change, Release

GRPO_FAMILY = ("grpo", "gspo", "cispo")
ESTIMATORS = GRPO_FAMILY + ("reinforce_plus_plus", "reinforce_plus_plus_baseline", "ppo")
KL_TYPES = ("k1", "k2", "k3", "low_var_kl")
OPD_TYPES = ("sglang", "megatron")
SOURCE = "THUDM/slime @ 624b824a"

KEYS = {
    "advantage_estimator": Key("grpo", "grpo, gspo, cispo (one advantage path: the normalised reward on every "
                               "position, KL ignored), reinforce_plus_plus, reinforce_plus_plus_baseline, ppo",
                               None, "str"),
    "n_samples_per_prompt": Key(1, "group size n: consecutive blocks of n rows of a step (prompt_id is not read). "
                                "n = 1 turns grpo_std_normalization off, so group-normalised rewards are 0", None,
                                "int"),
    "rollout_batch_size": Key(None, "prompts per rollout (slime requires it). Not given: rows of the step // n. A "
                              "step whose rows are not rollout_batch_size·n is normalised as ONE group (slime's "
                              "silent whole-batch fallback)", None, "int"),
    "grpo_std_normalization": Key(True, "grpo/gspo/cispo: divide the centred rewards by (unbiased std + 1e-6) "
                                  "(--disable-grpo-std-normalization sets false)", None, "bool"),
    "rewards_normalization": Key(True, "rollout-side group normalisation for grpo/gspo/cispo and "
                                 "reinforce_plus_plus_baseline (--disable-rewards-normalization sets false)",
                                 None, "bool"),
    "kl_coef": Key(0.0, "fixed KL-in-reward β: reinforce_plus_plus (masked, summed into the return), "
                   "reinforce_plus_plus_baseline (token-local, unmasked), ppo (unmasked); grpo/gspo/cispo ignore it",
                   None, "float"),
    "kl_loss_type": Key("k1", "k1 = lp−ref; k2 = ½(lp−ref)²; k3 = exp(ref−lp)−1+(lp−ref), unclamped; "
                        "low_var_kl = k3 clamped to ±10", KL_TYPES, "str"),
    "use_rollout_logprobs": Key(False, "the KL and OPD read rollout_log_probs (the inference engine's) instead "
                                "of old_log_probs", None, "bool"),
    "gamma": Key(1.0, "discount of the reinforce_plus_plus returns and ppo GAE (masked positions count as steps)",
                 None, "float"),
    "lambd": Key(1.0, "GAE λ (ppo)", None, "float"),
    "normalize_advantages": Key(False, "whitening over the m=1 tokens of the step (one-pass float32 unbiased "
                                "variance, rsqrt(var + 1e-8)) applied to every position; required by slime for "
                                "reinforce_plus_plus and reinforce_plus_plus_baseline", None, "bool"),
    "use_opd": Key(False, "on-policy distillation: A −= opd_kl_coef·(lp − teacher_log_probs) on every position, "
                   "after the estimator, before whitening", None, "bool"),
    "opd_type": Key(None, "sglang or megatron (required with use_opd; where the teacher log-probs came from, no "
                    "numeric effect)", None, "str"),
    "opd_kl_coef": Key(1.0, "OPD coefficient", None, "float"),
    # the KL loss (slime's scripts pass --use-kl-loss --kl-loss-coef): the loss's, no advantage reads them; slime
    # refuses a kl_loss_coef beside a kl_coef (arguments.py L1846 @624b824a)
    "use_kl_loss": Key(False, "the actor's KL loss: no effect on advantages", None, "bool"),
    "kl_loss_coef": Key(0.0, "the KL loss's coefficient: no effect on advantages; slime refuses it beside a "
                        "non-zero kl_coef", None, "float"),
}


def _check(v: dict) -> None:
    """The refusals slime itself makes (argparse choices and ``slime_validate_args``)."""
    est = v["advantage_estimator"]
    if est not in ESTIMATORS:
        raise AdvcliError(f"key advantage_estimator: unknown value {est!r}.{did_you_mean(est, ESTIMATORS)} "
                          f"Valid: {', '.join(ESTIMATORS)} (slime's argparse choices, arguments.py L941)")
    if v["kl_loss_type"] not in KL_TYPES:
        raise AdvcliError(f"key kl_loss_type: unknown value {v['kl_loss_type']!r}. Valid: {', '.join(KL_TYPES)}")
    n = v["n_samples_per_prompt"]
    if n is None or n < 1:
        raise AdvcliError(f"key n_samples_per_prompt must be at least 1 (got {n})")
    rbs = v["rollout_batch_size"]
    if rbs is not None and rbs < 1:
        raise AdvcliError(f"key rollout_batch_size must be at least 1 (got {rbs})",
                          hint="leave it out to take the rows of each step // n_samples_per_prompt")
    if v["kl_coef"] != 0 and v["kl_loss_coef"] != 0:
        raise AdvcliError(f"keys kl_coef={v['kl_coef']:g} and kl_loss_coef={v['kl_loss_coef']:g}: slime refuses to "
                          "start (arguments.py L1846: 'Only one of kl_coef and kl_loss_coef can be set')",
                          hint="the KL in the reward (kl_coef) or the KL loss (kl_loss_coef), not both")
    if est in ("reinforce_plus_plus", "reinforce_plus_plus_baseline") and not v["normalize_advantages"]:
        raise AdvcliError(f"advantage_estimator={est} with normalize_advantages=false: slime refuses to start "
                          "(arguments.py L1848: 'The reinforce_plus_plus and reinforce_plus_plus_baseline advantage "
                          "estimators require advantage normalization')",
                          hint="add --set normalize_advantages=true")
    if v["use_opd"]:
        if v["opd_type"] is None:
            raise AdvcliError("use_opd=true without opd_type: slime refuses to start (arguments.py L1786: "
                              "'--opd-type must be specified when --use-opd is enabled')",
                              hint="add --set opd_type=sglang (or megatron; it has no numeric effect)")
    if v["opd_type"] is not None and v["opd_type"] not in OPD_TYPES:
        raise AdvcliError(f"key opd_type: unknown value {v['opd_type']!r}.{did_you_mean(v['opd_type'], OPD_TYPES)} "
                          f"Valid: {', '.join(OPD_TYPES)}")


def translate(v: dict) -> dict:
    _check(v)
    cfg = default_config()
    est = v["advantage_estimator"]
    n = v["n_samples_per_prompt"]
    rbs = v["rollout_batch_size"]
    # grouping: blocks of n per step, or the whole step when its rows are not rollout_batch_size·n
    # rollout-side normalisation (rollout.py L613-628); n = 1 forces the std off (arguments.py L1981)
    norm = v["rewards_normalization"] and (est in GRPO_FAMILY or est == "reinforce_plus_plus_baseline")
    # groups exist only for that normalisation: blocks of n per step, or the whole step when its row count
    # is not rollout_batch_size·n
    cfg["grouping"].update(by="position" if norm else "none", size=n if norm else None, scope="step",
                           fallback="scope", scope_rows=None if rbs is None else rbs * n, id_check="warn")
    std = norm and est in GRPO_FAMILY and v["grpo_std_normalization"] and n != 1
    cfg["reward"].update(source="reward", clip=None, mask_placed=False, unplaced="error",
                         placement={"reinforce_plus_plus": "last_valid", "ppo": "last"}.get(est, "all"))
    cfg["reward"]["normalize"].update(mean="group" if norm else "none", std="group" if std else "none", eps=1e-6,
                                      centre_first=True)
    # KL (loss.py L731-761): zero when kl_coef is 0; grpo/gspo/cispo never read it
    kind = v["kl_loss_type"]
    cfg["kl"].update(estimator="k1" if kind == "k1" else ("k2" if kind == "k2" else "k3"), input_clamp=None,
                     output_clamp=10.0 if kind == "low_var_kl" else None, coef=v["kl_coef"], controller="fixed",
                     in_reward=est not in GRPO_FAMILY and v["kl_coef"] != 0, mask=est == "reinforce_plus_plus",
                     policy="rollout_log_probs" if v["use_rollout_logprobs"] else "old_log_probs")
    if est == "reinforce_plus_plus":  # get_reinforce_plus_plus_returns: every position a discount step
        cfg["estimator"] = {"name": "reinforce_plus_plus", "gamma": v["gamma"], "holes": "step", "mask_rewards": False}
    elif est == "ppo":  # vanilla GAE over every position, V_L = 0, unmasked values
        cfg["estimator"] = {"name": "gae", "gamma": v["gamma"], "lam": v["lambd"], "holes": "step",
                            "zero_masked": False}
    else:  # grpo family and rf++-baseline: the token rewards themselves (r̃ [− β·kl]) on every position
        cfg["estimator"] = {"name": "token_rewards"}
    cfg["advantage"].update(
        whiten=v["normalize_advantages"], whiten_one_pass=True, whiten_unbiased=True, whiten_eps=1e-8,
        whiten_eps_mode="add", whiten_divisor="n", whiten_scale=True, whiten_small="error_empty", remask=False,
        clip=None, returns="estimator",
        distill_coef=v["opd_kl_coef"] if v["use_opd"] else None,
        distill_returns=est == "reinforce_plus_plus_baseline")  # returns = advantages (loss.py L804)
    return cfg


def estimator_note(v: dict) -> str | None:
    """Why an advantage_estimator runs under another advcli name (translate above)."""
    est = v["advantage_estimator"]
    if est in GRPO_FAMILY:
        return (f"advantage_estimator={est} is slime's group reward normalisation (rollout.py L608-633) and then "
                "that reward on every token (get_grpo_returns): advcli's token_rewards on the normalised rewards")
    if est == "reinforce_plus_plus_baseline":
        return ("advantage_estimator=reinforce_plus_plus_baseline is slime's group-centred reward − β·KL on every "
                "token (loss.py L448-475): advcli's token_rewards")
    if est == "ppo":
        return "advantage_estimator=ppo is slime's vanilla GAE over every position (loss.py L478-583): advcli's gae"
    return None


# the commits whose semantics advcli reproduces, oldest first (--flavor slime@RELEASE); nothing that changes
# advantages was merged after it (#2062, grouping by group_index, is still open)
# The GitHub releases v0.2.4, v0.3.0 and v0.3.1 (slime is not on the package index) were read and run against
# advcli (a helper ran each tag's own _post_process_rewards and compute_advantages_and_returns: 30 cases per tag):
# compute_approx_kl, get_grpo_returns, the REINFORCE++ baselines, GAE, distributed_masked_whiten and
# _post_process_rewards are 624b824a's, every key has the same default. What differs: cispo (#2067, after v0.3.0);
# REINFORCE++'s per-token float32 loop before #2205 (equal up to float32 rounding); with --context-parallel-size > 1
# and normalize_advantages each context-parallel rank whitened its own slice before #2235 (advcli reproduces
# context-parallel size 1); the train dump's layout before #2266 (one file per rank: refused; after it, read).
_NO_CISPO = tuple(e for e in ESTIMATORS if e != "cispo")
_CP = ("with --context-parallel-size > 1 and normalize_advantages each context-parallel rank whitened its own slice "
       "of every sequence (before #2235): advcli reproduces context-parallel size 1")
RELEASES = (
    Release("0.2.4", "2026-03-29", tag_only=True,
            aliases=("v0.2.4", "bd217a63f113d74488170914e4d39e68c12e8cf0",
                     "0.3.0", "v0.3.0", "bf14dc21f9500746447f2572d0692e981c4d2a7e"),
            accepts={"advantage_estimator": (_NO_CISPO, "slime v0.2.4 and v0.3.0 have no cispo: "
                                             "--advantage-estimator's choices (slime/utils/arguments.py L809-815 "
                                             "@v0.2.4, L873-879 @v0.3.0) lack it; it came with #2067")},
            note="slime v0.2.4 to v0.3.0 (GitHub releases, not on the package index): 624b824's rewards and "
                 "advantages for every estimator they have; no cispo; " + _CP),
    Release("0.3.1", "2026-08-06", tag_only=True, aliases=("v0.3.1", "a6272da0d4f3d0a08520c99a2f3b4f6c887960dc"),
            changes=(Change("#2067", ("advantage_estimator",),
                            "cispo: grpo's group normalisation and the reward on every token (only its loss "
                            "differs)"),),
            note="slime v0.3.1 (GitHub release, not on the package index): 624b824's rewards and advantages; " + _CP),
    Release("624b824", "2026-08-21", aliases=("624b824a898ab0ec1fcb4d373004c7f3852bf515",),
            changes=(Change("#2235", (), "with --context-parallel-size > 1 and normalize_advantages, one whitening "
                                         "mean and variance per step over the data- and context-parallel ranks; the "
                                         "same numbers at context-parallel size 1"),
                     Change("#2205", ("advantage_estimator",),
                            "reinforce_plus_plus returns by a chunked float32 scan instead of a per-token float32 "
                            "loop: equal up to float32 rounding"),
                     Change("#2266", (), "the train dump is one file of all data-parallel shards in rollout order "
                                         "(format_version 2, train_data/{rollout_id}.pt), before one per rank: "
                                         "read (advcli audit DIR/train_data), the per-rank ones refused")),
            note="the commit advcli was matched against"),
)

FLAVOR = Flavor(
    title="slime",  # the framework's name in prose (help, docs)
    kl_off="--set kl_coef=0",
    name="slime", framework=f"{SOURCE} (slime/ray/rollout.py, slime/backends/megatron_utils/loss.py, "
                            "slime/utils/ppo_utils.py)",
    keys=KEYS, translate=translate, estimator_key="advantage_estimator", response_estimator="grpo",
    elsewhere={"reward_key": "--reward-key picks the reward among the reward model's outputs: pick the reward "
                             "column with --column reward=reward/{value} (a rollout dump's dict rewards are read as "
                             "the columns reward/NAME; in a Parquet file, --column reward={value}); a train dump's "
                             "raw_reward holds the reward it picked already: leave the key out"},
    estimator_names=ESTIMATORS,
    group_size_key="n_samples_per_prompt", estimator_note=estimator_note,
    notes="groups are consecutive blocks of n_samples_per_prompt rows of a step; a step whose row count is not "
          "rollout_batch_size·n (default: rows // n, so a count that is not a multiple of n) is normalised as one "
          "group; grpo/gspo/cispo: (r − μ)/(std(r − μ) + 1e-6) on the [G, n] float32 reshape (12×0.7 gives 0.119), "
          "n = 1 gives 0, broadcast to every position (masked ones too), KL ignored, returns = advantages; "
          "reinforce_plus_plus_baseline: (r − μ) − β·kl_t, unmasked, returns = advantages after OPD; "
          "reinforce_plus_plus: raw reward at the last m=1 token, − β·kl·m, discounted over every position; ppo: "
          "raw reward at L_i−1 whatever its mask, − β·kl unmasked, vanilla GAE over every position, returns = A + V; "
          "k3 unclamped, low_var_kl clamped ±10; OPD A −= coef·(lp − teacher) unmasked before whitening; whitening "
          "one-pass in float32 (E[x²] − E[x]², unbiased for N ≥ 2, rsqrt(var + 1e-8)) over the m=1 tokens of the "
          "step, applied to every position and never re-masked; returns never whitened.",
    releases=RELEASES)
