"""--flavor prime-rl against numbers produced by prime-rl's own algorithm classes, and by hand.

EXPECTED below was computed by running the unmodified ``GRPOAlgorithm``, ``MaxRLAlgorithm``,
``HierarchicalGRPOAlgorithm`` and ``RAEAlgorithm`` (``src/prime_rl/orchestrator/algo/{base,routing,grpo,
max_rl,hierarchical_grpo,rae}.py``) with configs validated by prime-rl's own ``AlgoConfig`` union
(``packages/prime-rl-configs/src/prime_rl/configs/algorithm.py``), PrimeIntellect-ai/prime-rl @
559b44772e471d1538537b8805cc77f3824a5e64, on CPU (torch 2.13), verifiers containers stubbed. Each row
was one trace (one node per run of equal mask values; ``has_error = not trainable``), an episode per
(cohort, episode id) in order of first appearance, ``finalize_group`` once per cohort (step, prompt_id)
with a trainable trace, cohorts in order of first appearance, step ascending. The values are the
scalar each row got (0.0: no advantage); verifiers' ``Branch.spread`` puts it on the mask=1 tokens and
0.0 elsewhere. Independent python-loop references below check the same numbers from the formulas.
"""
import math
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from conftest import run_table

import advcli
from advcli.errors import AdvcliError

# (prompt_id, step, reward, mask, trainable, num_output_tokens, num_total_tokens, num_turns, agent, episode).
# Cohorts scattered: (0, a) = [1.0, 0.0, 0.5 (untrainable), 0.25, 1.0, 0.75]; (0, b) = 0.7 ×3 (all equal,
# non-dyadic; counts differ); (0, c) alone; (0, d) = one row with no sampled token + one 0.3 (alone in
# effect); (1, a) = [0.2, 0.8, 0.6] (same prompt id, next step: another cohort). Interior masked spans,
# masked tails, a row of length 1, a row with no input tokens, counts unrelated to the mask.
ROWS = [
    ("a", 0, 1.0, [1, 1, 0, 1], True, 120, 400, 2, "solver", "e1"),
    ("b", 0, 0.7, [1, 1, 1], True, 30, 100, 1, "proposer", "e3"),
    ("a", 0, 0.0, [0, 1, 1, 1, 0, 0], True, 200, 260, 3, "solver", "e1"),
    ("c", 0, 0.9, [1, 1], True, 10, 50, 1, "solver", "e5"),
    ("a", 0, 0.5, [1, 1, 1], False, 50, 80, 1, "proposer", "e2"),
    ("b", 0, 0.7, [1], True, 90, 150, 2, "solver", "e3"),
    ("d", 0, 0.3, [0, 0], True, 0, 0, 0, "solver", "e6"),
    ("a", 0, 0.25, [1], True, 0, 40, 1, "proposer", "e2"),
    ("b", 0, 0.7, [1, 0, 1, 1, 1], True, 60, 300, 2, "solver", "e4"),
    ("d", 0, 0.3, [1, 1, 1, 1], True, 5, 9, 1, "solver", "e6"),
    ("a", 1, 0.2, [1, 1], True, 12, 40, 1, "solver", "e7"),
    ("a", 1, 0.8, [1, 0, 1], True, 24, 30, 2, "proposer", "e7"),
    ("a", 1, 0.6, [1, 1, 1, 1, 1], True, 36, 36, 3, "solver", "e7"),
    ("a", 0, 1.0, [1, 1, 0], True, 80, 90, 2, "solver", "e1"),
    ("a", 0, 0.75, [1, 1], True, 70, 20, 4, "proposer", "e1"),
]
P = "orchestrator.algo."
SETTINGS = {
    "grpo": {},
    "grpo_lp_defaults": {P + "length_penalty.type": "linear"},
    "grpo_lp_weights": {P + "length_penalty.num_output_tokens_weight": 0.5,
                        P + "length_penalty.num_input_tokens_weight": 0.0,
                        P + "length_penalty.num_turns_weight": 0.3},
    "max_rl": {P + "type": "max_rl"},
    "hier_solver": {P + "type": "hierarchical_grpo", P + "episode_agents": ["solver"]},
    "hier_both": {P + "type": "hierarchical_grpo", P + "episode_agents": ["solver", "proposer"]},
    "rae_default": {P + "type": "rae"},
    "rae_05": {P + "type": "rae", P + "decay": 0.5},
}
EXPECTED = {  # prime-rl @ 559b4477, see the module docstring
    'grpo': [0.399999976, 0.0, -0.600000024, 0.0, 0.0, 0.0, 0.0, -0.350000024, 0.0, 0.0, -0.333333373, 0.266666651, 0.0666666627, 0.399999976, 0.149999976],
    'grpo_lp_defaults': [0.341071427, 0.0972221792, -0.686785698, 0.0, 0.0, -0.051527828, 0.0, -0.252499998, -0.0456945002, 0.0, -0.302857161, 0.276825398, 0.0260317624, 0.428928554, 0.169285715],
    'grpo_lp_weights': [0.379000038, 0.186666667, -0.786000013, 0.0, 0.0, -0.151666671, 0.0, -0.145999983, -0.0349999964, 0.0, -0.191111088, 0.266666651, -0.0755555332, 0.438999981, 0.113999993],
    'max_rl': [0.666666627, 0.0, -1.0, 0.0, 0.0, 0.0, 0.0, -0.583333373, 0.0, 0.0, -0.62500006, 0.49999994, 0.124999985, 0.666666627, 0.249999955],
    'hier_solver': [0.333333343, 0.0, -0.666666687, 0.0, 0.0, 0.0, 0.0, -0.25, 0.0, 0.0, -0.200000018, 0.0, 0.200000018, 0.333333343, 0.25],
    'hier_both': [0.333333343, 0.0, -0.666666687, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -0.200000018, 0.0, 0.200000018, 0.333333343, 0.0],
    'rae_default': [1.0, 0.651874959, -0.0500000007, 0.745899677, 0.0, 0.604874969, 0.0, 0.212500006, 0.574631214, 0.108604714, 0.0031744726, 0.719281256, 0.403015763, 0.952499986, 0.75],
    'rae_05': [1.0, 0.387499988, -0.5, 0.218749985, 0.0, 0.0749999881, 0.0, -0.125, 0.037499994, -0.490624964, -0.345312506, 0.293750018, 0.227343768, 0.75, 0.75],
}
NAMES = ("prompt_id", "step", "reward", "response_mask", "trainable", "num_output_tokens", "num_total_tokens",
         "num_turns", "agent_name", "episode_id")
