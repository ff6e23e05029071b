"""``advcli filter --variance-top-p/--variance-top-k``: RAGEN-2's signal-to-noise group filter (arXiv
2604.06268; verl PR #7894, TRL PR #7242), and ``--mask-dropped`` (the PRs mask the unselected groups out of
the loss instead of removing them). The expected selection is computed here in plain Python from the
rule: per step, groups by reward variance (descending, ties in order of appearance), zero-variance groups
left out unless asked; top_k the first K, top_p the shortest prefix reaching P·Σ variance."""
from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_commands import main_rc
from test_filter import make_dump

# step 0: a [0, 1] var 1/2; b [0, 0, 1, 1] var 1/3; c [1, 1] var 0; d [0, 0.5] var 1/8; e [1] alone (0)
# step 1: f [0, 1, 1] var 1/3; g [0.5, 0.5] var 0
HAND = [("a", 0, 0.0), ("b", 0, 0.0), ("c", 0, 1.0), ("a", 0, 1.0), ("d", 0, 0.0), ("b", 0, 0.0), ("e", 0, 1.0),
        ("b", 0, 1.0), ("c", 0, 1.0), ("d", 0, 0.5), ("b", 0, 1.0), ("f", 1, 0.0), ("g", 1, 0.5), ("f", 1, 1.0),
        ("g", 1, 0.5), ("f", 1, 1.0)]


def hand_dump(path):
    t = pa.table({"prompt_id": [r[0] for r in HAND], "step": pa.array([r[1] for r in HAND], pa.int64()),
                  "reward": pa.array([r[2] for r in HAND], pa.float32()),
                  "response_mask": pa.array([[1, 1, 0]] * len(HAND), pa.list_(pa.int8())),
                  "old_log_probs": pa.array([[-0.5, -0.25, -1.0]] * len(HAND), pa.list_(pa.float32()))})
    pq.write_table(t, str(path))
    return str(path)


def selection(rows, top_p=None, top_k=None, include_zero=False, ddof=1):
    """Plain Python: the (step, prompt_id) groups RAGEN-2's rule keeps."""
    groups = {}
    for pid, step, r in rows:
        groups.setdefault((step, pid), []).append(r)
    keep = set()
    for step in sorted({k[0] for k in groups}):
        ranked = []
        for (s, pid), vals in groups.items():  # insertion order = order of appearance
            if s != step:
                continue
            vals = [v for v in vals if v == v]
            n = len(vals)
            mu = sum(vals) / n if n else 0.0
            var = sum((v - mu) ** 2 for v in vals) / (n - ddof) if n - ddof > 0 else 0.0
            ranked.append((var, (s, pid)))
        total = sum(v for v, _ in ranked)
        ranked = sorted(ranked, key=lambda x: -x[0])  # stable: ties keep the order of appearance
        if not include_zero:
            ranked = [x for x in ranked if x[0] > 0]
        if top_k is not None:
            keep |= {k for _, k in ranked[:top_k]}
        else:
            target, cum = top_p * total - 1e-12, 0.0
            if target > 0:
                for v, k in ranked:
                    keep.add(k)
                    cum += v
                    if cum >= target:
                        break
    return keep


@pytest.mark.parametrize("args,kw,kept", [
    (["--variance-top-p", "0.5"], dict(top_p=0.5), {"a", "f"}),
    (["--variance-top-p", "0.8"], dict(top_p=0.8), {"a", "b", "f"}),
    (["--variance-top-p", "0.9"], dict(top_p=0.9), {"a", "b", "d", "f"}),
    (["--variance-top-k", "2"], dict(top_k=2), {"a", "b", "f"}),
    (["--variance-top-k", "5", "--variance-include-zero"], dict(top_k=5, include_zero=True),
     {"a", "b", "d", "c", "e", "f", "g"}),
    (["--variance-top-k", "1", "--variance-ddof", "0"], dict(top_k=1, ddof=0), {"a", "f"}),
])
def test_hand_checked_selection(tmp_path, capsys, args, kw, kept):
    src = hand_dump(tmp_path / "in.parquet")
    assert {pid for _, pid in selection(HAND, **kw)} == kept  # the rule, by hand above
    out = tmp_path / "out.parquet"
    code, stdout, err = main_rc(capsys, "filter", src, "-o", out, *args, "--json")
    assert code == 0, err
    got = pq.read_table(out).column("prompt_id").to_pylist()
    assert got == [r[0] for r in HAND if r[0] in kept]  # kept rows, in input order
    rep = json.loads(stdout)
    assert rep["dropped_variance"] == 7 - len(kept)


