"""Estimators from the last year's papers (issue 33 part 3), through `advcli run`, against each paper's
formula computed here independently in plain Python (brute force where the estimator uses a closed form):
PKPO, QAE, MGPO, entropic / entropic_adaptive_beta, the MaxRL variants and CoDaPO.

Groups are hand-checkable: a binary group, an uneven continuous group, a uniform group, a singleton, and
a group with ties."""
from __future__ import annotations

import math
from itertools import combinations

import numpy as np
import pyarrow.parquet as pq
import pytest
from conftest import SAMPLE, run_main

from tests._flavor_rows import run_rows

# (prompt_id, reward, valid length): a binary 4-group, an uneven 3-group, a uniform pair, a singleton,
# a 5-group with ties
GROUPS = [("a", [1.0, 0.0, 1.0, 0.0]), ("b", [0.25, 0.875, 0.5]), ("c", [0.75, 0.75]), ("s", [1.0]),
          ("d", [1.0, 0.5, 0.5, 0.0, 1.0])]


def _rows():
    """Rows of the groups interleaved (a group's rows sit apart), each with a mask of 1-3 tokens."""
    flat = [(pid, r) for pid, rs in GROUPS for r in rs]
    order = list(range(0, len(flat), 2)) + list(range(1, len(flat), 2))
    rows = []
    for i in order:
        pid, r = flat[i]
        n = 1 + i % 3
        rows.append({"prompt_id": pid, "reward": r, "mask": [1] * n + [0], "old": [-0.5] * (n + 1)})
    return rows


ROWS = _rows()


def _expected(per_group_fn):
    """Per row of ROWS: the advantage from per_group_fn(rewards of the group) -> list, at the row's index."""
    by_pid = {}
    for r in ROWS:
        by_pid.setdefault(r["prompt_id"], []).append(r["reward"])
    adv = {pid: per_group_fn(rs) for pid, rs in by_pid.items()}
    seen = {pid: 0 for pid in by_pid}
    out = []
    for r in ROWS:
        out.append(adv[r["prompt_id"]][seen[r["prompt_id"]]])
        seen[r["prompt_id"]] += 1
    return out


def _run(tmp_path, settings, chunk_rows=3, precision=None):
    s = {"estimator." + k if k != "precision" else k: v for k, v in settings.items()}
    got, _ = run_rows(tmp_path, ROWS, "advcli", s, chunk_rows=chunk_rows)
    return got["advantages"]


def _check(got, expected_row, masked=True, rtol=1e-5, atol=1e-6):
    for i, (row, a) in enumerate(zip(ROWS, expected_row)):
        want = [a * m for m in row["mask"]] if masked else [a] * len(row["mask"])
        assert np.allclose(got[i], want, rtol=rtol, atol=atol), (i, row, got[i], want)


# --------------------------------------------------------------------------------------------- PKPO
def pkpo_brute(rs, k):
    """Credit = mean over the k-subsets containing i of the subset's max, centred by the group mean."""
    n = len(rs)
    if n <= 1:
        return [0.0] * n
    k = max(1, min(k, n))
    total = math.comb(n, k)
    credit = [sum(max(rs[j] for j in s) for s in combinations(range(n), k) if i in s) / total for i in range(n)]
    mean = sum(credit) / n
    return [c - mean for c in credit]


@pytest.mark.parametrize("k", [1, 2, 3, 7])
def test_pkpo_against_the_subset_definition(tmp_path, k):
    got = _run(tmp_path, {"name": "pkpo", "k": k})
    _check(got, _expected(lambda rs: pkpo_brute(rs, k)))


def test_pkpo_binary_theorem_2(tmp_path):
    """The paper's Theorem 2 for n = 4, c = 2, k = 2: a success is credited k/n = 1/2, a failure
    (k/n)·ρ(3, 2, 1) = 1/3; centred ±1/12 (rllm PR #743's test, derived from the theorem)."""
    got = _run(tmp_path, {"name": "pkpo", "k": 2})
    for row, adv in zip(ROWS, got):
        if row["prompt_id"] == "a":
            want = 1 / 12 if row["reward"] == 1.0 else -1 / 12
            assert np.allclose(adv, [want * m for m in row["mask"]], atol=1e-7)
        if row["prompt_id"] in ("c", "s"):  # uniform and singleton groups: 0
            assert all(x == 0 for x in adv)


