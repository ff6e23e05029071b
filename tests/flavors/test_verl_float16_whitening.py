"""verl with float16 scores: reinforce_plus_plus and its baseline variant whiten in the scores' dtype, and a
masked sum past float16's 65504 leaves verl training on nothing (inf variance: every advantage 0)."""
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import run_main


@pytest.mark.parametrize("est", ["reinforce_plus_plus", "reinforce_plus_plus_baseline"])
def test_float16_scores_whose_whitening_sums_overflow_are_refused(tmp_path, capsys, est):
    """verl keeps these estimators' returns in the scores' dtype and masked_whiten sums them there
    (torch_functional.py masked_mean / masked_var @1dda039b): with float16 scores ±100 and ±50 over 4 rows of 10
    tokens, Σ(x − mean)²·m = 10·(2·100² + 2·50²) = 250000 > 65504, the variance is inf and every advantage 0.
    Refused; the same scores in bf16 (whose range holds the sums) run, and so do float16 scores of ±1."""
    def write(path, scale):
        pq.write_table(pa.table({"prompt_id": ["a", "a", "b", "b"],
                                 "reward": pa.array([s * scale for s in (1.0, -1.0, 0.5, -0.5)], pa.float32()),
                                 "response_mask": pa.array([[1] * 10] * 4, pa.list_(pa.int8()))}), path)

    base = ["--flavor", "verl", "--set", f"algorithm.adv_estimator={est}", "-q"]
    write(tmp_path / "big.parquet", 100.0)
    code, _, err = run_main(["run", tmp_path / "big.parquet", "-o", tmp_path / "o1.parquet", *base,
                             "--set", "advcli.reward_dtype=float16"], capsys)
    assert code == 2 and "250000" in err and "65504" in err and "every advantage 0" in err
    code, _, err = run_main(["run", tmp_path / "big.parquet", "-o", tmp_path / "o2.parquet", *base,
                             "--set", "advcli.reward_dtype=bfloat16"], capsys)
    assert code == 0, err
    write(tmp_path / "small.parquet", 1.0)
    code, _, err = run_main(["run", tmp_path / "small.parquet", "-o", tmp_path / "o3.parquet", *base,
                             "--set", "advcli.reward_dtype=float16"], capsys)
    assert code == 0, err
