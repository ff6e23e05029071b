"""`advcli run --flavor trl@X --set trainer=rloo` at TRL 0.9.2-0.21.0: the old online RLOOTrainer, whose batch is
its prompts repeated rloo_k times (so a prompt's completions sit a batch/rloo_k rows apart). The expected numbers
are worked out here in plain Python from each release's code (huggingface/trl, trl/trainer/rloo_trainer.py and
rloo_config.py at the tag named in each test)."""
from __future__ import annotations

import statistics

import pyarrow.parquet as pq
import pytest
from _released import advcli_run, write_parquet
from conftest import assert_release_refuses, run_main

import advcli

SCORES = [1.0, 0.2, 0.5, -1.0, 0.3, 0.9, 0.0, 2.0, -0.4, 0.6, 1.5, -2.5]
TRUNC = [0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0]


def rows_of(k: int, trunc: bool = False) -> list[dict]:
    """One step of 12 rows, rloo_k = k copies of 12/k prompts: row r answers prompt r mod 12/k
    (queries.repeat(rloo_k, 1)). Per-token logprobs that differ by row, a masked last token."""
    b = len(SCORES) // k
    rows = []
    for i, s in enumerate(SCORES):
        rows.append(dict(prompt_id=f"p{i % b}", reward=s, mask=[1, 1, 0],
                         old=[-1.0 - 0.1 * i, -0.5, -3.0], ref=[-1.2, -0.5 - 0.05 * i, -1.0],
                         extra={"truncated": TRUNC[i]} if trunc else {}))
    return rows


def kl_sum(i: int) -> float:
    """Σ_t (logprob − ref_logprob) over the response (the padding: INVALID_LOGPROB on both, 0)."""
    return (-1.0 - 0.1 * i + 1.2) + (-0.5 + 0.5 + 0.05 * i)


def old_rloo(k: int, scores=SCORES, kl_coef: float = 0.05, normalize_reward: bool = False, clip: float = 10.0,
             normalize_advantage: bool = False) -> list[float]:
    """rloo_trainer.py L403-440 @v0.21.0 (L314-323 @v0.9.3 without the two options): scores z-scored (torch's
    unbiased std + 1e-8) and clamped; R = score − kl_coef·Σ kl; R.reshape(k, -1): row r's group is the rows
    r mod B + j·B; A = R − (Σ_group − R)/(k − 1); A z-scored (std + 1e-8)."""
    s = list(scores)
    if normalize_reward:
        m, sd = statistics.fmean(s), statistics.stdev(s)
        s = [min(max((x - m) / (sd + 1e-8), -clip), clip) for x in s]
    r = [x - kl_coef * kl_sum(i) for i, x in enumerate(s)]
    b = len(r) // k
    adv = []
    for i, x in enumerate(r):
        total = sum(r[i % b + j * b] for j in range(k))
        adv.append(x - (total - x) / (k - 1))
    if normalize_advantage:
        m, sd = statistics.fmean(adv), statistics.stdev(adv)
        adv = [(a - m) / (sd + 1e-8) for a in adv]
    return adv


def per_row(got: list[list[float]]) -> list[float]:
    for row in got:
        assert all(v == row[0] for v in row)  # one value per sample, over all positions
    return [row[0] for row in got]


def close(got: list[float], want: list[float]) -> None:
    assert got == pytest.approx(want, rel=1e-5, abs=1e-5)


def test_first_rloo_groups_the_copies_of_the_batch_and_subtracts_the_kl(tmp_path):
    """0.9.2-0.10.1 (rloo_trainer.py L234, L314-323 @v0.9.3): rloo_k = 2 by default, kl_coef 0.05; rows r and
    r + 6 are one prompt's two completions."""
    got = per_row(advcli_run(tmp_path, rows_of(2), "trl@0.9.6", {})["advantages"])
    want = old_rloo(2)
    close(got, want)
    assert want[0] == pytest.approx(-want[6])  # two completions: ±(R_0 − R_6)
    assert want[0] == pytest.approx((1.0 - 0.05 * kl_sum(0)) - (0.0 - 0.05 * kl_sum(6)))