def _credit(rs, members, k, i):
    """S(i, k, members): (1/C(|members|, k)) Σ over the k-subsets of members holding i of their max."""
    return sum(max(rs[j] for j in c) for c in combinations(members, k) if i in c) / math.comb(len(members), k)


def pkpo_paper(rs, k, baseline):
    """The paper's eq. 29 (loo) and eq. 33 (loo_minus_one), by enumerating the subsets."""
    n = len(rs)
    if n <= 1:
        return [0.0] * n
    every = list(range(n))
    if baseline == "loo":
        k = max(1, min(k, n - 1))
        return [_credit(rs, every, k, i) - sum(_credit(rs, [j for j in every if j != i], k, j)
                                               for j in every if j != i) / (n - 1) for i in every]
    k = max(2, min(k, n))
    return [sum(max(rs[j] for j in c) - max(rs[j] for j in c if j != i)
                for c in combinations(every, k) if i in c) / math.comb(n, k) for i in every]


@pytest.mark.parametrize("baseline", ["loo", "loo_minus_one"])
@pytest.mark.parametrize("k", [2, 3, 6])
def test_pkpo_paper_baselines(tmp_path, baseline, k):
    got = _run(tmp_path, {"name": "pkpo", "k": k, "baseline": baseline})
    _check(got, _expected(lambda rs: pkpo_paper(rs, k, baseline)))


def test_pkpo_loo_minus_one_binary(tmp_path):
    """n = 4, c = 2, k = 2, eq. 33 by hand: a success is the max of its 3 pairs and loses to the other
    success in one of them: (3·1 − 1)/6 = 1/3; a failure gains only over the other failure: 0."""
    got = _run(tmp_path, {"name": "pkpo", "k": 2, "baseline": "loo_minus_one"})
    for row, adv in zip(ROWS, got):
        if row["prompt_id"] == "a":
            want = 1 / 3 if row["reward"] == 1.0 else 0.0
            assert np.allclose(adv, [want * m for m in row["mask"]], atol=1e-7)


def test_pkpo_raw_credit(tmp_path):
    def raw(rs):
        n = len(rs)
        if n <= 1:
            return [0.0]
        return [sum(max(rs[j] for j in s) for s in combinations(range(n), 2) if i in s) / math.comb(n, 2)
                for i in range(n)]
    _check(_run(tmp_path, {"name": "pkpo", "k": 2, "baseline": "none"}), _expected(raw))


# ---------------------------------------------------------------------------------------------- QAE
def qae_ref(rs, level, norm=True, eps=1e-6):
    n = len(rs)
    if n <= 1:
        return [0.0] * n
    srt = sorted(rs)
    q = srt[max(math.ceil(level * n), 1) - 1]  # inverse CDF: smallest x with F(x) ≥ K
    mu = sum(rs) / n
    sd = math.sqrt(sum((x - mu) ** 2 for x in rs) / (n - 1))
    return [(r - q) / (sd + eps) if norm else r - q for r in rs]


@pytest.mark.parametrize("level", [0.2, 0.5, 0.8])
def test_qae_against_the_quantile_baseline(tmp_path, level):
    _check(_run(tmp_path, {"name": "qae", "k": level}), _expected(lambda rs: qae_ref(rs, level)), rtol=1e-4)
    _check(_run(tmp_path, {"name": "qae", "k": level, "norm_by_std": False}),
           _expected(lambda rs: qae_ref(rs, level, norm=False)))


def test_qae_two_regime_gate(tmp_path):
    """Binary group a (p = 1/2): with K = 0.4, p ≤ 1 − K → baseline 0, only the successes move (+1);
    with K = 0.6, p > 1 − K → baseline 1, only the failures move (−1)."""
    for level, baseline in ((0.4, 0.0), (0.6, 1.0)):
        got = _run(tmp_path, {"name": "qae", "k": level, "norm_by_std": False})
        for row, adv in zip(ROWS, got):
            if row["prompt_id"] == "a":
                want = row["reward"] - baseline
                assert want in (0.0, 1.0 - 2 * baseline)
                assert np.allclose(adv, [want * m for m in row["mask"]])