@pytest.mark.parametrize("args,kw", [(["--variance-top-p", "0.7"], dict(top_p=0.7)),
                                     (["--variance-top-k", "4"], dict(top_k=4)),
                                     (["--variance-top-p", "1"], dict(top_p=1.0))])
def test_uneven_groups_with_nan_and_steps(tmp_path, capsys, args, kw):
    src = make_dump(tmp_path / "in.parquet", seed=5)
    t = pq.read_table(src).to_pydict()
    rows = list(zip(t["prompt_id"], t["step"], t["reward"]))
    rows = [(p, s, float("nan") if r is None else r) for p, s, r in rows]
    keep = selection(rows, **kw)
    want = [i for i, (p, s, _) in enumerate(rows) if (s, p) in keep]
    assert 0 < len(want) < len(rows)
    out = tmp_path / "out.parquet"
    code, _, err = main_rc(capsys, "filter", src, "-o", out, *args, "--chunk-rows", "7", "-q")
    assert code == 0, err
    got = pq.read_table(out)
    assert got.column("prompt_id").to_pylist() == [rows[i][0] for i in want]
    assert got.column("step").to_pylist() == [rows[i][1] for i in want]


def test_mask_dropped_keeps_rows_and_masks_the_loss(tmp_path, capsys):
    """Every row written, unchanged but for the unselected groups' response_mask (all 0); a GRPO run on it
    gives the kept groups the advantages of a run on the dropped file, and the masked rows 0."""
    src = hand_dump(tmp_path / "in.parquet")
    masked, dropped = tmp_path / "m.parquet", tmp_path / "d.parquet"
    code, _, err = main_rc(capsys, "filter", src, "-o", masked, "--variance-top-k", "2", "--mask-dropped", "-q")
    assert code == 0, err
    code, _, err = main_rc(capsys, "filter", src, "-o", dropped, "--variance-top-k", "2", "-q")
    assert code == 0, err
    m, s = pq.read_table(masked), pq.read_table(src)
    kept = {"a", "b", "f"}
    assert m.num_rows == s.num_rows
    for c in ("prompt_id", "step", "reward", "old_log_probs"):
        assert m.column(c).equals(s.column(c))
    assert m.column("response_mask").to_pylist() == [[1, 1, 0] if r[0] in kept else [0, 0, 0] for r in HAND]
    assert m.schema.field("response_mask").type == s.schema.field("response_mask").type
    outs = {}
    for name, path in (("m", masked), ("d", dropped)):
        o = tmp_path / f"run_{name}.parquet"
        code, _, err = main_rc(capsys, "run", path, "-o", o, "--flavor", "verl", "--set",
                               "algorithm.adv_estimator=grpo", "-q")
        assert code == 0, err
        outs[name] = pq.read_table(o).column("advantages").to_pylist()
    kept_rows = [i for i, r in enumerate(HAND) if r[0] in kept]
    assert [outs["m"][i] for i in kept_rows] == outs["d"]
    assert all(outs["m"][i] == [0.0, 0.0, 0.0] for i in range(len(HAND)) if i not in kept_rows)


@pytest.mark.parametrize("args,needle", [
    (["--variance-top-p", "0.5", "--variance-top-k", "2"], "give one"),
    (["--variance-top-p", "1.5"], "--variance-top-p"),
    (["--variance-top-k", "0"], "--variance-top-k"),
    (["--variance-top-p", "0.9", "--variance-selection-eps", "-1"], "--variance-selection-eps"),
    (["--variance-top-p", "0.9", "--flavor", "verll"], "unknown flavor"),
])
def test_bad_options_refused(tmp_path, capsys, args, needle):
    src = hand_dump(tmp_path / "in.parquet")
    out = tmp_path / "out.parquet"
    code, _, err = main_rc(capsys, "filter", src, "-o", out, *args)
    assert code == 2 and needle in err and "Traceback" not in err
    assert not out.exists()


