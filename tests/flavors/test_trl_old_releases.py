"""`advcli run --flavor trl@X` at TRL's releases before 1.6.0: each release class's advantage code, with the
expected numbers worked out here in plain Python from the formula of that release's code (huggingface/trl, the
file at the release's tag), and the refusals where the release has no such trainer or option."""
from __future__ import annotations

import math
import statistics

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _released import advcli_run, write_parquet
from conftest import assert_release_refuses, run_main

import advcli

NAN = float("nan")


def rows_of(acc: list[float], fmt: list[float] | None = None, group: int = 4) -> list[dict]:
    """One step: consecutive groups of ``group`` rows; reward columns acc (and fmt) as the reward functions'
    outputs (NaN = the function returned None); the scalar reward column is acc alone, or unused (0) with fmt."""
    rows = []
    for i, a in enumerate(acc):
        extra = {"acc": a} if fmt is None else {"acc": a, "fmt": fmt[i]}
        rows.append(dict(prompt_id=f"p{i // group}", reward=a if fmt is None else 0.0, mask=[1, 1, 0],
                         old=[-1.0] * 3, ref=[-1.2] * 3, values=[0.0] * 3, extra=extra))
    return rows


def per_row(got: list[list[float]]) -> list[float]:
    """The one value TRL broadcasts over a row's positions."""
    for row in got:
        assert all(v == row[0] or (math.isnan(v) and math.isnan(row[0])) for v in row)
    return [row[0] for row in got]


def grpo(r: list[float], g: int, divide: str = "group") -> list[float]:
    """(r − mean_g)/(std + 1e-4), std = unbiased std of the group (``group``) or of the batch (``batch``), or no
    division (``none``): grpo_trainer.py L500-507 @v0.14.0, L1391-1423 @v0.22.2."""
    out = []
    for k in range(0, len(r), g):
        grp = r[k:k + g]
        m = statistics.fmean(grp)
        s = statistics.stdev(grp) if divide == "group" else statistics.stdev(r) if divide == "batch" else None
        out += [(x - m) / (s + 1e-4) if s is not None else x - m for x in grp]
    return out


def close(got: list[float], want: list[float]) -> None:
    assert got == pytest.approx(want, rel=1e-5, abs=1e-6)


ACC = [1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0]
FMT = [0.5, 0.25, -0.5, 0.75, 0.25, 1.0, -0.25, 0.0]


def test_014_sums_the_functions_and_divides_by_the_group_std(tmp_path):
    """0.14.0 (grpo_trainer.py L497-507 @v0.14.0): rewards = rewards_per_func.sum(1); group mean, torch's unbiased
    std, + 1e-4, always divided."""
    got = per_row(advcli_run(tmp_path, rows_of(ACC, FMT), "trl@0.14.0",
                             {"num_generations": 4, "reward_funcs": "[acc,fmt]"})["advantages"])
    close(got, grpo([a + f for a, f in zip(ACC, FMT)], 4))


def test_015_weights_the_functions(tmp_path):
    """0.15.0 (#2676, grpo_trainer.py L630-640 @v0.15.0): rewards = (rewards_per_func · w).sum(1)."""
    got = per_row(advcli_run(tmp_path, rows_of(ACC, FMT), "trl@0.15.2",
                             {"num_generations": 4, "reward_funcs": "[acc,fmt]", "reward_weights": "[2.0,0.5]"}
                             )["advantages"])
    close(got, grpo([2 * a + 0.5 * f for a, f in zip(ACC, FMT)], 4))


