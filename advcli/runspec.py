"""The run spec: the resolved configuration of one run, typed and frozen, one small dataclass per section.

The configuration arrives as the canonical dict (flavor keys translated, defaults filled, values checked:
:mod:`advcli.config`); :func:`RunSpec.from_config` reads it once, and each pipeline stage is handed the
section it reads (``plan.run.reward``, ``plan.run.kl``, ...) instead of looking keys up by string path.
The fields mirror the keys of ``config.SCHEMA`` (``reward.normalize.mean`` is ``run.reward.normalize.mean``;
the ``advantage.whiten*`` and ``advantage.batch_normalize`` keys form the ``whitening`` section).
Nothing here imports torch.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Grouping:
    by: str = "auto"
    size: int | None = None
    fallback: str = "error"
    id_check: str = "strict"
    scope_rows: int | None = None
    scope: str = "step"
    trajectories: str = "none"
    layout: str = "blocks"


@dataclass(frozen=True)
class RewardNormalize:
    mean: str = "none"
    std: str = "none"
    eps: float = 1e-6
    centre_first: bool = False


@dataclass(frozen=True)
class Overlong:
    tokens: int | None = None
    factor: float | None = None
    max_tokens: int = 1024


@dataclass(frozen=True)
class Reward:
    source: str = "auto"
    nan: str = "refuse"
    components: list | None = None
    weights: list | None = None
    normalize: RewardNormalize = field(default_factory=RewardNormalize)
    clip: Any = None
    overlong: Overlong = field(default_factory=Overlong)
    bias: float = 0.0
    scale: float = 1.0
    shape_clip: Any = None
    norm: Any = None
    zero_truncated: bool = False
    no_eos_value: float | None = None
    no_eos_penalty: float | None = None
    placement: str = "last"
    unplaced: str = "drop"
    empty_row: str = "zero"
    mask_placed: bool = False
    whiten_tokens: bool = False
    dtype: str = "run"


@dataclass(frozen=True)
class KL:
    in_reward: bool = False
    estimator: str = "k1"
    input_clamp: float | None = None
    output_clamp: float | None = None
    policy: str = "old_log_probs"
    missing: str = "refuse"
    coef: float = 0.001
    coef_min: float | None = None
    controller: str = "fixed"
    target: float = 0.1
    horizon: float = 10000
    mask: bool = True
    score_sum: str = "exact"
    token_clip: Any = None


@dataclass(frozen=True)
class Correction:
    mode: str = "off"
    is_level: Any = None
    is_upper: float = 2.0
    is_lower: float | None = None
    is_batch_normalize: bool = False
    rs: list | None = None
    gate_level: Any = None  # OpenRLHF's is_correction_level (token, seq); None: off
    gate_mode: str = "mask"
    gate_stat: str = "ratio"
    gate_bounds: list = field(default_factory=lambda: [0.5, 5.0])
    ignored: tuple = ()  # flavor settings the correction does not model, reported as warnings
    unused: tuple = ()  # (column role, why the flavor does not read it with the correction off): a warning


@dataclass(frozen=True)
class Whitening:
    """``advantage.whiten*`` and ``advantage.batch_normalize``: the batch-wide normalisation of the advantages."""
    whiten: bool = False
    one_pass: bool = False
    unbiased: bool = True
    eps: float = 1e-8
    eps_mode: str = "add"
    divisor: str = "n_eps"
    scale: bool = True
    small: str = "error"
    mask: str = "response_mask"
    batch_normalize: bool = False

    @property
    def on(self) -> bool:
        return bool(self.whiten or self.batch_normalize)


@dataclass(frozen=True)
class Advantage:
    """What happens to the estimator's advantages before they are written (``advantage.*`` but whitening)."""
    distill_coef: float | None = None
    distill_returns: bool = False
    remask: Any = False
    clip: Any = None
    returns: str = "estimator"


@dataclass(frozen=True)
class Estimator:
    name: str = "grpo"
    given: dict = field(default_factory=dict)  # the parameters the configuration sets (the estimator resolves them)


@dataclass(frozen=True)
class RunSpec:
    grouping: Grouping
    reward: Reward
    kl: KL
    correction: Correction
    whitening: Whitening
    advantage: Advantage
    estimator: Estimator
    columns: dict  # role -> column name (the configuration's `columns` section)
    padded: Any = "auto"
    diagnostics_rule: str | None = None
    precision: str = "float32"
    # the canonical configuration it was resolved from: recorded in the output metadata, read by no stage
    source: dict = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_config(cls, cfg: dict) -> RunSpec:
        """The spec of a canonical configuration dict (``config.default_config`` overlaid and checked)."""
        def section(dc, node: dict | None, rename: dict | None = None):
            node = dict(node or {})
            kw = {}
            for f in dataclasses.fields(dc):
                key = (rename or {}).get(f.name, f.name)
                if key not in node:
                    continue
                value = node[key]
                if dataclasses.is_dataclass(f.default_factory if f.default_factory is not dataclasses.MISSING
                                            else None):
                    value = section(f.default_factory, value)
                kw[f.name] = value
            return dc(**kw)

        adv = cfg.get("advantage") or {}
        rc = dict(cfg.get("rollout_correction") or {})
        rc["ignored"] = tuple(rc.get("ignored") or ())
        rc["unused"] = tuple(tuple(u) for u in rc.get("unused") or ())
        est = dict(cfg.get("estimator") or {})
        return cls(grouping=section(Grouping, cfg.get("grouping")), reward=section(Reward, cfg.get("reward")),
                   kl=section(KL, cfg.get("kl")), correction=section(Correction, rc),
                   whitening=section(Whitening, adv, {f.name: f"whiten_{f.name}" for f in dataclasses.fields(Whitening)
                                                      if f.name not in ("whiten", "batch_normalize", "mask", "small")}
                                     | {"mask": "whiten_mask", "small": "whiten_small"}),
                   advantage=section(Advantage, adv),
                   estimator=Estimator(name=est.pop("name", "grpo"), given=est),
                   columns=dict(cfg.get("columns") or {}), padded=cfg.get("padded", "auto"),
                   diagnostics_rule=(cfg.get("diagnostics") or {}).get("rule"),
                   precision=cfg.get("precision", "float32"), source=cfg)


def recorded_config(run: RunSpec, params: dict) -> dict:
    """The resolved canonical configuration as the output metadata records it, once: every section with its
    defaults filled in, and ``estimator`` holding the name with every parameter resolved (``params``)."""
    out = {k: v for k, v in run.source.items() if k != "estimator"}
    out["estimator"] = {"name": run.estimator.name, **params}
    return out


def as_dict(section) -> dict:
    """A section as a plain dict (for the ops that take one, and the output metadata)."""
    return dataclasses.asdict(section)
