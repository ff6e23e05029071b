"""``--flavor areal``: AReaL's advantage pipeline (areal-project/AReaL, formerly inclusionAI/AReaL, @
cbff54d6; ``PPOActorConfig`` / ``NormConfig`` in areal/api/cli_args.py, ``PPOActor._compute_advantages``
in areal/trainer/ppo/actor.py L178-325).

AReaL has no estimator key: every configuration runs the same chain, translated here stage by stage:

1. overlong penalty → ``reward.overlong.*``; ``clip((r + reward_bias)·reward_scaling, ±reward_clip)`` →
   ``reward.bias/scale/shape_clip``; ``reward_norm`` → ``reward.norm`` over ``grouping.by=runs``
   (the per-prompt trajectory dicts: maximal runs of consecutive equal prompt_id), per step;
   ``mask_no_eos_with_zero`` → ``reward.zero_truncated``; the reward sits on the last response token.
2. KL reward ``−kl_ctl·clamp(k(lp, ref), ±10)·m`` → ``kl.*`` (always in the reward, as AReaL; ref = 0
   without a ``ref_log_probs`` column; lp = ``rollout_log_probs`` unless ``recompute_logprob`` and not
   ``use_decoupled_loss``, then ``old_log_probs``).
3. GAE (V = 0 without ``values``), token or turn timesteps, a per-row λ function, the bootstrap of
   truncated rows, then ``adv_norm`` → estimator ``areal_gae``.

A ``NormConfig`` is on as soon as any of its sub-keys is given (the others then take NormConfig's
defaults: OmegaConf merges the section into the structured dataclass), and off otherwise.
"""
from __future__ import annotations

from ..config import Key, default_config
from ..errors import AdvcliError
from . import Flavor
from ._releases import Change, Release

LEVEL = ("batch", "group", None)
LAMBDA_PATHS = {
    "areal.trainer.ppo.lambda_fn.constant_gae_lambda": "constant",
    "areal.trainer.ppo.lambda_fn.vapo_length_adaptive_gae": "vapo_length_adaptive",
    "areal.trainer.ppo.lambda_fn.relative_position_gae_lambda": "relative_position",
}


def _norm_keys(section: str, what: str) -> dict[str, Key]:
    p = f"actor.{section}."
    return {
        p + "mean_level": Key("batch", f"{what}: mean level, batch / group / null (no centring); the section is off "
                              "unless one of its keys is given", LEVEL, "any"),
        p + "mean_leave1out": Key(False, f"{what}: leave-one-out mean (a group of one row → itself → 0)", None, "bool"),
        p + "std_level": Key("batch", f"{what}: std level, batch / group / null (std 1 and eps 0); the std is taken "
                             "about the chosen mean", LEVEL, "any"),
        p + "std_unbiased": Key(True, f"{what}: N−1 denominator (N ≤ 1 → std 1)", None, "bool"),
        p + "eps": Key(1e-5, f"{what}: added to the std", None, "float"),
        p + "group_size": Key(1, f"{what}: fallback fixed group size; the trainer passes the actual per-prompt "
                              "group sizes, so it does not change the result", None, "int"),
    }


