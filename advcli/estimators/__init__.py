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
discovered automatically. The registry loads without torch (``advcli inspect``, ``explain``, the checks
ask it): an estimator module, and the math modules it imports, take torch from :mod:`advcli.lazy_torch`,
which imports it when a function first uses it.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import field
from typing import TYPE_CHECKING, Any

from ..config import Key
from ..errors import AdvcliError, MissingColumn, did_you_mean
from ..plugins import load_modules
from ..records import record

if TYPE_CHECKING:
    from ..config.runspec import RunSpec


@record(frozen=True)
class EstimatorSpec:
    """One registered estimator: its formula, source, parameters and the column roles it reads."""

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
    # (token stats ctx, params, ids) -> extra diagnostics items (advcli.pipeline.diagnostics)
    diagnostics: Callable | None = None
    # a group of >= 2 rows whose rewards are all equal gets advantage 0 on every row (the estimator only
    # compares rows within a group, no batch-wide step after): True, False, or (params) -> bool
    zero_for_uniform_groups: bool | Callable[[dict], bool] = False
    # --- what the estimator is, asked by the plan, the checks, the diagnostics and `advcli inspect` instead
    # of its name
    # the estimator normalises each reward component (reward.components) itself, so the row score is not their
    # sum and no reward column is required; without components the one reward is the only component (verl gdpo)
    reward_from_components: bool = False
    min_components: int = 0  # reward component columns (reward/<name>) the estimator refuses to run without
    drops_masked_rewards: bool = False  # a reward on a mask=0 token is discarded (verl remax: G = revcumsum(r·m))
    needs_lengths: str = ""  # what the response lengths are for, when the estimator weighs rows by them (OPO)
    # (run spec) -> whether this token-level estimator gives one value per row under these settings, so it
    # runs on a dump without token data (REINFORCE++ returns with γ = 1 of a reward at the last token)
    response_level_ok: Callable[[RunSpec], bool] | None = None
    # (run spec) -> why this run's statistics weigh each response by its token count ("" where they do not):
    # a dump without token data must then give every response's token count (AReaL adv_norm)
    weighs_by_tokens: Callable[[RunSpec], str] | None = None
    # on a dump whose agent-loop sessions have several outputs (verl's multi-output agent loop), the trainer
    # computes this estimator from each session's last output and gives it to all of the session's outputs
    # (grouping.trajectories=last_step); otherwise every output is a row of its prompt's group
    last_step_of_sessions: bool = False
    # the trainer computes it in the rewards' own dtype (verl core_algos on bf16 scores): with reward.dtype
    # bfloat16/float16 the row function gets the scores in that dtype (pipeline.prepare.row_advantages)
    keeps_reward_dtype: bool = False
    # token roles (of ``needs``/``optional``) whose mean over each row's mask=1 tokens a row-level estimator
    # reads: ``table.columns["token_mean:ROLE"]`` where the input has the role (NaN for a row without a
    # trained token; CoDaPO's mean-token log-prob)
    row_token_means: tuple[str, ...] = ()
    # (params) -> (spec, params) the run runs instead: an estimator made of others (mix), whose needs, level
    # and groups are those of the estimators its parameters name
    build: Callable | None = None
    # --- what a run must satisfy, checked without torch before any data is read (``advcli run`` and
    # ``advcli validate`` call :meth:`check`; the estimator functions assume it holds)
    check_params: Callable[[dict], None] | None = None  # (params) -> raises AdvcliError naming the bad key
    # (params) -> (role, why) pairs of the columns these parameters need besides ``needs``
    needs_for: Callable[[dict], tuple[tuple[str, str], ...]] | None = None
    # (params, reward component columns) -> raises AdvcliError where they do not fit (one weight per component)
    check_components: Callable[[dict, list[str]], None] | None = None

    def check(self, params: dict, cmap, components: list[str]) -> None:
        """Refuses (AdvcliError) a run this estimator cannot compute: a bad parameter, a column it needs
        (``needs``, and ``needs_for`` under these parameters) that ``cmap`` does not map, fewer reward
        components than ``min_components``. Torch-free: ``advcli validate`` asks it as ``advcli run`` does."""
        if self.check_params is not None:
            self.check_params(params)
        for role in self.needs:
            try:
                cmap.require(role, f"estimator {self.name} needs it")
            except MissingColumn as e:
                e.estimator = self.name
                raise
        for role, why in (self.needs_for(params) if self.needs_for is not None else ()):
            cmap.require(role, why)
        if self.min_components and len(components) < self.min_components:
            raise AdvcliError(f"{self.name} needs at least {self.min_components} reward components (reward/<name> "
                              f"columns); found {len(components)}: {list(components)}. NeMo raises ValueError "
                              "here; use grpo instead")
        if self.check_components is not None:
            self.check_components(params, list(components))

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


def is_user(name: str) -> bool:
    """Whether ``name`` refers to a user function (module:function, file.py:function, an entry point), which
    only running it can check (its output's shape and values), rather than to a registered estimator."""
    _load_all()
    return ":" in name or name not in REGISTRY and _is_user_reference(name)


def _is_user_reference(name: str) -> bool:
    from .user import is_reference

    return is_reference(name)


def all_specs() -> dict[str, EstimatorSpec]:
    _load_all()
    return dict(REGISTRY)


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
