"""``--flavor verl``: the ``algorithm.rollout_correction.*`` keys (verl's training–inference mismatch
correction) and their translation to the canonical ``rollout_correction.*`` section.

verl-project/verl @ 1dda039b: the keys and the defaults a user gets are the Hydra YAML's
(``verl/trainer/config/algorithm/rollout_correction.yaml``: ``rollout_is: null``; the dataclass
``RolloutCorrectionConfig`` says ``"sequence"`` but the trainer reads the YAML); the threshold
strings are parsed as ``_parse_rollout_is_threshold`` / ``_parse_rollout_rs_thresholds`` do
(``rollout_corr_helper.py`` L93-194), the rejection options as ``compute_rollout_rejection_mask``
(L236-256): comma-separated, duplicates dropped (the first kept). The math is
``advcli.correction.weights``.
"""
from __future__ import annotations

import math

from ..config import Key
from ..errors import AdvcliError, did_you_mean

P = "algorithm.rollout_correction."

KEYS = {
    P + "rollout_is": Key(None, "IS weights from old_log_probs − rollout_log_probs: null (none), token, sequence "
                          "(the YAML default null; the dataclass' \"sequence\" is not what the trainer uses)",
                          None, "any"),
    P + "rollout_is_threshold": Key(2.0, "a number u: TIS min(w, u); a string 'lo_hi': IcePop, weights outside "
                                    "[lo, hi] become 0 (quote it: unquoted 0.5_2 is YAML's 0.52)", None, "any"),
    P + "rollout_is_batch_normalize": Key(False, "divide the weights by their step mean", None, "bool"),
    P + "rollout_rs": Key(None, "rejection options, comma-separated (all must pass): token_k1/k2/k3, "
                          "seq_sum_k1/k2/k3, seq_mean_k1/k2/k3, seq_max_k2/k3", None, "any"),
    P + "rollout_rs_threshold": Key(None, "one threshold for every option or one per option (comma-separated); "
                                    "k1: 'lo_hi' or u (lo = 1/u), bounds on log(π_rollout/π_train); k2/k3: an "
                                    "upper bound", None, "any"),
    P + "bypass_mode": Key(False, "true: IS/RS inside the actor loss against the current policy (no dump holds "
                           "it): the advantages are written, on the unchanged mask, without IS weights", None,
                           "bool"),
    P + "loss_type": Key("ppo_clip", "bypass-mode loss only (ignored: the correction of bypass mode is in the loss)",
                         None, "str"),
    # verl 0.6.1-0.7.0 (rollout_correction.yaml @v0.7.0): rollout_rs is a level with ratio bounds, and the veto
    P + "rollout_rs_threshold_lower": Key(None, "verl 0.6.1-0.7.0: the lower ratio bound of rollout_rs (null: "
                                          "1/rollout_rs_threshold)", None, "float"),
    P + "rollout_token_veto_threshold": Key(None, "verl 0.6.1-0.7.0: a row with a token whose ratio "
                                            "π_train/π_rollout is below it is rejected whole (null: off)", None,
                                            "float"),
    P + "use_policy_gradient": Key(False, "verl 0.6.1: bypass-mode loss only (ignored: the actor loss)",
                                   None, "bool"),
}
# verl 0.6.0 (ppo_trainer.yaml @v0.6.0, verl/trainer/ppo/mismatch_helper.py): the correction's keys sit in
# algorithm itself; the threshold is the on/off switch, algorithm.rollout_is whether the weights reach the loss
P0 = "algorithm."
KEYS_060 = {
    P0 + "rollout_is_threshold": Key(None, "verl 0.6.0: the IS weights' upper threshold; null: no correction, "
                                     "no metrics (its on/off switch)", None, "float"),
    P0 + "rollout_is_threshold_lower": Key(None, "verl 0.6.0: the lower threshold (null: 1/upper; mask mode and "
                                           "the metrics)", None, "float"),
    P0 + "rollout_is_level": Key("token", "verl 0.6.0: token, sequence (product) or geometric (geometric mean)",
                                 None, "str"),
    P0 + "rollout_is_mode": Key("truncate", "verl 0.6.0: truncate (min(w, upper)) or mask (0 outside [lower, "
                                "upper])", None, "str"),
    P0 + "rollout_is_veto_threshold": Key(1e-4, "verl 0.6.0: a row with a token whose ratio is below it gets "
                                          "weight 0 (null: off)", None, "float"),
    P0 + "rollout_is": Key(False, "verl 0.6.0: write the weights (the actor applies them); false: metrics only",
                           None, "bool"),
}
KEYS.update(KEYS_060)
API = "advcli.rollout_corr_api"
APIS = ("none", "0.6.0", "0.6.1", "0.7.0", "0.7.1", "0.8.0", "0.9.0")
KEYS[API] = Key("0.9.0", "advcli extension (verl's releases): which release's rollout correction the keys "
                "follow: `0.9.0` (rollout_corr_helper.py from 0.9.0), `0.8.0` (the per-row fractions of the IS "
                "metrics from the applied weights; k1 bounds unordered), `0.7.1` (its metrics before truncation, no "
                "IcePop string), `0.7.0` / `0.6.1` (rollout_rs token/sequence/geometric with ratio bounds, the "
                "per-token veto; 0.6.1's sequence batch mean over every row), `0.6.0` (mismatch_helper.py: "
                "algorithm.rollout_is_*), `none` (before 0.6.0)", APIS, "str")