def test_qae_linear_quantile(tmp_path):
    def ref(rs):
        if len(rs) <= 1:
            return [0.0]
        q = float(np.quantile(np.array(rs), 0.3))  # numpy's default: linear interpolation
        return [r - q for r in rs]
    _check(_run(tmp_path, {"name": "qae", "k": 0.3, "quantile": "linear", "norm_by_std": False}), _expected(ref))


# --------------------------------------------------------------------------------------------- MGPO
def mgpo_ref(rs, base=1.0, lam=0.5, p0=0.5):
    n = len(rs)
    mu = sum(rs) / n
    sd = math.sqrt(sum((x - mu) ** 2 for x in rs) / (n - 1)) if n > 1 else float("nan")
    grpo = [(r - mu) / (sd + 1e-4) if n > 1 else 0.0 for r in rs]  # TRL: n = 1 gives NaN → 0
    p = sum(r >= base for r in rs) / n

    def xlog(a, b):
        return 0.0 if a == 0 else a * math.log(a / b)
    kl = xlog(p, p0) + xlog(1 - p, 1 - p0)
    return [a * math.exp(-lam * kl) for a in grpo]


@pytest.mark.parametrize("opts", [{}, {"lam": 2.0, "target_success_rate": 0.25, "reward_base": 0.5}])
def test_mgpo_against_the_bernoulli_kl_weight(tmp_path, opts):
    got = _run(tmp_path, {"name": "mgpo", **opts})
    _check(got, _expected(lambda rs: mgpo_ref(rs, opts.get("reward_base", 1.0), opts.get("lam", 0.5),
                                              opts.get("target_success_rate", 0.5))), masked=False, rtol=1e-4)


def test_mgpo_weight_is_one_at_the_target(tmp_path):
    """Group a has success rate 1/2 = p₀: MGPO equals TRL's GRPO there."""
    mg = _run(tmp_path, {"name": "mgpo"})
    gr = _run(tmp_path, {"name": "grpo_nan"})
    for row, a, b in zip(ROWS, mg, gr):
        if row["prompt_id"] == "a":
            assert np.allclose(a, b, rtol=1e-6)


# ----------------------------------------------------------------------------------------- entropic
def entropic_ref(rs, beta):
    n = len(rs)
    if n == 1:
        return [0.0]
    m = max(rs)
    e = [math.exp(beta * (r - m)) for r in rs]
    return [ei / ((sum(e) - ei) / (n - 1) + 1e-12) - 1 for ei in e]


def kl_uniform(rs, beta):
    m = max(rs)
    z = [math.exp(beta * (r - m)) for r in rs]
    s = sum(z)
    return sum((x / s) * (math.log(x / s) + math.log(len(rs))) for x in z if x > 0)


def beta_solved(rs, delta=math.log(2)):
    """TTT-Discover's search, written from the paper's rule: the β with KL(q_β ‖ uniform) = δ."""
    lo, hi = 0.0, 1.0
    while hi < 1e6 and kl_uniform(rs, hi) < delta:
        hi *= 2
    if kl_uniform(rs, hi) < delta:
        return hi
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if kl_uniform(rs, mid) < delta else (lo, mid)
    return hi


@pytest.mark.parametrize("beta", [0.5, 2.0, 8.0])
def test_entropic_fixed_beta(tmp_path, beta):
    _check(_run(tmp_path, {"name": "entropic", "beta": beta}), _expected(lambda rs: entropic_ref(rs, beta)),
           rtol=1e-5, atol=1e-6)


def test_entropic_adaptive_beta(tmp_path):
    def ref(rs):
        if len(rs) == 1:
            return [0.0]
        b = beta_solved(rs)
        if len(set(rs)) > 1:  # the solved β puts q_β at KL = log 2 from uniform
            assert abs(kl_uniform(rs, b) - math.log(2)) < 1e-6 or b >= 1e6
        return entropic_ref(rs, b)
    _check(_run(tmp_path, {"name": "entropic_adaptive_beta"}), _expected(ref), rtol=1e-4, atol=1e-5)