def test_016_counts_a_row_without_any_reward_as_zero(tmp_path):
    """0.16.0-1.5.1 (#3079, grpo_trainer.py L820-839 @v0.16.0): rewards = (rewards_per_func · w).nansum(1), so
    a None counts 0 and a row whose every function returned None scores 0 and enters the group's mean and std.
    1.6.0 (#5902) leaves that row out of the statistics and gives it 0."""
    acc = [1.0, NAN, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0]
    fmt = [0.5, NAN, -0.5, NAN, 0.25, 1.0, -0.25, 0.0]
    r = [(0.0 if math.isnan(a) else a) + (0.0 if math.isnan(f) else f) for a, f in zip(acc, fmt)]
    for spec in ("trl@0.16.0", "trl@0.19.1", "trl@1.5.1"):
        got = per_row(advcli_run(tmp_path, rows_of(acc, fmt), spec,
                                 {"num_generations": 4, "reward_funcs": "[acc,fmt]"})["advantages"])
        close(got, grpo(r, 4))
    # 1.6.0: row 1 unscorable, the first group's statistics over rows 0, 2, 3
    first = [r[0], r[2], r[3]]
    m, s = statistics.fmean(first), statistics.stdev(first)
    got = per_row(advcli_run(tmp_path, rows_of(acc, fmt), "trl@1.6.0",
                             {"num_generations": 4, "reward_funcs": "[acc,fmt]"})["advantages"])
    close(got[:4], [(r[0] - m) / (s + 1e-4), 0.0, (r[2] - m) / (s + 1e-4), (r[3] - m) / (s + 1e-4)])


def test_016_scale_rewards_is_a_bool(tmp_path):
    """0.16.0-0.21.0 (#3135): scale_rewards false subtracts the group mean only; group/batch/none came in 0.22.0."""
    got = per_row(advcli_run(tmp_path, rows_of(ACC), "trl@0.21.0",
                             {"num_generations": 4, "scale_rewards": "false"})["advantages"])
    close(got, grpo(ACC, 4, "none"))


def test_022_swapped_scale_rewards(tmp_path):
    """0.22.0-0.22.1 (#3935; grpo_trainer.py L1391-1423 @v0.22.0): scale_rewards=group took the batch std only to
    log it and divided nothing; batch and none divided by the group std. 0.22.2 (#3992) fixed it."""
    want = {("trl@0.22.0", "group"): grpo(ACC, 4, "none"), ("trl@0.22.1", "batch"): grpo(ACC, 4, "group"),
            ("trl@0.22.0", "none"): grpo(ACC, 4, "group"), ("trl@0.22.2", "group"): grpo(ACC, 4, "group"),
            ("trl@0.26.2", "batch"): grpo(ACC, 4, "batch"), ("trl@0.23.0", "none"): grpo(ACC, 4, "none")}
    for (spec, scale), expected in want.items():
        got = per_row(advcli_run(tmp_path, rows_of(ACC), spec,
                                 {"num_generations": 4, "scale_rewards": scale})["advantages"])
        close(got, expected)


def test_022_rloo_counts_a_row_without_reward_as_zero_and_normalizes_with_torch_std(tmp_path):
    """RLOOTrainer 0.22.0-1.5.1 (#3801; rloo_trainer.py L1241-1270 @v0.22.0): R = nansum_k r_k (a row with none
    scores 0), clip, − β·Σ_t (old − ref)·mask; b_i = (Σ_g R − R_i)/(G − 1); normalize_advantages: the batch's
    (A − mean)/(std + 1e-4), torch's unbiased std. Here β = 0.1 and each row's Σ_t (old − ref)·mask = 2·0.2."""
    acc = [1.0, NAN, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0]
    r = [(0.0 if math.isnan(a) else a) - 0.1 * 0.4 for a in acc]
    loo = []
    for k in range(0, 8, 4):
        grp = r[k:k + 4]
        loo += [x - (sum(grp) - x) / 3 for x in grp]
    m, s = statistics.fmean(loo), statistics.stdev(loo)
    got = per_row(advcli_run(tmp_path, rows_of(acc), "trl@0.25.1",
                             {"trainer": "rloo", "num_generations": 4, "reward_funcs": "[acc]", "beta": 0.1,
                              "normalize_advantages": "true"})["advantages"])
    close(got, [(a - m) / (s + 1e-4) for a in loo])


