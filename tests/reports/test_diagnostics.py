"""Hazard diagnostics (advcli.pipeline.diagnostics) and --precision float64.

The float32 figures are verl's own: ``spec/README.md`` §3 lists verl ``grpo`` on ``12×0.7`` giving
|A| = 0.106 and on ``8×0.1`` giving 0.0074 (confirmed there by running
verl/trainer/ppo/core_algos.py::compute_grpo_outcome_advantage @1dda039b on CPU, torch 2.13);
float64 gives 0 (all-equal groups have std 0 and mean equal to the value).
"""
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

import advcli
from tests._float32_refs import verl_grpo
from tests.conftest import run_cli


def _hazard_dump(path):
    pid, rew, mask = [], [], []
    for _ in range(12):
        pid.append("a"); rew.append(0.7); mask.append([1, 1, 1])  # noqa: E702
    for r in (1, 0, 1, 0):
        pid.append("b"); rew.append(r); mask.append([1, 1, 0, 1])  # noqa: E702
    pid.append("c"); rew.append(0.5); mask.append([1, 0])  # noqa: E702 - a group of one (row 16)
    for _ in range(8):
        pid.append("d"); rew.append(0.1); mask.append([1, 1])  # noqa: E702
    pq.write_table(pa.table({"prompt_id": pid, "reward": pa.array(rew, pa.float32()),
                             "response_mask": pa.array(mask, pa.list_(pa.int8()))}), path)
    return str(path)


def _adv(path):
    return [a[0] for a in pq.read_table(path).column("advantages").to_pylist()]


def _diag(res, kind):
    found = [d for d in res.diagnostics if d["kind"] == kind]
    assert len(found) == 1, [d["kind"] for d in res.diagnostics]
    return found[0]


def test_float32_hazard_reproduced_flagged_and_float64_gives_zero(tmp_path):
    src = _hazard_dump(tmp_path / "in.parquet")
    settings = {"algorithm.adv_estimator": "grpo"}
    r32 = advcli.run(src, tmp_path / "o32.parquet", flavor="verl", settings=settings, chunk_rows=5)
    a32 = _adv(tmp_path / "o32.parquet")
    # verl's own float32 calls on this machine (12×0.7 gave |A| ≈ 0.106 and 8×0.1 0.0074 on the machine the
    # spec was written on; the residue, even its presence, depends on the CPU's summation order)
    pids = pq.read_table(src).column("prompt_id").to_pylist()
    rewards = pq.read_table(src).column("reward").to_pylist()
    want = verl_grpo(rewards, pids).tolist()
    assert a32 == want
    haz = _diag(r32, "float32_cancellation")
    residue = {g for g, a in (("a", a32[0]), ("d", a32[17])) if a != 0.0}
    assert haz["count"] == len(residue) and {e["group"] for e in haz["examples"]} == residue
    ex = {e["group"]: e for e in haz["examples"]}
    if "a" in ex:
        assert ex["a"]["rows"] == list(range(12)) and ex["a"]["std_float64"] == 0.0
        assert ex["a"]["adv_float32"][0] == pytest.approx(a32[0]) and ex["a"]["adv_float64"][0] == 0.0
        assert ex["a"]["rewards"][0] == pytest.approx(0.7) and "σ + 1e-06" in ex["a"]["rule"]
    assert not any("float32" in w for w in r32.warnings)  # said once, in the diagnostics

    r64 = advcli.run(src, tmp_path / "o64.parquet", flavor="verl", settings=settings, precision="float64")
    a64 = _adv(tmp_path / "o64.parquet")
    assert a64[0] == 0.0 and a64[17] == 0.0
    assert pq.read_table(tmp_path / "o64.parquet").schema.field("advantages").type == pa.list_(pa.float32())
    # binary group b is unaffected: ±sqrt(3)/2 · 1/(1+1e-6·...) in both precisions
    assert a64[12] == pytest.approx(0.5 / np.std([1, 0, 1, 0], ddof=1), rel=1e-5)
    assert a32[12] == pytest.approx(a64[12], rel=1e-6)
    # the float64 run still reports what the framework's float32 would have given
    haz64 = _diag(r64, "float32_cancellation")
    assert haz64["count"] == len(residue)
    if "a" in residue:
        assert {e["group"]: e for e in haz64["examples"]}["a"]["adv_float32"][0] == pytest.approx(a32[0])


