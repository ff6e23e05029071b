"""``--flavor advcli``: the canonical configuration itself (documented in docs/configuration.md)."""
from __future__ import annotations

from ..config import SCHEMA, Key, default_config, set_path
from . import Flavor


def _translate(values: dict) -> dict:
    cfg = default_config()
    for k, v in sorted(values.items(), key=lambda kv: kv[0] in ALIASES):  # aliases last
        if k.startswith("estimator."):
            cfg["estimator"][k.split(".", 1)[1]] = v
        elif k.startswith("columns."):
            cfg["columns"][k.split(".", 1)[1]] = v
        elif k in ALIASES:  # the canonical key wins where both are set
            canonical = ALIASES[k]
            if values.get(canonical, SCHEMA[canonical].default) == SCHEMA[canonical].default:
                set_path(cfg, canonical, v)
        else:
            set_path(cfg, k, v)
    return cfg


# older names still accepted in configurations: alias -> canonical key
ALIASES = {"kl.log_probs": "kl.policy"}
KEYS = dict(SCHEMA)
KEYS["kl.log_probs"] = Key("old_log_probs", "older name of kl.policy (kl.policy wins where both are set)",
                           SCHEMA["kl.policy"].choices, "str")

FLAVOR = Flavor(
    name="advcli", framework="advcli's own canonical pipeline", keys=KEYS, translate=_translate,
    estimator_key="estimator.name",
    audit_tries=lambda n: [{"estimator.name": "grpo", "estimator.eps": 1e-4},
                           {"estimator.name": "grpo", "estimator.eps": 1e-8}],
    open_prefixes=("estimator.", "columns."),
    notes="Every stage is set directly: reward.* (source, normalisation, clip, placement), kl.*, "
          "estimator.name and its parameters, advantage.* (whitening, clip).")