def test_mask_dropped_needs_a_token_mask(tmp_path, capsys):
    src = tmp_path / "in.parquet"
    pq.write_table(pa.table({"prompt_id": ["a", "a", "b", "b"], "reward": [0.0, 1.0, 1.0, 1.0]}), str(src))
    out = tmp_path / "out.parquet"
    code, _, err = main_rc(capsys, "filter", src, "-o", out, "--variance-top-k", "1", "--mask-dropped")
    assert code == 2 and "response_mask" in err and not out.exists()


# ------------------------------------------------ the trainers' rules (verl PR #7894, SkyRL PR #2217: open)
def rule_dump(path, rows):
    """rows: (prompt_id, step, reward, mask)."""
    t = pa.table({"prompt_id": [r[0] for r in rows], "step": pa.array([r[1] for r in rows], pa.int64()),
                  "reward": pa.array([r[2] for r in rows], pa.float32()),
                  "response_mask": pa.array([r[3] for r in rows], pa.list_(pa.int8()))})
    pq.write_table(t, str(path))
    return str(path)


# step 0: A [0, 0.1] var 0.005, B [0.2, 0.3] var 0.005: Σ 0.01, so P·Σ = 0.009 ≤ eps 0.01
# step 1: C [0, 1] var 0.5, D [0, 0.5] var 0.125, E [1, 1] var 0: Σ 0.625, P·Σ = 0.5625
EPS_ROWS = [("A", 0, 0.0, [1]), ("A", 0, 0.1, [1]), ("B", 0, 0.2, [1]), ("B", 0, 0.3, [1]),
            ("C", 1, 0.0, [1]), ("C", 1, 1.0, [1]), ("D", 1, 0.0, [1]), ("D", 1, 0.5, [1]),
            ("E", 1, 1.0, [1]), ("E", 1, 1.0, [1])]


@pytest.mark.parametrize("flavor,extra,kept", [
    # RAGEN-2 (eps 1e-12): step 0 target 0.009: A (0.005) then B (0.01) reach it; step 1 target 0.5625: C, D
    (None, [], {"A", "B", "C", "D"}),
    ("trl", [], {"A", "B", "C", "D"}),
    # verl / SkyRL (eps 0.01): step 0 target 0.009 − 0.01 ≤ 0 keeps nothing; step 1 target 0.5525: C, D
    ("verl", [], {"C", "D"}),
    ("skyrl", [], {"C", "D"}),
    # eps 0.2: step 1 target 0.3625, reached by C alone
    ("verl", ["--variance-selection-eps", "0.2"], {"C"}),
    (None, ["--variance-selection-eps", "0.01"], {"C", "D"}),
])
def test_selection_eps_by_hand(tmp_path, capsys, flavor, extra, kept):
    src = rule_dump(tmp_path / "in.parquet", EPS_ROWS)
    out = tmp_path / "out.parquet"
    args = ["--flavor", flavor] if flavor else []
    code, stdout, err = main_rc(capsys, "filter", src, "-o", out, "--variance-top-p", "0.9", *args, *extra, "--json")
    assert code == 0, err
    assert set(pq.read_table(out).column("prompt_id").to_pylist()) == kept
    note = " ".join(json.loads(stdout)["notes"])
    assert "not in any release" in note and ("#7894" in note if flavor == "verl" else True)
    # TRL #7242's filter function is not public where advcli can read it: the note says so and whose rule ran
    assert ("TRL PR #7242 (open; its filter function's code is not public" in note) == (flavor == "trl")


