"""``advcli filter --variance-top-p/--variance-top-k``: RAGEN-2's signal-to-noise group filter (arXiv
2604.06268; verl PR #7894, TRL PR #7242), and ``--mask-dropped`` (the PRs mask the unselected groups out of
the loss instead of removing them). The expected selection is computed here in plain Python from the
rule: per step, groups by reward variance (descending, ties in order of appearance), zero-variance groups
left out unless asked; top_k the first K, top_p the shortest prefix reaching P·Σ variance."""
from __future__ import annotations

import json

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