KEYS = {
    # rollout-time reward normalisation (AReaL #1516 @95d70052, RolloutControllerV2 from #1619): the workflow
    # replaces each reward by its group's population z-score (remote_inf_engine.py L180-215 @cbff54d6) and the
    # trainer's chain below starts from it; the JSONL dump writes it as `reward` (advcli: normalized_reward)
    # beside the raw original_reward
    "gconfig.reward_normalization": Key(False, "rollout-time reward normalisation: the trainer's reward is each "
                                        "group's population z-score (r − mean)/(std + 1e-8), which AReaL's dump "
                                        "keeps as normalized_reward: the run reads it as the reward (another "
                                        "column: --column reward=NAME); AReaL refuses it with actor.reward_norm",
                                        None, "bool"),
    "actor.reward_bias": Key(0.0, "added to the scalar reward before scaling", None, "float"),
    "actor.reward_scaling": Key(1.0, "multiplies (reward + bias)", None, "float"),
    "actor.reward_clip": Key(20.0, "clip to ±value after scaling, before reward_norm", None, "float"),
    "actor.overlong_reward_penalty": Key(False, "DAPO length penalty on the reward, before bias/scaling: r += "
                                         "min(−(n − (max_new_tokens − overlong_tokens))/overlong_tokens·factor, 0), "
                                         "n = trained tokens", None, "bool"),
    "actor.overlong_tokens": Key(None, "tail length of the penalty (required when on)", None, "int"),
    "actor.overlong_penalty_factor": Key(None, "penalty factor (required when on)", None, "float"),
    "actor.max_new_tokens": Key(1024, "max response length used by the penalty", None, "int"),
    **_norm_keys("reward_norm", "reward_norm (scalar rewards, per trajectory group / step)"),
    **_norm_keys("adv_norm", "adv_norm (token advantages over the trained tokens)"),
    "actor.kl_ctl": Key(0.1, "coefficient of the per-token KL reward −kl_ctl·clamp(k(lp, ref), ±10) (ref = 0 "
                        "without a ref_log_probs column)", None, "float"),
    "actor.kl_estimator": Key("k1", "k1 = d, k2 = d²/2, k3 = e^−d − 1 + d, d = lp − ref; all clamped to ±10",
                              ("k1", "k2", "k3"), "str"),
    "actor.recompute_logprob": Key(False, "with use_decoupled_loss=false: the KL uses old_log_probs (recomputed) "
                                   "instead of rollout_log_probs", None, "bool"),
    "actor.use_decoupled_loss": Key(False, "when true the KL always uses rollout_log_probs", None, "bool"),
    "actor.discount": Key(1.0, "γ", None, "float"),
    "actor.gae_lambda": Key(1.0, "λ: a number, or the dotted path of a per-row λ function: "
                            + ", ".join(LAMBDA_PATHS), None, "any"),
    "actor.gae_lambda_kwargs": Key({}, "keyword arguments of the λ function, as actor.gae_lambda_kwargs.<name> "
                                   "(value / alpha / q); ignored when gae_lambda is a number", None, "any"),
    "actor.gae_timestep_unit": Key("token", "token (GAE over trained tokens) or turn (one GAE step per turn, "
                                   "needs turn_ids)", ("token", "turn"), "str"),
    "advcli.norm_groups": Key("prompts", "advcli extension (AReaL's releases): the groups of a NormConfig at group "
                              "level: `prompts` (each prompt's own rows, any size: the trainer passes the actual "
                              "group sizes) or `slices` (AReaL ≤ 1.0.4: consecutive slices of the section's "
                              "group_size rows, whatever their prompt; maps to grouping.by=position, "
                              "grouping.size=group_size)", ("prompts", "slices"), "str"),
    "actor.mask_no_eos_with_zero": Key(False, "rows with truncated=true get outcome reward 0 (they still count in "
                                       "reward_norm)", None, "bool"),
}

NORM_FIELDS = ("mean_level", "mean_leave1out", "std_level", "std_unbiased", "eps", "group_size")


def _norm(v: dict, section: str, given: set) -> dict | None:
    keys = [f"actor.{section}.{f}" for f in NORM_FIELDS]
    if not any(k in given for k in keys):
        return None
    from ..ops.normcfg import NormSpec  # (the math's own module: loaded only when a section is set)

    spec = NormSpec.parse({f: v[k] for f, k in zip(NORM_FIELDS, keys)}, f"actor.{section}")
    return spec.as_dict()


