"""The Ray engine's rows: each row's global index from Ray Data's ``row_hash``, and the resolved
per-row table cut down to what the workers need and to one batch's rows.

``read_parquet(include_row_hash=True)`` gives every row a uint64 ``row_hash = splitmix64(md5(path)[:8]
+ row in file)`` (Ray Data ``_internal/datasource_v2/common/synthesized_columns.py:_compute_row_hashes``,
Ray 2.60). The splitmix64 finaliser is a bijection, so :class:`RowLocator` inverts it and recovers
(file, row in file) exactly.
"""
from __future__ import annotations

import dataclasses
import hashlib

import numpy as np
import torch

from ..errors import AdvcliError
from ..ops.groups import GroupIndex

ROW_HASH = "row_hash"
ROW_COL = "__advcli_row"  # global row index, carried from the workers to the writer (not written)

_M64 = 1 << 64
_C1, _C2 = 0xBF58476D1CE4E5B9, 0x94D049BB133111EB
_I1, _I2 = pow(_C1, -1, _M64), pow(_C2, -1, _M64)


def path_seed(path: str) -> int:
    """Ray's per-file seed: the first 8 bytes of md5(path), little-endian."""
    return int.from_bytes(hashlib.md5(path.encode("utf-8")).digest()[:8], "little")


def row_keys(hashes: np.ndarray) -> np.ndarray:
    """Invert splitmix64's finaliser (x ^= x>>30; x *= C1; x ^= x>>27; x *= C2; x ^= x>>31):
    ``row_hash`` -> ``seed(path) + row in file`` (mod 2^64). Each xor-shift by s is undone by
    x ^ x>>s ^ x>>2s ^ ..., each multiplication by the inverse of the odd constant mod 2^64."""
    x = np.array(hashes, dtype=np.uint64, copy=True)
    u = np.uint64
    with np.errstate(over="ignore"):
        x ^= (x >> u(31)) ^ (x >> u(62))
        x *= u(_I2)
        x ^= (x >> u(27)) ^ (x >> u(54))
        x *= u(_I1)
        x ^= (x >> u(30)) ^ (x >> u(60))
    return x


class RowLocator:
    """Global row index (input order over all files) of each row, from its ``row_hash``."""

    def __init__(self, paths: list[str], file_rows: list[int]):
        seeds = np.array([path_seed(p) for p in paths], dtype=np.uint64)
        order = np.argsort(seeds, kind="stable")
        base = np.concatenate([[0], np.cumsum(np.asarray(file_rows, dtype=np.int64))[:-1]]).astype(np.int64)
        self.paths = list(paths)
        self.seeds = seeds[order]
        self.file = order.astype(np.int64)
        self.rows = np.asarray(file_rows, dtype=np.uint64)[order]
        self.base = base[order]

    def locate(self, hashes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(global row, file index, row in file), int64 each."""
        keys = row_keys(hashes)
        j = np.searchsorted(self.seeds, keys, side="right") - 1
        j[j < 0] = len(self.seeds) - 1  # seed + row wrapped past 2^64
        with np.errstate(over="ignore"):
            off = keys - self.seeds[j]
        bad = off >= self.rows[j]
        if bool(bad.any()):
            raise AdvcliError("--engine ray: a row's row_hash does not decode to a row of an input file; this "
                              "Ray version hashes rows differently from the one advcli was built against "
                              "(Ray 2.60)", hint="use --engine local, or the Ray version named in docs/distributed.md")
        off = off.astype(np.int64)
        return self.base[j] + off, self.file[j], off


# Prepared fields take_rows gathers per row, those it keeps whole (per scope / per group), and
# those the workers never read (dropped from the broadcast by lean()).


_PER_ROW = {"scopes", "groups", "beta_row", "reward_row", "adv_row", "table"}
_WHOLE = {"step_values", "whiten_mean", "whiten_rstd", "tlr_mean", "tlr_rstd", "group_tables", "kl_deferred"}
_DRIVER_ONLY = {"raw_score", "row_keys",
                "token_cache", "token_cache_complete", "token_spill",  # the local engine's chunk cache
                "diagnostics", "whiten_other"}  # diagnostics the driver reports (SkyRL, slime)
# "correction" (the rollout correction): its spec whole, its factor per row; lean() drops its sums


def lean(res):
    """The resolved tables as broadcast to the workers: without what only the driver's statistics
    read (``row_keys`` holds every row's prompt id) and without cached group buckets. A field
    this module does not know is refused rather than guessed per row or per scope."""
    names = [f.name for f in dataclasses.fields(res)]
    unknown = [n for n in names if n not in _PER_ROW | _WHOLE | _DRIVER_ONLY | {"correction"}]
    if unknown:
        raise RuntimeError(f"advcli.engines.ray_engine does not know Prepared field(s) {unknown}: say in "
                           "take_rows/lean whether they are per row, per scope or driver-only")

    def gi(g):
        return None if g is None else GroupIndex(g.codes, g.num_groups)

    table = dataclasses.replace(res.table, scopes=gi(res.table.scopes), groups=gi(res.table.groups))
    corr = getattr(res, "correction", None)
    if corr is not None:  # the workers apply it (spec, per-row factor); the sums and histogram are the report's
        corr = dataclasses.replace(corr, sums=None, hist=None)
    return dataclasses.replace(res, scopes=gi(res.scopes), groups=gi(res.groups), table=table,
                               **{k: None for k in _DRIVER_ONLY if k in names},
                               **({"correction": corr} if "correction" in names else {}))


def take_rows(res, idx: torch.Tensor):
    """The resolved tables restricted to rows ``idx`` (in that order): per-row tensors gathered,
    per-scope/per-group statistics kept whole (row codes still index them)."""
    def gi(g):
        return None if g is None else GroupIndex(g.codes[idx], g.num_groups)

    t = res.table
    table = dataclasses.replace(t, score=t.score[idx], valid_len=t.valid_len[idx], length=t.length[idx],
                                scopes=gi(t.scopes), groups=gi(t.groups),
                                columns={k: v[idx] for k, v in t.columns.items()})
    corr = getattr(res, "correction", None)
    if corr is not None and corr.factor_row is not None:
        corr = dataclasses.replace(corr, factor_row=corr.factor_row[idx])
    return dataclasses.replace(res, scopes=gi(res.scopes), groups=gi(res.groups), beta_row=res.beta_row[idx],
                               reward_row=res.reward_row[idx],
                               adv_row=None if res.adv_row is None else res.adv_row[idx], table=table,
                               **({"correction": corr} if corr is not None else {}))