_LEGACY_07_KEYS = (P + "rollout_rs_threshold_lower", P + "rollout_token_veto_threshold")
KEYS_NEW = tuple(k for k in KEYS if k.startswith(P) and k not in _LEGACY_07_KEYS)  # from 0.6.1
_LEGACY_060_DEFAULTS = {k: v.default for k, v in KEYS_060.items()}
_WHERE = {"none": "verl before 0.6.0 has no rollout correction (ray_trainer.py @v0.5.0)",
          "0.6.0": "verl/trainer/config/ppo_trainer.yaml @v0.6.0",
          "0.6.1": "verl/trainer/config/algorithm/rollout_correction.yaml @v0.6.1",
          "0.7.0": "verl/trainer/config/algorithm/rollout_correction.yaml @v0.7.0",
          "0.7.1": "verl/trainer/config/algorithm/rollout_correction.yaml @v0.7.1",
          "0.8.0": "verl/trainer/config/algorithm/rollout_correction.yaml @v0.8.0",
          "0.9.0": "verl/trainer/config/algorithm/rollout_correction.yaml @v0.9.0 and later"}


def _err(key: str, msg: str) -> AdvcliError:
    return AdvcliError(f"key {P}{key}: {msg}", hint="quote values that hold '_' or ',', e.g. "
                       f"--set {P}rollout_rs_threshold=\"'0.5_2.0'\"")


def parse_is_threshold(spec) -> tuple[float, float | None]:
    """(upper, lower or None) as ``_parse_rollout_is_threshold`` (L93-129)."""
    key = "rollout_is_threshold"
    if isinstance(spec, bool):
        raise _err(key, "must be a number or a string threshold, not a boolean (verl raises TypeError)")
    if isinstance(spec, (int, float)):
        upper, lower = float(spec), None
    elif isinstance(spec, str):
        s = spec.strip()
        if not s:
            raise _err(key, "must not be an empty string")
        try:
            if "_" in s:
                lo_s, up_s = s.split("_", 1)
                lower, upper = float(lo_s), float(up_s)
            else:
                upper, lower = float(s), None
        except ValueError:
            raise _err(key, f"invalid threshold {spec!r}: a number, or 'lo_hi' for IcePop") from None
    else:
        raise _err(key, f"{spec!r} is neither a number nor a threshold string")
    if not upper > 0:
        raise _err(key, f"the upper bound must be positive, got {upper:g}")
    if lower is not None:
        if not lower > 0:
            raise _err(key, f"the lower bound must be positive, got {lower:g}")
        if lower > upper:
            raise _err(key, f"the lower bound must be <= the upper bound (got {spec!r})")
    return upper, lower