# -------------------------------------------------------------------------------------- the command
def _sample_groups():
    t = pq.read_table(SAMPLE).to_pydict()
    keys = list(zip(t["step"], t["prompt_id"]))
    return t, keys


@pytest.mark.parametrize("name,settings,ref", [
    ("pkpo", ["estimator.k=3"], lambda rs: pkpo_brute(rs, 3)),
    ("qae", ["estimator.k=0.5"], lambda rs: qae_ref(rs, 0.5)),
    ("entropic", ["estimator.beta=2.0"], lambda rs: entropic_ref(rs, 2.0)),
])
def test_on_the_sample_data_through_the_command(tmp_path, capsys, name, settings, ref):
    out = tmp_path / "o.parquet"
    args = ["run", SAMPLE, "-o", out, "--flavor", "advcli", "--set", f"estimator.name={name}", "-q"]
    for s in settings:
        args += ["--set", s]
    code, _, err = run_main(args, capsys)
    assert code == 0, err
    t, keys = _sample_groups()
    groups = {}
    for i, k in enumerate(keys):
        groups.setdefault(k, []).append(i)
    want = [0.0] * len(keys)
    for rows in groups.values():
        for i, a in zip(rows, ref([t["reward"][i] for i in rows])):
            want[i] = a
    got = pq.read_table(out).column("advantages").to_pylist()
    for i, (g, m) in enumerate(zip(got, t["response_mask"])):
        assert np.allclose(g, [want[i] * x for x in m], rtol=1e-4, atol=1e-5), i


@pytest.mark.parametrize("name,settings,ref", [
    ("pkpo", ["estimator.k=2"], lambda rs: pkpo_brute(rs, 2)),
    ("entropic_adaptive_beta", [], lambda rs: entropic_ref(rs, beta_solved(rs)) if len(rs) > 1 else [0.0]),
    ("mgpo", ["estimator.lam=1.0"], lambda rs: mgpo_ref(rs, lam=1.0)),
])
def test_on_a_trainer_dump(tmp_path, capsys, name, settings, ref):
    """SkyRL's evaluation dump (response level: rewards and groups only) through --flavor advcli."""
    root, rows = _skyrl(tmp_path)
    out = tmp_path / "o.parquet"
    args = ["run", root.parent, "-o", out, "--flavor", "advcli", "--set", f"estimator.name={name}", "-q"]
    for s in settings:
        args += ["--set", s]
    code, _, err = run_main(args, capsys)
    assert code == 0, err
    want = []
    for step in (10, 20):
        for src in ("math", "openai_gsm8k"):  # the dump's files in name order within a step
            recs = rows[(step, src)]
            prompts = [r["input_prompt"] for r in recs]
            adv = {}
            for p in dict.fromkeys(prompts):
                idx = [i for i, q in enumerate(prompts) if q == p]
                for i, a in zip(idx, ref([recs[i]["score"] for i in idx])):
                    adv[i] = a
            want += [adv[i] for i in range(len(recs))]
    got = pq.read_table(out).column("advantages").to_pylist()
    assert np.allclose(got, want, rtol=1e-4, atol=1e-5)


def _skyrl(tmp_path):
    """The SkyRL evaluation dump of tests/formats/test_format_skyrl.py (its fixture's builder, called directly)."""
    import test_format_skyrl
    return test_format_skyrl.dump.__wrapped__(tmp_path)


def test_explain_shows_formula_and_source(capsys):
    for name, bit in (("pkpo", "2505.15201"), ("qae", "2509.22611"), ("mgpo", "2511.06221"),
                      ("entropic_adaptive_beta", "TTT-Discover"), ("codapo", "7497"), ("maxrl", "tajwarfahim")):
        code, out, err = run_main(["explain", "--flavor", "advcli", "--set", f"estimator.name={name}"], capsys)
        assert code == 0, err
        assert bit in out and "A_i" in out, name