def test_cli_precision_option(tmp_path):
    src = _hazard_dump(tmp_path / "in.parquet")
    out = tmp_path / "o.parquet"
    p = run_cli("run", src, "-o", out, "--flavor", "verl", "--set", "algorithm.adv_estimator=grpo",
                "--precision", "float64", "--quiet")
    assert p.returncode == 0, p.stderr
    assert _adv(out)[0] == 0.0
    p = run_cli("run", src, "-o", out, "--force", "--precision", "float46", "--quiet")
    assert p.returncode == 2 and "float64" in p.stderr and "Traceback" not in p.stderr


def test_groups_of_one_and_all_equal_groups(tmp_path):
    src = _hazard_dump(tmp_path / "in.parquet")
    res = advcli.run(src, tmp_path / "o.parquet", flavor="verl", settings={"algorithm.adv_estimator": "grpo"})
    one = _diag(res, "groups_of_one")
    assert one["count"] == 1 and one["examples"][0]["row"] == 16 and one["examples"][0]["group"] == "c"
    # verl grpo: a group of one gets s/(1 + 1e-6) (mean 0, std 1)
    assert one["examples"][0]["advantage"] == pytest.approx(0.5 / (1 + 1e-6))
    eq = _diag(res, "all_equal_groups")
    assert eq["count"] == 2 and {e["group"] for e in eq["examples"]} == {"a", "d"}
    # rloo_vectorized gives groups of one 0
    res = advcli.run(src, tmp_path / "o2.parquet", flavor="verl",
                     settings={"algorithm.adv_estimator": "rloo_vectorized"})
    one = _diag(res, "groups_of_one")
    assert one["examples"][0]["advantage"] == 0.0 and "gives 0" in one["explanation"]


def test_dropped_reward_on_masked_last_token(tmp_path):
    """verl gae reads rewards at mask=1 tokens only: a row ending in a masked token loses its reward;
    verl grpo sums token_level_rewards without the mask and keeps it."""
    src = tmp_path / "in.parquet"
    pq.write_table(pa.table({
        "prompt_id": ["a", "a", "b"], "reward": pa.array([1.0, 0.0, 2.0], pa.float32()),
        "response_mask": pa.array([[1, 1, 0], [1, 1, 0], [1, 1, 1]], pa.list_(pa.int8())),
        "values": pa.array([[0, 0, 0]] * 3, pa.list_(pa.float32()))}), src)
    res = advcli.run(str(src), tmp_path / "o.parquet", flavor="verl", settings={"algorithm.adv_estimator": "gae"})
    d = _diag(res, "dropped_rewards")
    assert d["count"] == 1 and d["examples"][0]["row"] == 0  # row 1 ends masked too but its reward is 0
    ret = pq.read_table(tmp_path / "o.parquet").column("returns").to_pylist()
    assert ret[0] == [0.0, 0.0, 0.0]  # the reward is indeed gone
    res = advcli.run(str(src), tmp_path / "o2.parquet", flavor="verl", settings={"algorithm.adv_estimator": "grpo"})
    assert not [x for x in res.diagnostics if x["kind"] == "dropped_rewards"]


def test_kl_clamps_counted(tmp_path):
    """verl low_var_kl: x = clamp(ref − logp, ±20), kl = clamp(e^x − x − 1, ±10) (core_algos L2215-2250)."""
    lp = [[-1.0, -30.0, -1.0], [-1.0, -1.0, -40.0]]
    ref = [[-1.0, -1.0, -6.0], [-25.0, -1.0, -1.0]]
    mask = [[1, 1, 1], [1, 1, 0]]
    src = tmp_path / "in.parquet"
    pq.write_table(pa.table({"prompt_id": ["a", "a"], "reward": pa.array([1.0, 0.0], pa.float32()),
                             "response_mask": pa.array(mask, pa.list_(pa.int8())),
                             "old_log_probs": pa.array(lp, pa.list_(pa.float32())),
                             "ref_log_probs": pa.array(ref, pa.list_(pa.float32()))}), src)
    res = advcli.run(str(src), tmp_path / "o.parquet", flavor="verl",
                     settings={"algorithm.adv_estimator": "grpo", "algorithm.use_kl_in_reward": True,
                               "algorithm.kl_penalty": "low_var_kl"})
    x = np.array(ref, dtype=np.float64) - np.array(lp)
    m = np.array(mask, bool)
    n_in = int(((np.abs(x) > 20) & m).sum())  # 29 at (0,1); -24 at (1,0); (1,2) is masked
    k3 = np.exp(np.clip(x, -20, 20)) - np.clip(x, -20, 20) - 1
    n_out = int(((np.abs(k3) > 10) & m).sum())  # x=29→clip 20, x=-5 → e^-5+4 = 4.0 (no), x=-24 → 19 (yes)
    assert (n_in, n_out) == (2, 2)
    assert _diag(res, "kl_input_clamp")["count"] == n_in
    assert _diag(res, "kl_output_clamp")["count"] == n_out
    assert [e["row"] for e in _diag(res, "kl_input_clamp")["examples"]] == [0, 1]