# F: 1.0, 0.0 live, 5.0 with an all-zero mask   -> verl/SkyRL var of [1, 0] = 0.5; RAGEN-2 of [1, 0, 5] = 7
# G: 0, 2, 1                                      -> var 1 under both
# H: inf, 3, 1                                    -> verl/SkyRL var of [3, 1] = 2 (RAGEN-2 counts the inf)
# I: 4 live, 9 with an all-zero mask              -> verl/SkyRL: one value ≤ ddof 1: variance 0; RAGEN-2 12.5
LIVE_ROWS = [("F", 0, 1.0, [1, 1]), ("F", 0, 0.0, [0, 1]), ("F", 0, 5.0, [0, 0]),
             ("G", 0, 0.0, [1]), ("G", 0, 2.0, [1]), ("G", 0, 1.0, [1]),
             ("H", 0, float("inf"), [1]), ("H", 0, 3.0, [1]), ("H", 0, 1.0, [1]),
             ("I", 0, 4.0, [1]), ("I", 0, 9.0, [0])]


@pytest.mark.parametrize("flavor,k,kept", [
    ("verl", 1, {"H"}), ("verl", 2, {"H", "G"}), ("verl", 3, {"H", "G", "F"}),
    ("skyrl", 4, {"H", "G", "F"}),  # I has variance 0: not eligible without --variance-include-zero
])
def test_live_rows_and_finite_rewards_by_hand(tmp_path, capsys, flavor, k, kept):
    src = rule_dump(tmp_path / "in.parquet", LIVE_ROWS)
    out = tmp_path / "out.parquet"
    code, stdout, err = main_rc(capsys, "filter", src, "-o", out, "--variance-top-k", str(k), "--flavor", flavor,
                                "--json")
    assert code == 0, err
    assert set(pq.read_table(out).column("prompt_id").to_pylist()) == kept
    rep = json.loads(stdout)
    assert rep["dropped_variance"] == 4 - len(kept)


def test_ragen_rule_counts_masked_rows(tmp_path, capsys):
    """Without a trainer's rule the all-masked rows count: I (12.5) and F (7) rank first (H's inf left aside)."""
    rows = [r for r in LIVE_ROWS if r[0] != "H"]
    src = rule_dump(tmp_path / "in.parquet", rows)
    out = tmp_path / "out.parquet"
    code, _, err = main_rc(capsys, "filter", src, "-o", out, "--variance-top-k", "2", "-q")
    assert code == 0, err
    assert set(pq.read_table(out).column("prompt_id").to_pylist()) == {"I", "F"}


def test_variance_rule_group_variance_unit():
    import numpy as np

    from advcli.figures.curate import group_variance

    group = np.array([0, 0, 0, 1, 1])
    m = np.array([1.0, 0.0, np.inf, 4.0, 9.0])
    live = np.array([True, True, True, True, False])
    var, n = group_variance(group, m, 2, 1, live)
    assert var.tolist() == [0.5, 0.0] and n.tolist() == [2.0, 1.0]


# TRL #7242 (open) ranks the rewards after GRPOTrainer's multi-reward aggregation. One step, groups of 4:
# X: acc [0, 10, 0, 10], fmt 0      -> raw sum variance 33.3; normalize_then_sum ±0.866 each: variance ~1
# Y: acc [0, 0, 0, 1], fmt [0, 1, 1, 1] -> raw sum [0, 1, 1, 2] variance 0.667; z-scores summed [−2, 0, 0, 2]: ~2.67
# Z: acc [1, 1, None, 1], fmt 1    -> uniform under both (a reward function's None is NaN, left out)
TRL_ROWS = [("X", 0.0, 0.0), ("X", 10.0, 0.0), ("X", 0.0, 0.0), ("X", 10.0, 0.0),
            ("Y", 0.0, 0.0), ("Y", 0.0, 1.0), ("Y", 0.0, 1.0), ("Y", 1.0, 1.0),
            ("Z", 1.0, 1.0), ("Z", 1.0, 1.0), ("Z", None, 1.0), ("Z", 1.0, 1.0)]


