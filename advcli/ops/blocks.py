"""Reward shaping over positional groups: the ``[G, n]`` reshape of each batch, as ROLL and OpenRLHF do it.

ROLL ``reward_norm`` (roll/utils/functionals.py L564-600 @8eb27cc2) and OpenRLHF
``compute_advantages_and_returns`` (openrlhf/trainer/ppo_utils/experience_maker.py L246-270
@3c3be623) never see a group id: each batch (ROLL: one domain of a step; OpenRLHF: one step) is
reshaped to ``R = r.reshape(-1, n)`` and the group statistics are torch reductions along the last
dim of that matrix. The bits of those reductions depend on the matrix shape (``torch.std`` of a
``[1, n]`` matrix takes the 1-D path, float64 squares: ``0.9×3`` gives 7.3e-8; a ``[G≥2, n]`` matrix
takes the Welford kernel: exactly 0), so the same calls are made here on the same shapes, one
batch at a time (a loop over the scopes — steps or step×domain — never over groups or rows)::

    mean  batch: mean(r)         group: mean(R, -1)        loo: (Σ_g R − R)/(n − 1)      none: 0
    std   batch: std(r) (unb.)   group: std(R, -1) (unb.)                                none: —
    r̃ = (base − mean)/(std + eps)   or   base − mean     (base = R for group/loo means, else r)

``loo`` is OpenRLHF ``rloo``'s leave-one-out baseline. A group of one gives NaN with a group std
(torch.std of one element) and 0 with a group mean, as both frameworks do.
"""
from __future__ import annotations

import warnings

import numpy as np

from ..lazy_torch import torch
from .groups import GroupIndex


def block_sizes(scope_rows: list[int], n: int, expected: int | None, fallback: str) -> list[int]:
    """The block size of every scope for positional groups of ``n``: ``n``, or the scope's whole row
    count where it is not ``expected`` (None: not a multiple of ``n``) and ``fallback="scope"``.

    slime ``RolloutManager._post_process_rewards`` (slime/ray/rollout.py L619-623 @624b824a):
    ``r.reshape(-1, n)`` when ``len(r) == n·rollout_batch_size``, else ``r.view(-1, len(r))`` — one
    group of the whole batch, silently. With ``fallback="error"`` a mismatch returns -1 for the caller
    to refuse; with ``fallback="tail"`` the scope keeps blocks of ``n``, its last block the rest (AReaL
    1.0.4's slices, areal/utils/data.py ``Normalization.__call__``)."""
    out = []
    for size in scope_rows:
        ok = size % n == 0 if expected is None else size == expected
        out.append(n if ok or fallback == "tail" else (size if fallback == "scope" else -1))
    return out


def block_normalize(r: torch.Tensor, scopes: GroupIndex, n: int | list[int], mean_kind: str, std_kind: str,
                    eps: float, centre_first: bool = False) -> torch.Tensor:
    """``r̃`` [R] for rows grouped in consecutive blocks of ``n`` inside each scope (input order).

    ``n`` may be a list: the block size of each scope (:func:`block_sizes`). ``centre_first``: the
    std is taken of ``base − mean`` (slime: ``r = r − mean; r / (r.std(-1) + 1e-6)``), not of ``r``."""
    if mean_kind == "none" and std_kind == "none":
        return r
    out = torch.empty_like(r)
    grouped = mean_kind in ("group", "loo") or std_kind == "group"
    order = torch.argsort(scopes.codes, stable=True)  # each scope's rows, in input order
    sizes = n if isinstance(n, (list, tuple)) else [n] * scopes.num_groups
    for rows, n in zip(torch.split(order, scopes.sizes.tolist()), sizes):
        if rows.numel() == 0:
            continue
        x = r[rows]
        R = x.reshape(-1, n) if grouped else None
        if mean_kind == "batch":
            mean = x.mean()
        elif mean_kind == "group":
            mean = R.mean(dim=-1, keepdim=True)
        elif mean_kind == "loo":
            mean = (R.sum(dim=-1, keepdim=True) - R) / (n - 1) if n > 1 else torch.full_like(R, float("nan"))
        else:
            mean = 0.0
        base = R if mean_kind in ("group", "loo") else x
        centred = base - mean
        if std_kind == "batch":
            y = centred / ((centred.std() if centre_first else x.std()) + eps)
        elif std_kind == "group":
            with warnings.catch_warnings():  # n = 1: NaN, as the frameworks get (their torch warns too)
                warnings.simplefilter("ignore", UserWarning)
                std = torch.std(centred if centre_first else R, dim=-1, keepdim=True)
            y = centred / (std + eps)
        else:
            y = centred
        out[rows] = y.reshape(-1)
    return out


def _scope_id_codes(ids: np.ndarray, scope: np.ndarray) -> np.ndarray:
    """[R] dense code of each row's (scope, prompt id)."""
    _, code = np.unique(scope * (int(ids.max()) + 1) + ids, return_inverse=True)
    return code.reshape(-1)


def first_mixed_block(block: np.ndarray, ids: np.ndarray) -> tuple[int, int] | None:
    """(i, j): the first row j whose block's first row i has another prompt id, or None (no block holds several)."""
    if len(block) == 0:
        return None
    head = np.full(int(block.max()) + 1, len(block), dtype=np.int64)
    np.minimum.at(head, block, np.arange(len(block)))  # each block's first row
    first = head[block]
    bad = np.nonzero(ids != ids[first])[0]
    return (int(first[bad[0]]), int(bad[0])) if bad.size else None


def every_id_split(block: np.ndarray, ids: np.ndarray, scope: np.ndarray) -> bool:
    """Whether every prompt id (within its scope) spans more than one positional block."""
    if len(block) == 0:
        return False
    pairs = np.unique(np.stack([_scope_id_codes(ids, scope), block.astype(np.int64)]), axis=1)
    _, blocks_per_id = np.unique(pairs[0], return_counts=True)
    return bool((blocks_per_id > 1).all())


def check_blocks_against_ids(block: np.ndarray, ids: np.ndarray, scope: np.ndarray):
    """First disagreement between positional blocks and a prompt-id column, or None (numpy int64 codes:
    a check, run by ``advcli validate`` without torch).

    ``block`` [R] positional group code, ``ids`` [R] prompt-id code, ``scope`` [R] scope code.
    Returns ``("mixed", i, j)`` when rows i and j share a block but not an id, or
    ``("split", i, j)`` when rows i and j share an id (in one scope) but not a block; i < j are the
    first such rows in input order.
    """
    R = len(block)
    if R == 0:
        return None
    mixed = first_mixed_block(block, ids)
    # an id spanning several blocks (inside one scope)
    kcode = _scope_id_codes(ids, scope)
    first_of_key = np.full(int(kcode.max()) + 1, R, dtype=np.int64)
    np.minimum.at(first_of_key, kcode, np.arange(R))
    khead = first_of_key[kcode]
    bad = np.nonzero(block != block[khead])[0]
    split = (int(khead[bad[0]]), int(bad[0])) if bad.size else None
    if mixed and (not split or mixed[1] <= split[1]):
        return ("mixed",) + mixed
    if split:
        return ("split",) + split
    return None