def _lambda(v: dict) -> tuple[float, str | None, dict | None]:
    from ..estimators.areal import check_lambda  # the estimator registry loads when asked, not with the flavors

    lam = v["actor.gae_lambda"]
    kwargs = {k.split(".", 2)[2]: x for k, x in v.items() if k.startswith("actor.gae_lambda_kwargs.")}
    base = v.get("actor.gae_lambda_kwargs") or {}
    if not isinstance(base, dict):
        raise AdvcliError(f"key actor.gae_lambda_kwargs: expected a mapping, got {base!r}",
                          hint="e.g. --set actor.gae_lambda_kwargs.alpha=0.05")
    kwargs = {**base, **kwargs}
    if isinstance(lam, str):
        if not lam:
            raise AdvcliError("key actor.gae_lambda: the function path must not be empty (AReaL refuses it)")
        fn = LAMBDA_PATHS.get(lam)
        if fn is None:
            raise AdvcliError(f"key actor.gae_lambda={lam!r}: advcli knows AReaL's own λ functions only: "
                              f"{', '.join(LAMBDA_PATHS)}; it does not import other code",
                              hint="or give λ as a number")
        check_lambda(fn, kwargs, None)
        return 1.0, fn, kwargs
    check_lambda(None, {}, lam)
    return float(lam), None, None  # kwargs are ignored with a number (cli_args.py L1747-1755)


def translate(v: dict, given: set | None = None) -> dict:
    given = set(given or ())
    cfg = default_config()
    cfg["grouping"].update(by="runs", scope="step")
    r = cfg["reward"]
    r.update(source="reward", placement="last", mask_placed=False)
    if v["actor.overlong_reward_penalty"]:  # actor.py L186-198: both asserted not None
        tokens, factor = v["actor.overlong_tokens"], v["actor.overlong_penalty_factor"]
        if tokens is None or factor is None:
            raise AdvcliError("actor.overlong_reward_penalty=true needs actor.overlong_tokens and "
                              "actor.overlong_penalty_factor (AReaL asserts both are set)")
        if tokens == 0:  # −exceed/0: ±inf or NaN rewards (functional.py reward_overlong_penalty L950-953)
            raise AdvcliError("key actor.overlong_tokens must not be 0: AReaL's reward_overlong_penalty divides the "
                              "excess length by it, so every reward would be infinite or NaN")
        r["overlong"] = {"tokens": tokens, "factor": factor, "max_tokens": v["actor.max_new_tokens"]}
    c = v["actor.reward_clip"]
    r.update(bias=v["actor.reward_bias"], scale=v["actor.reward_scaling"], shape_clip=[-c, c])
    r["norm"] = _norm(v, "reward_norm", given)
    if v["gconfig.reward_normalization"]:
        if r["norm"] is not None:  # AReaL's config validation (cli_args.py) refuses the two together
            raise AdvcliError("gconfig.reward_normalization=true with actor.reward_norm: AReaL refuses the two "
                              "together (the rewards would be normalised twice)",
                              hint="keep the one the run used")
        cfg["columns"] = {"reward": "normalized_reward"}  # the z-score the trainer took (formats/areal.py)
    r["zero_truncated"] = v["actor.mask_no_eos_with_zero"]
    policy = ("old_log_probs" if v["actor.recompute_logprob"] and not v["actor.use_decoupled_loss"]
              else "rollout_log_probs")
    cfg["kl"].update(in_reward=True, estimator=v["actor.kl_estimator"], input_clamp=None, output_clamp=10.0,
                     coef=v["actor.kl_ctl"], controller="fixed", mask=True, policy=policy, missing="zeros")
    lam, fn, kwargs = _lambda(v)
    cfg["estimator"] = {"name": "areal_gae", "gamma": v["actor.discount"], "lam": lam, "lam_fn": fn,
                        "lam_kwargs": kwargs, "timestep": v["actor.gae_timestep_unit"],
                        "norm": _norm(v, "adv_norm", given)}
    if v["advcli.norm_groups"] == "slices":
        _slices(cfg, v, {"reward_norm": r["norm"], "adv_norm": cfg["estimator"]["norm"]})
    return cfg