@pytest.mark.parametrize("settings", [["estimator.k=0"], ["estimator.k=1", "estimator.baseline=loo_minus_one"]])
def test_bad_parameter_is_refused(tmp_path, capsys, settings):
    out = tmp_path / "o.parquet"
    args = ["run", SAMPLE, "-o", out, "--flavor", "advcli", "--set", "estimator.name=pkpo"]
    for s in settings:
        args += ["--set", s]
    code, _, err = run_main(args, capsys)
    assert code == 2 and "estimator.k" in err and "Traceback" not in err
    assert not out.exists()


# -------------------------------------------------------------------------------------------- MaxRL
def maxrl_ref(rs, eps, singleton, nonpositive):
    if len(rs) == 1:
        return [rs[0] / eps if singleton == "over_eps" else rs[0] if singleton == "score" else 0.0]
    mu = sum(rs) / len(rs)
    if nonpositive == "zero" and mu <= 0:
        return [0.0] * len(rs)
    return [(r - mu) / (mu + eps) for r in rs]


MAXRL_ROWS = [("a", [1.0, 0.0, 0.0, 0.0]), ("b", [0.0, 0.0, 0.0]), ("n", [-1.0, 0.5]), ("s", [1.0]),
              ("t", [0.5])]


@pytest.mark.parametrize("variant,settings", [
    ("skyrl", {}),
    ("authors_verl_fork", {"singleton": "over_eps"}),
    ("prime_rl", {"eps": 0.0, "singleton": "zero", "nonpositive_mean": "zero"}),
])
def test_maxrl_variants(tmp_path, variant, settings):
    """(r − r̄)/(r̄ + eps): a rare success gets (1 − 1/4)/(1/4) = 3, the failures −1; the variants differ on
    groups of one (s, s/eps, 0) and on a negative mean (μ = −1/4: divides, or 0 in prime-rl)."""
    rows = [{"prompt_id": pid, "reward": r, "mask": [1, 1, 0]} for pid, rs in MAXRL_ROWS for r in rs]
    got, _ = run_rows(tmp_path, rows, "advcli", {"estimator.name": "maxrl", "precision": "float64",
                                                 **{"estimator." + k: v for k, v in settings.items()}})
    eps = settings.get("eps", 1e-6)
    want = []
    for _, rs in MAXRL_ROWS:
        want += maxrl_ref(rs, eps, settings.get("singleton", "score"), settings.get("nonpositive_mean", "divide"))
    for g, w in zip(got["advantages"], want):
        assert np.allclose(g, [w, w, 0.0], rtol=1e-6), (variant, g, w)
    if variant != "authors_verl_fork":
        assert np.allclose(got["advantages"][0], [3.0, 3.0, 0.0], rtol=1e-5)


def test_maxrl_over_eps_needs_eps(tmp_path, capsys):
    out = tmp_path / "o.parquet"
    code, _, err = run_main(["run", SAMPLE, "-o", out, "--flavor", "advcli", "--set", "estimator.name=maxrl",
                             "--set", "estimator.singleton=over_eps", "--set", "estimator.eps=0"], capsys)
    assert code == 2 and "estimator.eps" in err and not out.exists()


# ------------------------------------------------------------------------------------------- CoDaPO
# (prompt_id, reward, acc, old log-probs, mask): group q has an empty response (mask all 0) that counts in
# GRPO but not in the CoDaValue; reward ≠ acc on some rows (a format bonus); r is uniform in reward.
CODAPO = [("q", 1.1, 1.0, [-0.2, -0.4, -9.0], [1, 1, 0]), ("r", 0.0, 0.0, [-1.0, -1.0], [1, 1]),
          ("q", 0.1, 0.0, [-0.5, -0.7, -0.9], [1, 1, 1]), ("q", 1.0, 1.0, [-0.1], [1]),
          ("q", 0.0, 0.0, [-3.0, -3.0], [0, 0]), ("r", 0.0, 0.0, [-2.0], [1]), ("s", 1.0, 1.0, [-0.3], [1]),
          ("q", 0.1, 0.0, [-0.6, -0.2], [1, 1])]