def trl_aggregated_by_hand(rows, agg, weights=(1.0, 1.0)):
    """TRL GRPOTrainer's rewards before the variance filter, in plain Python (nanmean, unbiased nanstd, eps 1e-4)."""
    out = []
    for pid, acc, fmt in rows:
        vals = [acc, fmt]
        if agg == "sum_then_normalize":
            out.append((pid, 0, sum(w * v for w, v in zip(weights, vals) if v is not None)))
            continue
        total = 0.0
        for k, v in enumerate(vals):
            if v is None:
                continue
            col = [r[1 + k] for r in rows if r[0] == pid and r[1 + k] is not None]
            mu = sum(col) / len(col)
            sd = (sum((c - mu) ** 2 for c in col) / (len(col) - 1)) ** 0.5
            total += weights[k] * (v - mu) / (sd + 1e-4)
        out.append((pid, 0, total))
    return out


@pytest.mark.parametrize("agg,weights", [("normalize_then_sum", None), ("sum_then_normalize", "[1.0, 30.0]")])
def test_trl_ranks_its_aggregated_rewards(tmp_path, capsys, agg, weights):
    t = pa.table({"prompt_id": [r[0] for r in TRL_ROWS], "step": pa.array([0] * len(TRL_ROWS), pa.int64()),
                  "acc": pa.array([r[1] for r in TRL_ROWS], pa.float64()),
                  "fmt": pa.array([r[2] for r in TRL_ROWS], pa.float64()),
                  "reward": pa.array([(r[1] or 0) + r[2] for r in TRL_ROWS], pa.float64())})
    src, out = tmp_path / "in.parquet", tmp_path / "out.parquet"
    pq.write_table(t, str(src))
    sets = ["--set", f"multi_objective_aggregation={agg}", "--set", "reward_funcs=[acc, fmt]"]
    if weights:
        sets += ["--set", f"reward_weights={weights}"]
    code, stdout, err = main_rc(capsys, "filter", src, "-o", out, "--variance-top-k", "1", "--flavor", "trl", *sets,
                                "--json")
    assert code == 0, err
    w = (1.0, 30.0) if weights else (1.0, 1.0)
    want = {pid for _, pid in selection(trl_aggregated_by_hand(TRL_ROWS, agg, w), top_k=1)}
    assert set(pq.read_table(out).column("prompt_id").to_pylist()) == want
    # normalize_then_sum picks Y; the weighted raw sum (fmt ×30) picks Y too, where the plain reward picks X
    assert want == {"Y"}
    code, _, err = main_rc(capsys, "filter", src, "-o", tmp_path / "plain.parquet", "--variance-top-k", "1", "--force")
    assert code == 0, err
    assert set(pq.read_table(tmp_path / "plain.parquet").column("prompt_id").to_pylist()) == {"X"}
    note = " ".join(json.loads(stdout)["notes"])
    assert "TRL PR #7242 (open; " in note and f"ranked by TRL's aggregated rewards ({agg} of acc, fmt" in note
    from advcli.figures.curate import filter_sections

    metric = dict(filter_sections(json.loads(stdout))[1][0][2])["metric"]  # the summary's line: what was ranked
    assert metric == (f"TRL's {agg} of 1·acc, 30·fmt" if weights else f"TRL's {agg} of acc, fmt"), metric


def test_filter_set_needs_trl(tmp_path, capsys):
    src = hand_dump(tmp_path / "in.parquet")
    code, _, err = main_rc(capsys, "filter", src, "-o", tmp_path / "o.parquet", "--variance-top-k", "1", "--flavor",
                           "verl", "--set", "reward_funcs=[acc]")
    assert code == 2 and "with --flavor trl" in err
    code, _, err = main_rc(capsys, "filter", src, "-o", tmp_path / "o.parquet", "--variance-top-k", "1", "--flavor",
                           "trl", "--set", "beta=0.1")
    assert code == 2 and "reads only reward_funcs" in err


# ---------------- the PRs' code, point by point (verl PR #7894 verl/trainer/ppo/reward_variance_filter.py @
# a9772ca7, SkyRL PR #2217 skyrl/train/reward_variance_filter.py @ 4f86c72d; TRL PR #7242 for RAGEN-2's rule)
# step 0: P [1, 1], Q [0, 0]: Σ variance 0; step 1: R [0, 1] var 0.5, S [1, 1] var 0
ZERO_ROWS = [("P", 0, 1.0, [1]), ("P", 0, 1.0, [1]), ("Q", 0, 0.0, [1]), ("Q", 0, 0.0, [1]),
             ("R", 1, 0.0, [1]), ("R", 1, 1.0, [1]), ("S", 1, 1.0, [1]), ("S", 1, 1.0, [1])]