@pytest.mark.parametrize("release,trainer,want_nan", [("0.14.0", "grpo", True), ("0.26.2", "grpo", True),
                                                       ("0.26.2", "rloo", True), ("0.27.0", "grpo", False),
                                                       ("0.27.0", "rloo", False), ("1.6.0", "grpo", False)])
def test_a_group_of_one_before_and_after_the_027_guard(tmp_path, release, trainer, want_nan):
    """num_generations=1 (0.14.0 has no check; 0.15.0-0.25.1 refuse it; from 0.26.0 an evaluation with
    num_generations_eval=1 reaches it): before 0.27.0 torch.std of one value is NaN (GRPO, grpo_trainer.py L1952
    @v0.26.2, L505 @v0.14.0) and RLOO's baseline is (Σ − R)/(n − 1) = 0/0 (rloo_trainer.py L1422 @v0.26.2), so the
    advantage is NaN; from 0.27.0 both guard num_generations > 1 (std 0, baseline 0): r − r = 0."""
    rows = rows_of([1.0, 0.0, 0.5], group=1)
    got = per_row(advcli_run(tmp_path, rows, f"trl@{release}",
                             {"trainer": trainer, "num_generations": 1, "beta": 0.0})["advantages"])
    assert all(math.isnan(x) for x in got) if want_nan else got == [0.0, 0.0, 0.0]


def test_027_normalize_then_sum_counts_a_row_without_reward(tmp_path):
    """0.27.0-1.5.1 (#4785; grpo_trainer.py L2018-2068 @v0.27.0): each function z-scored in its group with
    nanmean/nanstd (a None stays NaN), the weighted nansum (a row with none scores 0), then (R − mean_B)/(std_B +
    1e-4) with torch's mean and unbiased std over the whole batch, that row included."""
    acc = [1.0, NAN, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0]
    fmt = [0.5, NAN, -0.5, 0.75, 0.25, 1.0, -0.25, 0.0]

    def z(col):
        out = []
        for k in range(0, 8, 4):
            vals = [x for x in col[k:k + 4] if not math.isnan(x)]
            m, s = statistics.fmean(vals), statistics.stdev(vals)
            out += [NAN if math.isnan(x) else (x - m) / (s + 1e-4) for x in col[k:k + 4]]
        return out
    za, zf = z(acc), z(fmt)
    summed = [(0.0 if math.isnan(a) else 2 * a) + (0.0 if math.isnan(f) else f) for a, f in zip(za, zf)]
    m, s = statistics.fmean(summed), statistics.stdev(summed)
    got = per_row(advcli_run(tmp_path, rows_of(acc, fmt), "trl@1.0.0",
                             {"num_generations": 4, "reward_funcs": "[acc,fmt]", "reward_weights": "[2,1]",
                              "multi_objective_aggregation": "normalize_then_sum"})["advantages"])
    close(got, [(x - m) / (s + 1e-4) for x in summed])


@pytest.mark.parametrize("spec,settings,words", [
    ("trl@0.14.0", ["reward_weights=[1,2]", "reward_funcs=[acc,fmt]"], "0.14.0's GRPOTrainer has no reward weights"),
    ("trl@0.15.0", ["scale_rewards=false"], "before 0.16.0 has no scale_rewards"),
    ("trl@0.18.0", ["scale_rewards=batch"], "scale_rewards is a bool"),
    ("trl@0.26.0", ["multi_objective_aggregation=normalize_then_sum"], "normalize_then_sum came in 0.27.0"),
])
def test_what_a_release_did_not_have_is_refused(tmp_path, capsys, spec, settings, words):
    src = write_parquet(rows_of(ACC, FMT), str(tmp_path / "in.parquet"))
    assert_release_refuses(tmp_path, capsys, src, spec, settings, words)