TYPES = (pa.string(), pa.int64(), pa.float32(), pa.list_(pa.int8()), pa.bool_(), pa.int64(), pa.int64(),
         pa.int64(), pa.string(), pa.string())


def _write(path, rows=ROWS, drop=(), rename=None):
    cols = {n: pa.array([r[k] for r in rows], t) for k, (n, t) in enumerate(zip(NAMES, TYPES)) if n not in drop}
    for old, new in (rename or {}).items():
        cols[new] = cols.pop(old)
    pq.write_table(pa.table(cols), path)
    return path


def _run(tmp_path, settings, chunk_rows=3, rows=ROWS, drop=(), rename=None, columns=None, precision=None):
    src = _write(os.path.join(tmp_path, "in.parquet"), rows, drop, rename)
    t, res = run_table(src, os.path.join(tmp_path, "out.parquet"), "prime-rl", settings, columns=columns,
                       chunk_rows=chunk_rows, precision=precision)
    return t.column("advantages").to_pylist(), res


def _spread(per_row, rows=ROWS):
    """verifiers Branch.spread: the trace's scalar on mask=1 tokens, 0.0 elsewhere."""
    return [[a if m else 0.0 for m in r[3]] for a, r in zip(per_row, rows)]


def _close(got, want, rtol=1e-5, atol=1e-6):
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert len(g) == len(w), f"row {i}"
        for t, (x, y) in enumerate(zip(g, w)):
            assert abs(x - y) <= atol + rtol * abs(y), f"row {i} position {t}: {x} != {y}"


# ------------------------------------------------------------------- python-loop references (float64)
def _active(r):
    return r[4] and any(r[3])


def _cohorts(rows):
    """{(step, prompt_id): [row indices]} in order of first appearance, steps ascending."""
    out = {}
    for i, r in enumerate(rows):
        out.setdefault((r[1], r[0]), []).append(i)
    return dict(sorted(out.items(), key=lambda kv: (kv[0][0], kv[1][0])))