@pytest.mark.parametrize("chunk_rows", [1, 4])
@pytest.mark.parametrize("estimator", ["grpo", "reinforce++"])  # reinforce++ whitens: a moments pass observes
def test_kl_clamps_leave_out_the_rows_whose_kl_is_skipped(tmp_path, chunk_rows, estimator):
    """SkyRL's zero_variance_filter with use_kl_in_reward zeroes the flat groups' loss masks before the KL penalty
    (kl.skip_flat_groups): their KL term is 0, so their clamped tokens are not counted. Group a (1, 1) is flat,
    group b (1, 0) is not; k3 clamps ref − old to ±20 (input) and the value to ±10 (output)."""
    lp = [[-1.0, -30.0], [-40.0, -1.0], [-1.0, -30.0], [-1.0, -1.0]]
    ref = [[-1.0, -1.0], [-1.0, -1.0], [-1.0, -1.0], [-26.0, -1.0]]
    src = tmp_path / "in.parquet"
    pq.write_table(pa.table({"prompt_id": ["a", "a", "b", "b"], "reward": pa.array([1.0, 1.0, 1.0, 0.0], pa.float32()),
                             "response_mask": pa.array([[1, 1]] * 4, pa.list_(pa.int8())),
                             "old_log_probs": pa.array(lp, pa.list_(pa.float32())),
                             "ref_log_probs": pa.array(ref, pa.list_(pa.float32()))}), src)
    a = "trainer.algorithm."
    settings = {a + "use_kl_in_reward": True, a + "use_kl_loss": False, a + "kl_estimator_type": "k3",
                a + "advantage_estimator": estimator}
    for flat, rows in ((False, [0, 1, 2, 3]), (True, [2, 3])):
        res = advcli.run(str(src), tmp_path / "o.parquet", flavor="skyrl", force=True, chunk_rows=chunk_rows,
                         settings={**settings, a + "zero_variance_filter": flat})
        x = np.array(ref, dtype=np.float64)[rows] - np.array(lp)[rows]
        k3 = np.exp(np.clip(x, -20, 20)) - np.clip(x, -20, 20) - 1
        assert _diag(res, "kl_input_clamp")["count"] == int((np.abs(x) > 20).sum())
        assert _diag(res, "kl_output_clamp")["count"] == int((np.abs(k3) > 10).sum())
        clamped = [r for r, row in zip(rows, np.abs(x)) if row.max() > 20]
        assert [e["row"] for e in _diag(res, "kl_input_clamp")["examples"]] == clamped


def test_reward_normalisation_stage_is_checked_too(tmp_path):
    """Group z-score of the row reward on the [G, n] reshape before a token-level estimator (ROLL
    reward_norm): 0.9×3 gives 0.0596 in float32 (spec/README.md §3, ROLL grpo row, confirmed with
    ROLL's code @8eb27cc2) and 0 in float64."""
    src = tmp_path / "in.parquet"
    pq.write_table(pa.table({"reward": pa.array([0.9] * 3 + [1.0, 0.0, 1.0], pa.float32()),
                             "response_mask": pa.array([[1, 1]] * 6, pa.list_(pa.int8()))}), src)
    settings = {"estimator.name": "reinforce_plus_plus", "reward.normalize.mean": "group",
                "reward.normalize.std": "group", "grouping.by": "position", "grouping.size": 3}
    r32 = advcli.run(str(src), tmp_path / "o32.parquet", flavor="advcli", settings=settings)
    r64 = advcli.run(str(src), tmp_path / "o64.parquet", flavor="advcli", settings=settings, precision="float64")
    a32, a64 = _adv(tmp_path / "o32.parquet"), _adv(tmp_path / "o64.parquet")
    assert a32[0] == pytest.approx(0.0596, abs=5e-4) and a64[:3] == [0.0, 0.0, 0.0]
    # the second group: (1 − 2/3)/(std([1,0,1], ddof=1) + 1e-6) in both precisions
    assert a64[3] == pytest.approx((1 - 2 / 3) / np.std([1, 0, 1], ddof=1), rel=1e-5)
    haz = _diag(r32, "float32_cancellation")
    assert haz["count"] == 1 and haz["examples"][0]["group"] == "#0"
    assert haz["examples"][0]["stage"] == "reward normalisation"
    assert haz["examples"][0]["adv_float32"][0] == pytest.approx(a32[0]) and haz["examples"][0]["adv_float64"][0] == 0
    assert _diag(r64, "float32_cancellation")["count"] == 1


