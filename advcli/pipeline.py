"""Plan the passes, stream the chunks, compute, write.

The canonical pipeline, for every row ``i`` and token ``t``::

    r_i    row reward (reward column, weighted components, or Σ token_level_scores)
    r̃_i    = clip(normalize(r_i))                                  reward.normalize / reward.clip
    R_it   = r̃_i at the placement token (or token_level_scores) − β_step·KL_it      kl.*
    A, G   = estimator(R, mask, values, groups, ...)                estimator.*
    A      = clip(whiten(A))                                        advantage.*

Passes (only those a configuration needs):

1. **rows**: the small columns (group id, step, rewards) and, where a row feature needs them, the
   token columns reduced per row (Σ mask, Σ KL). Builds the per-row table of the whole input.
2. in memory, on that table: the KL coefficient of every step (an adaptive controller is stepped
   in ascending step order), reward normalisation, and every row-level estimator — exact over
   whole groups and steps wherever their rows sit.
3. **token statistics** (only for whitening of token-varying advantages): per-step moments.
4. **write**: every column, chunk by chunk, with the new columns appended; row order kept.

Memory is bounded by the chunk plus the per-row table (a few tens of bytes per row).
"""
from __future__ import annotations

import hashlib
import json
import os
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import pyarrow as pa
import torch

from . import __version__
from .batch import RowTable, TokenChunk
from .columns import ColumnMap, resolve_columns
from .config import get_path
from .errors import AdvcliError
from .estimators import EstimatorSpec, get as get_estimator, resolve_params
from .io.arrow_torch import (check_mask_values, check_no_nulls, list_column_to_tensor, offsets_array,
                             tensor_to_list_array)
from .io.lists import arrow_from_numpy, dictionary_codes, primitive_numpy
from .io.memory import trim as trim_heap
from .io.ordered import OrderedWorker
from .io.reader import InputSet
from .io import writer as writer_module
from .io.splice import SplicedParquetWriter, spliceable
from .io.writer import AtomicParquetWriter, check_output_path, clean_stale_temps
from .ops import kl as kl_ops
from .ops.groups import GroupIndex
from .ops.rewards import clip as clip_values, normalize_rewards
from .ops.whiten import MomentSums, WhitenSpec, scope_mean_rstd
from .ragged import Ragged
from .stats import RunObserver

ProgressFn = Callable[[str, int, int], None]  # (pass name, rows done, rows total)


# ------------------------------------------------------------------------------------------ plan
@dataclass
class Plan:
    cfg: dict
    spec: EstimatorSpec
    params: dict
    cmap: ColumnMap
    device: torch.device
    dtype: torch.dtype
    reward_source: str
    components: list[str]
    kl_on: bool
    group_by: str
    token_roles: list[str]  # token columns the math reads
    # the new columns written, in this order (those of NEW_COLUMNS the run produces; --write-columns)
    output_columns: list[str]
    padded: bool = False  # fixed-width lists: L_i = last mask=1 position + 1
    checked_roles: set = field(default_factory=set)  # token roles a finished pass has checked (nulls, lengths, values)
    scope_domains: list | None = None  # grouping.scope=step_domain: the domain of every scope

    @property
    def whiten(self) -> bool:
        return bool(get_path(self.cfg, "advantage.whiten"))

    def whiten_spec(self) -> WhitenSpec:
        g = lambda k: get_path(self.cfg, f"advantage.{k}")  # noqa: E731
        return WhitenSpec(unbiased=g("whiten_unbiased"), eps=g("whiten_eps"), eps_mode=g("whiten_eps_mode"),
                          divisor=g("whiten_divisor"), scale=g("whiten_scale"))


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise AdvcliError("--device cuda: no CUDA device is available here", hint="use --device auto or cpu")
    if name not in ("cpu", "cuda"):
        raise AdvcliError(f"--device {name!r}: expected auto, cpu or cuda")
    return torch.device(name)


def make_plan(cfg: dict, inputs: InputSet, column_overrides: dict[str, str], device: str = "auto") -> Plan:
    overrides = dict(get_path(cfg, "columns", {}) or {})
    overrides.update(column_overrides)
    cmap = resolve_columns(inputs.schema, overrides, inputs.paths[0])
    spec = get_estimator(get_path(cfg, "estimator.name"))
    params = resolve_params(spec, {k: v for k, v in cfg["estimator"].items() if k != "name"})
    file = inputs.paths[0]

    cmap.require("response_mask", "every estimator needs the token mask; it also gives each row's length")
    source = get_path(cfg, "reward.source")
    components = _expand_components(list(get_path(cfg, "reward.components") or []), inputs.schema.names, file)
    if source == "auto":
        source = "components" if components and spec.name != "gdpo" else (
            "token_level_scores" if cmap.has("token_level_scores") else "reward")
    if source == "components" and not components:
        raise AdvcliError("key reward.source=components needs reward.components (a list of columns)")
    if source == "reward" and spec.name != "gdpo":
        cmap.require("reward", "the response-level reward")
    if source == "token_level_scores":
        cmap.require("token_level_scores", "reward.source=token_level_scores")
        if get_path(cfg, "reward.normalize.mean") != "none" or get_path(cfg, "reward.normalize.std") != "none":
            raise AdvcliError("reward.normalize works on a scalar reward; it cannot be used with token_level_scores")
    for c in components:
        if c not in inputs.schema.names:
            from .errors import did_you_mean
            raise AdvcliError(f"{file}: reward component column {c!r} not found.{did_you_mean(c, inputs.schema.names)}"
                              f" Columns present: {', '.join(inputs.schema.names)}")
        from .columns import check_type
        check_type(inputs.schema, "reward", c, file)
    kl_on = bool(get_path(cfg, "kl.in_reward"))
    if kl_on:
        cmap.require("old_log_probs", "KL in the reward needs the policy log-probs")
        cmap.require("ref_log_probs", "KL in the reward needs the reference log-probs")
        kl = cfg["kl"]
        if kl["controller"] == "adaptive":  # checked before any data is read
            if not kl["horizon"] or kl["horizon"] <= 0:
                raise AdvcliError(f"key kl.horizon must be > 0 for the adaptive controller (got {kl['horizon']})")
            if not kl["target"] or kl["target"] <= 0:
                raise AdvcliError(f"key kl.target must be > 0 for the adaptive controller (got {kl['target']}): "
                                  "β is updated by clip(kl/target − 1, ±0.2)",
                                  hint="set the target KL, or use kl.controller=fixed")
    for role in spec.needs:
        cmap.require(role, f"estimator {spec.name} needs it")
    group_by = get_path(cfg, "grouping.by")
    if group_by == "auto":
        group_by = "id" if cmap.has("prompt_id") else "none"
    if group_by == "position" and not get_path(cfg, "grouping.size"):
        raise AdvcliError("grouping.by=position needs grouping.size (the number of responses per prompt)")
    if group_by == "id":
        cmap.require("prompt_id", "grouping.by=id groups rows by it")
    needs_groups = spec.uses_groups or bool({"group", "loo"} & {get_path(cfg, "reward.normalize.mean"),
                                                                 get_path(cfg, "reward.normalize.std")})
    if needs_groups and group_by == "none":
        raise AdvcliError(f"{file}: estimator {spec.name} needs groups but the input has no "
                          f"{cmap.names.get('prompt_id', 'prompt_id')!r} column",
                          hint="map the group column with --column prompt_id=NAME, or group by position "
                               "with --set grouping.by=position --set grouping.size=N")
    token_roles = ["response_mask"] + [r for r in spec.needs if r in ("values", "sum_pi_squared",
                                                                       "teacher_log_probs", "old_log_probs",
                                                                       "ref_log_probs")]
    if source == "token_level_scores":
        token_roles.append("token_level_scores")
    if kl_on:
        token_roles += ["old_log_probs", "ref_log_probs"]
    token_roles += [r for r in spec.optional if cmap.has(r)]
    token_roles = list(dict.fromkeys(token_roles))
    dtype = torch.float64 if get_path(cfg, "precision") == "float64" else torch.float32
    return Plan(cfg=cfg, spec=spec, params=params, cmap=cmap, device=pick_device(device), dtype=dtype,
                reward_source=source, components=components, kl_on=kl_on, group_by=group_by,
                token_roles=token_roles, padded=_is_padded(cfg, inputs, cmap),
                output_columns=list(NEW_COLUMNS if kl_on else NEW_COLUMNS[:2]))