def ref_grpo(rows, weights=None):
    adv = [0.0] * len(rows)
    for members in _cohorts(rows).values():
        c = [i for i in members if _active(rows[i])]
        if not c:
            continue
        mu = sum(rows[i][2] for i in c) / len(c)
        s = {i: rows[i][2] for i in c}
        if weights is not None:
            out = {i: rows[i][5] for i in c}
            inp = {i: rows[i][6] - rows[i][5] for i in c}
            turns = {i: rows[i][7] for i in c}
            mx = [max(max(x.values()), 1) for x in (out, inp, turns)]
            for i in c:
                frac = weights[0] * out[i] / mx[0] + weights[1] * inp[i] / mx[1] + weights[2] * turns[i] / mx[2]
                s[i] = rows[i][2] - mu * frac
        ms = sum(s.values()) / len(c)
        for i in c:
            adv[i] = s[i] - ms
    return adv


def ref_max_rl(rows):
    adv = [0.0] * len(rows)
    for members in _cohorts(rows).values():
        c = [i for i in members if _active(rows[i])]
        mu = sum(rows[i][2] for i in c) / len(c) if c else 0.0
        for i in c:
            adv[i] = (rows[i][2] - mu) / mu if mu > 0 else 0.0
    return adv


def ref_hier(rows, episode_agents):
    adv = [0.0] * len(rows)
    for members in _cohorts(rows).values():
        peers = {}
        for i in members:
            if _active(rows[i]):
                agent = rows[i][8]
                peers.setdefault((agent, rows[i][9] if agent in episode_agents else None), []).append(i)
        for p in peers.values():
            base = sum(rows[i][2] for i in p) / len(p)
            for i in p:
                adv[i] = rows[i][2] - base
    return adv


def ref_rae(rows, decay):
    """Scoring order: cohorts as _cohorts orders them, episodes by first appearance inside a cohort."""
    adv, b = [0.0] * len(rows), {}
    for members in _cohorts(rows).values():
        eps = {}
        for i in members:
            eps.setdefault(rows[i][9], []).append(i)
        for i in (i for e in eps.values() for i in e):
            if _active(rows[i]):
                base = b.get(rows[i][8], 0.0)
                adv[i] = rows[i][2] - base
                b[rows[i][8]] = decay * base + (1 - decay) * rows[i][2]
    return adv


@pytest.mark.parametrize("key,ref", [
    ("grpo", lambda: ref_grpo(ROWS)),
    ("grpo_lp_defaults", lambda: ref_grpo(ROWS, (0.25, 0.1, 0.1))),
    ("grpo_lp_weights", lambda: ref_grpo(ROWS, (0.5, 0.0, 0.3))),
    ("max_rl", lambda: ref_max_rl(ROWS)),
    ("hier_solver", lambda: ref_hier(ROWS, {"solver"})),
    ("hier_both", lambda: ref_hier(ROWS, {"solver", "proposer"})),
    ("rae_default", lambda: ref_rae(ROWS, 0.95)),
    ("rae_05", lambda: ref_rae(ROWS, 0.5)),
])
def test_references_agree_with_prime_rl(key, ref):
    """The loop references (float64, from the formulas) give prime-rl's numbers (float32 ones to ~1e-7)."""
    for x, y in zip(ref(), EXPECTED[key]):
        assert abs(x - y) <= 1e-6 + 1e-6 * abs(y)


@pytest.mark.parametrize("key", list(EXPECTED))
@pytest.mark.parametrize("chunk_rows", [1, 7, 100])
def test_against_prime_rl(tmp_path, key, chunk_rows):
    got, _ = _run(tmp_path, SETTINGS[key], chunk_rows=chunk_rows)
    _close(got, _spread(EXPECTED[key]))


@pytest.mark.parametrize("key", list(EXPECTED))
def test_chunk_size_does_not_change_a_bit(tmp_path, key):
    a, _ = _run(tmp_path, SETTINGS[key], chunk_rows=1)
    b, _ = _run(tmp_path, SETTINGS[key], chunk_rows=7)
    c, _ = _run(tmp_path, SETTINGS[key], chunk_rows=4096)
    assert a == b == c


def test_echo_scores_as_grpo(tmp_path):
    for lp in ({}, {P + "length_penalty.type": "linear"}):
        a, _ = _run(tmp_path, {P + "type": "echo", **lp})
        b, _ = _run(tmp_path, {P + "type": "grpo", **lp})
        assert a == b