def parse_rs(options, thresholds, order: bool = True) -> list[list]:
    """[[option, lo, hi], ...] in statistic units (k1: log bounds, as L299-301) from verl's strings."""
    from .weights import RS_OPTIONS  # (torch only when the option is used)

    if not isinstance(options, str) or not options.strip():
        raise _err("rollout_rs", f"must be a non-empty comma-separated string of options, got {options!r}")
    names: list[str] = []
    for o in (x.strip() for x in options.split(",")):
        if not o:
            continue
        if o not in RS_OPTIONS:
            raise _err("rollout_rs", f"unknown option {o!r}.{did_you_mean(o, RS_OPTIONS)} "
                       f"Valid: {', '.join(RS_OPTIONS)}")
        if o not in names:
            names.append(o)
    if not names:
        raise _err("rollout_rs", "must contain at least one option")
    if thresholds is None:
        raise _err("rollout_rs_threshold", f"is required when rollout_rs is set (verl raises ValueError); e.g. "
                   f"--set {P}rollout_rs_threshold=\"'0.5_2.0'\"")
    if isinstance(thresholds, bool):
        raise _err("rollout_rs_threshold", "must be a string or a number, not a boolean")
    if isinstance(thresholds, (int, float)):
        specs = [str(thresholds)]
    elif isinstance(thresholds, str):
        specs = [p.strip() for p in thresholds.split(",") if p.strip()]
    else:
        raise _err("rollout_rs_threshold", f"{thresholds!r} is neither a string nor a number")
    if not specs:
        raise _err("rollout_rs_threshold", "must contain at least one threshold value")
    if len(specs) not in (1, len(names)):
        raise _err("rollout_rs_threshold", f"expects one threshold shared by all options or exactly {len(names)} "
                   f"(one per option of rollout_rs), got {len(specs)}")
    if len(specs) == 1:
        specs = specs * len(names)
    out = []
    for o, s in zip(names, specs):
        try:
            if o.endswith("k1"):
                if "_" in s:
                    lo_s, up_s = s.split("_", 1)
                    lower, upper = float(lo_s), float(up_s)
                else:
                    upper = float(s)
                    lower = float(str(1.0 / upper))
            else:
                if "_" in s:
                    raise _err("rollout_rs_threshold", f"option {o} takes a single upper bound without '_', got {s!r}")
                lower, upper = None, float(s)
        except (ValueError, ZeroDivisionError):
            raise _err("rollout_rs_threshold", f"invalid numeric threshold {s!r} for option {o}") from None
        if upper <= 0 or (lower is not None and lower <= 0):
            raise _err("rollout_rs_threshold", f"thresholds for option {o} must be positive, got {s!r}")
        if order and lower is not None and lower > upper:  # (checked from verl 0.9.0)
            raise _err("rollout_rs_threshold", f"thresholds for option {o} must be lower <= upper, got {s!r}")
        if o.endswith("k1"):
            out.append([o, math.log(lower), math.log(upper)])
        else:
            out.append([o, None, upper])
    return out


def _not_at(api: str, key: str, since: str) -> AdvcliError:
    where = _WHERE[api] if api == "none" else f"verl's rollout correction at this release has no such key " \
                                               f"({_WHERE[api]})"
    return AdvcliError(f"key {key}: {where}; it exists {since}",
                       hint="set the keys of the release you ran (advcli explain --history shows them), or pick "
                            "the release that has this key with --flavor verl@RELEASE")


def _refuse_foreign(v: dict, api: str) -> None:
    """A key of another release's correction set to a non-default value: refused, naming where it is missing."""
    if api != "0.6.0":
        for k, d in _LEGACY_060_DEFAULTS.items():
            if v[k] != d:
                raise _not_at(api, k, "in verl 0.6.0 only (mismatch_helper.py; from 0.6.1 the keys are "
                              f"{P}*): --flavor verl@0.6.0")
    if api not in ("0.6.1", "0.7.0"):
        for k in _LEGACY_07_KEYS:
            if v[k] is not None:
                raise _not_at(api, k, "in verl 0.6.1-0.7.0 only (rollout_correction.yaml @v0.7.0): "
                              "--flavor verl@0.7.0")
    if api != "0.6.1" and v[P + "use_policy_gradient"]:
        raise _not_at(api, P + "use_policy_gradient", "in verl 0.6.1 only (bypass mode's loss)")
    if api in ("none", "0.6.0"):
        for k in KEYS_NEW:
            if k != P + "use_policy_gradient" and v[k] != KEYS[k].default:
                raise _not_at(api, k, "from verl 0.6.1 (the algorithm.rollout_correction section)"
                              + ("; verl 0.6.0 has algorithm.rollout_is_* instead" if api == "0.6.0" else ""))
    if api == "none":
        for k, d in _LEGACY_060_DEFAULTS.items():
            if v[k] != d:
                raise AdvcliError(f"key {k}: verl before 0.6.0 has no rollout correction (it appears in 0.6.0, "
                                  "verl/trainer/ppo/mismatch_helper.py @v0.6.0)",
                                  hint="--flavor verl@0.6.0 or later for the rollout correction")