NEW_COLUMNS = ("advantages", "returns", "token_level_rewards")  # the last one only when KL enters the reward


def choose_output_columns(plan: Plan, wanted: list[str] | str | None) -> None:
    """Restrict the new columns to ``wanted`` (names or one comma-separated string; None: all the run
    produces — advantages, returns, and token_level_rewards when KL enters the reward)."""
    if wanted is None:
        return
    if isinstance(wanted, str):
        wanted = [w.strip() for w in wanted.split(",") if w.strip()]
    from .errors import did_you_mean

    for w in wanted:
        if w not in NEW_COLUMNS:
            raise AdvcliError(f"--write-columns: unknown column {w!r}; expected some of "
                              f"{', '.join(NEW_COLUMNS)}.{did_you_mean(w, NEW_COLUMNS)}")
        if w not in plan.output_columns:
            raise AdvcliError(f"--write-columns: this run produces no {w!r} (KL does not enter the reward)",
                              hint=f"the run produces {', '.join(plan.output_columns)}")
    if not wanted:
        raise AdvcliError("--write-columns: name at least one of " + ", ".join(plan.output_columns))
    plan.output_columns = [c for c in plan.output_columns if c in wanted]


def _expand_components(components: list, names: list[str], file: str) -> list[str]:
    """A component name with ``*`` stands for every matching column, sorted by name (NeMo RL's GDPO
    takes every ``reward/*`` key, sorted: nemo_rl/algorithms/utils.py L35-39 @7ea279ab)."""
    import fnmatch

    out: list[str] = []
    for c in components:
        c = str(c)
        if "*" in c:
            hits = sorted(n for n in names if fnmatch.fnmatchcase(n, c))
            if not hits:
                raise AdvcliError(f"{file}: no column matches the reward components pattern {c!r}. "
                                  f"Columns present: {', '.join(names)}")
            out += hits
        else:
            out.append(c)
    return list(dict.fromkeys(out))


def _is_padded(cfg: dict, inputs: InputSet, cmap: ColumnMap) -> bool:
    setting = get_path(cfg, "padded", "auto")
    if setting == "auto":
        return pa.types.is_fixed_size_list(inputs.schema.field(cmap["response_mask"]).type)
    return bool(setting)


# --------------------------------------------------------------------------------------- results
@dataclass
class RunResult:
    inputs: list[str]
    outputs: list[str]
    rows: int
    tokens: int
    valid_tokens: int
    seconds: float
    config: dict
    metrics: dict[str, Any] = field(default_factory=dict)
    per_step: list[dict] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    histograms: dict[str, Any] = field(default_factory=dict)  # advcli.stats (module docstring)
    diagnostics: list[dict] = field(default_factory=list)  # advcli.diagnostics (module docstring)


# --------------------------------------------------------------------------------------- helpers
def _file_fingerprint(paths: list[str]) -> str:
    """sha256 over each input's size and Parquet footer (cheap, changes with the content)."""
    h = hashlib.sha256()
    for p in paths:
        st = os.stat(p)
        h.update(os.path.basename(p).encode())
        h.update(str(st.st_size).encode())
        with open(p, "rb") as fh:
            fh.seek(max(0, st.st_size - 65536))
            h.update(fh.read())
    return h.hexdigest()


_FLOAT_ROLES = ("old_log_probs", "ref_log_probs", "values", "token_level_scores", "sum_pi_squared",
                "teacher_log_probs", "rollout_is_weights")


class _ChunkReader:
    """Reads one chunk's token columns as flat tensors with shared offsets, checking each row."""

    def __init__(self, plan: Plan, inputs: InputSet):
        self.plan = plan
        self.inputs = inputs

    def tokens(self, batch: pa.RecordBatch, file: str, row_base: int, roles: list[str]):
        plan = self.plan
        mask_name = plan.cmap["response_mask"]
        mask_arr = batch.column(mask_name)
        done = plan.checked_roles  # checked by an earlier pass over the same rows: not again
        if "response_mask" not in done:
            check_no_nulls(mask_arr, file, mask_name, row_base)
        offsets, mask = list_column_to_tensor(mask_arr)
        if "response_mask" not in done:
            check_mask_values(mask, offsets, file, mask_name, row_base)
        out = {"response_mask": mask}
        for role in roles:
            if role == "response_mask":
                continue
            name = plan.cmap[role]
            arr = batch.column(name)
            if role in done:
                out[role] = list_column_to_tensor(arr)[1].to(plan.dtype) if role in _FLOAT_ROLES else \
                    list_column_to_tensor(arr)[1]
                continue
            check_no_nulls(arr, file, name, row_base)
            offs, vals = list_column_to_tensor(arr)
            if not np.array_equal(offs, offsets):
                lm, lc = np.diff(offsets), np.diff(offs)
                bad = int(np.nonzero(lm != lc)[0][0])
                raise AdvcliError(f"{file}: row {row_base + bad}: column {name!r} has {lc[bad]} tokens but "
                                  f"{mask_name!r} has {lm[bad]}; every token column of a row must have the "
                                  "same length")
            if role in _FLOAT_ROLES:
                vals = vals.to(plan.dtype)
                # one reduction instead of a bool tensor per column: a NaN/inf makes the sum
                # non-finite; a finite sum that overflowed only sends us to the exact check
                if not bool(torch.isfinite(vals.sum())) and not bool(torch.isfinite(vals).all()):
                    pos = int(torch.nonzero(~torch.isfinite(vals))[0])
                    row = int(np.searchsorted(offsets, pos, side="right") - 1)
                    raise AdvcliError(f"{file}: column {name!r}, row {row_base + row}, position "
                                      f"{pos - offsets[row]}: value {float(vals[pos])} is not finite",
                                      hint="NaN or infinite log-probs/values would poison every statistic; "
                                           "drop or repair the row")
            out[role] = vals
        return offsets, out


def to_device(t: torch.Tensor, dev: torch.device) -> torch.Tensor:
    """A host tensor on the compute device. CUDA: through pinned (page-locked) host memory, from
    torch's caching host allocator, so the copy is asynchronous (``non_blocking``) and the next
    kernels queue behind it instead of waiting; CPU: the tensor itself."""
    if dev.type != "cuda" or t.device.type == "cuda":
        return t
    return t.pin_memory().to(dev, non_blocking=True)


def _scalar(batch: pa.RecordBatch, name: str, file: str, row_base: int, dtype, allow_nan: bool = False) -> torch.Tensor:
    """A per-row number column as a tensor; nulls, NaN and ±inf refused (``allow_nan``: nulls and NaN
    become NaN, as TRL reads a reward function's None; ±inf still refused)."""
    arr = batch.column(name)
    if allow_nan and arr.null_count:
        arr = arr.cast(pa.float64()).fill_null(float("nan"))
    check_no_nulls(arr, file, name, row_base)
    t = torch.from_numpy(np.array(primitive_numpy(arr))).to(dtype)
    bad_mask = torch.isinf(t) if allow_nan and t.is_floating_point() else ~torch.isfinite(t)
    if t.is_floating_point() and bool(bad_mask.any()):
        bad = int(torch.nonzero(bad_mask)[0])
        raise AdvcliError(f"{file}: column {name!r}, row {row_base + bad}: reward {float(t[bad])} is not finite",
                          hint="verl/NeMo would propagate NaN into the whole group's advantages; advcli refuses "
                               "it. Drop the row or give it a real reward")
    return t


def _allow_nan(plan: Plan) -> bool:
    return get_path(plan.cfg, "reward.nan", "refuse") == "allow"