def test_singletons_untrainable_and_unsampled_rows_get_zero(tmp_path):
    got, _ = _run(tmp_path, {})
    assert got[3] == [0.0, 0.0]  # (0, c): a cohort of one
    assert got[4] == [0.0, 0.0, 0.0]  # untrainable, left out of (0, a)'s mean
    assert got[6] == [0.0, 0.0] and got[9] == [0.0] * 4  # (0, d): no sampled token + a lone 0.3
    assert all(abs(x) <= 1e-6 for x in got[1] + got[5] + got[8])  # 0.7 ×3: 0 up to float32 rounding


def test_length_penalty_reads_the_count_columns_not_the_mask(tmp_path):
    """Equal rewards still get length-dependent advantages; counts equal to 0 give a 0 term (max clamp 1)."""
    got, _ = _run(tmp_path, SETTINGS["grpo_lp_defaults"])
    assert got[1][0] > 0 > got[5][0]  # 0.7 ×3: the shortest (30 output tokens) gains
    rows = [r[:5] + (0, 0, 0) + r[8:] for r in ROWS]  # no usage at all: the penalty vanishes
    got, _ = _run(tmp_path, SETTINGS["grpo_lp_defaults"], rows=rows)
    _close(got, _spread(ref_grpo(ROWS)), atol=1e-6)


def test_a_zero_weight_needs_no_column(tmp_path):
    """w·x/max with w = 0 adds ±0.0 in prime-rl: the same numbers without the column."""
    settings = {**SETTINGS["grpo_lp_weights"], P + "length_penalty.num_turns_weight": 0.0}
    a, _ = _run(tmp_path, settings)
    b, _ = _run(tmp_path, settings, drop=("num_turns", "num_total_tokens"))
    assert a == b
    _close(a, _spread(ref_grpo(ROWS, (0.5, 0.0, 0.0))))


def test_rae_without_a_group_column(tmp_path):
    """group_size 1 is allowed: with no prompt_id the scoring order is the row order (per step)."""
    rows = [("x", 0, r, [1, 1], True, 0, 0, 0, "agent", f"e{i}") for i, r in enumerate([1.0, 0.0, 0.5, 1.0])]
    got, _ = _run(tmp_path, {P + "type": "rae", P + "decay": 0.5}, rows=rows, drop=("prompt_id",))
    b, want = 0.0, []
    for r in rows:
        want.append(r[2] - b)
        b = 0.5 * b + 0.5 * r[2]
    _close(got, _spread(want, rows))
    with pytest.raises(AdvcliError, match="prompt_id"):
        _run(tmp_path, {}, rows=rows, drop=("prompt_id",))


def test_max_rl_binary_and_tiny_mean():
    """spec/primerl.md §4.3: pass rate p → (1−p)/p for a success, −1 for a failure; [0.001, 0, 0, 0, 0] →
    [4, −1, −1, −1, −1] (no eps)."""
    rows = [("g", 0, r, [1], True, 0, 0, 0, "agent", f"e{i}") for i, r in enumerate([1.0, 0.0, 0.0, 1.0])]
    rows += [("h", 0, r, [1, 1], True, 0, 0, 0, "agent", f"f{i}") for i, r in enumerate([0.001, 0, 0, 0, 0])]
    rows += [("z", 0, 0.0, [1], True, 0, 0, 0, "agent", "z0"), ("z", 0, 0.0, [1], True, 0, 0, 0, "agent", "z1")]
    assert ref_max_rl(rows)[:4] == [1.0, -1.0, -1.0, 1.0]
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        got, _ = _run(tmp, SETTINGS["max_rl"], rows=rows)
    _close(got, _spread([1.0, -1.0, -1.0, 1.0, 4.0, -1.0, -1.0, -1.0, -1.0, 0.0, 0.0], rows), rtol=1e-5)