@pytest.mark.parametrize("flavor,extra,kept", [
    # verl/SkyRL: include_zero and Σ variance 0 keeps every group of the step (total_variance <= 0 branch);
    # step 1: target 0.9·0.5 − 0.01 = 0.44, reached by R
    ("verl", ["--variance-top-p", "0.9", "--variance-include-zero"], {"P", "Q", "R"}),
    ("skyrl", ["--variance-top-p", "0.9", "--variance-include-zero"], {"P", "Q", "R"}),
    # RAGEN-2 / TRL: target 0.9·0 − 1e-12 ≤ 0 keeps nothing in step 0
    ("trl", ["--variance-top-p", "0.9", "--variance-include-zero"], {"R"}),
    # verl/SkyRL: include_zero with top_p 1 keeps every group (the `top_p == 1.0` branch), S included
    ("verl", ["--variance-top-p", "1", "--variance-include-zero"], {"P", "Q", "R", "S"}),
    ("skyrl", ["--variance-top-p", "1", "--variance-include-zero"], {"P", "Q", "R", "S"}),
    # without include_zero: step 0 none; step 1 target 0.5 − 0.01 = 0.49, reached by R
    ("verl", ["--variance-top-p", "1"], {"R"}),
    # RAGEN-2 with top_p 1: target 0.5 − 1e-12, reached by R; S (0) is never needed
    ("trl", ["--variance-top-p", "1", "--variance-include-zero"], {"R"}),
    # top_k with include_zero: step 0 the first K in order of appearance (P), step 1 R
    ("verl", ["--variance-top-k", "1", "--variance-include-zero"], {"P", "R"}),
])
def test_include_zero_branches_by_hand(tmp_path, capsys, flavor, extra, kept):
    src = rule_dump(tmp_path / "in.parquet", ZERO_ROWS)
    out = tmp_path / "out.parquet"
    code, stdout, err = main_rc(capsys, "filter", src, "-o", out, "--flavor", flavor, *extra, "--json")
    assert code == 0, err
    assert set(pq.read_table(out).column("prompt_id").to_pylist()) == kept
    rep = json.loads(stdout)
    assert rep["groups_kept"] == len(kept) and rep["dropped_variance"] == 4 - len(kept)


# step 0: X [0, 2^31] var 2^61; step 1: U [0, 1] var 0.5, V [0, 0.5] var 0.125, W [0.5, 1] var 0.125.
# top_p 1, eps 0.125: step 1's target is 0.75 − 0.125 = 0.625 = U + V exactly, so the PRs' loop (cumulative
# from 0 within the batch) stops at V. A running sum over both steps minus step 0's 2^61 would read 0 for
# every prefix (2^61 + 0.5 rounds to 2^61) and keep W too.
EXACT_ROWS = [("X", 0, 0.0, [1]), ("X", 0, 2.0 ** 31, [1]), ("U", 1, 0.0, [1]), ("U", 1, 1.0, [1]),
              ("V", 1, 0.0, [1]), ("V", 1, 0.5, [1]), ("W", 1, 0.5, [1]), ("W", 1, 1.0, [1])]


@pytest.mark.parametrize("flavor", ["verl", "skyrl", "trl"])
def test_cumulative_mass_restarts_at_each_step_exactly(tmp_path, capsys, flavor):
    src = rule_dump(tmp_path / "in.parquet", EXACT_ROWS)
    out = tmp_path / "out.parquet"
    code, _, err = main_rc(capsys, "filter", src, "-o", out, "--flavor", flavor, "--variance-top-p", "1",
                           "--variance-selection-eps", "0.125", "-q")
    assert code == 0, err
    assert set(pq.read_table(out).column("prompt_id").to_pylist()) == {"X", "U", "V"}


