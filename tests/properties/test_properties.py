"""Property and fuzz tests (hypothesis), kept small for a 2-core CI (few examples, no deadline).

- Random *valid* dumps (ragged lengths including 0 and 1, masks with holes and masked tails,
  groups scattered over the file including singletons, one to three steps, log-ratios beyond ±20)
  give outputs of the right shapes, finite for the estimators whose math is finite on any valid
  input, and bit-identical for any chunk size, for several verl estimators.
- Random *invalid* dumps (one defect planted at a random row) are refused cleanly: exit code 2,
  one message naming the column, no traceback, nothing at the output path.
"""
from __future__ import annotations

import os
import tempfile

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import run_main
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import advcli
from advcli.errors import AdvcliError

SETTINGS = settings(max_examples=8, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.function_scoped_fixture])

# the estimators whose outputs are finite for every valid dump (verl semantics): group-relative
# ones divide by σ+ε or by n-1 only for n >= 2, returns are sums of finite terms
FINITE = ["grpo", "grpo_vectorized", "rloo", "rloo_vectorized", "reinforce_plus_plus", "remax", "gae"]
WHITENED = {"gae", "reinforce_plus_plus", "reinforce_plus_plus_baseline"}  # need >= 2 valid tokens per step


@st.composite
def dumps(draw, min_valid_per_step: int = 0):
    rows = draw(st.integers(1, 24))
    n_groups = draw(st.integers(1, max(1, rows)))
    groups = draw(st.lists(st.integers(0, n_groups - 1), min_size=rows, max_size=rows))
    steps = draw(st.integers(1, 3))
    lengths = draw(st.lists(st.sampled_from([0, 1, 1, 2, 3, 5, 8, 13]), min_size=rows, max_size=rows))
    masks = [draw(st.lists(st.sampled_from([0, 1, 1, 1]), min_size=n, max_size=n)) for n in lengths]
    reward_vals = st.one_of(st.sampled_from([0.0, 1.0, 0.9, 0.1, 0.7, 0.5]),
                            st.floats(-5, 5, allow_nan=False, width=32))
    rewards = draw(st.lists(reward_vals, min_size=rows, max_size=rows))
    seed = draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    step = [groups[i] % steps for i in range(rows)]  # a group lives in one step
    if min_valid_per_step:
        for s in set(step):  # at least two mask=1 tokens in every step
            i = step.index(s)
            masks[i] = masks[i] + [1] * min_valid_per_step
    lengths = [len(m) for m in masks]
    tok = lambda scale: [list((rng.normal(0, scale, n)).astype(np.float32)) for n in lengths]  # noqa: E731
    old = tok(2.0)
    ref = [list(np.asarray(o, np.float32) + rng.choice([0, 0, 25.0, -25.0], len(o)).astype(np.float32)) for o in old]
    table = pa.table({
        "prompt_id": pa.array([f"p{g}" for g in groups]),
        "step": pa.array(step, pa.int64()),
        "reward": pa.array(rewards, pa.float32()),
        "reward_baseline": pa.array([0.25 * (g % 3) for g in groups], pa.float32()),
        "response_mask": pa.array(masks, pa.list_(pa.int8())),
        "old_log_probs": pa.array(old, pa.list_(pa.float32())),
        "ref_log_probs": pa.array(ref, pa.list_(pa.float32())),
        "values": pa.array(tok(1.0), pa.list_(pa.float32())),
    })
    return table


def _run(table, est, chunk, extra=None):
    with tempfile.TemporaryDirectory() as d:
        src, dst = os.path.join(d, "in.parquet"), os.path.join(d, "out.parquet")
        pq.write_table(table, src)
        s = {"algorithm.adv_estimator": est, **(extra or {})}
        advcli.run(src, dst, flavor="verl", settings=s, chunk_rows=chunk, device="cpu")
        return pq.read_table(dst)


def _flat(t, col):
    return np.concatenate([np.asarray(x, np.float32) for x in t.column(col).to_pylist()] or [np.zeros(0, np.float32)])


@pytest.mark.parametrize("est", ["grpo", "rloo", "gae", "reinforce_plus_plus", "remax", "opo", "gpg",
                                 "grpo_vectorized", "rloo_vectorized", "reinforce_plus_plus_baseline"])
@SETTINGS
@given(data=st.data())
def test_valid_dumps_any_chunking(est, data):
    table = data.draw(dumps(min_valid_per_step=2 if est in WHITENED else 0))
    chunk = data.draw(st.integers(1, max(1, table.num_rows)))
    extra = {"algorithm.use_kl_in_reward": True, "algorithm.kl_penalty": data.draw(st.sampled_from(
        ["kl", "low_var_kl", "mse", "abs"]))} if data.draw(st.booleans()) else None
    whole = _run(table, est, 4096, extra)
    parts = _run(table, est, chunk, extra)
    lengths = [len(m) for m in table.column("response_mask").to_pylist()]
    assert whole.num_rows == table.num_rows
    for col in ("advantages", "returns"):
        assert [len(x) for x in whole.column(col).to_pylist()] == lengths
        a, b = _flat(whole, col), _flat(parts, col)
        assert a.tobytes() == b.tobytes(), f"{col} differs with chunk_rows={chunk}"
    assert whole.column("reward").equals(table.column("reward"))  # input columns kept as they were
    if est in FINITE:
        assert np.isfinite(_flat(whole, "advantages")).all()
        assert np.isfinite(_flat(whole, "returns")).all()