def test_max_rl_zero_mean_hazard_is_prime_rls_and_flagged(tmp_path):
    """[0.7, 0.2, −0.9]: the float32 mean decides between 0 and ~1e8. advcli gives what the same torch
    calls give (grpo/max_rl run them on the cohort's 1-D float32 tensor), flags the cohort naming max_rl's
    rule, and --precision float64 gives the float64 mean's values."""
    vals = [0.7, 0.2, -0.9]
    rows = [("z", 0, v, [1, 1], True, 0, 0, 0, "agent", f"e{i}") for i, v in enumerate(vals)]
    rows.append(("ok", 0, 1.0, [1], True, 0, 0, 0, "agent", "x"))
    rows.append(("ok", 0, 0.0, [1], True, 0, 0, 0, "agent", "y"))
    r = torch.tensor(vals, dtype=torch.float32)
    mean = r.mean()
    want32 = torch.zeros_like(r) if mean <= 0 else (r - mean) / mean  # max_rl.py L25-26
    got, res = _run(tmp_path, SETTINGS["max_rl"], rows=rows)
    assert [g[0] for g in got[:3]] == want32.tolist()
    assert [g[0] for g in got[3:]] == [1.0, -1.0]
    diag = {d["kind"]: d for d in res.diagnostics}
    canc = diag["float32_cancellation"]
    assert canc["count"] == 1 and canc["examples"][0]["group"] == "z"
    assert "max_rl" in canc["examples"][0]["rule"] and "no eps" in canc["examples"][0]["rule"]
    r64 = r.double()
    mu64 = float(r64.mean())
    assert mu64 != 0.0  # the float32 values of 0.7, 0.2, −0.9 do not sum to 0 in float64 (mean ≈ 5e-9)
    got64, _ = _run(tmp_path, SETTINGS["max_rl"], rows=rows, precision="float64")
    want64 = [(float(x) - mu64) / mu64 if mu64 > 0 else 0.0 for x in r64]
    for g, w in zip(got64[:3], want64):
        assert g[0] == pytest.approx(w, rel=1e-6)


def test_no_hazard_flag_for_length_shaped_equal_rewards(tmp_path):
    _, res = _run(tmp_path, SETTINGS["grpo_lp_defaults"])
    canc = {d["kind"]: d for d in res.diagnostics}.get("float32_cancellation")
    assert canc is None or canc["count"] == 0