def test_nonfinite_advantages_per_token_and_per_row_agree():
    """Rows with a NaN/inf advantage on a valid token are flagged; a NaN on a masked token is not. The
    row form (row-level estimators: one value per row and its valid-token count) flags the same rows."""
    import torch

    from advcli.ops.ragged import Ragged
    from advcli.pipeline.diagnostics import Diagnostics

    lens = torch.tensor([3, 2, 0, 4, 2, 1])
    row_val = torch.tensor([0.5, float("nan"), 1.0, float("inf"), float("nan"), -1.0])
    lay = Ragged.from_lengths(lens)
    mask = torch.tensor([1, 1, 0, 1, 1, 1, 0, 1, 1, 0, 0, 1], dtype=torch.float32)
    valid = lay.row_sum(mask.to(torch.int64))  # row 4 (NaN) has no valid token
    adv = lay.broadcast(row_val).clone()
    adv[2] = float("nan")  # masked token of row 0: not a valid advantage
    by_tok, by_row = Diagnostics(), Diagnostics()
    # two chunks: rows 0-2 and rows 3-5 (global rows 10.. and 13..)
    for d, rows in ((by_tok, None), (by_row, True)):
        for a, b in ((0, 3), (3, 6)):
            t0, t1 = int(lay.offsets[a]), int(lay.offsets[b])
            sub = Ragged.from_lengths(lens[a:b])
            kw = {"row_adv": (row_val[a:b], valid[a:b])} if rows else {}
            d.add_chunk(10 + a, sub, mask[t0:t1], adv[t0:t1], {}, **kw)
    want = [11, 13]  # row 1 (NaN, valid tokens) and row 3 (inf); not row 0 (masked NaN) nor row 4 (no valid)
    for d in (by_tok, by_row):
        item = next(x for x in d.finish() if x["kind"] == "nonfinite_advantages")
        assert item["count"] == 2 and [e["row"] for e in item["examples"]] == want


@pytest.mark.parametrize("kind", ["k1", "abs", "k2", "k3"])
@pytest.mark.parametrize("spread", [0.5, 2.0, 2.5, 3.5, 15.0, 25.0])
def test_kl_clamp_flags_shortcut_agrees_with_the_per_token_rule(kind, spread):
    """kl_clamp_flags may answer 'nothing clamped' from min/max x alone: it must agree with the rule
    applied token by token, f(clamp(x)) vs the clamps, whatever the chunk's spread (k3 reaches its ±10
    output clamp near x = 2.53 and x = -11)."""
    from advcli.ops import kl as kl_ops

    g = torch.Generator().manual_seed(int(spread * 10))
    for clamps in ((20.0, 10.0), (None, 10.0), (20.0, None), (None, None), (1.0, 0.4)):
        lp = torch.randn(5000, generator=g) * spread
        ref = torch.zeros(5000)
        flag_in, flag_out = kl_ops.kl_clamp_flags(lp, ref, kind, *clamps)
        x = ref - lp
        want_in = x.abs() > clamps[0] if clamps[0] is not None else None
        xc = x.clamp(-clamps[0], clamps[0]) if clamps[0] is not None else x
        want_out = kl_ops.KL_KINDS[kind].fn(xc).abs() > clamps[1] if clamps[1] is not None else None
        for got, want in ((flag_in, want_in), (flag_out, want_out)):
            if want is None:
                assert got is None
            else:
                assert torch.equal(got.expand_as(want), want), (kind, spread, clamps)