def _slices(cfg: dict, v: dict, norms: dict) -> None:
    """AReaL ≤ 1.0.4 (areal/utils/data.py ``Normalization.__call__``, package areal 1.0.4): a group-level
    mean or std is taken over ``x[i·group_size:(i+1)·group_size]`` for i < bs // group_size, the rows of
    consecutive slices whatever their prompt; a group of one row is centred on itself and, unbiased, has
    std 1."""
    grouped = {s: n for s, n in norms.items() if n and "group" in (n["mean_level"], n["std_level"])}
    sizes = {v[f"actor.{s}.group_size"] for s in grouped}
    if not sizes:
        return
    if len(sizes) > 1:
        raise AdvcliError(f"advcli.norm_groups=slices: actor.reward_norm.group_size and actor.adv_norm.group_size "
                          f"differ ({' and '.join(str(x) for x in sorted(sizes))}); advcli reproduces AReaL's fixed "
                          "slices for one group size", hint="give both sections the same group_size")
    size = sizes.pop()
    # group_size 1 with mean_leave1out: 1.0.4 centres each row on 0 (its special case), then divides by the
    # group std (1 when unbiased, |x| biased) or the batch std about those zero means: NormConfig slices=1 does
    # a step that is not a whole number of slices: AReaL 1.0.4 leaves the group mean and std of the rows past
    # the last whole slice at 0 and divides them by eps (AReaL #1673, open); the release ran that way, so it is
    # reproduced (grouping.fallback=tail: the rest is one short block; NormConfig slices: such a block keeps
    # mean 0 and std 0), with a warning naming the bug
    cfg["grouping"].update(by="position", size=size, fallback="tail", id_check="warn")
    for n in grouped.values():
        n["slices"] = size


# On AReaL's JSONL the keys not set are AReaL's defaults, or what the run's config.yaml (saved in the trial
# directory above rollout/, read by advcli.formats.areal.run_config) says: never a guess of the example a run
# came from.

# AReaL's only release on the package index, 1.0.4, is older than commit cbff54d6 (the flavor's first match):
# read from the installed package's areal/utils/data.py and areal/trainer/ppo/actor.py, and checked by
# tests/conformance/test_conformance_areal.py against the release's own PPOActor._compute_advantages. Merged after
# cbff54d6 and not reproduced yet: #1563 (incomplete groups, rows of one logical rollout counted once,
# std ≤ eps → divide by 1) and #1619 (population z-score on the v2 rollout path).
RELEASES = (
    Release("1.0.4", "2026-06-10", settings={"advcli.norm_groups": "slices"},
            note="AReaL 1.0.4: NormConfig groups are fixed slices of group_size rows"),
    # v2.0.0 is a tag and GitHub release (pyproject version 2.0.0, 2026-07-02), not on the package index: users
    # install it from the repository. Its areal/utils/data.py is cbff54d6's; its ppo/actor.py differs only by #1600
    # (λ functions, turn-level GAE: the same token GAE) and #1516 (rollout-time normalisation; logging)
    Release("2.0.0", "2026-07-02", aliases=("v2.0.0", "fee938e"), tag_only=True,
            note="AReaL v2.0.0 (GitHub release, not on the package index): per-prompt NormConfig groups, no λ "
                 "functions or turn-level GAE",
            changes=(Change("#1454", ("advcli.norm_groups", "actor.reward_norm.group_size",
                                      "actor.adv_norm.group_size"),
                            "group-level normalisation takes each prompt's rows (the trainer passes the group "
                            "sizes) instead of consecutive slices of group_size rows: a short group, or group_size "
                            "left at 1 (every advantage 0 before), now gives the per-prompt z-score"),)),
    Release("cbff54d", "2026-08-22", aliases=("cbff54d6",), note="AReaL at commit cbff54d6 (advcli's first match)",
            changes=(Change("#1600", ("actor.gae_lambda", "actor.gae_lambda_kwargs", "actor.gae_timestep_unit"),
                            "keys 2.0.0 and 1.0.4 do not have (refused there): gae_lambda as the path of a per-row λ "
                            "function with its gae_lambda_kwargs, and turn-level GAE (gae_timestep_unit=turn)"),
                     Change("#1516", ("gconfig.reward_normalization",),
                            "a key 2.0.0 and 1.0.4 do not have (refused there): rollout-time group reward "
                            "normalisation, whose z-score AReaL's dump writes as the reward"),)),
)