def test_rloo_k_four_and_the_kl_coefficient(tmp_path):
    """rloo_k = 4 over 12 rows: prompt r mod 3 (rows 0, 3, 6, 9 are one prompt)."""
    got = per_row(advcli_run(tmp_path, rows_of(4), "trl@0.10.1", {"rloo_k": 4, "kl_coef": 0.2})["advantages"])
    close(got, old_rloo(4, kl_coef=0.2))


def test_non_eos_penalty_sets_the_score(tmp_path):
    """0.9.2-0.10.1 (L301-305 @v0.9.3): non_eos_penalty: a response without EOS scores penalty_reward_value."""
    got = per_row(advcli_run(tmp_path, rows_of(2, trunc=True), "trl@0.9.3",
                             {"non_eos_penalty": "true", "penalty_reward_value": -3})["advantages"])
    close(got, old_rloo(2, [-3.0 if t else s for s, t in zip(SCORES, TRUNC)]))


def test_missing_eos_penalty_lowers_the_score(tmp_path):
    """0.11.0-0.21.0 (L352-353 @v0.11.0, L391-393 @v0.21.0): scores[~contain_eos_token] -= missing_eos_penalty."""
    for spec in ("trl@0.12.1", "trl@0.13.0"):
        got = per_row(advcli_run(tmp_path, rows_of(2, trunc=True), spec, {"missing_eos_penalty": 1.5})["advantages"])
        close(got, old_rloo(2, [s - 1.5 * t for s, t in zip(SCORES, TRUNC)]))


def test_normalize_reward_clip_and_normalize_advantage(tmp_path):
    """0.14.0-0.21.0 (L403-440 @v0.21.0): normalize_reward (batch z-score, std + 1e-8, clamp ±reward_clip_range),
    normalize_advantage (batch z-score, std + 1e-8); the penalty comes before the normalisation."""
    scores = [s - 0.5 * t for s, t in zip(SCORES, TRUNC)]
    got = per_row(advcli_run(tmp_path, rows_of(4, trunc=True), "trl@0.17.0",
                             {"trainer": "rloo", "rloo_k": 4, "kl_coef": 0.1, "normalize_reward": "true",
                              "reward_clip_range": 1.0, "normalize_advantage": "true", "missing_eos_penalty": 0.5}
                             )["advantages"])
    want = old_rloo(4, scores, kl_coef=0.1, normalize_reward=True, clip=1.0, normalize_advantage=True)
    close(got, want)
    # the clamp acts: the scores' z-scores reach past ±1
    m, sd = statistics.fmean(scores), statistics.stdev(scores)
    assert max(abs((x - m) / sd) for x in scores) > 1.0


def test_token_level_kl_gives_the_same_advantage(tmp_path):
    """token_level_kl (0.14.0-0.21.0) puts −kl_coef·kl on the tokens and the score on one; the advantage reads
    their sum, the same R."""
    got = per_row(advcli_run(tmp_path, rows_of(2), "trl@0.20.0", {"trainer": "rloo", "token_level_kl": "true"}
                             )["advantages"])
    close(got, old_rloo(2))


def test_every_route_gives_the_release_its_numbers(tmp_path):
    """--flavor trl@0.11.2 (trainer=rloo is that release's default), --flavor trl with advcli.trl_code and
    trainer=rloo, --flavor trl@0.17.0 --estimator rloo, and advcli.run give the same numbers."""
    want = old_rloo(2)
    close(per_row(advcli_run(tmp_path, rows_of(2), "trl@0.11.2", {})["advantages"]), want)
    close(per_row(advcli_run(tmp_path, rows_of(2), "trl", {"advcli.trl_code": "0.11.0", "trainer": "rloo"}
                             )["advantages"]), want)
    close(per_row(advcli_run(tmp_path, rows_of(2), "trl@0.17.0", {}, extra=["--estimator", "rloo"])["advantages"]),
          want)
    src = write_parquet(rows_of(2), str(tmp_path / "lib.parquet"))
    result = advcli.run(pq.read_table(src), None, flavor="trl@0.11.2", device="cpu")
    close(per_row(result.table.column("advantages").to_pylist()), want)


