"""Fixed-width padded token lists give the same numbers as the ragged dump they pad."""
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

import advcli


def _pad(table: pa.Table, width: int) -> pa.Table:
    cols = {}
    for name in table.column_names:
        col = table.column(name).combine_chunks()
        if pa.types.is_list(col.type):
            rows = col.to_pylist()
            vt = col.type.value_type
            cols[name] = pa.array([r + [0] * (width - len(r)) for r in rows], type=pa.list_(vt, width))
        else:
            cols[name] = col
    return pa.table(cols)


def test_padded_matches_ragged(tmp_path, sample_path):
    t = pq.read_table(sample_path).slice(0, 64)
    # padding only works for rows that end in a trained token: verl's L_i is the attention length
    mask = t.column("response_mask").to_pylist()
    keep = [i for i, m in enumerate(mask) if m and m[-1] == 1]
    t = t.take(keep)
    width = max(len(m) for m in t.column("response_mask").to_pylist()) + 5
    pq.write_table(t, tmp_path / "ragged.parquet")
    pq.write_table(_pad(t, width), tmp_path / "padded.parquet")
    for est in ("grpo", "gae", "reinforce_plus_plus"):
        s = {"algorithm.adv_estimator": est, "algorithm.use_kl_in_reward": True, "algorithm.kl_penalty": "k3",
             "algorithm.gamma": 0.99, "algorithm.lam": 0.95}
        advcli.run(str(tmp_path / "ragged.parquet"), str(tmp_path / f"r_{est}.parquet"), settings=s, force=True)
        advcli.run(str(tmp_path / "padded.parquet"), str(tmp_path / f"p_{est}.parquet"), settings=s, force=True)
        r = pq.read_table(tmp_path / f"r_{est}.parquet")
        p = pq.read_table(tmp_path / f"p_{est}.parquet")
        for col in ("advantages", "returns", "token_level_rewards"):
            for a, b, m in zip(r.column(col).to_pylist(), p.column(col).to_pylist(),
                               r.column("response_mask").to_pylist()):
                assert len(b) == width
                a, b, m = np.array(a), np.array(b[:len(a)]), np.array(m, bool)
                # valid tokens agree (whitening statistics use valid tokens only)
                np.testing.assert_allclose(a[m], b[m], rtol=1e-5, atol=1e-6, err_msg=f"{est} {col}")