def test_rae_carries_the_baseline_across_steps_in_scoring_order(tmp_path):
    """A dump in scoring order (cohorts contiguous, steps ascending): the loop over rows in order."""
    rows = []
    rewards = [1.0, 0.0, 0.5, -1.0, 0.25, 0.75, 1.0, 0.0, 0.3, 0.9, -0.5, 0.1]
    for k, rew in enumerate(rewards):
        agent = ("player0", "player1")[k % 2]
        trainable = k not in (4, 9)
        mask = [0, 0] if k == 7 else [1, 0, 1]
        rows.append((f"g{k // 4}", k // 6, rew, mask, trainable, 0, 0, 0, agent, f"ep{k // 2}"))
    b, want = {}, []
    for r in rows:
        if r[4] and any(r[3]):
            base = b.get(r[8], 0.0)
            want.append(r[2] - base)
            b[r[8]] = 0.9 * base + 0.1 * r[2]
        else:
            want.append(0.0)
    for chunk in (1, 5, 100):
        got, _ = _run(tmp_path, {P + "type": "rae", P + "decay": 0.9}, rows=rows, chunk_rows=chunk)
        _close(got, _spread(want, rows), rtol=1e-6, atol=1e-7)
    got, _ = _run(tmp_path, {P + "type": "rae", P + "decay": 0.0}, rows=rows)  # b = the agent's last reward
    assert got[2][0] == pytest.approx(0.5 - 1.0) and got[3][0] == pytest.approx(-1.0 - 0.0)


def test_rae_and_grpo_without_the_optional_columns(tmp_path):
    """No trainable column: every row trainable; no agent_name: verifiers' default agent; no episode_id:
    each row its own episode."""
    drop = ("trainable", "agent_name", "episode_id")
    rows = [r[:4] + (True,) + r[5:8] + ("agent", f"row{i}") for i, r in enumerate(ROWS)]
    got, _ = _run(tmp_path, SETTINGS["rae_05"], drop=drop)
    _close(got, _spread(ref_rae(rows, 0.5)), rtol=1e-6, atol=1e-7)
    got, _ = _run(tmp_path, {}, drop=drop)
    _close(got, _spread(ref_grpo(rows)), rtol=1e-5, atol=1e-6)


def test_columns_map_to_the_new_roles(tmp_path):
    rename = {"trainable": "ok", "agent_name": "role", "episode_id": "episode", "num_turns": "turns"}
    cols = {"trainable": "ok", "agent_name": "role", "episode_id": "episode", "num_turns": "turns"}
    got, _ = _run(tmp_path, SETTINGS["hier_solver"], rename=rename, columns=cols)
    _close(got, _spread(EXPECTED["hier_solver"]))
    got, _ = _run(tmp_path, SETTINGS["grpo_lp_defaults"], rename=rename, columns=cols)
    _close(got, _spread(EXPECTED["grpo_lp_defaults"]))


def test_trainable_as_integers(tmp_path):
    src = _write(os.path.join(tmp_path, "in.parquet"))
    t = pq.read_table(src)
    t = t.set_column(t.schema.get_field_index("trainable"), "trainable", t.column("trainable").cast(pa.int8()))
    pq.write_table(t, src)
    out = os.path.join(tmp_path, "out.parquet")
    advcli.run(src, out, flavor="prime-rl", device="cpu", force=True)
    _close(pq.read_table(out).column("advantages").to_pylist(), _spread(EXPECTED["grpo"]))


@pytest.mark.parametrize("settings,match", [
    ({P + "type": "opd"}, "assigns no advantage"),
    ({P + "type": "sft"}, "assigns no advantage"),
    ({P + "decay": 0.5}, "not a setting of orchestrator.algo.type=grpo"),
    ({P + "type": "max_rl", P + "length_penalty.type": "linear"}, "MaxRLAlgoConfig forbids extra keys"),
    ({P + "type": "rae", P + "episode_agents": ["solver"]}, "RAEAlgoConfig forbids extra keys"),
    ({P + "type": "hierarchical_grpo"}, "episode_agents is required"),
    ({P + "type": "hierarchical_grpo", P + "episode_agents": []}, "episode_agents is required"),
    ({P + "type": "rae", P + "decay": 1.0}, r"\[0, 1\)"),
    ({P + "length_penalty.num_turns_weight": -0.1}, "finite and >= 0"),
    ({P + "length_penalty.num_output_tokens_weight": math.inf}, "finite and >= 0"),
    ({P + "type": "ppo"}, "unknown value"),
])
def test_refused_as_prime_rl_refuses(tmp_path, settings, match):
    with pytest.raises(AdvcliError, match=match):
        _run(tmp_path, settings)


def test_missing_columns_are_named(tmp_path):
    with pytest.raises(AdvcliError, match="num_output_tokens"):
        _run(tmp_path, SETTINGS["grpo_lp_defaults"], drop=("num_output_tokens",))
    with pytest.raises(AdvcliError, match="episode_id"):
        _run(tmp_path, SETTINGS["hier_solver"], drop=("episode_id",))


def test_explain_lists_the_keys_with_defaults():
    from advcli.flavors import get
    from advcli.runs.explain import keys_text

    text = keys_text(get("prime-rl"))
    for k in ("orchestrator.algo.type", "orchestrator.algo.length_penalty.num_output_tokens_weight",
              "orchestrator.algo.decay", "orchestrator.algo.episode_agents"):
        assert k in text
    assert 'default "grpo"' in text and "default 0.95" in text


# ------------------------------------------------- the estimators against prime-rl's torch calls, per cohort
def _random_table(seed, n=600, agents=3):
    from advcli.ops.batch import RowTable
    from advcli.ops.groups import GroupIndex

    g = torch.Generator().manual_seed(seed)
    cohort = torch.randint(0, 60, (n,), generator=g)
    kind = torch.randint(0, 3, (60,), generator=g)[cohort]  # binary, uniform, zero-sum-ish
    r = torch.where(kind == 0, torch.randint(0, 2, (n,), generator=g).float(),
                    torch.rand(n, generator=g) * 2 - (kind == 2).float())
    valid = torch.randint(0, 5, (n,), generator=g)  # 0: no sampled token
    cols = {"trainable": torch.rand(n, generator=g) > 0.1,
            "num_output_tokens": torch.randint(0, 400, (n,), generator=g),
            "num_total_tokens": torch.randint(0, 1200, (n,), generator=g),
            "num_turns": torch.randint(0, 5, (n,), generator=g),
            "agent_name": torch.randint(0, agents, (n,), generator=g)}
    scopes = GroupIndex.from_codes(torch.zeros(n, dtype=torch.int64))
    table = RowTable(score=r, valid_len=valid, length=valid + 1, scopes=scopes, groups=GroupIndex.from_codes(cohort),
                     columns=cols, labels={"agent_name": [f"a{k}" for k in range(agents)]})
    return table, cohort


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_cohort_estimators_give_prime_rls_float32_bits(seed):
    """Each cohort through the same torch calls prime-rl makes (grpo.py L27-43, max_rl.py L24-26) on the
    running machine: advcli's vectorised estimators give the same bits (rows in input order)."""
    from advcli.estimators.cohort import grpo_cohort_row, max_rl_cohort_row

    table, cohort = _random_table(seed)
    active = table.columns["trainable"] & (table.valid_len > 0)
    lp = [0.25, 0.1, 0.3]
    got = {"grpo": grpo_cohort_row(table, {"length_penalty": None}),
           "lp": grpo_cohort_row(table, {"length_penalty": lp}),
           "max_rl": max_rl_cohort_row(table, {})}
    for c in torch.unique(cohort).tolist():
        rows = torch.nonzero((cohort == c) & active, as_tuple=True)[0]
        if not rows.numel():
            continue
        rewards = torch.tensor(table.score[rows].tolist(), dtype=torch.float32)
        assert torch.equal(got["grpo"][rows], rewards - rewards.mean())
        output = torch.tensor(table.columns["num_output_tokens"][rows].tolist(), dtype=rewards.dtype)
        total = torch.tensor(table.columns["num_total_tokens"][rows].tolist(), dtype=rewards.dtype)
        turns = torch.tensor(table.columns["num_turns"][rows].tolist(), dtype=rewards.dtype)
        inp = total - output
        frac = (lp[0] * (output / output.max().clamp(min=1)) + lp[1] * (inp / inp.max().clamp(min=1))
                + lp[2] * (turns / turns.max().clamp(min=1)))
        shaped = rewards - rewards.mean() * frac
        assert torch.equal(got["lp"][rows], shaped - shaped.mean())
        mean = rewards.mean()
        assert torch.equal(got["max_rl"][rows], torch.zeros_like(rewards) if mean <= 0 else (rewards - mean) / mean)
    assert bool((got["grpo"][~active] == 0).all()) and bool((got["max_rl"][~active] == 0).all())


@pytest.mark.parametrize("decay", [0.0, 0.5, 0.95, 0.999])
def test_ema_scan_equals_prime_rls_loop(decay):
    """rae.py L39-43 as a loop over the rows in order (one cohort per row here keeps the row order the
    scoring order) against the per-agent scan."""
    from advcli.estimators.cohort import ema_baseline_row
    from advcli.ops.groups import GroupIndex

    table, _ = _random_table(7, n=3000)
    table.groups = GroupIndex.from_codes(torch.arange(table.num_rows))
    got = ema_baseline_row(table, {"decay": decay})
    b, want = {}, []
    for i in range(table.num_rows):
        if bool(table.columns["trainable"][i]) and int(table.valid_len[i]) > 0:
            agent, r = int(table.columns["agent_name"][i]), float(table.score[i])
            base = b.get(agent, 0.0)
            want.append(r - base)
            b[agent] = decay * base + (1.0 - decay) * r
        else:
            want.append(0.0)
    assert torch.allclose(got.double(), torch.tensor(want, dtype=torch.float64), rtol=1e-6, atol=1e-7)


def test_rl_toml_table_translates(tmp_path):
    """The [orchestrator.algo] table of prime-rl's rl TOML, as --config reads it."""
    from advcli.flavors import resolve

    path = os.path.join(tmp_path, "rl.toml")
    with open(path, "w") as fh:
        fh.write('[orchestrator.algo]\ntype = "echo"\n\n[orchestrator.algo.length_penalty]\nnum_turns_weight = 0.2\n')
    cfg, given = resolve("prime-rl", [], path)
    assert cfg["estimator"] == {"name": "grpo_cohort", "length_penalty": [0.25, 0.1, 0.2]}
    assert given == {P + "type": "echo", P + "length_penalty.num_turns_weight": 0.2}
    with open(path, "w") as fh:
        fh.write('[orchestrator.algo]\ntype = "hierarchical_grpo"\nepisode_agents = ["solver"]\n')
    cfg, _ = resolve("prime-rl", [], path)
    assert cfg["estimator"] == {"name": "grpo_peers", "episode_agents": ["solver"]}
