"""The estimator registry: one module per family, each estimator registered once by name.

An estimator is either

- **row-level** (``level="row"``): a function of the per-row table of the *whole* input (row scores,
  groups, valid lengths, scopes) returning one advantage per row; the token output is that value on
  every token (× mask unless ``mask_output`` is false). GRPO, RLOO, OPO, GPG, ... live here; their
  group statistics are exact over every member of a group, wherever it sits in the file.
- **token-level** (``level="token"``): a function of one chunk of token rows (token rewards,
  values, log-probs, ...) plus row-level inputs, returning ``(advantages, returns)`` flat tensors.
  GAE, REINFORCE++, ReMax live here. Those that need statistics over the tokens of a whole group
  (the optimal token baselines) declare ``group_token_pass``.

Adding an estimator is one new module in this package calling :func:`register`; modules are
discovered automatically.
"""
from __future__ import annotations

import ast
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..config import Key
from ..errors import AdvcliError, did_you_mean
from ..plugins import load_modules


@dataclass(frozen=True)
class EstimatorSpec:
    name: str
    level: str  # "row" | "token"
    formula: str
    source: str  # the framework function it matches (file, commit)
    params: dict[str, Key] = field(default_factory=dict)
    needs: tuple[str, ...] = ()  # extra column roles (values, reward_baseline, ...)
    optional: tuple[str, ...] = ()  # column roles read when the input has them (rollout_is_weights)
    uses_groups: bool = False
    row_fn: Callable | None = None
    token_fn: Callable | None = None
    row_constant: bool = False  # token advantages are a per-row value (× mask): whitening stats from rows
    group_token_pass: Callable | None = None  # (chunk, params, ctx) -> accumulate per (group, position)
    float32_rule: str = ""  # the framework's float32 rule that can make artefacts (named by the diagnostics)
    float32_hazard: Callable | None = None  # (table, params) -> [G] bool: groups that rule puts at risk
    group_token_pass_needed: Callable | None = None  # (params) -> whether this run needs group_token_pass (None: yes)
    # (token stats ctx, params, ids) -> extra diagnostics items (advcli.diagnostics)
    diagnostics: Callable | None = None
    # a group of >= 2 rows whose rewards are all equal gets advantage 0 on every row (the estimator only
    # compares rows within a group, no batch-wide step after): True, False, or (params) -> bool
    zero_for_uniform_groups: bool | Callable[[dict], bool] = False
    # --- what the estimator is, asked by the plan, the checks, the diagnostics and `advcli inspect` instead
    # of its name. Literals only: `inspect` reads them without importing the module (estimator_requirements)
    # the estimator normalises each reward component (reward.components) itself, so the row score is not their
    # sum and no reward column is required; without components the one reward is the only component (verl gdpo)
    reward_from_components: bool = False
    min_components: int = 0  # reward component columns (reward/<name>) the estimator refuses to run without
    drops_masked_rewards: bool = False  # a reward on a mask=0 token is discarded (verl remax: G = revcumsum(r·m))
    needs_lengths: str = ""  # what the response lengths are for, when the estimator weighs rows by them (OPO)
    # (params) -> (spec, params) the run runs instead: an estimator made of others (mix), whose needs, level
    # and groups are those of the estimators its parameters name
    build: Callable | None = None

    def gives_zero_for_uniform_groups(self, params: dict) -> bool:
        """Whether a uniform group (every reward equal) gets advantage 0 with these parameters."""
        z = self.zero_for_uniform_groups
        return bool(z(params) if callable(z) else z)


REGISTRY: dict[str, EstimatorSpec] = {}
_LOADED = False


def register(spec: EstimatorSpec) -> EstimatorSpec:
    if spec.name in REGISTRY:
        raise RuntimeError(f"estimator {spec.name!r} registered twice")
    REGISTRY[spec.name] = spec
    return spec


def _load_all() -> None:
    global _LOADED
    if _LOADED:
        return
    load_modules(__name__, __path__)  # each module calls register()
    _LOADED = True


def get(name: str) -> EstimatorSpec:
    _load_all()
    if ":" in name or name not in REGISTRY and _is_user_reference(name):
        from .user import load  # a user function: module:function, file.py:function or an entry point

        return load(name)  # (again each time: a file edited since is loaded anew)
    if name not in REGISTRY:
        raise AdvcliError(f"key estimator.name: unknown estimator {name!r}.{did_you_mean(name, REGISTRY)} "
                          f"Known: {', '.join(sorted(REGISTRY))}")
    return REGISTRY[name]


def _is_user_reference(name: str) -> bool:
    from .user import is_reference

    return is_reference(name)


def all_specs() -> dict[str, EstimatorSpec]:
    _load_all()
    return dict(REGISTRY)


# the EstimatorSpec fields estimator_requirements() gives, with their defaults (all literals)
REQUIREMENT_FIELDS: dict[str, Any] = {"level": "?", "needs": (), "uses_groups": False,
                                      "reward_from_components": False, "min_components": 0,
                                      "drops_masked_rewards": False, "needs_lengths": ""}


def estimator_requirements() -> dict[str, dict]:
    """name -> {level, needs, uses_groups, reward_from_components, ...} (:data:`REQUIREMENT_FIELDS`) of every
    registered estimator, read from the estimator modules' ``register(EstimatorSpec(...))`` calls without
    importing them (they import torch).

    When torch is already imported the registry itself answers.
    """
    import sys

    def entry(get) -> dict:
        out = {k: get(k, d) for k, d in REQUIREMENT_FIELDS.items()}
        out["needs"] = list(out["needs"] or ())
        return out

    if "torch" in sys.modules:
        return {n: entry(lambda k, d, s=s: getattr(s, k)) for n, s in sorted(all_specs().items())}
    pkg = os.path.dirname(os.path.abspath(__file__))
    out: dict[str, dict] = {}
    for fname in sorted(os.listdir(pkg)):
        if not fname.endswith(".py") or fname.startswith("_"):
            continue
        try:
            with open(os.path.join(pkg, fname), encoding="utf-8") as fh:
                tree = ast.parse(fh.read())
        except (OSError, SyntaxError):
            continue
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            fn = node.func
            if getattr(fn, "id", getattr(fn, "attr", None)) != "EstimatorSpec":
                continue
            kw = {k.arg: k.value for k in node.keywords if k.arg}

            def lit(key, default, kw=kw):
                try:
                    return ast.literal_eval(kw[key]) if key in kw else default
                except ValueError:
                    return default

            name = lit("name", None)
            if isinstance(name, str):
                out[name] = entry(lit)
    return dict(sorted(out.items()))


def resolve_params(spec: EstimatorSpec, given: dict[str, Any]) -> dict[str, Any]:
    """The estimator's parameters: defaults overlaid with ``given`` (unknown keys refused)."""
    from ..config import coerce

    out = {k: key.default for k, key in spec.params.items()}
    for k, v in given.items():
        if k == "name":
            continue
        if k not in spec.params:
            valid = sorted(spec.params)
            raise AdvcliError(f"key estimator.{k}: not a parameter of estimator {spec.name!r}."
                              f"{did_you_mean(k, valid)} Its parameters: {', '.join(valid) or '(none)'}")
        out[k] = coerce(f"estimator.{k}", v, spec.params[k])
    return out