def _number(api: str, key: str, x, rule: str = "positive") -> float:
    """A float key of the releases before 0.8.0 (a number: verl compares it with numbers). ``rule``: ``positive``
    (verl raises ValueError on ≤ 0), ``nonzero`` (verl divides 1.0 by it: ZeroDivisionError at 0; a negative
    one runs), ``any``."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise _err(key.removeprefix(P), f"must be a number at this release (verl compares it with numbers and "
                   f"raises TypeError on {x!r}; {_WHERE[api]}); the 'lo_hi' string form arrived in 0.8.0")
    if rule == "positive" and not x > 0:
        raise AdvcliError(f"key {key} must be positive (got {x:g}): verl raises ValueError ({_WHERE[api]})")
    if rule == "nonzero" and x == 0:
        raise AdvcliError(f"key {key} must not be 0: verl takes 1/{key.rsplit('.', 1)[-1]} as the lower bound "
                          f"and stops with ZeroDivisionError ({_WHERE[api]})")
    return float(x)


def _translate_060(v: dict, rc: dict) -> None:
    """verl 0.6.0: ``RayPPOTrainer.compute_rollout_importance_weights_and_add_to_batch`` (ray_trainer.py @v0.6.0
    L921-962) and ``compute_rollout_importance_weights`` (mismatch_helper.py @v0.6.0 L47-234): with a threshold,
    weights of the level's ratio, truncated or masked to [lower, upper], 0 on a vetoed row, × mask; the response
    mask is not changed; the weights reach the batch only with algorithm.rollout_is; mismatch/* metrics."""
    thr = v[P0 + "rollout_is_threshold"]
    rc.update(rs=None)
    if thr is None:  # the on/off switch: neither weights nor metrics
        return
    low = v[P0 + "rollout_is_threshold_lower"]
    upper = _number("0.6.0", P0 + "rollout_is_threshold", thr, "nonzero" if low is None else "any")
    lower = 1.0 / upper if low is None else _number("0.6.0", P0 + "rollout_is_threshold_lower", low, "any")
    level, mode = v[P0 + "rollout_is_level"], v[P0 + "rollout_is_mode"]
    if level not in ("token", "sequence", "geometric"):
        raise AdvcliError(f"key {P0}rollout_is_level: unknown value {level!r}."
                          f"{did_you_mean(str(level), ['token', 'sequence', 'geometric'])} Valid: token, sequence, "
                          "geometric (verl 0.6.0 raises ValueError)")
    if mode not in ("truncate", "mask"):
        raise AdvcliError(f"key {P0}rollout_is_mode: unknown value {mode!r}."
                          f"{did_you_mean(str(mode), ['truncate', 'mask'])} Valid: truncate, mask (verl 0.6.0 "
                          "raises ValueError)")
    veto = v[P0 + "rollout_is_veto_threshold"]
    rc.update(mode="on" if v[P0 + "rollout_is"] else "auto", is_level=level, is_upper=upper,
              is_lower=lower if mode == "mask" else None, is_metrics="raw", is_metrics_lower=lower,
              veto=None if veto is None else _number("0.6.0", P0 + "rollout_is_veto_threshold", veto, "any"),
              veto_metrics=True, rejects="weights", write_weights=bool(v[P0 + "rollout_is"]),
              metric_names="mismatch")


def _translate_07(v: dict, rc: dict, api: str) -> None:
    """verl 0.6.1-0.7.0: ``compute_rollout_correction_and_rejection_mask`` (rollout_corr_helper.py @v0.7.0
    L553-704): TIS weights as later (metrics before the truncation), rejection by one ratio level (token,
    sequence, geometric) within [lower, upper], the per-token veto; both change the mask the estimator sees."""
    level = rc["is_level"]
    if level is not None and v[P + "rollout_is_threshold"] is not None:
        rc["is_upper"] = _number(api, P + "rollout_is_threshold", v[P + "rollout_is_threshold"])
    opt = v[P + "rollout_rs"]
    if opt is not None:
        if opt not in ("token", "sequence", "geometric"):
            raise _err("rollout_rs", f"unknown value {opt!r} at verl {api}."
                       f"{did_you_mean(str(opt), ['token', 'sequence', 'geometric'])} Valid: null, token, "
                       f"sequence, geometric ({_WHERE[api]}; the k1/k2/k3 options arrived in 0.7.1)")
        thr = v[P + "rollout_rs_threshold"]
        if thr is None:
            raise _err("rollout_rs_threshold", "is required when rollout_rs is set (verl raises ValueError)")
        low = v[P + "rollout_rs_threshold_lower"]
        hi = _number(api, P + "rollout_rs_threshold", thr, "nonzero" if low is None else "any")
        lo = 1.0 / hi if low is None else _number(api, P + "rollout_rs_threshold_lower", low, "any")
        rc["rs"] = [[opt, lo, hi]]
    veto = v[P + "rollout_token_veto_threshold"]
    rc.update(is_metrics="raw", veto_metrics=True, norm_rows="all" if api == "0.6.1" else "valid",
              veto=None if veto is None else _number(api, P + "rollout_token_veto_threshold", veto))
    if api == "0.6.1" and v[P + "loss_type"] != "ppo_clip":
        raise _not_at(api, P + "loss_type", "from verl 0.7.0 (0.6.1 has use_policy_gradient; bypass mode only)")


def translate(v: dict, cfg: dict) -> None:
    """Fill ``cfg["rollout_correction"]`` from the native values ``v`` (``advcli.rollout_corr_api``: the
    release whose keys and math they follow)."""
    api = v.get(API, "0.9.0")
    _refuse_foreign(v, api)
    if api in ("none", "0.6.0"):
        rc = cfg.setdefault("rollout_correction", {})
        rc.update(mode="off", is_level=None, is_upper=None, is_lower=None, is_batch_normalize=False, rs=None)
        if api == "0.6.0":
            _translate_060(v, rc)
        return
    if v[P + "bypass_mode"]:
        # bypass mode: the trainer sets old_log_probs := rollout_log_probs and skips the correction at advantage
        # time (the advantages see the unchanged mask); IS and rejection run inside the actor loss against the
        # current policy (compute_policy_loss_bypass_mode, core_algos.py L2413 @1dda039b), not in any dump
        rc = cfg.setdefault("rollout_correction", {})
        rc.update(mode="off", is_level=None, is_upper=None, is_lower=None, is_batch_normalize=False, rs=None,
                  bypass=True,
                  ignored=[f"{P}bypass_mode=true: verl corrects inside the actor loss, per micro-batch, against the "
                           "current policy's log-probs, which no dump holds: the advantages (on the unchanged mask, "
                           "with rollout_log_probs standing for old_log_probs, as verl sets them, in the KL and the "
                           "estimators) are written, without rollout_is_weights"])
        return
    level = v[P + "rollout_is"]
    if level is not None and level not in ("token", "sequence"):
        raise _err("rollout_is", f"unknown value {level!r}.{did_you_mean(str(level), ['token', 'sequence'])} Valid: "
                   "null, token, sequence")
    rc = cfg.setdefault("rollout_correction", {})
    rc.update(mode="auto", is_level=level, is_upper=None, is_lower=None,
              is_batch_normalize=bool(v[P + "rollout_is_batch_normalize"]), rs=None)
    thr = v[P + "rollout_is_threshold"]
    if api in ("0.6.1", "0.7.0"):
        _translate_07(v, rc, api)
    else:
        if level is not None and thr is not None:  # threshold null: no weights (L854)
            if api == "0.7.1":  # compute_rollout_correction_weights @v0.7.1: `threshold <= 0` on the value
                rc["is_upper"] = _number(api, P + "rollout_is_threshold", thr)
                rc["is_metrics"] = "raw"
            else:
                rc["is_upper"], rc["is_lower"] = parse_is_threshold(thr)
        if v[P + "rollout_rs"] is not None:
            rc["rs"] = parse_rs(v[P + "rollout_rs"], v[P + "rollout_rs_threshold"], order=api == "0.9.0")
        if api == "0.8.0" and rc["is_upper"] is not None:  # compute_is_metrics @v0.8.0 L772-774
            rc["is_metrics"] = "applied_rows"
    if v[P + "loss_type"] != "ppo_clip":  # read by bypass mode only: said in the run's warnings
        rc["ignored"] = [f"{P}loss_type={v[P + 'loss_type']} applies to bypass mode only (the actor loss); "
                         "decoupled mode, which advcli recomputes, does not read it"]
    if level is not None or rc["rs"] or rc.get("veto") is not None:
        rc["mode"] = "on"  # an option was asked for: the log-prob columns are required
