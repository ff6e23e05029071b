"""SkyRL 0.1.0's step-wise trajectories (``--flavor skyrl@0.1.0 --set generator.step_wise_trajectories=true``),
by hand.

0.1.0's ``RayPPOTrainer.compute_advantages_and_returns`` (skyrl/train/trainer.py L784-815 @skyrl-v0.1.0) runs the
estimator on the last steps' right-padded ``[n, T]`` rows (SkyRL's response_mask: 1 on ``[0, L)``, so a last
step's row is its value on ``[0, L_last)`` and 0 after) and gives each turn ``last_step_advantages[traj_id]``: the
whole padded row. A turn's position t holds the value where t < L_last and 0 from L_last on, whatever the turn's
own mask; 0.2.0 on give the value to every position of the turn. The numbers below are written out from that
rule; the group values from SkyRL's grpo ((s − μ)/(torch.std + 1e-6)) and rloo ((s − μ)·n/(n − 1)).
"""
import math

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import output_lists, run_main, run_table

from advcli.errors import AdvcliError

A = "trainer.algorithm."
SW = {"generator.step_wise_trajectories": True}

# (prompt_id, reward, response_mask, is_last_step): one step, four trajectories.
# T1 = rows 0-2 (a; turns of 5 and 2 tokens, last step 3), T2 = rows 3-4 (a; a turn of 1, last step 4),
# T3 = rows 5-6 (b; a turn of 4, last step 2), T4 = row 7 (b; 3). The earlier turns' ids and rewards are
# SkyRL's to ignore; their masks hold zeros, which the copy does not apply.
ROWS = [
    ("a", 9.0, [1, 1, 0, 1, 1], False),
    ("a", 7.0, [1, 1], False),
    ("a", 1.0, [1, 1, 1], True),
    ("x", 3.0, [1], False),
    ("a", 0.0, [1, 1, 1, 1], True),
    ("y", 2.0, [1, 0, 1, 1], False),
    ("b", 0.5, [1, 1], True),
    ("b", 0.0, [1, 1, 1], True),
]
LAST_LEN = [3, 3, 3, 4, 4, 2, 2, 3]  # each row's trajectory's last step length
TRAJ_SIGN = [1, 1, 1, -1, -1, 1, 1, -1]  # + for the better last step of its group (a: 1 > 0, b: 0.5 > 0)
GROUP = ["a", "a", "a", "a", "a", "b", "b", "b"]


def _write(path, rows=ROWS):
    pq.write_table(pa.table({
        "prompt_id": [r[0] for r in rows], "reward": pa.array([r[1] for r in rows], pa.float32()),
        "response_mask": pa.array([r[2] for r in rows], pa.list_(pa.int8())), "step": [0] * len(rows),
        "is_last_step": [r[3] for r in rows]}), path)
    return path


def _grpo_value(group: str) -> float:
    s = {"a": [1.0, 0.0], "b": [0.5, 0.0]}[group]
    mu = sum(s) / 2
    std = math.sqrt(sum((x - mu) ** 2 for x in s) / 1)  # torch.std: unbiased
    return (s[0] - mu) / (std + 1e-6)


def _rloo_value(group: str) -> float:
    s = {"a": [1.0, 0.0], "b": [0.5, 0.0]}[group]
    return (s[0] - sum(s) / 2) * 2 / (2 - 1)


def expected(value, copy: str) -> list[list[float]]:
    out = []
    for i, r in enumerate(ROWS):
        v = TRAJ_SIGN[i] * value(GROUP[i])
        n = len(r[2])
        out.append([v if (copy == "own_mask" or t < LAST_LEN[i]) else 0.0 for t in range(n)])
    return out


def _run(tmp_path, flavor, settings, chunk_rows=3):
    src = _write(str(tmp_path / "in.parquet"))
    t, res = run_table(src, tmp_path / "out.parquet", flavor, {**SW, **settings}, chunk_rows=chunk_rows,
                       precision="float64")
    return output_lists(t), res


@pytest.mark.parametrize("est,value", [("grpo", _grpo_value), ("rloo", _rloo_value)])
def test_010_copies_the_last_steps_padded_row(tmp_path, est, value):
    got, res = _run(tmp_path, "skyrl@0.1.0", {A + "advantage_estimator": est})
    want = expected(value, "last_row")
    for i, (g, w) in enumerate(zip(got["advantages"], want)):
        assert g == pytest.approx(w, rel=1e-6, abs=1e-7), f"row {i}"
        assert got["returns"][i] == pytest.approx(w, rel=1e-6, abs=1e-7), f"row {i} returns"
    # row 0 (5 tokens, last step 3) ends in two 0s; row 5 (4 tokens, last step 2) in two 0s
    assert got["advantages"][0][3:] == [0.0, 0.0] and got["advantages"][5][2:] == [0.0, 0.0]
    said = [w for w in res.warnings if "SkyRL 0.1.0" in w]
    assert len(said) == 1 and "0 from there on" in said[0]