def codapo_ref(offset=0.1, shift=0.0, table=None):
    """Per row: verl GRPO × (exp(mean of mean-token log-probs) · 4p(1−p) + offset), by hand; ``shift``
    is added to every log-prob (the rollout log-probs of _codapo_dump); ``table``: other rows than CODAPO."""
    table = CODAPO if table is None else table
    out = []
    for pid, r, *_ in table:
        rows = [x for x in table if x[0] == pid]
        rs = [x[1] for x in rows]
        n = len(rs)
        if n == 1:
            grpo = r / (1 + 1e-6)
        else:
            mu = sum(rs) / n
            sd = math.sqrt(sum((x - mu) ** 2 for x in rs) / (n - 1))
            grpo = (r - mu) / (sd + 1e-6)
        live = [x for x in rows if sum(x[4]) > 0]
        conf = math.exp(sum(sum((lp + shift) * m for lp, m in zip(x[3], x[4])) / sum(x[4]) for x in live)
                        / len(live))
        p = sum(x[2] == 1 for x in live) / len(live)
        out.append(grpo * (conf * 4 * p * (1 - p) + offset))
    return out


def _codapo_dump(path, with_acc=True):
    import pyarrow as pa
    cols = {"prompt_id": [x[0] for x in CODAPO], "reward": pa.array([x[1] for x in CODAPO], pa.float32()),
            "old_log_probs": pa.array([x[3] for x in CODAPO], pa.list_(pa.float32())),
            "response_mask": pa.array([x[4] for x in CODAPO], pa.list_(pa.int8()))}
    if with_acc:
        cols["correct"] = pa.array([x[2] for x in CODAPO], pa.float32())
    cols["rollout_log_probs"] = pa.array([[v - 0.5 for v in x[3]] for x in CODAPO], pa.list_(pa.float32()))
    pq.write_table(pa.table(cols), str(path))
    return str(path)


@pytest.mark.parametrize("offset", [0.1, 0.0])
def test_codapo_against_the_codavalue(tmp_path, capsys, offset):
    src = _codapo_dump(tmp_path / "in.parquet")
    out = tmp_path / "o.parquet"
    code, _, err = run_main(["run", src, "-o", out, "--flavor", "advcli", "--set", "estimator.name=codapo",
                             "--set", f"estimator.weight_offset={offset}", "--column", "accuracy=correct",
                             "--precision", "float64", "--chunk-rows", "3", "-q"], capsys)
    assert code == 0, err
    got = pq.read_table(out).column("advantages").to_pylist()
    for row, g, a in zip(CODAPO, got, codapo_ref(offset)):
        assert np.allclose(g, [a * m for m in row[4]], rtol=1e-6, atol=1e-9), (row, g, a)
    # group q: 3 live rows, 1 correct → 4·(1/3)·(2/3) = 8/9 of the confidence
    assert abs(got[0][0]) > 0


def test_codapo_with_the_rollout_log_probs(tmp_path, capsys):
    """log_probs=rollout_log_probs (the paper's π_rollout): the confidence reads that column (here the old
    log-probs − 0.5, so every confidence is e^−0.5 times the old one)."""
    src = _codapo_dump(tmp_path / "in.parquet")
    out = tmp_path / "o.parquet"
    code, _, err = run_main(["run", src, "-o", out, "--flavor", "advcli", "--set", "estimator.name=codapo",
                             "--set", "estimator.log_probs=rollout_log_probs", "--column", "accuracy=correct",
                             "--precision", "float64", "-q"], capsys)
    assert code == 0, err
    got = pq.read_table(out).column("advantages").to_pylist()
    for row, g, a in zip(CODAPO, got, codapo_ref(0.1, shift=-0.5)):
        assert np.allclose(g, [a * m for m in row[4]], rtol=1e-6, atol=1e-9), (row, g, a)


def test_codapo_needs_the_accuracy_column(tmp_path, capsys):
    src = _codapo_dump(tmp_path / "in.parquet", with_acc=False)
    out = tmp_path / "o.parquet"
    code, _, err = run_main(["run", src, "-o", out, "--flavor", "advcli", "--set", "estimator.name=codapo"], capsys)
    assert code == 2 and "acc" in err and "Traceback" not in err and not out.exists()


