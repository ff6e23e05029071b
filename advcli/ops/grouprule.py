"""The grouping rule in numpy, the one every part asks: which rows form a group, and how big the groups are.

A group is the rows of one prompt inside one scope: the (step, prompt_id) pairs (``grouping.by=id``), the maximal
runs of consecutive equal prompt_id inside a scope (``runs``, AReaL), or blocks of n consecutive rows inside a
scope (``position``, :func:`advcli.ops.blocks.block_sizes` deciding a step that is not whole blocks). The run
(:func:`advcli.pipeline.grouping.scope_and_group_codes`), audit, ``advcli inspect``, ``advcli filter`` and the
resolution's group-size hints take their codes and sizes from here; no configuration is read (the callers pass
the codes of the key columns they read). Torch-free.
"""
from __future__ import annotations

import numpy as np


def scope_codes(steps: np.ndarray) -> tuple[np.ndarray, list]:
    """(code of each row's step, the step values in ascending order): each step is one scope."""
    uniq, codes = np.unique(np.asarray(steps), return_inverse=True)
    return codes.ravel().astype(np.int64), uniq.tolist()


def id_groups(scope: np.ndarray | None, pid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(group code of each row, first row of each group) of the (scope, prompt_id) pairs: ``pid`` holds each
    row's prompt_id code (0..P-1; a null's −1 is a prompt of its own), ``scope`` each row's scope code (None:
    one scope). Codes in (scope, pid) order."""
    pid = np.asarray(pid, dtype=np.int64)
    n = pid.size
    if n == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    pid = pid - min(int(pid.min()), 0)  # the order kept, every code >= 0
    sc = np.zeros(n, np.int64) if scope is None else np.asarray(scope, dtype=np.int64)
    combined = sc * (int(pid.max()) + 1) + pid
    _, first, codes = np.unique(combined, return_index=True, return_inverse=True)
    return codes.ravel().astype(np.int64), first.astype(np.int64)


def run_groups(scope: np.ndarray, pid: np.ndarray) -> np.ndarray:
    """Group code of each row where each maximal run of consecutive rows (inside a scope, in input order) with
    equal prompt_id code is one group, whatever its size (AReaL's GroupedRolloutWorkflow concatenates one
    prompt's episodes into one dict; actor.py L207-212 @cbff54d6 normalises per dict)."""
    n = len(scope)
    if n == 0:
        return np.zeros(0, np.int64)
    order = np.argsort(scope, kind="stable")
    p, sc = np.asarray(pid)[order], np.asarray(scope)[order]
    new = np.ones(n, dtype=bool)
    new[1:] = (p[1:] != p[:-1]) | (sc[1:] != sc[:-1])
    codes = np.empty(n, dtype=np.int64)
    codes[order] = np.cumsum(new) - 1
    return codes


def rank_in_scope(scope: np.ndarray) -> np.ndarray:
    """Each row's position inside its scope (0-based), rows in input order: what a positional grouping cuts
    into blocks of n."""
    scope = np.asarray(scope, dtype=np.int64)
    if scope.size == 0:
        return np.zeros(0, np.int64)
    order = np.argsort(scope, kind="stable")
    sizes = np.bincount(scope)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    rank = np.empty(scope.size, dtype=np.int64)
    rank[order] = np.arange(scope.size) - np.repeat(starts, sizes)
    return rank


def by_first_appearance(codes: np.ndarray, first: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The same groups renumbered in the order of their first row: (codes, first row of each group, ascending)."""
    rank = np.empty(first.size, np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(first.size)
    return rank[codes], np.sort(first)


def size_counts(codes: np.ndarray) -> dict[int, int]:
    """{group size: number of groups of that size}, sizes ascending."""
    sizes = np.bincount(np.asarray(codes, dtype=np.int64)) if len(codes) else np.zeros(0, np.int64)
    sz, cnt = np.unique(sizes[sizes > 0], return_counts=True)
    return {int(s): int(c) for s, c in zip(sz, cnt)}


def contiguous_block_size(pid: np.ndarray, scope: np.ndarray | None = None) -> int | None:
    """n when the rows form contiguous blocks of n equal prompt_id codes, each id in one block only (per scope:
    a block never spans two steps); else None. What a positional flavor's blocks of n rows would group."""
    pid = np.asarray(pid)
    if pid.size == 0:
        return None
    change = np.diff(pid) != 0
    if scope is not None:
        change |= np.diff(np.asarray(scope)) != 0
    starts = np.concatenate([[0], np.flatnonzero(change) + 1])
    sizes = np.diff(np.concatenate([starts, [pid.size]]))
    key = pid if scope is None else id_groups(scope_codes(scope)[0], _codes(pid))[0]
    if len(np.unique(key)) != len(starts) or len(set(sizes.tolist())) != 1:
        return None
    return int(sizes[0])


def _codes(values: np.ndarray) -> np.ndarray:
    return np.unique(values, return_inverse=True)[1].ravel().astype(np.int64)