@pytest.mark.parametrize("spec,settings,words", [
    ("trl@0.13.0", ["trainer=grpo"], "has no GRPOTrainer"),
    ("trl@0.10.1", ["missing_eos_penalty=1"], "not a field of TRL 0.9.2's RLOOConfig"),
    ("trl@0.12.0", ["normalize_reward=true"], "not a field of TRL 0.11.0's RLOOConfig"),
    ("trl@0.19.0", ["trainer=rloo", "beta=0.1"], "not a field"),
    ("trl@1.0.0", ["trainer=rloo", "kl_coef=0.1"], "a field of the old RLOOTrainer"),
    ("trl@0.9.6", ["rloo_k=1"], "rloo_k must be at least 2"),
])
def test_what_a_release_did_not_have_is_refused(tmp_path, capsys, spec, settings, words):
    src = write_parquet(rows_of(2), str(tmp_path / "in.parquet"))
    assert_release_refuses(tmp_path, capsys, src, spec, settings, words)


def test_a_missing_truncated_column_is_named(tmp_path, capsys):
    src = write_parquet(rows_of(2), str(tmp_path / "in.parquet"))
    argv = ["run", src, "-o", str(tmp_path / "out.parquet"), "--flavor", "trl@0.11.0", "--device", "cpu",
            "--set", "missing_eos_penalty=1"]
    code, _, err = run_main(argv, capsys)
    assert code == 2 and "missing column 'truncated'" in err, err


def test_each_step_is_its_own_batch_of_copies(tmp_path):
    """Two steps of 8 and 4 rows, rloo_k = 2: step 0's groups are rows r and r + 4, step 1's rows 8 + r and
    10 + r; normalize_advantage z-scores each step on its own (one trainer batch each)."""
    import pyarrow as pa

    scores = SCORES  # 12 rows: the first 8 are step 0, the last 4 step 1
    src = write_parquet(rows_of(2), str(tmp_path / "in.parquet"))
    table = pq.read_table(src)
    pids = [f"s0p{i % 4}" for i in range(8)] + [f"s1p{i % 2}" for i in range(4)]
    table = table.set_column(table.column_names.index("prompt_id"), "prompt_id", pa.array(pids))
    table = table.append_column("step", pa.array([0] * 8 + [1] * 4, pa.int64()))
    pq.write_table(table, str(tmp_path / "steps.parquet"))
    result = advcli.run(pq.read_table(str(tmp_path / "steps.parquet")), None, flavor="trl@0.17.0",
                        settings={"trainer": "rloo", "normalize_advantage": True}, device="cpu")
    got = per_row(result.table.column("advantages").to_pylist())

    def step(lo, hi):
        r = [scores[i] - 0.05 * kl_sum(i) for i in range(lo, hi)]
        b = (hi - lo) // 2
        adv = [x - r[(i + b) % (2 * b)] for i, x in enumerate(r)]  # k = 2: minus the other copy
        m, sd = statistics.fmean(adv), statistics.stdev(adv)
        return [(a - m) / (sd + 1e-8) for a in adv]
    close(got, step(0, 8) + step(8, 12))


def test_a_step_that_is_not_whole_copies_is_refused(tmp_path, capsys):
    src = write_parquet(rows_of(2)[:11], str(tmp_path / "in.parquet"))
    code, _, err = run_main(["run", src, "-o", str(tmp_path / "out.parquet"), "--flavor", "trl@0.9.2",
                             "--device", "cpu", "--set", "advcli.id_check=warn"], capsys)
    assert code == 2 and "are not 2 copies of a batch of prompts" in " ".join(err.split()), err