# ------------------------------------------------------------------------------ invalid dumps
def _plant(table: pa.Table, defect: str, row: int) -> tuple[pa.Table, str]:
    """One defect at ``row``; returns (table, the column the message must name)."""
    def set_col(name, values, typ=None):
        return table.set_column(table.column_names.index(name), name,
                                pa.array(values, typ or table.schema.field(name).type))

    if defect == "nan_reward":
        r = table.column("reward").to_pylist()
        r[row] = float("nan")
        return set_col("reward", r), "reward"
    if defect == "null_reward":
        r = table.column("reward").to_pylist()
        r[row] = None
        return set_col("reward", r), "reward"
    if defect == "null_mask":
        m = table.column("response_mask").to_pylist()
        m[row] = None
        return set_col("response_mask", m), "response_mask"
    if defect == "mask_3":
        m = table.column("response_mask").to_pylist()
        m[row] = list(m[row]) + [3]
        for c in ("old_log_probs", "ref_log_probs", "values"):
            v = table.column(c).to_pylist()
            v[row] = list(v[row]) + [0.0]
            table = set_col(c, v)
        return set_col("response_mask", m), "response_mask"
    if defect == "values_longer":
        v = table.column("values").to_pylist()
        v[row] = list(v[row]) + [0.5]
        return set_col("values", v), "values"
    if defect == "inf_value":
        m = table.column("response_mask").to_pylist()
        v = table.column("values").to_pylist()
        m[row] = list(m[row]) + [1]
        v[row] = list(v[row]) + [float("inf")]
        for c in ("old_log_probs", "ref_log_probs"):
            x = table.column(c).to_pylist()
            x[row] = list(x[row]) + [0.0]
            table = set_col(c, x)
        return set_col("values", v).set_column(table.column_names.index("response_mask"), "response_mask",
                                               pa.array(m, pa.list_(pa.int8()))), "values"
    if defect == "null_prompt_id":
        p = table.column("prompt_id").to_pylist()
        p[row] = None
        return set_col("prompt_id", p), "prompt_id"
    if defect == "reward_as_string":
        return set_col("reward", [str(x) for x in table.column("reward").to_pylist()], pa.string()), "reward"
    raise AssertionError(defect)


@settings(SETTINGS, max_examples=16)
@given(data=st.data())
def test_invalid_dumps_refused_cleanly(data, capsys):
    table = data.draw(dumps(min_valid_per_step=2))
    defect = data.draw(st.sampled_from(["nan_reward", "null_reward", "null_mask", "mask_3", "values_longer",
                                        "inf_value", "null_prompt_id", "reward_as_string"]))
    row = data.draw(st.integers(0, table.num_rows - 1))
    bad, column = _plant(table, defect, row)
    with tempfile.TemporaryDirectory() as d:
        src, dst = os.path.join(d, "in.parquet"), os.path.join(d, "out.parquet")
        pq.write_table(bad, src)
        code, _, err = run_main(["run", src, "-o", dst, "--flavor", "verl", "--set", "algorithm.adv_estimator=gae",
                                 "--chunk-rows", str(data.draw(st.integers(1, 30))), "-q"], capsys)
        assert code == 2, (defect, err)
        assert "Traceback" not in err and "internal error" not in err
        assert err.count("advcli: error:") == 1
        assert f"'{column}'" in err and "in.parquet" in err
        if defect != "reward_as_string":
            assert f"row {row}" in err, (defect, err)
        assert not os.path.exists(dst)
        assert os.listdir(d) == ["in.parquet"]


def test_library_raises_advcli_error():
    """From Python the same refusal is an AdvcliError (the CLI turns it into exit 2)."""
    t = pa.table({"prompt_id": ["a"], "reward": pa.array([float("nan")], pa.float32()),
                  "response_mask": pa.array([[1]], pa.list_(pa.int8()))})
    with pytest.raises(AdvcliError, match="row 0"):
        _run(t, "grpo", 10)


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lengths=st.lists(st.integers(0, 9), min_size=0, max_size=120),
       cuts=st.lists(st.integers(1, 40), min_size=1, max_size=6),
       piece=st.integers(1, 17), weight=st.integers(1, 120))
def test_the_writer_writes_every_row_once_in_order(monkeypatch, lengths, cuts, piece, weight):
    """Whatever the incoming batch sizes, list lengths, piece size and row-group weight, the committed
    file holds every row handed to the writer, once, in order (the dropped-last-row-group bug)."""
    from advcli.io import writer as writer_mod

    monkeypatch.setattr(writer_mod, "PIECE_ROWS", piece)
    monkeypatch.setattr(writer_mod, "ROW_GROUP_WEIGHT", weight)
    n = len(lengths)
    t = pa.table({"row": pa.array(np.arange(n, dtype=np.int64)),
                  "toks": pa.array([[float(i)] * k for i, k in enumerate(lengths)], type=pa.list_(pa.float32()))})
    with tempfile.TemporaryDirectory() as d:
        target = os.path.join(d, "o.parquet")
        w = writer_mod.AtomicParquetWriter(target, t.schema)
        pos, k = 0, 0
        while pos < n:
            size = cuts[k % len(cuts)]
            w.write(t.slice(pos, size).to_batches()[0] if size else t.slice(pos, 0))
            pos, k = pos + size, k + 1
        w.commit()
        got = pq.read_table(target)
        assert got.column("row").to_pylist() == list(range(n))
        assert got.column("toks").to_pylist() == t.column("toks").to_pylist()
