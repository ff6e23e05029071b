"""Synthetic rollout dumps for trials and benchmarks (``advcli sample``), built with numpy only.

Rows look like a real dump: groups of ``group_size`` responses per prompt scattered over the file
(``shuffle``), ragged lengths, binary-ish rewards with partial credit, some rows with masked
observation spans inside or at the end, log-probs whose log-ratio is usually small, critic values,
reward components and a greedy baseline per prompt.
"""
from __future__ import annotations

import uuid

import numpy as np
import pyarrow as pa

GENERATE_STAGES = 6  # the points at which make_table reports progress


def make_table(rows: int, group_size: int = 8, min_len: int = 16, max_len: int = 512, seed: int = 0,
               shuffle: bool = True, steps: int = 1, masked_span_frac: float = 0.15, progress=None) -> pa.Table:
    """The synthetic dump (module docstring). ``progress(name, done, total)``: told after each stage of the
    generation, as rows' worth of the work (``advcli sample``'s bar); the table does not depend on it."""
    stage = [0]

    def advance():
        stage[0] += 1
        if progress is not None:
            progress("generate", rows * stage[0] // GENERATE_STAGES, rows)

    rng = np.random.default_rng(seed)
    groups = -(-rows // group_size)
    rnd = uuid.UUID(int=int(rng.integers(0, 2**63)))
    prompt_ids = np.array([str(uuid.uuid5(rnd, str(g))) for g in range(groups)], dtype=object)
    gid = np.repeat(np.arange(groups), group_size)[:rows]
    order = np.arange(rows)
    step = (gid * steps // max(groups, 1)).astype(np.int64)
    if shuffle:  # scatter groups inside each step
        keys = step * rows + rng.permutation(rows)
        order = np.argsort(keys, kind="stable")
    gid, step = gid[order], step[order]
    lengths = rng.integers(min_len, max_len + 1, size=rows)
    n_tok = int(lengths.sum())
    offsets = np.zeros(rows + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    advance()
    mask = np.ones(n_tok, dtype=np.int8)
    # masked spans: an observation span inside some rows, a masked tail in a few
    row_of = np.repeat(np.arange(rows), lengths)
    pos = np.arange(n_tok) - offsets[:-1][row_of]
    has_span = rng.random(rows) < masked_span_frac
    span_start = (lengths * rng.uniform(0.3, 0.6, rows)).astype(np.int64)
    span_len = np.maximum(1, (lengths * rng.uniform(0.05, 0.2, rows)).astype(np.int64))
    in_span = has_span[row_of] & (pos >= span_start[row_of]) & (pos < (span_start + span_len)[row_of])
    mask[in_span] = 0
    tail = rng.random(rows) < masked_span_frac / 3
    tail_len = np.maximum(1, (lengths * 0.05).astype(np.int64))
    mask[tail[row_of] & (pos >= (lengths - tail_len)[row_of])] = 0
    advance()
    difficulty = rng.uniform(0, 1, groups)[gid]
    correct = (rng.random(rows) < difficulty).astype(np.float32)
    fmt = (rng.random(rows) < 0.9).astype(np.float32)
    reward = np.where(correct > 0, 1.0, np.where(fmt > 0, 0.1, 0.0)).astype(np.float32)
    advance()
    old_lp = -rng.exponential(0.6, n_tok).astype(np.float32)
    ref_lp = (old_lp + rng.normal(0, 0.15, n_tok)).astype(np.float32)
    ref_lp = np.minimum(ref_lp, 0).astype(np.float32)
    advance()
    values = (reward[row_of] * 0.5 + rng.normal(0, 0.3, n_tok)).astype(np.float32)
    baseline = difficulty.astype(np.float32)
    advance()
    lst = lambda v, t: pa.ListArray.from_arrays(pa.array(offsets), pa.array(v, type=t))  # noqa: E731
    cols = {
        "prompt_id": pa.array(prompt_ids[gid], type=pa.string()),
        "step": pa.array(step),
        "reward": pa.array(reward, type=pa.float32()),
        "acc": pa.array(correct, type=pa.float32()),
        "fmt": pa.array(fmt, type=pa.float32()),
        "reward_baseline": pa.array(np.round(baseline, 3), type=pa.float32()),
        "response_mask": lst(mask, pa.int8()),
        "old_log_probs": lst(old_lp, pa.float32()),
        "ref_log_probs": lst(ref_lp, pa.float32()),
        "values": lst(values, pa.float32()),
    }
    if steps <= 1:
        del cols["step"]
    table = pa.table(cols)
    advance()
    return table