def _factorize(values: list[pa.Array]) -> np.ndarray:
    """int64 codes (first-appearance order) for a key column split over several arrays.

    Arrow's hash dictionary encoding (pandas.factorize's codes; importing pandas alone costs ~0.3 s of
    start-up). Float keys keep pandas.factorize, whose NaN -> -1 rule the callers rely on."""
    if not values:  # an input of 0 rows
        return np.zeros(0, dtype=np.int64)
    arr = pa.chunked_array(values).combine_chunks() if len(values) != 1 else values[0]
    if pa.types.is_dictionary(arr.type):
        arr = arr.cast(arr.type.value_type)
    if pa.types.is_floating(arr.type):
        import pandas as pd

        codes, _ = pd.factorize(arr.to_numpy(zero_copy_only=False), sort=False)
        return codes.astype(np.int64)
    return dictionary_codes(arr)


def _kl_token(plan: Plan, tok: dict, mask: torch.Tensor) -> torch.Tensor:
    c = plan.cfg["kl"]
    kld = kl_ops.kl_per_token(tok["old_log_probs"], tok["ref_log_probs"], c["estimator"], c["input_clamp"],
                              c["output_clamp"])
    return kld * mask if c["mask"] else kld


def _placement_index(plan: Plan, layout: Ragged, mask: torch.Tensor) -> torch.Tensor:
    """Flat index of each row's reward token (-1: nowhere, e.g. an empty row)."""
    if get_path(plan.cfg, "reward.placement") == "last_valid" or plan.padded:
        idx = layout.last_true_index(mask.bool())
        # OpenRLHF: an all-zero mask row gets eos = T-1 of the *padded batch* (its reward is masked out
        # later anyway): inside the row only for fixed-width (padded) dumps; a ragged row has no T-1 of
        # the batch, so the reward lands nowhere (token_level_rewards then hold only the KL term, as
        # OpenRLHF's do for every row shorter than the batch width)
        if plan.padded:
            return torch.where(idx >= 0, idx, layout.last_index())
        return idx
    return layout.last_index()


# ----------------------------------------------------------------------------------------- pass 1
def _defer_row_kl(plan: Plan) -> bool:
    """Whether the per-row KL (Σ_t and verl's masked mean) can wait for the write pass: nothing
    before it depends on it — a fixed controller (β does not depend on the KL), an estimator that
    reads tokens, not row scores, and no group diagnostics over the row scores. Then pass 1 reads no
    log-prob column and the KL is computed once, where the token rewards need it anyway."""
    return (plan.kl_on and plan.cfg["kl"]["controller"] != "adaptive" and plan.spec.level != "row"
            and not plan.spec.uses_groups and plan.spec.token_group_stats is None)


