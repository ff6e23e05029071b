"""advcli's canonical configuration: every stage of the pipeline and its switches.

A configuration is a nested dict with the keys of :data:`SCHEMA` (dotted paths) plus
``estimator.*``, whose keys depend on the estimator (see ``advcli.estimators``). Flavors translate a
framework's own keys into this form; ``--flavor advcli`` takes it directly. ``--set KEY=VALUE``
parses VALUE as YAML. Nothing here imports torch.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import AdvcliError, did_you_mean


@dataclass(frozen=True)
class Key:
    default: Any
    doc: str
    choices: tuple | None = None
    kind: str = "any"  # "bool", "float", "int", "str", "clip", "list", "any"


# The pipeline, in order: columns -> grouping -> reward -> kl -> estimator -> advantage -> output.
SCHEMA: dict[str, Key] = {
    # ----------------------------------------------------------------------------- grouping/scope
    "grouping.by": Key("auto", "how rows form groups: `id` (the prompt_id column, rows anywhere in the "
                       "file), `position` (consecutive blocks of grouping.size rows), `none`, or `auto` "
                       "(id when the column exists)", ("auto", "id", "position", "none"), "str"),
    "grouping.size": Key(None, "group size for grouping.by=position", None, "int"),
    "grouping.scope": Key("step", "scope of batch statistics: `step` (each value of the step column is "
                          "its own batch, in ascending order; the whole input when there is no step "
                          "column), `step_domain` (per step and domain, ROLL) or `all`",
                          ("step", "step_domain", "all"), "str"),
    # ----------------------------------------------------------------------------------- reward
    "reward.source": Key("auto", "the row reward: `reward` (scalar column), `token_level_scores` "
                         "(token list column, verl), `components` (weighted sum of reward.components) "
                         "or `auto` (token_level_scores if present, else reward)",
                         ("auto", "reward", "token_level_scores", "components"), "str"),
    "reward.nan": Key("refuse", "missing (null or NaN) row rewards: `refuse` (the run stops, naming the row) or "
                      "`allow` (TRL: a reward function's None is NaN; NaN components count as 0 in the weighted "
                      "sum, a row with no reward at all is unscorable and gets advantage 0)",
                      ("refuse", "allow"), "str"),
    "reward.components": Key(None, "component reward columns, e.g. [acc, fmt]; a name with `*` stands for "
                             "every matching column, sorted by name (NeMo gdpo: [\"reward/*\"])", None, "list"),
    "reward.weights": Key(None, "weights of the components (default all 1)", None, "list"),
    "reward.normalize.mean": Key("none", "subtract the `batch` or `group` mean of the row reward "
                                 "before it is placed on tokens, or `loo` (the mean of the group's other "
                                 "rows, OpenRLHF rloo)", ("none", "batch", "group", "loo"), "str"),
    "reward.normalize.std": Key("none", "divide by the `batch` or `group` std (unbiased) + eps",
                                ("none", "batch", "group"), "str"),
    "reward.normalize.eps": Key(1e-6, "epsilon added to the std", None, "float"),
    "reward.clip": Key(None, "clamp of the (normalised) row reward: c for [-c, c], or [lo, hi]", None, "clip"),
    "reward.placement": Key("last", "where the row reward lands: `last` (position L_i-1, verl/ROLL) or "
                            "`last_valid` (last mask=1 token, OpenRLHF/NeMo gae) or `all` (every position of the row: NeMo "
                            "RL's REINFORCE++ and raw_reward)", ("last", "last_valid", "all"), "str"),
    "reward.mask_placed": Key(False, "multiply the placed token rewards by the mask (ROLL: a row ending "
                              "in a masked token loses its reward)", None, "bool"),
    "reward.whiten_tokens": Key(False, "whiten the token-level rewards (after KL and kl.token_clip) over the "
                                "mask=1 tokens of each scope, then multiply by the mask (ROLL whiten_rewards: "
                                "unbiased, rsqrt(var + 1e-8); skipped in a scope with <= 1 valid token)", None, "bool"),
    # --------------------------------------------------------------------------------------- kl
    "kl.in_reward": Key(False, "token_level_rewards = scores − β·KL before the estimator", None, "bool"),
    "kl.estimator": Key("k1", "per-token KL estimate of logp − ref: k1, abs, k2, k3", ("k1", "abs", "k2", "k3"), "str"),
    "kl.input_clamp": Key(None, "clamp of ref − logp before the estimate (verl k3: 20)", None, "float"),
    "kl.output_clamp": Key(None, "clamp of the estimate (verl k3: 10)", None, "float"),
    "kl.coef": Key(0.001, "β (the initial β of an adaptive controller)", None, "float"),
    "kl.controller": Key("fixed", "`fixed` or `adaptive` (Ziegler et al.: β ← β·(1 + clip(kl/target − 1, "
                         "±0.2)·n/horizon) after each step; a step uses β from before its update)",
                         ("fixed", "adaptive"), "str"),
    "kl.target": Key(0.1, "adaptive controller target KL", None, "float"),
    "kl.horizon": Key(10000, "adaptive controller horizon", None, "float"),
    "kl.mask": Key(True, "multiply the KL by the response mask before subtracting it", None, "bool"),
    "kl.token_clip": Key(None, "clamp of the token-level rewards after the KL term (ROLL's second "
                         "reward_clip)", None, "clip"),
    # ------------------------------------------------------------------------ rollout correction
    # (advcli.ops.rollout_correction; docs/rollout-correction.md): between the KL penalty and the estimator
    "rollout_correction.mode": Key("off", "`off`; `auto`: run when the input has a rollout_log_probs column "
                                   "(verl: whenever the batch holds them); `on`: require it",
                                   ("off", "auto", "on"), "str"),
    "rollout_correction.is_level": Key(None, "IS weights: null (none), `token` exp(clamp(lr, ±20)), `sequence` "
                                       "exp(clamp(Σ lr·m, ±20)); lr = old_log_probs − rollout_log_probs",
                                       (None, "token", "sequence"), "any"),
    "rollout_correction.is_upper": Key(2.0, "TIS: w = min(w, upper); with is_lower, IcePop's upper bound "
                                       "(null: no weights)", None, "float"),
    "rollout_correction.is_lower": Key(None, "IcePop: weights outside [is_lower, is_upper] become 0 (null: TIS)",
                                       None, "float"),
    "rollout_correction.is_batch_normalize": Key(False, "divide the weights by their step mean (token: token-"
                                                 "weighted; sequence: one vote per non-empty row)", None, "bool"),
    "rollout_correction.rs": Key(None, "rejection options, each [name, lo, hi] on the option's statistic (name "
                                 "token_kX, seq_sum_kX, seq_mean_kX, seq_max_kX; k1 = −clamp(lr), k2 = ½l², k3 = "
                                 "eˡ−1−l; lo null: no lower test); a row or token is kept when every option "
                                 "passes", None, "list"),
    # -------------------------------------------------------------------------------- advantage
    "advantage.whiten": Key(False, "whiten the advantages over the mask=1 tokens of each scope", None, "bool"),
    "advantage.whiten_unbiased": Key(True, "unbiased (N/(N−1)) variance in whitening", None, "bool"),
    "advantage.whiten_eps": Key(1e-8, "whitening epsilon", None, "float"),
    "advantage.whiten_eps_mode": Key("add", "`add`: rsqrt(var + eps); `max`: rsqrt(max(var, eps))", ("add", "max"), "str"),
    "advantage.whiten_divisor": Key("n_eps", "what the masked mean and variance divide their sums by: `n_eps` "
                                    "Σm + 1e-8 (verl, ROLL, NeMo gae), `n` Σm (OpenRLHF, NeMo "
                                    "reinforce_plus_plus: a scope with no valid token gives NaN), `max1` "
                                    "max(Σm, 1) (NeMo raw_reward)", ("n_eps", "n", "max1"), "str"),
    "advantage.whiten_scale": Key(True, "divide by the std (false: centre only)", None, "bool"),
    "advantage.whiten_small": Key("error", "a scope with <= 1 valid token: `error` (verl masked_var raises), "
                                  "`skip` (ROLL: no whitening in that scope) or `compute` (OpenRLHF, NeMo: no "
                                  "check; an unbiased variance of one token is NaN, none at all NaN or 0 "
                                  "by whiten_divisor)", ("error", "skip", "compute"), "str"),
    "advantage.remask": Key(False, "zero the final advantages at mask=0 positions: `true` multiplies by the mask "
                            "(A·M: a NaN or inf there stays NaN; verl, ROLL), `fill` sets them to 0 whatever they "
                            "hold (masked_fill; NeMo gae)", (False, True, "fill"), "any"),
    "advantage.clip": Key(None, "clamp of the final advantages: c for [-c, c], or [lo, hi]", None, "clip"),
    "advantage.returns": Key("estimator", "the `returns` column: the estimator's returns (`estimator`) or the "
                             "final advantages (`advantages`: verl gdpo and reinforce_plus_plus_baseline return "
                             "the whitened advantages)", ("estimator", "advantages"), "str"),
    "padded": Key("auto", "token lists are right-padded to a fixed width with mask 0: a row's length L_i "
                  "(where `reward.placement=last` puts the reward) is then its last mask=1 position + 1. "
                  "`auto`: true when the mask column is a fixed-size list", ("auto", True, False), "any"),
    # ---------------------------------------------------------------------------------- numeric
    "precision": Key("float32", "`float32` reproduces the frameworks (float32 artefacts included); "
                     "`float64` computes the intended math", ("float32", "float64"), "str"),
}

ROLES = ("prompt_id", "reward", "token_level_scores", "response_mask", "old_log_probs", "ref_log_probs",
         "values", "reward_baseline", "sum_pi_squared", "teacher_log_probs", "rollout_is_weights",
         "rollout_log_probs", "step", "domain")


def default_config() -> dict:
    cfg: dict = {}
    for path, key in SCHEMA.items():
        set_path(cfg, path, copy.deepcopy(key.default))
    cfg["columns"] = {}
    cfg["estimator"] = {"name": "grpo"}
    return cfg


def set_path(cfg: dict, path: str, value: Any) -> None:
    parts = path.split(".")
    node = cfg
    for p in parts[:-1]:
        node = node.setdefault(p, {})
    node[parts[-1]] = value


def get_path(cfg: dict, path: str, default: Any = None) -> Any:
    node: Any = cfg
    for p in path.split("."):
        if not isinstance(node, dict) or p not in node:
            return default
        node = node[p]
    return node


def flatten(cfg: dict, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in cfg.items():
        path = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            out.update(flatten(v, path + "."))
        else:
            out[path] = v
    return out


def parse_value(text: str) -> Any:
    """A --set VALUE, parsed as YAML (``true``, ``0.95``, ``null``, ``[acc,fmt]``)."""
    import yaml

    try:
        return yaml.safe_load(text) if text.strip() != "" else ""
    except yaml.YAMLError as e:
        raise AdvcliError(f"cannot parse value {text!r} as YAML: {str(e).splitlines()[0]}") from None


def parse_set(items: list[str] | None) -> list[tuple[str, Any]]:
    """``["a.b=1", ...]`` -> ``[("a.b", 1), ...]`` in order."""
    out = []
    for item in items or []:
        if "=" not in item:
            raise AdvcliError(f"--set {item!r}: expected KEY=VALUE, e.g. --set algorithm.gamma=0.99")
        k, v = item.split("=", 1)
        k = k.strip()
        if not k:
            raise AdvcliError(f"--set {item!r}: the key is empty")
        out.append((k, parse_value(v)))
    return out


def parse_column_maps(items: list[str] | None) -> dict[str, str]:
    """``--column reward=score`` -> {"reward": "score"}."""
    out = {}
    for item in items or []:
        if "=" not in item:
            raise AdvcliError(f"--column {item!r}: expected ROLE=NAME, e.g. --column reward=score")
        role, name = (s.strip() for s in item.split("=", 1))
        if role not in ROLES and not role.startswith("reward/"):
            raise AdvcliError(f"--column {item!r}: unknown role {role!r}.{did_you_mean(role, ROLES)} "
                              f"Roles: {', '.join(ROLES)}")
        out[role] = name
    return out


def load_config_file(path: str) -> dict:
    """A YAML or TOML file of the same keys as --set (nested or dotted), as a flat {key: value}."""
    p = Path(path)
    if not p.is_file():
        raise AdvcliError(f"config file {path}: no such file")
    text = p.read_text()
    try:
        if p.suffix.lower() == ".toml":
            import tomllib

            data = tomllib.loads(text)
        else:
            import yaml

            data = yaml.safe_load(text) or {}
    except Exception as e:  # noqa: BLE001 - any parse error is the user's file
        raise AdvcliError(f"config file {path}: cannot parse: {str(e).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise AdvcliError(f"config file {path}: expected a mapping of keys to values")
    return flatten_keys(data)


def flatten_keys(data: dict, prefix: str = "") -> dict[str, Any]:
    """Nested dicts to dotted keys; leaves (including lists) kept as values."""
    out: dict[str, Any] = {}
    for k, v in data.items():
        path = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten_keys(v, path + "."))
        else:
            out[path] = v
    return out


def coerce(path: str, value: Any, key: Key) -> Any:
    """Check and normalise one canonical value; raise AdvcliError naming the key."""
    if value is None:
        return None
    kind = key.kind
    try:
        if kind == "bool":
            if isinstance(value, bool):
                return value
            raise ValueError
        if kind == "float":
            if isinstance(value, bool):
                raise ValueError
            return float(value)
        if kind == "int":
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError
            return int(value)
        if kind == "str":
            value = str(value)
        if kind == "list":
            if isinstance(value, str):
                value = [value]
            if not isinstance(value, (list, tuple)):
                raise ValueError
            return list(value)
        if kind == "clip":
            return normalize_clip(value)
    except (TypeError, ValueError):
        raise AdvcliError(f"key {path}: {value!r} is not a valid {kind} ({key.doc})") from None
    if key.choices is not None and value not in key.choices:
        raise AdvcliError(f"key {path}: unknown value {value!r}.{did_you_mean(value, key.choices)} "
                          f"Valid: {', '.join(map(str, key.choices))}")
    return value


def normalize_clip(value: Any) -> list[float] | None:
    """``c`` -> [-c, c]; ``[lo, hi]`` kept; 0/false/null -> None."""
    if value is None or value is False:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        c = float(value)
        return [-abs(c), abs(c)]
    if isinstance(value, (list, tuple)) and len(value) == 2:
        lo = None if value[0] is None else float(value[0])
        hi = None if value[1] is None else float(value[1])
        return [lo, hi]
    raise ValueError
