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
    P + "bypass_mode": Key(False, "true: IS/RS inside the actor loss against the current policy (not "
                           "recomputable from a dump: refused)", None, "bool"),
    P + "loss_type": Key("ppo_clip", "bypass-mode loss only (ignored: bypass mode is refused)", None, "str"),
}


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


def parse_rs(options, thresholds) -> list[list]:
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
        if lower is not None and lower > upper:
            raise _err("rollout_rs_threshold", f"thresholds for option {o} must be lower <= upper, got {s!r}")
        if o.endswith("k1"):
            out.append([o, math.log(lower), math.log(upper)])
        else:
            out.append([o, None, upper])
    return out


def translate(v: dict, cfg: dict) -> None:
    """Fill ``cfg["rollout_correction"]`` from the native values ``v``."""
    if v[P + "bypass_mode"]:
        raise AdvcliError(f"key {P}bypass_mode=true: out of scope. In bypass mode verl computes IS and rejection "
                          "inside the actor loss, per micro-batch, against the current policy's log-probs, which "
                          "depend on the training weights and cannot be recomputed from a rollout dump; the "
                          "advantages then see the unchanged mask",
                          hint=f"leave {P}bypass_mode=false (decoupled mode) to recompute the trainer-side correction")
    level = v[P + "rollout_is"]
    if level is not None and level not in ("token", "sequence"):
        raise _err("rollout_is", f"unknown value {level!r}.{did_you_mean(str(level), ['token', 'sequence'])} Valid: "
                   "null, token, sequence")
    rc = cfg.setdefault("rollout_correction", {})
    rc.update(mode="auto", is_level=level, is_upper=None, is_lower=None,
              is_batch_normalize=bool(v[P + "rollout_is_batch_normalize"]), rs=None)
    thr = v[P + "rollout_is_threshold"]
    if level is not None and thr is not None:  # threshold null: no weights (L854)
        rc["is_upper"], rc["is_lower"] = parse_is_threshold(thr)
    if v[P + "rollout_rs"] is not None:
        rc["rs"] = parse_rs(v[P + "rollout_rs"], v[P + "rollout_rs_threshold"])
    if v[P + "loss_type"] != "ppo_clip":  # read by bypass mode only: said in the run's warnings
        rc["ignored"] = [f"{P}loss_type={v[P + 'loss_type']} applies to bypass mode only (out of scope); "
                         "decoupled mode, which advcli recomputes, does not read it"]
    if level is not None or rc["rs"]:
        rc["mode"] = "on"  # an option was asked for: the log-prob columns are required