def test_scope_cumsum_matches_a_loop():
    import numpy as np

    from advcli.figures.curate import scope_cumsum

    rng = np.random.default_rng(0)
    x = rng.random(50) * 10.0 ** rng.integers(-3, 18, 50)
    seg = np.sort(rng.integers(0, 6, 50))
    starts = {s: int(np.flatnonzero(seg == s)[0]) for s in np.unique(seg)}
    pos = np.arange(50) - np.array([starts[s] for s in seg])
    want = []
    for s in np.unique(seg):
        c = 0.0
        for v in x[seg == s]:
            c += v
            want.append(c)
    assert scope_cumsum(x, seg, pos, 6).tolist() == want  # bit for bit: the same additions in the same order


def tls_dump(path, rows, fixed=False):
    """rows: (prompt_id, reward, token_level_scores or None, mask)."""
    cols = {"prompt_id": [r[0] for r in rows], "reward": pa.array([r[1] for r in rows], pa.float32()),
            "response_mask": pa.array([r[3] for r in rows], pa.list_(pa.int8(), 2) if fixed else pa.list_(pa.int8()))}
    if rows[0][2] is not None:
        cols["token_level_scores"] = pa.array([r[2] for r in rows], pa.list_(pa.float32()))
    pq.write_table(pa.table(cols), str(path))
    return str(path)


# verl ranks (token_level_scores · response_mask).sum(-1) (apply_reward_variance_filter). M: scores [0, 1] twice,
# the second row's last token masked: masked sums [1, 0], variance 0.5 (its reward column [1, 1]: variance 0).
# N: sums [0, 0.5], variance 0.125 either way. top_k 1: verl keeps M; SkyRL (the reward, trainer.py's
# sequence_rewards) and --metric reward keep N.
TLS_ROWS = [("M", 1.0, [0.0, 1.0], [1, 1]), ("M", 1.0, [0.0, 1.0], [1, 0]),
            ("N", 0.0, [0.0, 0.0], [1, 1]), ("N", 0.5, [0.0, 0.5], [1, 1])]


@pytest.mark.parametrize("flavor,scores,fixed,extra,kept", [
    ("verl", True, False, [], {"M"}),
    ("verl", False, False, [], {"M"}),  # no score list: the reward at position L−1 = 1, masked on M's 2nd row
    ("verl", False, True, [], {"N"}),  # fixed-width padded lists: L−1 is the last mask=1 token, never masked
    ("verl", True, False, ["--metric", "reward"], {"N"}),
    ("skyrl", True, False, [], {"N"}),
])
def test_verl_ranks_masked_reward_sums(tmp_path, capsys, flavor, scores, fixed, extra, kept):
    rows = [(p, r, s if scores else None, m) for p, r, s, m in TLS_ROWS]
    src = tls_dump(tmp_path / "in.parquet", rows, fixed)
    out = tmp_path / "out.parquet"
    code, stdout, err = main_rc(capsys, "filter", src, "-o", out, "--flavor", flavor, "--variance-top-k", "1",
                                *extra, "--json")
    assert code == 0, err
    assert set(pq.read_table(out).column("prompt_id").to_pylist()) == kept
    note = " ".join(json.loads(stdout)["notes"])
    assert ("masked reward sum" in note) == (flavor == "verl" and not extra)


def _pr_selection(variances: list[float], top_p: float, eps: float) -> list[int]:
    """The PRs' top_p loop (without include_zero) over Python float variances, groups in order."""
    total = sum(variances)
    cands = sorted([g for g, v in enumerate(variances) if v > 0.0], key=lambda g: variances[g], reverse=True)
    target, cum, kept = top_p * total - eps, 0.0, []
    if target > 0.0:
        for g in cands:
            kept.append(g)
            cum += variances[g]
            if cum >= target:
                break
    return kept