def _row_pass(plan: Plan, inputs: InputSet, chunk_rows: int, progress: ProgressFn | None, row_kl: bool = True):
    cmap = plan.cmap
    roles = ["response_mask"]
    if plan.reward_source == "token_level_scores":
        roles.append("token_level_scores")
    row_kl = plan.kl_on and row_kl
    if row_kl:
        roles += ["old_log_probs", "ref_log_probs"]
    cols = list(roles_to_columns(plan, roles))
    scalar_roles = []
    if plan.reward_source == "reward" and cmap.has("reward"):
        scalar_roles.append("reward")
    if cmap.has("reward_baseline") and "reward_baseline" in plan.spec.needs:
        scalar_roles.append("reward_baseline")
    for r in scalar_roles:
        cols.append(cmap[r])
    cols += plan.components
    key_cols = []
    if plan.group_by == "id" or (plan.group_by == "position" and cmap.has("prompt_id")):
        key_cols.append(cmap["prompt_id"])  # position: only to check the blocks against the ids
    if cmap.has("step") and get_path(plan.cfg, "grouping.scope") != "all":
        key_cols.append(cmap["step"])
    if cmap.has("domain") and get_path(plan.cfg, "grouping.scope") == "step_domain":
        key_cols.append(cmap["domain"])
    cols = list(dict.fromkeys(cols + key_cols))

    reader = _ChunkReader(plan, inputs)
    parts: dict[str, list] = {k: [] for k in ("length", "valid", "reward", "keep", "kl_sum", "kl_mean",
                                              "score_sum", "reward_baseline")}
    comp_parts: dict[str, list] = {c: [] for c in plan.components}
    keys: dict[str, list] = {c: [] for c in key_cols}
    done, total = 0, inputs.num_rows
    for fi, row_base, batch in inputs.iter_batches(cols, chunk_rows):
        file = inputs.paths[fi]
        offsets, tok = reader.tokens(batch, file, row_base, roles)
        layout = Ragged(torch.from_numpy(offsets))
        mask01 = tok["response_mask"]  # int8/bool 0-1 (checked by the reader)
        parts["length"].append(layout.lengths)
        parts["valid"].append(layout.count_per_row(mask01))
        place = _placement_index(plan, layout, mask01)
        keep = torch.zeros(layout.num_rows, dtype=torch.bool)
        ok = place >= 0
        keep[ok] = mask01[place[ok]] > 0
        parts["keep"].append(keep)
        if plan.reward_source == "reward":
            parts["reward"].append(_scalar(batch, cmap["reward"], file, row_base, plan.dtype, _allow_nan(plan)))
        elif plan.reward_source == "token_level_scores":
            parts["score_sum"].append(layout.row_sum(tok["token_level_scores"]))
        for c in plan.components:
            comp_parts[c].append(_scalar(batch, c, file, row_base, plan.dtype, _allow_nan(plan)))
        if "reward_baseline" in scalar_roles:
            parts["reward_baseline"].append(_scalar(batch, cmap["reward_baseline"], file, row_base, plan.dtype))
        if row_kl:
            mask = mask01.to(plan.dtype)
            kl_sum, kl_mean = _row_kl(layout, _kl_token(plan, tok, mask), mask, plan.cfg["kl"]["mask"])
            parts["kl_sum"].append(kl_sum)
            parts["kl_mean"].append(kl_mean)
        for c in key_cols:
            arr = batch.column(c)
            check_no_nulls(arr, file, c, row_base)
            keys[c].append(arr)
        done += batch.num_rows
        if (done // max(batch.num_rows, 1)) % TRIM_EVERY == 0:
            trim_heap()
        if progress:
            progress("rows", done, total)
    plan.checked_roles |= set(roles)  # every row of these columns passed the checks
    if not parts["length"]:  # an input of 0 rows: empty tables, an empty output
        parts["length"] = parts["valid"] = [torch.zeros(0, dtype=torch.int64)]
        parts["keep"] = [torch.zeros(0, dtype=torch.bool)]
        if plan.reward_source == "reward":
            parts["reward"] = [torch.zeros(0, dtype=plan.dtype)]
        if plan.reward_source == "token_level_scores":
            parts["score_sum"] = [torch.zeros(0, dtype=plan.dtype)]
        if row_kl:
            parts["kl_sum"] = parts["kl_mean"] = [torch.zeros(0, dtype=plan.dtype)]
        if "reward_baseline" in scalar_roles:
            parts["reward_baseline"] = [torch.zeros(0, dtype=plan.dtype)]
    cat = lambda xs, dt=None: torch.cat(xs) if xs else torch.zeros(0, dtype=dt or plan.dtype)  # noqa: E731
    return ({k: cat(v) for k, v in parts.items() if v}, {c: cat(v) for c, v in comp_parts.items()}, keys)


def _row_kl(layout: Ragged, kld: torch.Tensor, mask: torch.Tensor,
            masked: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """(Σ_t kld, verl apply_kl_penalty's masked_mean(kld, m, axis=-1) = Σ kld·m / (Σm + 1e-8)) per row;
    ``kld`` is the KL term as it enters the rewards. ``masked``: ``kld`` is already ``kld·m`` (0/1
    mask), so ``kld·m`` is ``kld`` bit for bit and Σ kld is taken once; Σm, a count, is the same
    float from an integer prefix sum."""
    total = layout.row_sum(kld)
    if masked:
        count = layout.count_per_row(mask).to(mask.dtype)
        return total, total / (count + 1e-8)
    return total, layout.row_sum(kld * mask) / (layout.row_sum(mask) + 1e-8)


def roles_to_columns(plan: Plan, roles: list[str]):
    for r in roles:
        yield plan.cmap[r]


# ----------------------------------------------------------------------------------- resolve rows
def _scopes_and_groups(plan: Plan, keys: dict[str, list], num_rows: int, file: str):
    cmap = plan.cmap
    step_col = cmap.names.get("step") if get_path(plan.cfg, "grouping.scope") != "all" else None
    if step_col and step_col in keys:
        steps = primitive_numpy(pa.chunked_array(keys[step_col] or [arrow_from_numpy(np.zeros(0, np.int64))]).combine_chunks())
        uniq, scope_codes = np.unique(steps, return_inverse=True)  # ascending step order
        step_values = uniq.tolist()
    else:
        scope_codes = np.zeros(num_rows, dtype=np.int64)
        step_values = [None]
    dom_col = cmap.names.get("domain") if get_path(plan.cfg, "grouping.scope") == "step_domain" else None
    if dom_col and dom_col in keys:
        # ROLL RLVR: each domain of a step is its own batch, domains in order of first appearance
        # inside the step (rlvr_pipeline.py L680-723 @8eb27cc2)
        dom_codes = _factorize(keys[dom_col]) if num_rows else np.zeros(0, dtype=np.int64)
        dom_names = pa.chunked_array(keys[dom_col]).to_pylist() if num_rows else []
        nd = int(dom_codes.max()) + 1 if num_rows else 1
        pair = scope_codes.astype(np.int64) * nd + dom_codes
        uniq_pair, first = np.unique(pair, return_index=True)
        rank_in_step = np.empty(len(uniq_pair), dtype=np.int64)
        order = np.lexsort((first, uniq_pair // nd))  # by step, then first appearance
        rank_in_step[order] = np.arange(len(uniq_pair))
        scope_codes = rank_in_step[np.searchsorted(uniq_pair, pair)]
        step_values = [step_values[int(uniq_pair[k] // nd)] for k in order]
        plan.scope_domains = [dom_names[int(first[k])] for k in order]
    scopes = GroupIndex(torch.from_numpy(scope_codes.astype(np.int64)), len(step_values))
    groups = None
    if plan.group_by == "id":
        pid_codes = _factorize(keys[cmap["prompt_id"]])
        combined = scope_codes.astype(np.int64) * (int(pid_codes.max()) + 1 if num_rows else 1) + pid_codes
        _, gcodes = np.unique(combined, return_inverse=True)
        groups = GroupIndex.from_codes(torch.from_numpy(gcodes.astype(np.int64)))
    elif plan.group_by == "position":
        n = int(get_path(plan.cfg, "grouping.size"))
        # position inside each scope, in input order
        order = np.argsort(scope_codes, kind="stable")
        rank = np.empty(num_rows, dtype=np.int64)
        sizes = np.bincount(scope_codes, minlength=len(step_values))
        starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        rank[order] = np.arange(num_rows) - np.repeat(starts, sizes)
        for si, size in enumerate(sizes.tolist()):
            if size % n:
                where = _scope_where(plan, step_values, si)
                raise AdvcliError(f"{file}: {size} rows{where} do not split into groups of {n} consecutive rows",
                                  hint="positional grouping needs contiguous blocks of grouping.size rows; "
                                       "check the group size or group by prompt_id")
        block = rank // n
        offsets = np.concatenate([[0], np.cumsum(sizes // n)[:-1]])
        gcodes = offsets[scope_codes] + block
        groups = GroupIndex.from_codes(torch.from_numpy(gcodes.astype(np.int64)))
        if cmap.has("prompt_id") and cmap["prompt_id"] in keys and num_rows:
            _check_position_ids(plan, keys, file, gcodes, scope_codes, rank, n, step_values)
    return scopes, groups, step_values


def _scope_where(plan: Plan, step_values: list, s: int) -> str:
    """' in step 3, domain "math"' for scope s (empty for a whole-input scope)."""
    parts = [f"step {step_values[s]}"] if step_values[s] is not None else []
    if plan.scope_domains is not None:
        parts.append(f"domain {plan.scope_domains[s]!r}")
    return " in " + ", ".join(parts) if parts else ""


def _check_position_ids(plan: Plan, keys: dict, file: str, gcodes, scope_codes, rank, n: int, step_values):
    """ROLL, OpenRLHF and TRL group n consecutive rows; a prompt_id column must agree with those blocks."""
    from .ops.blocks import check_blocks_against_ids

    col = plan.cmap["prompt_id"]
    pid = _factorize(keys[col])
    found = check_blocks_against_ids(torch.from_numpy(gcodes.astype(np.int64)), torch.from_numpy(pid),
                                     torch.from_numpy(scope_codes.astype(np.int64)))
    if found is None:
        return
    kind, i, j = found
    ids = pa.chunked_array(keys[col])
    a, b = ids[i].as_py(), ids[j].as_py()
    where = _scope_where(plan, step_values, int(scope_codes[j]))
    def blk(r):
        rows = np.nonzero(gcodes == gcodes[r])[0]
        return f"rows {rows[0]}-{rows[-1]}" if rows[-1] - rows[0] == len(rows) - 1 else f"rows {rows.tolist()}"
    if kind == "mixed":
        msg = (f"{file}: positional group of {n} ({blk(j)}{where}) holds several {col!r} values: row {i} has "
               f"{a!r}, row {j} has {b!r}")
    else:
        msg = (f"{file}: {col!r} {a!r} spans several positional groups of {n}{where}: row {i} ({blk(i)}) and "
               f"row {j} ({blk(j)})")
    raise AdvcliError(msg, hint=f"this flavor groups by position (blocks of {n} consecutive rows), and the "
                      f"{col!r} column disagrees with those blocks, so the groups are ambiguous. Check the group "
                      "size; if rows were reordered after the run, restore the rollout order (each prompt's "
                      "responses contiguous). To group by the ids instead, keeping this flavor's semantics, add "
                      "--set advcli.group_by=id")


def _kl_coefs(plan: Plan, scopes: GroupIndex, kl_mean: torch.Tensor | None) -> tuple[list[float], list[float]]:
    """β used by each scope (value before that scope's update) and each scope's current_kl
    (0.0 where ``kl_mean`` is not known yet: :func:`_defer_row_kl`)."""
    c = plan.cfg["kl"]
    value = float(c["coef"])
    betas, kls = [], []
    for s in range(scopes.num_groups):
        rows = scopes.codes == s
        current = float(kl_mean[rows].mean()) if kl_mean is not None and bool(rows.any()) else 0.0
        betas.append(value)
        kls.append(current)
        if c["controller"] == "adaptive" and plan.kl_on:  # no KL in the reward: no controller to update
            err = float(np.clip(current / c["target"] - 1, -0.2, 0.2))
            value *= 1 + err * int(rows.sum()) / c["horizon"]
    return betas, kls


# -------------------------------------------------------------------------------- per-chunk math
@dataclass
class _Resolved:
    scopes: GroupIndex
    groups: GroupIndex | None
    step_values: list
    beta_row: torch.Tensor  # [R]
    reward_row: torch.Tensor  # [R] r̃ (post-processed, before placement)
    adv_row: torch.Tensor | None  # [R] row-level estimator output
    table: RowTable
    whiten_mean: torch.Tensor | None = None  # [S] float64
    whiten_rstd: torch.Tensor | None = None
    tlr_mean: torch.Tensor | None = None  # [S] float64: reward.whiten_tokens statistics
    tlr_rstd: torch.Tensor | None = None
    token_stats: Any = None  # TokenGroupStats of the token-statistics pass (optimal token baselines)
    token_cache: dict | None = None  # row0 -> _CachedChunk from the statistics pass (_token_moment_pass)
    raw_score: torch.Tensor | None = None  # [R] row reward before normalisation and KL (statistics)
    row_keys: dict | None = None  # key columns of the row pass (diagnostics name groups by prompt_id)
    kl_deferred: bool = False  # the per-row KL is computed by the write pass (_defer_row_kl)


def _token_chunk(plan: Plan, res: _Resolved, layout: Ragged, tok: dict, row0: int,
                 extras: dict | None = None) -> TokenChunk:
    """The estimator's view of rows row0..row0+B-1: token rewards (placed reward − β·KL), mask, token
    columns and per-row inputs, on the compute device. ``extras`` (a dict) receives ``kld``, the KL
    term as it enters the rewards, when KL is on."""
    dev, dt = plan.device, plan.dtype
    B = layout.num_rows
    rows = slice(row0, row0 + B)
    layout = layout.to(dev)
    mask = to_device(tok["response_mask"], dev).to(dt)
    tok = {k: to_device(v, dev) for k, v in tok.items() if k != "response_mask"}
    # token-level rewards
    if plan.reward_source == "token_level_scores":
        tlr = tok["token_level_scores"].to(dt).clone()
    else:
        r = res.reward_row[rows].to(dev)
        if get_path(plan.cfg, "reward.placement") == "all":  # NeMo RF++ / raw_reward: every position
            tlr = layout.broadcast(r.to(dt))
        else:
            tlr = torch.zeros(layout.num_tokens, dtype=dt, device=dev)
            place = _placement_index(plan, layout, mask)
            ok = place >= 0
            tlr[place[ok]] = r[ok]
        if get_path(plan.cfg, "reward.mask_placed"):
            tlr = tlr * mask
    if plan.kl_on:
        kld = _kl_token(plan, tok, mask)
        if extras is not None:
            extras["kld"] = kld
        beta = res.beta_row[rows].to(dev, dt)
        if beta.numel() and bool((beta == beta[0]).all()):  # one β for the chunk (one step, a fixed β):
            beta = beta[:1]  # the same product per token, without a [N] copy of β
        else:
            beta = layout.broadcast(beta)
        tlr = tlr - beta * kld
        tlr = clip_values(tlr, get_path(plan.cfg, "kl.token_clip"))
    if res.tlr_mean is not None:  # reward.whiten_tokens (ROLL whiten_rewards), then × mask
        scope_tok = layout.broadcast(res.scopes.codes[rows].to(dev))
        tlr = ((tlr.to(torch.float64) - torch.index_select(res.tlr_mean.to(dev), 0, scope_tok))
               * torch.index_select(res.tlr_rstd.to(dev), 0, scope_tok)).to(dt)
        tlr = tlr * mask
    row_inputs = {k: v[rows].to(dev) for k, v in res.table.columns.items()}
    if res.groups is not None:
        row_inputs["group"] = res.groups.codes[rows].to(dev)
    return TokenChunk(layout=layout, mask=mask, token_rewards=tlr, tokens=tok, rows=row_inputs,
                      stats=res.token_stats)


def _token_group_pass(plan: Plan, inputs: InputSet, res: _Resolved, chunk_rows: int,
                      progress: ProgressFn | None):
    """Token statistics per (group, position) over the whole input, for estimators that declare
    ``token_group_stats`` (verl's optimal token baselines): one read of the token columns into flat
    tables of Σ_g (longest row of g) slots (``batch.TokenGroupStats``)."""
    from .batch import TokenGroupStats

    g = res.groups
    width = torch.zeros(g.num_groups, dtype=torch.int64).scatter_reduce_(
        0, g.codes, res.table.length.to(torch.int64), reduce="amax")
    ctx = TokenGroupStats(groups=g, width=width, table=res.table)
    reader = _ChunkReader(plan, inputs)
    cols = list(roles_to_columns(plan, plan.token_roles))
    row0 = 0
    for fi, rb, batch in inputs.iter_batches(cols, chunk_rows):
        offsets, tok = reader.tokens(batch, inputs.paths[fi], rb, plan.token_roles)
        chunk = _token_chunk(plan, res, Ragged(torch.from_numpy(offsets)), tok, row0)
        plan.spec.token_group_stats(chunk, plan.params, ctx)
        row0 += batch.num_rows
        if progress:
            progress("token statistics", row0, inputs.num_rows)
    return ctx


def _chunk_math(plan: Plan, res: _Resolved, layout: Ragged, tok: dict, row0: int, apply_whiten: bool,
                rewards_only: bool = False, extras: dict | None = None):
    """(advantages, returns, token_level_rewards, mask) flat tensors for rows row0..row0+B-1
    (``extras``: see :func:`_token_chunk`)."""
    chunk = _token_chunk(plan, res, layout, tok, row0, extras)
    layout, mask, tlr = chunk.layout, chunk.mask, chunk.token_rewards
    if rewards_only:
        return None, None, tlr, mask
    # estimator
    if plan.spec.level == "row":
        adv = ret = _row_level_tokens(plan, res, layout, mask, row0)
    else:
        adv, ret = plan.spec.token_fn(chunk, plan.params)
    return _chunk_final(plan, res, layout, adv, ret, tlr, mask, row0, apply_whiten)


def _row_level_tokens(plan: Plan, res: _Resolved, layout: Ragged, mask: torch.Tensor, row0: int) -> torch.Tensor:
    """A row-level estimator's token values: each row's advantage over its tokens, × mask unless the
    estimator keeps masked positions (``mask_output``). Advantages and returns both start from it."""
    a = layout.broadcast(res.adv_row[row0:row0 + layout.num_rows].to(plan.device, plan.dtype))
    return a * mask if plan.params.get("mask_output", True) else a


def _chunk_final(plan: Plan, res: _Resolved, layout: Ragged, adv, ret, tlr, mask, row0: int, apply_whiten: bool):
    """The estimator's output -> the final values: whitening (``apply_whiten``), re-masking, clip,
    returns. Without ``apply_whiten`` (statistics passes) only the re-masking, whose result the
    final values can start from again (x·1 = x on the valid tokens, which are all that whitening reads)."""
    dev, dt = plan.device, plan.dtype
    rows = slice(row0, row0 + layout.num_rows)
    fresh = False  # adv is a tensor of this function's own (may be changed in place)
    if apply_whiten and plan.whiten:
        if res.scopes.num_groups == 1:  # one scope: the same element-wise ops with a scalar
            mean, rstd = res.whiten_mean[0].to(dev), res.whiten_rstd[0].to(dev)
        else:
            scope_tok = layout.broadcast(res.scopes.codes[rows].to(dev))
            mean = torch.index_select(res.whiten_mean.to(dev), 0, scope_tok)  # (faster than [scope_tok])
            rstd = torch.index_select(res.whiten_rstd.to(dev), 0, scope_tok)
        # (v − μ)·rstd in float64, in place on one fresh copy (the input may be a cached tensor)
        x = adv.to(torch.float64, copy=True)
        adv = x.sub_(mean).mul_(rstd).to(dt)  # x itself or its float32 copy
        fresh = True
    remask = get_path(plan.cfg, "advantage.remask")
    if remask == "fill":  # masked_fill: 0 at M=0 whatever adv holds there (NaN included)
        adv = adv.masked_fill_(mask == 0, 0.0) if fresh else adv.masked_fill(mask == 0, 0.0)
    elif remask:  # A·M: a NaN at M=0 stays NaN
        adv = adv.mul_(mask) if fresh else adv * mask
    if apply_whiten:  # the final values only: whitening statistics are of the unclipped advantages
        adv = clip_values(adv, get_path(plan.cfg, "advantage.clip"))
    if get_path(plan.cfg, "advantage.returns") == "advantages":
        ret = adv
    return adv, ret, tlr, mask


# ------------------------------------------------------------------------------------------- run
def output_paths(inputs: InputSet, output: str) -> list[str]:
    """One output per input: OUTPUT itself for one input file, else OUTPUT/<input name>."""
    multi = len(inputs.paths) > 1 or output.endswith(os.sep) or os.path.isdir(output)
    if not multi:
        return [output]
    if os.path.exists(output) and not os.path.isdir(output):
        raise AdvcliError(f"{output}: several inputs need an output directory, but this is a file")
    os.makedirs(output, exist_ok=True)
    names = [os.path.basename(p) for p in inputs.paths]
    if len(set(names)) != len(names):
        raise AdvcliError("several inputs share a file name; their outputs would collide in one directory")
    return [os.path.join(output, n) for n in names]


def resolve(plan: Plan, inputs: InputSet, chunk_rows: int, progress: ProgressFn | None = None,
            token_moments: Callable | None = None, defer_kl: bool = False, row_pass: Callable | None = None):
    """Passes 1-2: the per-row table of the whole input and all that is resolved from it (scopes,
    groups, per-step KL coefficients, post-processed rewards, row-level advantages, token group
    statistics, whitening moments). Returns ``(res, row, betas, kls, warnings)``.

    ``defer_kl``: where :func:`_defer_row_kl` allows, leave the per-row KL (``row["kl_sum"]``,
    ``row["kl_mean"]``, ``kls`` and the KL part of the row score) to the write pass, which must then
    call :func:`_finish_row_kl` (``res.kl_deferred`` says so).

    ``token_moments`` (default :func:`_token_moment_pass`, same signature) computes the per-scope
    moments of token rewards/advantages; the Ray engine passes one that runs on its workers.
    ``row_pass`` (default :func:`_row_pass`, same signature and result) likewise for pass 1.
    """
    cfg = plan.cfg
    token_moments = token_moments or _token_moment_pass
    # pass 1: the row table
    deferred = defer_kl and _defer_row_kl(plan)
    row, comps, keys = (row_pass or _row_pass)(plan, inputs, chunk_rows, progress, row_kl=not deferred)
    R = inputs.num_rows
    scopes, groups, step_values = _scopes_and_groups(plan, keys, R, inputs.paths[0])
    betas, kls = _kl_coefs(plan, scopes, row.get("kl_mean"))
    beta_row = scopes.per_row(torch.tensor(betas, dtype=torch.float64)) if plan.kl_on else torch.zeros(R, dtype=torch.float64)
    if plan.reward_source == "components":
        weights = get_path(cfg, "reward.weights") or [1.0] * len(plan.components)
        if len(weights) != len(plan.components):
            raise AdvcliError(f"key reward.weights: {len(weights)} weights for {len(plan.components)} components")
        if _allow_nan(plan):  # TRL: (rewards_per_func * weights).nansum(dim=1); NaN where every function is NaN
            per_func = torch.stack([comps[c] for c in plan.components], dim=1)
            raw = (per_func * torch.tensor([float(w) for w in weights], dtype=plan.dtype)).nansum(dim=1)
            raw[torch.isnan(per_func).all(dim=1)] = float("nan")
        else:
            raw = sum(torch.tensor(float(w), dtype=plan.dtype) * comps[c] for w, c in zip(weights, plan.components))
    elif plan.reward_source == "reward":
        raw = row.get("reward", torch.zeros(R, dtype=plan.dtype))
    else:
        raw = row["score_sum"]
    ncfg = plan.cfg["reward"]["normalize"]
    reward_row = raw
    if plan.reward_source != "token_level_scores":
        if plan.group_by == "position":  # the frameworks' own [G, n] reshape of each batch
            from .ops.blocks import block_normalize
            reward_row = block_normalize(raw, scopes, int(get_path(cfg, "grouping.size")), ncfg["mean"],
                                         ncfg["std"], ncfg["eps"])
        else:
            reward_row = normalize_rewards(raw, scopes, groups, ncfg["mean"], ncfg["std"], ncfg["eps"])
        reward_row = clip_values(reward_row, get_path(cfg, "reward.clip"))
    # the row score the group estimators see: Σ_t token_level_rewards
    if plan.reward_source == "token_level_scores":
        score = raw.clone()
    else:
        keep = row["keep"] if get_path(cfg, "reward.mask_placed") else (row["length"] > 0)
        score = torch.where(keep, reward_row, torch.zeros_like(reward_row))
    if plan.kl_on and not deferred:
        score = (score - (beta_row * row["kl_sum"].to(torch.float64)).to(plan.dtype))
    columns = {f"component:{c}": comps[c] for c in plan.components}
    if "reward_baseline" in row:
        columns["reward_baseline"] = row["reward_baseline"]
    if plan.spec.name == "gdpo" and not plan.components:
        columns["component:score"] = score
    table = RowTable(score=score, valid_len=row["valid"], length=row["length"], scopes=scopes, groups=groups,
                     columns=columns)
    adv_row = plan.spec.row_fn(table, plan.params) if plan.spec.level == "row" else None
    res = _Resolved(scopes, groups, step_values, beta_row, reward_row, adv_row, table)
    res.raw_score, res.row_keys, res.kl_deferred = raw, keys, deferred
    if plan.spec.token_group_stats is not None:  # pass 1b: per-(group, position) token sums
        res.token_stats = _token_group_pass(plan, inputs, res, chunk_rows, progress)
    warnings: list[str] = []

    # pass 2a: token-reward whitening statistics (reward.whiten_tokens, ROLL whiten_rewards)
    if get_path(cfg, "reward.whiten_tokens"):
        sums = token_moments(plan, inputs, res, chunk_rows, progress, rewards=True)
        res.tlr_mean, res.tlr_rstd = _whiten_stats(plan, sums, WhitenSpec(), step_values, "skip")
    # pass 2: whitening statistics
    if plan.whiten:
        if plan.spec.level == "row":
            sums = MomentSums.zeros(scopes.num_groups)
            w = row["valid"].to(torch.float64)
            sums.add(adv_row.to(torch.float64), w, scopes.codes)
        else:
            sums = token_moments(plan, inputs, res, chunk_rows, progress, rewards=False)
        res.whiten_mean, res.whiten_rstd = _whiten_stats(plan, sums, plan.whiten_spec(), step_values,
                                                         get_path(cfg, "advantage.whiten_small", "error"))
    return res, row, betas, kls, warnings


OUTPUT_MODES = ("full", "sidecar")
CHUNK_TOKENS = 1 << 19  # tokens per chunk: each float32 column of a chunk stays around 2 MiB
TRIM_EVERY = 8  # chunks between returns of freed heap memory to the OS (advcli.io.memory)
SPLICE = True  # full output by splicing the new columns into a copy of the input (tests turn it off)
SIDECAR_ROW = "row_index"  # sidecar key: the row's position in its input file (0-based)


def chunk_rows_for(plan: Plan, inputs: InputSet, chunk_rows: int | None, chunk_tokens: int | None = CHUNK_TOKENS) -> int:
    """Rows per chunk: ``chunk_rows`` (the user's bound; None: no bound), lowered so that a chunk
    holds about ``chunk_tokens`` tokens on average (from the Parquet metadata; None: no token bound).

    Chunks of 0.5-2M tokens keep every per-token temporary small enough for the allocator to reuse
    (larger ones go through mmap and fault their pages in again on every op) and the read-compute-
    write overlap fine-grained. Results never depend on the chunking."""
    R = inputs.num_rows
    bound = rows = chunk_rows or max(R, 1)
    if chunk_tokens and R:
        n = inputs.list_tokens(plan.cmap["response_mask"])
        if n > 0:
            rows = min(rows, max(1, int(chunk_tokens * R // n)))
            piece = writer_module.PIECE_ROWS
            if piece <= rows < bound:  # a whole number of the writer's pieces: none straddles two chunks
                rows = min(bound, max(piece, (rows + piece // 2) // piece * piece))  # (no concatenation copy)
    return rows


PIPELINE_THREADS = 3  # besides torch's intra-op pool: the reader, statistics and writer threads


@contextmanager
def _intra_op_threads(dev: torch.device):
    """torch's intra-op pool on the CPU sized to the cores the pipeline's own threads leave free.

    The write pass already runs the reader, the statistics and the writer beside the compute thread
    (and the statistics pass two compute workers): an intra-op pool as large as the machine
    oversubscribes it (on 2 cores: 2 pools of 2 plus 3 threads) and its workers spin. Measured on the
    17.3M-token dump, 2 cores: 5-10 % less CPU time and wall for GAE and GRPO with one intra-op
    thread. Only ever lowers the count, restores it afterwards, and leaves it alone when the user set
    OMP_NUM_THREADS."""
    old = torch.get_num_threads()
    want = max(1, min(old, (os.cpu_count() or 1) - PIPELINE_THREADS))
    if dev.type != "cpu" or "OMP_NUM_THREADS" in os.environ or want == old:
        yield
        return
    torch.set_num_threads(want)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def run_pipeline(input_specs: list[str], output: str | None, cfg: dict, *, flavor: str = "advcli",
                 native: dict | None = None, column_overrides: dict[str, str] | None = None,
                 chunk_rows: int | None = 4096, device: str = "auto", force: bool = False,
                 progress: ProgressFn | None = None, output_mode: str = "full",
                 chunk_tokens: int | None = CHUNK_TOKENS, write_columns: list[str] | str | None = None) -> RunResult:
    """Every pass of one run (module docstring). ``output_mode``: ``full`` (the input plus the new
    columns) or ``sidecar`` (the new columns plus the row keys: :func:`output_schema`);
    ``write_columns``: which new columns to write (:func:`choose_output_columns`)."""
    t0 = time.perf_counter()
    if chunk_rows is not None and chunk_rows < 1:
        raise AdvcliError(f"--chunk-rows must be at least 1 (got {chunk_rows})")
    if output_mode not in OUTPUT_MODES:
        from .errors import did_you_mean
        raise AdvcliError(f"--output-mode {output_mode!r}: expected full or sidecar.{did_you_mean(output_mode, OUTPUT_MODES)}")
    inputs = InputSet.open(input_specs)
    plan = make_plan(cfg, inputs, column_overrides or {}, device)
    choose_output_columns(plan, write_columns)
    outs: list[str] = []
    if output is not None:
        outs = output_paths(inputs, output)
        for o in outs:
            check_output_path(o, inputs.paths, force)
    chunk_rows = chunk_rows_for(plan, inputs, chunk_rows, chunk_tokens)

    with _intra_op_threads(plan.device):
        # passes 1-2: the row table and the statistics resolved from it
        res, row, betas, kls, warnings = resolve(plan, inputs, chunk_rows, progress, defer_kl=True)
        R = inputs.num_rows

        # pass 3: compute (and write)
        result = RunResult(inputs=inputs.paths, outputs=outs, rows=R, tokens=int(row["length"].sum()),
                           valid_tokens=int(row["valid"].sum()), seconds=0.0, config=cfg, warnings=warnings)
        stats = RunObserver(plan, res, row, betas, kls)
        _stream_pass(plan, inputs, res, row, chunk_rows, stats, progress, outs if output is not None else None,
                     output_mode, flavor, native)
    stats.finish(result)  # metrics, per_step, histograms, diagnostics (advcli.stats)
    if plan.scope_domains is not None:
        for entry, dom in zip(result.per_step, plan.scope_domains):
            entry["domain"] = dom
    result.seconds = time.perf_counter() - t0
    return result


MOMENT_WORKERS = 2  # chunks computed at once by the statistics pass
TOKEN_CACHE_BYTES = 256 << 20  # the statistics pass keeps its results for the write pass up to this size


@dataclass
class _CachedChunk:
    rows: int
    adv: torch.Tensor  # before whitening (re-masked where configured)
    ret: torch.Tensor  # the estimator's returns
    tlr: torch.Tensor
    row_kl: tuple | None  # (Σ kld, masked mean) per row where the row KL is deferred


def _token_moment_pass(plan: Plan, inputs: InputSet, res: _Resolved, chunk_rows: int, progress, rewards: bool):
    """Per-scope moments over the mask=1 tokens of the token rewards (``rewards``) or the advantages.

    For the advantages, when the input's advantages, returns and token rewards fit in
    :data:`TOKEN_CACHE_BYTES`, each chunk's results are kept (``res.token_cache``, by first row) so
    that the write pass only whitens them instead of computing the estimator a second time; a
    bigger input is computed twice, in bounded memory."""
    sums = MomentSums.zeros(res.scopes.num_groups)
    reader = _ChunkReader(plan, inputs)
    cols = list(roles_to_columns(plan, plan.token_roles))
    total = int(res.table.length.sum()) if res.table.length.numel() else 0
    elem = torch.empty(0, dtype=plan.dtype).element_size()
    cache: dict | None = None
    if not rewards and total * elem * 3 <= TOKEN_CACHE_BYTES:
        cache = {}

    def work(fi: int, rb: int, batch: pa.RecordBatch, row0: int):
        offsets, tok = reader.tokens(batch, inputs.paths[fi], rb, plan.token_roles)
        layout = Ragged(torch.from_numpy(offsets))
        extras = {} if cache is not None and res.kl_deferred else None
        entry = None
        if cache is not None and plan.spec.level != "row":  # (row-level whitening never comes here)
            chunk = _token_chunk(plan, res, layout, tok, row0, extras)
            ret = plan.spec.token_fn(chunk, plan.params)
            adv, _, tlr, mask = _chunk_final(plan, res, chunk.layout, ret[0], ret[1], chunk.token_rewards,
                                             chunk.mask, row0, apply_whiten=False)
            row_kl = None
            if extras is not None:
                row_kl = tuple(x.cpu() for x in _row_kl(chunk.layout, extras["kld"], mask, plan.cfg["kl"]["mask"]))
            entry = _CachedChunk(batch.num_rows, adv, ret[1], tlr, row_kl)
        else:
            adv, _, tlr, mask = _chunk_math(plan, res, layout, tok, row0, apply_whiten=False, rewards_only=rewards)
        v = tlr if rewards else adv
        # the per-token reduction runs here, in the worker; only per-row sums reach the main thread
        partials = MomentSums.row_partials(v, mask, layout.to(v.device), res.scopes.codes[row0:row0 + batch.num_rows])
        return row0, batch.num_rows, partials, entry

    # chunks are independent here (the moments are summed exactly, in row order, below): compute
    # MOMENT_WORKERS of them at once; most segment ops run single-threaded inside torch
    from collections import deque
    from concurrent.futures import ThreadPoolExecutor

    done = 0
    pending: deque = deque()

    def consume(fut) -> None:
        nonlocal done
        r0, n, partials, entry = fut.result()
        sums.add_rows(*partials)
        if entry is not None:
            cache[r0] = entry
        done += 1
        if done % TRIM_EVERY == 0:
            trim_heap()
        if progress:
            progress("statistics", r0 + n, inputs.num_rows)

    workers = max(1, min(MOMENT_WORKERS, os.cpu_count() or 1))
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="advcli-stats-pass") as ex:
        row0 = 0
        for fi, rb, batch in inputs.iter_batches(cols, chunk_rows):
            pending.append(ex.submit(work, fi, rb, batch, row0))
            row0 += batch.num_rows
            if len(pending) >= workers:
                consume(pending.popleft())
        while pending:
            consume(pending.popleft())
    if cache is not None:
        res.token_cache = cache
    return sums


def _whiten_stats(plan: Plan, sums: MomentSums, spec: WhitenSpec, step_values: list, small: str):
    """(mean, rstd) per scope; a scope with <= 1 valid token raises (``error``), is left as it is
    (``skip``: mean 0, rstd 1, ROLL compute_advantage L1099-1106 @8eb27cc2) or computed (``compute``)."""
    few = sums.count <= 1
    if small == "error" and bool(few.any()):
        s = int(torch.nonzero(few)[0])
        raise AdvcliError(f"whitening needs at least 2 valid tokens per batch; found {int(sums.count[s])}"
                          f"{_scope_where(plan, step_values, s)}",
                          hint="verl raises here too (masked_var: N/(N−1) with N ≤ 1): check the "
                               "response_mask column of that step. With --flavor advcli, "
                               "advantage.whiten_small=skip leaves such a step unwhitened (ROLL's rule)")
    mean, rstd = scope_mean_rstd(sums, spec)
    if small == "skip":
        mean = torch.where(few, torch.zeros_like(mean), mean)
        rstd = torch.where(few, torch.ones_like(rstd), rstd)
    return mean, rstd


def _metadata(plan: Plan, inputs: InputSet, flavor: str, native: dict | None) -> dict[bytes, bytes]:
    prov = {"advcli_version": __version__, "flavor": flavor, "flavor_config": native or {},
            "config": plan.cfg, "estimator_params": plan.params, "inputs": [os.path.basename(p) for p in inputs.paths],
            "input_fingerprint": _file_fingerprint(inputs.paths), "output_columns": list(plan.output_columns)}
    return {b"advcli": json.dumps(prov, sort_keys=True, default=str).encode()}


def output_schema(plan: Plan, inputs: InputSet, flavor: str, native: dict | None, mode: str = "full"):
    """(input fields kept, output schema); provenance in the metadata.

    ``full``: every input column (an input column named like a new one is replaced), then
    the new columns (``plan.output_columns``: advantages, returns [, token_level_rewards]). ``sidecar``: ``row_index`` (int64, the row's
    position in its input file), the input's group id and step columns where it has them, then the
    new columns — a file that joins back to its input on ``row_index`` (or simply side by side: it
    holds the same rows in the same order)."""
    schema = inputs.schema
    new_fields = [pa.field(name, pa.list_(pa.float32())) for name in plan.output_columns]
    meta = _metadata(plan, inputs, flavor, native)
    if mode == "sidecar":
        keys = [plan.cmap[r] for r in ("prompt_id", "step") if plan.cmap.has(r)]
        skip = {SIDECAR_ROW} | {f.name for f in new_fields}
        base_fields = [schema.field(k) for k in dict.fromkeys(keys) if k not in skip]
        meta[b"advcli_sidecar"] = json.dumps({"join_on": SIDECAR_ROW, "keys": [f.name for f in base_fields],
                                              "columns": [f.name for f in new_fields]}).encode()
        return base_fields, pa.schema([pa.field(SIDECAR_ROW, pa.int64())] + base_fields + new_fields,
                                      metadata=meta)
    clash = [f.name for f in new_fields if f.name in schema.names]
    base_fields = [f for f in schema if f.name not in clash]
    out_schema = pa.schema(base_fields + new_fields, metadata={**(schema.metadata or {}), **meta})
    return base_fields, out_schema


def output_batch(plan: Plan, batch, base_fields, out_schema, adv, ret, tlr, offsets,
                 row_base: int | None = None) -> pa.RecordBatch:
    """One output record batch: the input batch's kept columns plus the new list columns (which
    share one offsets buffer). A sidecar schema (:func:`output_schema`) starts with ``row_index``:
    ``row_base`` is then the batch's first row in its input file."""
    arrays = []
    if out_schema.names[0] == SIDECAR_ROW and (not base_fields or base_fields[0].name != SIDECAR_ROW):
        arrays.append(arrow_from_numpy(np.arange(row_base, row_base + batch.num_rows, dtype=np.int64)))
    arrays += [batch.column(f.name) for f in base_fields]
    offs = offsets_array(offsets)
    values = {"advantages": adv, "returns": ret, "token_level_rewards": tlr}
    arrays += [tensor_to_list_array(values[name], offs) for name in plan.output_columns]
    return pa.RecordBatch.from_arrays(arrays, schema=out_schema)


def _finish_row_kl(plan: Plan, res: _Resolved, row: dict, kl_sum: torch.Tensor, kl_mean: torch.Tensor,
                   stats: RunObserver | None) -> None:
    """The per-row KL that :func:`resolve` deferred to the write pass: into ``row``, the row score
    (exactly as resolve computes it) and the run statistics, before they are finished."""
    row["kl_sum"], row["kl_mean"] = kl_sum, kl_mean
    _, kls = _kl_coefs(plan, res.scopes, kl_mean)
    res.table.score = res.table.score - (res.beta_row * kl_sum.to(torch.float64)).to(plan.dtype)
    res.kl_deferred = False
    st = getattr(stats, "stats", None)
    if st is not None and getattr(st, "rows_set", False):
        st.kl_row = kl_mean.detach().to(torch.float64)
        st.kls = kls
        st.score = res.table.score.detach().to(torch.float64)


def _stream_pass(plan, inputs, res, row, chunk_rows, stats, progress, outs, mode="full", flavor="advcli",
                 native=None):
    """The last pass: every chunk's math, statistics and (with ``outs``) its output batch.

    Overlap: while this thread computes chunk k, the reader thread decodes chunk k+1, a statistics
    thread accumulates chunk k-1's run statistics (in chunk order) and the writer thread encodes
    the chunks before (pyarrow and torch release the GIL)."""
    reader = _ChunkReader(plan, inputs)
    tok_cols = list(roles_to_columns(plan, plan.token_roles))
    writing = outs is not None
    splice = False
    if writing:
        base_fields, out_schema = output_schema(plan, inputs, flavor, native, mode)
        # full output: the input's column chunks are copied, not decoded and encoded again, where
        # every input allows it (advcli.io.splice); the pass then reads only what the math reads
        splice = mode == "full" and SPLICE and all(spliceable(p, plan.output_columns) for p in inputs.paths)
        if splice:
            cols = tok_cols
            new_schema = pa.schema([out_schema.field(n) for n in plan.output_columns])
        else:
            cols = inputs.schema.names if mode == "full" else list(dict.fromkeys(
                tok_cols + [f.name for f in base_fields]))
        for o in outs:
            clean_stale_temps(o)
    else:
        cols = tok_cols

    def open_writer(i: int):
        if splice:
            return SplicedParquetWriter(outs[i], inputs.paths[i], out_schema, plan.output_columns)
        return AtomicParquetWriter(outs[i], out_schema)

    writers: list[AtomicParquetWriter | None] = [None] * len(outs or [])
    last_fi: int | None = None  # the input whose output is being written
    kl_parts: tuple[list, list] | None = ([], []) if res.kl_deferred else None
    R = inputs.num_rows
    row0 = chunks = 0
    observer = OrderedWorker(stats.add, depth=1, name="advcli-stats")
    try:
        for fi, rb, batch in inputs.iter_batches(cols, chunk_rows):
            if writing and writers[fi] is None:
                if last_fi is not None:  # that input is done: close its output (renamed at the end)
                    writers[last_fi].prepare()
                writers[fi] = open_writer(fi)
                last_fi = fi
            offsets, tok = reader.tokens(batch, inputs.paths[fi], rb, plan.token_roles)
            layout = Ragged(torch.from_numpy(offsets))
            hit = res.token_cache.pop(row0, None) if res.token_cache else None
            if hit is not None and hit.rows == batch.num_rows:  # the statistics pass computed this chunk
                mask = to_device(tok["response_mask"], plan.device).to(plan.dtype)
                adv, ret, tlr, mask = _chunk_final(plan, res, layout.to(plan.device), hit.adv, hit.ret, hit.tlr,
                                                   mask, row0, apply_whiten=True)
                row_kl = hit.row_kl
                del hit
            else:
                extras = {} if kl_parts is not None else None
                adv, ret, tlr, mask = _chunk_math(plan, res, layout, tok, row0, apply_whiten=True, extras=extras)
                row_kl = (_row_kl(layout.to(mask.device), extras["kld"], mask, plan.cfg["kl"]["mask"])
                          if kl_parts is not None else None)
            if kl_parts is not None:
                kl_parts[0].append(row_kl[0].cpu())
                kl_parts[1].append(row_kl[1].cpu())
            observer.submit(row0, layout, mask, adv, ret, tlr, tok)
            if splice:
                writers[fi].write(output_batch(plan, batch, [], new_schema, adv, ret, tlr, offsets, rb))
            elif writing:
                writers[fi].write(output_batch(plan, batch, base_fields, out_schema, adv, ret, tlr, offsets, rb))
            row0 += batch.num_rows
            chunks += 1
            if chunks % TRIM_EVERY == 0:
                trim_heap()
            if progress:
                progress("write" if writing else "compute", row0, R)
        observer.close()
        res.token_cache = None
        if kl_parts is not None:
            empty = torch.zeros(0, dtype=plan.dtype)
            _finish_row_kl(plan, res, row, torch.cat(kl_parts[0]) if kl_parts[0] else empty,
                           torch.cat(kl_parts[1]) if kl_parts[1] else empty, stats)
        if writing:
            for i, o in enumerate(outs):  # an input with no rows still gets its (empty) output
                if writers[i] is None:
                    writers[i] = AtomicParquetWriter(o, out_schema)
            for w in writers:
                w.commit()
    except BaseException:
        try:
            observer.close()
        except BaseException:  # noqa: BLE001 - the first error is the one to report
            pass
        for w in writers:
            if w is not None:
                w.abort()
        raise