def test_020_and_newer_give_each_turn_its_own_positions(tmp_path):
    got, res = _run(tmp_path, "skyrl@0.2.0", {})
    for g, w in zip(got["advantages"], expected(_grpo_value, "own_mask")):
        assert g == pytest.approx(w, rel=1e-6, abs=1e-7)
    assert not [w for w in res.warnings if "SkyRL 0.1.0" in w]


@pytest.mark.parametrize("chunk_rows", [1, 2, 1000])
def test_every_route_gives_the_same_numbers(tmp_path, capsys, chunk_rows):
    """The release, the setting on the newest flavor, any chunking, the command: one answer."""
    base, _ = _run(tmp_path, "skyrl@0.1.0", {})
    same, _ = _run(tmp_path, "skyrl", {"advcli.step_wise_copy": "last_row"}, chunk_rows=chunk_rows)
    assert same == base
    src = _write(str(tmp_path / "cli.parquet"))
    out = tmp_path / "cli_out.parquet"
    code, _, err = run_main(["run", src, "-o", str(out), "--flavor", "skyrl@0.1.0", "--device", "cpu",
                             "--precision", "float64", "--set", "generator.step_wise_trajectories=true"], capsys)
    assert code == 0, err
    assert output_lists(pq.read_table(str(out)))["advantages"] == base["advantages"]


def test_explain_names_the_copy(capsys):
    code, out, err = run_main(["explain", "--flavor", "skyrl@0.1.0", "--set", "generator.step_wise_trajectories=true"],
                              capsys)
    assert code == 0, err
    assert "grouping.trajectory_copy" in out or "SkyRL 0.1.0 copies" in out


@pytest.mark.parametrize("chunk_rows", [1, 3, 1000])
def test_010_batch_normalize_counts_the_copied_padding(tmp_path, chunk_rows):
    """normalize_advantages_dict (ppo_utils.py @skyrl-v0.1.0) on the step's padded [B, T] grid as 0.1.0 fills it:
    the mean over all B·T cells, which include the value a turn shorter than its last step carries past its own
    end (row 3: 1 token, its last step 4), the biased variance over the response positions (t < L_i), then
    (A − mean)·rsqrt(max(var, 1e-8)) on every position written."""
    got, _ = _run(tmp_path, "skyrl@0.1.0", {A + "advantage_batch_normalize": True}, chunk_rows=chunk_rows)
    B, T = len(ROWS), max(len(r[2]) for r in ROWS)
    grid = [[TRAJ_SIGN[i] * _grpo_value(GROUP[i]) if t < LAST_LEN[i] else 0.0 for t in range(T)] for i in range(B)]
    mean = sum(map(sum, grid)) / (B * T)
    n = sum(len(r[2]) for r in ROWS)
    var = sum((grid[i][t] - mean) ** 2 for i in range(B) for t in range(len(ROWS[i][2]))) / n
    rstd = 1 / math.sqrt(max(var, 1e-8))
    for i, r in enumerate(ROWS):
        want = [(grid[i][t] - mean) * rstd for t in range(len(r[2]))]
        assert got["advantages"][i] == pytest.approx(want, rel=1e-6, abs=1e-7), f"row {i}"
    # the grid mean is not that of 0.2.0's grid (own positions): the padding cells of row 3 count
    own = sum(TRAJ_SIGN[i] * _grpo_value(GROUP[i]) * len(r[2]) for i, r in enumerate(ROWS)) / (B * T)
    assert abs(own - mean) > 1e-3


def test_gae_step_wise_at_010_is_refused_with_its_reason(tmp_path):
    with pytest.raises(AdvcliError, match="does not reproduce that copy of token-level advantages"):
        _run(tmp_path, "skyrl@0.1.0", {A + "advantage_estimator": "gae"})


@pytest.mark.parametrize("choose", [[(A + "advantage_estimator", "rloo")], [("advcli.estimator", "rloo")],
                                    [("advcli.mix", "0.5*grpo+0.5*rloo")]])
def test_every_way_of_choosing_the_estimator_keeps_the_copy(choose):
    """--set of the flavor's key, --estimator, advcli.mix: each resolved at 0.1.0 keeps its step-wise copy."""
    from advcli.flavors import resolve

    cfg, _ = resolve("skyrl@0.1.0", [("generator.step_wise_trajectories", True), *choose])
    assert cfg["grouping"]["trajectories"] == "last_step" and cfg["grouping"]["trajectory_copy"] == "last_row"
    newest, _ = resolve("skyrl", [("generator.step_wise_trajectories", True), *choose])
    assert newest["grouping"]["trajectory_copy"] == "own_mask"