def test_verl_variance_is_float32_skyrl_float64(tmp_path, capsys):
    """verl takes float(torch.var(...)) of its float32 scores, SkyRL np.var of Python floats. A [0, 2] (var 2),
    B [0, 0.3f]: float32 var 0.04500000178813934, float64 0.04500000357627876. With top_p 1 and eps = B's float32
    variance, verl's target is 2 + v32 − v32 = 2, reached by A alone; SkyRL's is 2 + v64 − v32 > 2: A and B."""
    import numpy as np
    import torch

    x = float(np.float32(0.3))
    v32 = [float(torch.var(torch.tensor(v, dtype=torch.float32), correction=1)) for v in ([0.0, 2.0], [0.0, x])]
    v64 = [float(np.var(np.array(v), ddof=1)) for v in ([0.0, 2.0], [0.0, x])]
    eps = v32[1]
    assert v64[1] != v32[1]
    want = {"verl": {"AB"[g] for g in _pr_selection(v32, 1.0, eps)},
            "skyrl": {"AB"[g] for g in _pr_selection(v64, 1.0, eps)}}
    assert want == {"verl": {"A"}, "skyrl": {"A", "B"}}  # the two rules part here
    src = rule_dump(tmp_path / "in.parquet", [("A", 0, 0.0, [1]), ("A", 0, 2.0, [1]), ("B", 0, 0.0, [1]),
                                               ("B", 0, x, [1])])
    for flavor in ("verl", "skyrl"):
        out = tmp_path / f"{flavor}.parquet"
        code, _, err = main_rc(capsys, "filter", src, "-o", out, "--flavor", flavor, "--variance-top-p", "1",
                               "--variance-selection-eps", repr(eps), "-q")
        assert code == 0, err
        assert set(pq.read_table(out).column("prompt_id").to_pylist()) == want[flavor]


def test_an_infinite_reward_is_refused_by_ragens_rule_and_left_out_by_verls(tmp_path, capsys):
    """One +inf reward made its group's variance, and so the step's total mass, NaN: top_p kept nothing of the
    step and the filter said 'keeps no row' with no word of the value. RAGEN-2's rule (the default) refuses it
    naming the row; verl's leaves non-finite rewards out of the variance, as the trainer does."""
    rows = [("a", 0, 0.0), ("a", 0, 1.0), ("b", 0, 0.0), ("b", 0, 1.0), ("b", 0, 1.0), ("c", 0, 0.0),
            ("c", 0, float("inf"))]
    src = tmp_path / "in.parquet"
    pq.write_table(pa.table({"prompt_id": [r[0] for r in rows], "step": [r[1] for r in rows],
                             "reward": pa.array([r[2] for r in rows], pa.float32()),
                             "response_mask": [[1]] * len(rows)}), src)
    code, _, err = main_rc(capsys, "filter", src, "-o", tmp_path / "o.parquet", "--variance-top-p", "0.9")
    assert code == 2 and "column 'reward', row 6: inf (1 infinite value(s))" in err, err
    code, _, err = main_rc(capsys, "filter", src, "-o", tmp_path / "o.parquet", "--variance-top-p", "0.9",
                           "--flavor", "verl")
    assert code == 0, err


def test_groups_of_the_same_rewards_tie_whatever_their_row_order(tmp_path, capsys):
    """Three groups of the same float32 rewards {0.1 ×7, 1.0} in different row orders have one variance: the
    ranking's ties keep the first-appearing group (top_k 1 keeps g0). Summed in row order, the three variances
    differed in their last bits and the order of the rows decided which group was kept."""
    from advcli.figures.curate import group_variance

    orders = [[0.1] * 7 + [1.0], [1.0] + [0.1] * 7, [0.1] * 3 + [1.0] + [0.1] * 4]
    rewards = [r for o in orders for r in o]
    values = np.array(rewards, np.float32).astype(np.float64)
    var, n = group_variance(np.repeat(np.arange(3), 8), values, 3, 1)
    assert var[0] == var[1] == var[2] and list(n) == [8, 8, 8]
    src = tmp_path / "tie.parquet"
    pq.write_table(pa.table({"prompt_id": [f"g{i}" for i in range(3) for _ in range(8)],
                             "reward": pa.array(rewards, pa.float32()),
                             "response_mask": pa.array([[1]] * 24, pa.list_(pa.int8()))}), src)
    code, _, err = main_rc(capsys, "filter", src, "-o", tmp_path / "k.parquet", "--variance-top-k", "1")
    assert code == 0, err
    assert set(pq.read_table(tmp_path / "k.parquet").column("prompt_id").to_pylist()) == {"g0"}