def test_codapo_on_the_sample_data(tmp_path, capsys):
    """sample_data has an `acc` column and old log-probs: the estimator runs as a user would type it (in
    float64: verl's float32 GRPO leaves residues of ~1e-3 on its uniform non-dyadic groups)."""
    out = tmp_path / "o.parquet"
    code, _, err = run_main(["run", SAMPLE, "-o", out, "--flavor", "advcli", "--set", "estimator.name=codapo",
                             "--precision", "float64", "-q"], capsys)
    assert code == 0, err
    t = pq.read_table(SAMPLE).to_pydict()
    got = pq.read_table(out).column("advantages").to_pylist()
    groups = {}
    for i, k in enumerate(zip(t["step"], t["prompt_id"])):
        groups.setdefault(k, []).append(i)
    for rows in groups.values():
        rs = [t["reward"][i] for i in rows]
        mu = sum(rs) / len(rs)
        sd = math.sqrt(sum((x - mu) ** 2 for x in rs) / (len(rs) - 1))
        live = [i for i in rows if sum(t["response_mask"][i]) > 0]
        ell = [sum(lp * m for lp, m in zip(t["old_log_probs"][i], t["response_mask"][i])) / sum(t["response_mask"][i])
               for i in live]
        p = sum(t["acc"][i] == 1 for i in live) / len(live)
        w = math.exp(sum(ell) / len(ell)) * 4 * p * (1 - p) + 0.1
        for i in rows:
            a = (t["reward"][i] - mu) / (sd + 1e-6) * w
            assert np.allclose(got[i], [a * m for m in t["response_mask"][i]], rtol=1e-4, atol=1e-5), i


@pytest.mark.parametrize("near, counted", [(float(np.nextafter(np.float32(1), np.float32(2))), True),
                                           (0.9999995, True), (1.000002, False)])
def test_codapo_counts_an_accuracy_within_1e6_of_one_as_correct(tmp_path, capsys, near, counted):
    """The PR's is_correct is torch.isclose(acc, 1, atol=1e-6, rtol=0) on the accuracy in float32 (core_algos.py
    L375 @ cb85d41a7): one float32 step above 1, or 5e-7 below it, is correct, 2e-6 above is not (it was read as
    exactly == 1). The reference is codapo_ref's rows with the near value counted as 1 or as 0."""
    import pyarrow as pa

    src = _codapo_dump(tmp_path / "in.parquet")
    t = pq.read_table(src)
    acc = [near if a == 1 else a for a in t.column("correct").to_pylist()]
    pq.write_table(t.set_column(t.schema.get_field_index("correct"), "correct", pa.array(acc, pa.float32())), src)
    out = tmp_path / "o.parquet"
    code, _, err = run_main(["run", src, "-o", out, "--flavor", "advcli", "--set", "estimator.name=codapo",
                             "--column", "accuracy=correct", "--precision", "float64", "-q"], capsys)
    assert code == 0, err
    want = codapo_ref(table=CODAPO if counted else [(x[0], x[1], 0.0 if x[2] == 1 else x[2], *x[3:])
                                                     for x in CODAPO])
    got = pq.read_table(out).column("advantages").to_pylist()
    for row, g, a in zip(CODAPO, got, want):
        assert np.allclose(g, [a * m for m in row[4]], rtol=1e-6, atol=1e-9), (row, g, a)


def test_codapo_refuses_a_negative_weight_offset(tmp_path, capsys):
    """The PR raises ValueError for a negative codapo_weight_offset (core_algos.py L400 @ cb85d41a7)."""
    src = _codapo_dump(tmp_path / "in.parquet")
    out = tmp_path / "o.parquet"
    code, _, err = run_main(["run", src, "-o", out, "--flavor", "advcli", "--set", "estimator.name=codapo",
                             "--set", "estimator.weight_offset=-0.1", "--column", "accuracy=correct"], capsys)
    assert code == 2 and "must be non-negative" in err and not out.exists()