def test_every_route_gives_the_release_its_numbers(tmp_path):
    """The same question by every route: `--flavor trl@0.22.1`, `--flavor trl --set advcli.trl_code=0.22.0`, and
    advcli.run(flavor="trl@0.22.1") give 0.22.x's swapped scale_rewards=batch (the group std)."""
    want = grpo(ACC, 4, "group")
    settings = {"num_generations": 4, "scale_rewards": "batch"}
    close(per_row(advcli_run(tmp_path, rows_of(ACC), "trl@0.22.1", settings)["advantages"]), want)
    close(per_row(advcli_run(tmp_path, rows_of(ACC), "trl", {**settings, "advcli.trl_code": "0.22.0"}
                             )["advantages"]), want)
    src = write_parquet(rows_of(ACC), str(tmp_path / "lib.parquet"))
    result = advcli.run(pq.read_table(src), None, flavor="trl@0.22.1", settings=settings, device="cpu")
    close(per_row(result.table.column("advantages").to_pylist()), want)


@pytest.mark.parametrize("release,trainer", [("0.15.0", "grpo"), ("0.16.1", "grpo"), ("0.19", "grpo"),
                                             ("0.22.2", "grpo"), ("0.22.0", "rloo"), ("0.25.1", "rloo")])
def test_releases_that_refuse_num_generations_one_are_not_run_with_it(tmp_path, capsys, release, trainer):
    """0.15.0 to 0.25.1 refuse num_generations < 2 (GRPOTrainer: range(2, ...) L344-350 @v0.15.0; GRPOConfig
    L556 @v0.19.0; RLOOConfig L672 @v0.22.0): no run of theirs has groups of one, so advcli refuses to
    invent numbers for one, naming the releases whose evaluation does have them; the releases of the same
    table entry that run it (0.14.0, 0.26.x) are tested above."""
    path = tmp_path / "g1.parquet"
    pq.write_table(pa.table({"prompt_id": ["a", "b"], "reward": [1.0, 0.0], "response_mask": [[1, 1], [1]]}), path)
    code, _, err = run_main(["run", path, "-o", tmp_path / "o.parquet", "--flavor", f"trl@{release}", "--set",
                             "num_generations=1", "--set", f"trainer={trainer}", "--set", "beta=0"], capsys)
    assert code == 2 and "refuse num_generations < 2" in err and "num_generations_eval=1" in err, err
    assert not (tmp_path / "o.parquet").exists()


@pytest.mark.parametrize("release", ["0.26.2", "1.16.0"])
def test_groups_of_one_say_they_are_an_evaluation_s(tmp_path, capsys, release):
    """From 0.26.0 num_generations=1 runs (an evaluation's num_generations_eval=1), but TRL's training refuses it
    (grpo_config.py L1137, rloo_config.py L700 @1.16.0: "requires at least 2 generations per prompt"): the summary
    says whose numbers these are, where it only showed a groups-of-one diagnostic."""
    path = tmp_path / "g1.parquet"
    pq.write_table(pa.table({"prompt_id": ["a", "b"], "reward": [1.0, 0.0], "response_mask": [[1, 1], [1]]}), path)
    code, _, err = run_main(["run", path, "-o", tmp_path / "o.parquet", "--flavor", f"trl@{release}", "--set",
                             "num_generations=1", "--set", "beta=0"], capsys)
    said = " ".join(err.split())
    assert code == 0 and "num_generations=1: TRL's training refuses it" in said, err
    assert "groups of one are an evaluation's (num_generations_eval=1" in said
    pq.write_table(pa.table({"prompt_id": ["a", "a"], "reward": [1.0, 0.0], "response_mask": [[1, 1], [1]]}), path)
    code, _, err = run_main(["run", path, "-o", tmp_path / "o.parquet", "--flavor", f"trl@{release}", "--set",
                             "num_generations=2", "--set", "beta=0", "--force"], capsys)
    assert code == 0 and "TRL's training refuses it" not in " ".join(err.split()), err
