"""``--flavor advcli``: the canonical configuration itself (documented in docs/configuration.md)."""
from __future__ import annotations

from ..config import SCHEMA, default_config, set_path
from . import Flavor


def _translate(values: dict) -> dict:
    cfg = default_config()
    for k, v in values.items():
        if k.startswith("estimator."):
            cfg["estimator"][k.split(".", 1)[1]] = v
        elif k.startswith("columns."):
            cfg["columns"][k.split(".", 1)[1]] = v
        else:
            set_path(cfg, k, v)
    return cfg


KEYS = dict(SCHEMA)

FLAVOR = Flavor(
    name="advcli", framework="advcli's own canonical pipeline", keys=KEYS, translate=_translate,
    estimator_key="estimator.name",
    audit_tries=lambda n: [{"estimator.name": "grpo", "estimator.eps": 1e-4},
                           {"estimator.name": "grpo", "estimator.eps": 1e-8}],
    open_prefixes=("estimator.", "columns."),
    # what another flavor's run records beside its configuration (warnings about its rollout correction): an
    # output's recorded configuration fed back as a --config file reproduces the run
    unread=("rollout_correction.ignored", "rollout_correction.unused"),
    notes="Every stage is set directly: reward.* (source, normalisation, clip, placement), kl.*, "
          "estimator.name and its parameters, advantage.* (whitening, clip).")