def release_check(v: dict, release, asked: str | None) -> None:
    """AReaL 1.0.4 and v2.0.0 have no per-row λ functions, no turn-level GAE and no rollout-time reward
    normalisation: their PPOActorConfig.gae_lambda is a float and they have neither gae_lambda_kwargs nor
    gae_timestep_unit (api/cli_args.py L1514 @1.0.4, L1579 @v2.0.0), nor GenerationHyperparameters.
    reward_normalization: a config naming them does not load there."""
    where = {"1.0.4": "L1514 @1.0.4", "2.0.0": "L1579 @v2.0.0"}.get(release.name)  # its PPOActorConfig.gae_lambda
    if where is None:
        return
    named = f"--flavor areal@{asked or release.name}"
    hint = "a newer AReaL has it: --flavor areal (the newest); `advcli explain --flavor areal --history`"
    if isinstance(v["actor.gae_lambda"], str) or v.get("actor.gae_lambda_kwargs") or \
            any(k.startswith("actor.gae_lambda_kwargs.") for k in v):
        raise AdvcliError(f"{named}: actor.gae_lambda={v['actor.gae_lambda']!r} and gae_lambda_kwargs: AReaL "
                          f"{release.name}'s gae_lambda is a number (PPOActorConfig, api/cli_args.py {where}); the λ "
                          "functions came later (#1600)", hint=hint)
    if v["actor.gae_timestep_unit"] != "token":
        raise AdvcliError(f"{named}: actor.gae_timestep_unit={v['actor.gae_timestep_unit']}: AReaL {release.name} has "
                          "no such key (its GAE steps over tokens; turn-level GAE came later, #1600)", hint=hint)
    if v["gconfig.reward_normalization"]:
        raise AdvcliError(f"{named}: gconfig.reward_normalization=true: AReaL {release.name}'s "
                          "GenerationHyperparameters has no such key (rollout-time reward normalisation came later, "
                          "#1516)", hint=hint)


FLAVOR = Flavor(
    title="AReaL",  # the framework's name in prose (help, docs)
    kl_off="--set actor.kl_ctl=0, or --config with the trial's config.yaml when the run set it there",
    name="areal", framework="areal-project/AReaL @ cbff54d6 (areal/trainer/ppo/actor.py, gae.py, utils/data.py)",
    keys=KEYS, translate=translate, open_prefixes=("actor.gae_lambda_kwargs.",), given_keys=True, releases=RELEASES,
    release_check=release_check,
    # the trial's saved config.yaml (AReaL's save_config: the whole experiment) is a --config file as it is:
    # its actor section is PPOActorConfig, mostly training settings advcli does not read
    mixed_sections=("actor", "gconfig"),
    # `adv_norm: {}` is NormConfig() with its defaults (to_structured_cfg, api/cli_args.py L3534-3541 @cbff54d6),
    # a truthy section: the normalisation runs (ppo/actor.py L79-81), batch mean and std
    empty_tables={f"actor.{s}": (f"actor.{s}.mean_level", "batch") for s in ("adv_norm", "reward_norm")},
    notes="One chain for every algorithm: overlong penalty → clip((r + bias)·scaling, ±clip) → reward_norm → "
          "−kl_ctl·clamp(k(lp, ref), ±10) on trained tokens (on by default: kl_ctl 0.1, ref = 0 without a ref "
          "column) → GAE over the trained tokens (V = 0 without values; the outcome on a masked last token is "
          "lost; truncated rows bootstrap from bootstrap_value) → adv_norm. Groups are runs of consecutive equal "
          "prompt_id of any size; each step is a batch. NormConfig: float64 statistics, std about the chosen mean, "
          "/(std + 1e-5), std_level null → no eps, masked outputs 0, group mean rounded to float32 before "
          "centring (the one float32 artefact, flagged as float32_norm). Without adv_norm the masked "
          "positions keep the GAE carry. No truncated column: no row is flagged (AReaL flags the batch's longest "
          "prompt+response, which a dump cannot show).")
