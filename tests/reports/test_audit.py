"""``advcli audit``: logged advantages checked against advcli's recomputation.

The logged values are computed here, independently of advcli, from the frameworks' formulas in
float64 numpy/python:

- verl GRPO (verl core_algos.py @1dda039b ``compute_grpo_outcome_advantage``): per group
  ``(r − mean)/(std + 1e-6)`` with the unbiased std (``norm_adv_by_std_in_grpo=false``: ``r − mean``),
  times the response mask;
- NeMo GRPO (NeMo RL @7ea279ab ``GRPOAdvantageEstimator`` / ``calculate_baseline_and_std_per_prompt``,
  spec/nemo.md §2-3): leave-one-out baseline ``b_i = mean_{j≠i} r_j`` and std of the other rewards
  (unbiased; 0 for one other), ``A = (r − b)/(σ + 1e-6)`` where ``σ > 0``, on every token;
- TRL GRPO (trl @f2cd5771 grpo_trainer.py): contiguous groups of G, ``(r − mean)/(std + 1e-4)``, one
  scalar ``advantage`` per row (the column TRL's completions dump logs).

Rewards are dyadic (0, 0.25, 0.5, 1) so that float32 holds them exactly.
"""
from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_commands import main_rc


def make_dump(seed: int, groups: int = 10, n: int = 4, steps: int = 2, scatter: bool = True):
    """(columns dict, group index per row, mask lists): groups of n rows, scattered within a step."""
    rng = np.random.default_rng(seed)
    gid = np.repeat(np.arange(groups), n)
    step = (gid * steps // groups).astype(np.int64)
    order = np.argsort(step * 10_000 + (rng.permutation(gid.size) if scatter else np.arange(gid.size)),
                       kind="stable")
    gid, step = gid[order], step[order]
    R = gid.size
    reward = rng.choice([0.0, 0.25, 0.5, 1.0], size=R)
    reward[gid == 0] = 1.0  # one uniform group
    masks = []
    for _ in range(R):
        L = int(rng.integers(1, 12))
        m = (rng.random(L) > 0.2).astype(np.int8)
        m[0] = 1
        masks.append(m.tolist())
    cols = {"prompt_id": [f"p{g}" for g in gid], "step": step, "reward": reward.astype(np.float32),
            "response_mask": masks}
    return cols, gid, masks


def write(cols: dict, path, logged=None, name="advantages"):
    arrays = {"prompt_id": pa.array(cols["prompt_id"], pa.string()), "step": pa.array(cols["step"], pa.int64()),
              "reward": pa.array(cols["reward"], pa.float32()),
              "response_mask": pa.array(cols["response_mask"], pa.list_(pa.int8()))}
    if logged is not None:
        if isinstance(logged[0], list):
            arrays[name] = pa.array(logged, pa.list_(pa.float32()))
        else:
            arrays[name] = pa.array(logged, pa.float64())
    pq.write_table(pa.table(arrays), str(path))
    return str(path)


def verl_grpo(reward, gid, masks, norm=True):
    out = []
    r = np.asarray(reward, np.float64)
    for i in range(len(r)):
        g = r[gid == gid[i]]
        a = r[i] - g.mean()
        if norm:
            a = a / (g.std(ddof=1) + 1e-6)
        out.append([a * m for m in masks[i]])
    return out


def nemo_loo(reward, gid, masks):
    out = []
    r = np.asarray(reward, np.float64)
    for i in range(len(r)):
        idx = np.flatnonzero(gid == gid[i])
        others = r[idx[idx != i]]
        if others.size == 0:
            a = 0.0
        else:
            a = r[i] - others.mean()
            sd = others.std(ddof=1) if others.size > 1 else 0.0
            if sd > 0:
                a = a / (sd + 1e-6)
        out.append([a] * len(masks[i]))
    return out


def audit_json(capsys, *args):
    code, out, err = main_rc(capsys, "audit", *args, "--device", "cpu", "--json")
    assert code in (0, 1), err
    return code, json.loads(out)


VERL = ["--flavor", "verl", "--set", "algorithm.adv_estimator=grpo"]


def test_honest_verl_dump_passes(tmp_path, capsys):
    cols, gid, masks = make_dump(0)
    p = write(cols, tmp_path / "d.parquet", verl_grpo(cols["reward"], gid, masks))
    code, rep = audit_json(capsys, p, *VERL)
    assert code == 0 and rep["agree"]
    assert rep["tokens_disagreeing"] == 0 and rep["rows_disagreeing"] == 0
    assert rep["valid_tokens"] == sum(sum(m) for m in masks)
    assert rep["groups"] == 10 and rep["groups_disagreeing"] == 0


def test_honest_nemo_dump_passes_and_planted_row_is_named(tmp_path, capsys):
    cols, gid, masks = make_dump(1, groups=12, n=5)
    logged = nemo_loo(cols["reward"], gid, masks)
    p = write(cols, tmp_path / "nemo.parquet", logged)
    code, rep = audit_json(capsys, p, "--flavor", "nemo")
    assert code == 0 and rep["agree"] and rep["masked_tokens_disagreeing"] == 0  # NeMo does not zero masked tokens
    bad_row = 23
    logged[bad_row] = [v + 0.37 for v in logged[bad_row]]
    p2 = write(cols, tmp_path / "planted.parquet", logged)
    code, rep = audit_json(capsys, p2, "--flavor", "nemo", "--no-search", "--chunk-rows", "7")
    assert code == 1 and not rep["agree"]
    assert rep["rows_disagreeing"] == 1 and rep["groups_disagreeing"] == 1
    w = rep["worst"][0]
    assert w["row"] == bad_row and w["group"] == cols["prompt_id"][bad_row]
    assert w["step"] == int(cols["step"][bad_row])
    assert w["abs_diff"] == pytest.approx(0.37, abs=1e-5)
    assert rep["tokens_disagreeing"] == sum(masks[bad_row])
    assert rep["findings"][0]["kind"] == "isolated"


def test_trl_scalar_advantage_dump(tmp_path, capsys):
    G = 4
    cols, gid, masks = make_dump(2, groups=8, n=G, steps=1, scatter=False)
    r = np.asarray(cols["reward"], np.float64).reshape(-1, G)
    adv = ((r - r.mean(1, keepdims=True)) / (r.std(1, ddof=1, keepdims=True) + 1e-4)).ravel().tolist()
    p = write(cols, tmp_path / "trl.parquet", adv, name="advantage")
    trl = ["--flavor", "trl", "--set", f"num_generations={G}"]
    code, rep = audit_json(capsys, p, *trl)
    assert code == 0 and rep["logged_column"] == "advantage" and rep["logged_per"] == "row"
    adv[13] = -adv[13] if adv[13] != 0 else 0.5
    p2 = write(cols, tmp_path / "trl_bad.parquet", adv, name="advantage")
    code, rep = audit_json(capsys, p2, *trl, "--no-search")
    assert code == 1 and rep["rows_disagreeing"] == 1 and rep["worst"][0]["row"] == 13


def test_names_the_setting_that_reproduces_the_logged_values(tmp_path, capsys):
    cols, gid, masks = make_dump(3)
    p = write(cols, tmp_path / "nostd.parquet", verl_grpo(cols["reward"], gid, masks, norm=False))
    code, rep = audit_json(capsys, p, *VERL)
    assert code == 1
    assert "verl grpo with algorithm.norm_adv_by_std_in_grpo=false" in rep["matches"]
    # every other flavor's group estimators ran on this dump (position flavors on its prompt_id groups)
    ran = {c["flavor"] for c in rep["search"] if "skipped" not in c}
    assert ran == {"verl", "nemo", "trl", "openrlhf", "roll", "advcli"}
    assert any(f["kind"] == "group_scale" for f in rep["findings"])  # std normalisation: one factor per group
    # the named configuration itself passes
    code, _ = audit_json(capsys, p, *VERL, "--set", "algorithm.norm_adv_by_std_in_grpo=false")
    assert code == 0


def test_roll_audit_names_float16_rewards(tmp_path, capsys):
    """Advantages logged by a ROLL run on its own reward workers' float16 rewards, audited on a file whose
    reward column is float32: the default (the column's dtype) disagrees at float16's precision and the audit
    names ``advcli.reward_dtype=float16`` as the setting that reproduces the log."""
    cols, gid, masks = make_dump(6, groups=6, n=4, steps=1, scatter=False)
    p = write(cols, tmp_path / "in.parquet")
    roll = ["--flavor", "roll", "--set", "adv_estimator=grpo",
            "--set", "actor_infer.generating_args.num_return_sequences=4"]
    out = tmp_path / "float16.parquet"
    code, _, err = main_rc(capsys, "run", p, "-o", str(out), *roll, "--set", "advcli.reward_dtype=float16", "-q",
                           "--device", "cpu")
    assert code == 0, err
    logged = pq.read_table(out).column("advantages").to_pylist()
    p2 = write(cols, tmp_path / "logged.parquet", logged)
    code, rep = audit_json(capsys, p2, *roll)
    assert code == 1 and rep["rows_disagreeing"] > 0
    assert any(m.startswith("roll grpo with") and m.endswith("advcli.reward_dtype=float16") for m in rep["matches"])
    code, rep = audit_json(capsys, p2, *roll, "--set", "advcli.reward_dtype=float16", "--no-search")
    assert code == 0 and rep["agree"]


def test_names_another_flavor(tmp_path, capsys):
    cols, gid, masks = make_dump(4, groups=8, n=5, steps=1)
    p = write(cols, tmp_path / "nemo.parquet", nemo_loo(cols["reward"], gid, masks))
    code, rep = audit_json(capsys, p, *VERL)
    assert code == 1
    assert "nemo grpo" in rep["matches"]  # nemo's defaults: leave-one-out baseline and std


def _ref(seed=5):
    cols, gid, masks = make_dump(seed)
    return cols, masks, verl_grpo(cols["reward"], gid, masks)


@pytest.mark.parametrize("kind", ["scale", "sign", "shift"])
def test_constant_transforms_are_classified(tmp_path, capsys, kind):
    cols, masks, ref = _ref()
    f = {"scale": lambda a, m: 2.5 * a, "sign": lambda a, m: -a, "shift": lambda a, m: a + 0.75}[kind]
    logged = [[f(a, m) if m else a for a, m in zip(row, mrow)] for row, mrow in zip(ref, masks)]
    p = write(cols, tmp_path / "x.parquet", logged)
    code, rep = audit_json(capsys, p, *VERL, "--no-search")
    assert code == 1
    assert rep["findings"][0]["kind"] == kind
    if kind == "scale":
        assert rep["fitted"]["scale"] == pytest.approx(2.5, rel=1e-5)


@pytest.mark.parametrize("lo, hi", [(-0.5, 0.8), (None, 0.8)])
def test_clipped_advantages_are_classified_with_the_settings_that_clip(tmp_path, capsys, lo, hi):
    """Logged = clamp(recomputed, lo, hi) (NeMo RL's grpo.advantage_clip_low/high): the finding is the clamp, with the
    bounds the logged values reach (a bound no token reaches is not guessed) and NeMo's keys; those keys given, the
    audit agrees. A float32 explanation, which a wide clamp can fall inside, is not offered beside it."""
    cols, gid, masks = make_dump(11, groups=10, n=6, steps=1)
    ref = nemo_loo(cols["reward"], gid, masks)
    logged = [[float(np.clip(a, -np.inf if lo is None else lo, hi)) for a in row] for row in ref]
    assert any(a > hi for row in ref for a in row) and (lo is None or any(a < lo for row in ref for a in row))
    p = write(cols, tmp_path / "c.parquet", logged)
    nemo = ["--flavor", "nemo", "--set", "advcli.grpo_valid_mask=false"]
    code, rep = audit_json(capsys, p, *nemo, "--no-search")
    kinds = [f["kind"] for f in rep["findings"]]
    assert code == 1 and kinds[0] == "clip" and "float32" not in kinds, kinds
    keys = (["--set", f"grpo.advantage_clip_low={lo:g}"] if lo is not None else []) + \
        ["--set", f"grpo.advantage_clip_high={hi:g}"]
    assert rep["findings"][0]["explanation"].endswith(f"(the run clipped its advantages: {' '.join(keys)})")
    assert rep["fitted"]["clip"] == [lo, pytest.approx(hi)] if lo is None else [pytest.approx(lo), pytest.approx(hi)]
    code, rep = audit_json(capsys, p, *nemo, *keys, "--no-search")
    assert code == 0, rep["findings"]


def test_mixup_is_classified(tmp_path, capsys):
    cols, masks, ref = _ref(6)
    row_val = [r[0] for r in ref]
    # two rows of different groups whose values differ, same length: swap their logged values
    cand = [(i, j) for i in range(len(ref)) for j in range(i + 1, len(ref))
            if cols["prompt_id"][i] != cols["prompt_id"][j] and cols["step"][i] == cols["step"][j]
            and len(masks[i]) == len(masks[j]) and abs(row_val[i] - row_val[j]) > 0.1]
    i, j = cand[0]
    logged = list(ref)
    logged[i], logged[j] = [row_val[j] * m for m in masks[i]], [row_val[i] * m for m in masks[j]]
    p = write(cols, tmp_path / "mix.parquet", logged)
    code, rep = audit_json(capsys, p, *VERL, "--no-search")
    assert code == 1 and rep["rows_disagreeing"] == 2
    assert rep["findings"][0]["kind"] == "mixup"
    assert {w["row"] for w in rep["worst"]} == {i, j}


def test_masked_positions_only_pass_with_a_note(tmp_path, capsys):
    cols, masks, ref = _ref(7)
    logged = [[a if m else 9.0 for a, m in zip(row, mrow)] for row, mrow in zip(ref, masks)]
    n_masked = sum(len(m) - sum(m) for m in masks)
    assert n_masked > 0
    p = write(cols, tmp_path / "m.parquet", logged)
    code, rep = audit_json(capsys, p, *VERL)
    assert code == 0 and rep["masked_tokens_disagreeing"] == n_masked
    assert [f["kind"] for f in rep["findings"]] == ["masked"]


def test_float32_noise_is_recognised(tmp_path, capsys):
    """TRL adds 1e-4 to the std with no σ>0 guard: an all-equal group of a non-dyadic reward gives
    (r − mean_f32)/(std_f32 + 1e-4), float32 residue, where the float64 math gives ~0."""
    import torch

    G = 6
    cols, gid, masks = make_dump(8, groups=6, n=G, steps=1, scatter=False)
    r = np.asarray(cols["reward"], np.float32)
    r[:G] = np.float32(0.9)
    cols["reward"] = r
    r64 = r.astype(np.float64).reshape(-1, G)
    adv = ((r64 - r64.mean(1, keepdims=True)) / (r64.std(1, ddof=1, keepdims=True) + 1e-4)).ravel().tolist()
    p = write(cols, tmp_path / "f.parquet", adv, name="advantage")
    code, rep = audit_json(capsys, p, "--flavor", "trl", "--set", f"num_generations={G}", "--no-search")
    # what float32 gives for that group on this machine (TRL's own torch calls)
    x = torch.full((G,), 0.9, dtype=torch.float32)
    f32 = ((x - x.mean()) / (x.std() + 1e-4)).abs().max().item()
    if f32 > 1e-5 + 1e-4 * f32:  # ~6e-4 where float32 leaves a residue
        assert code == 1
    if code == 1:
        assert rep["findings"][0]["kind"] == "float32"
        assert rep["rows_disagreeing"] <= G


def test_chunk_size_does_not_change_the_audit(tmp_path, capsys):
    cols, masks, ref = _ref(9)
    ref[3] = [a + 1.0 for a in ref[3]]
    p = write(cols, tmp_path / "c.parquet", ref)
    _, a = audit_json(capsys, p, *VERL, "--no-search", "--chunk-rows", "7")
    _, b = audit_json(capsys, p, *VERL, "--no-search", "--chunk-rows", "4096")
    for k in ("tokens_disagreeing", "rows_disagreeing", "worst", "findings", "max_abs_diff", "hypotheses"):
        assert a[k] == b[k]


def test_reports_and_errors(tmp_path, capsys):
    cols, masks, ref = _ref(10)
    ref[0] = [a + 1.0 for a in ref[0]]
    p = write(cols, tmp_path / "r.parquet", ref)
    for ext in ("json", "md", "html"):
        out = tmp_path / f"audit.{ext}"
        code, _, err = main_rc(capsys, "audit", p, *VERL, "--device", "cpu", "--no-search", "--report", out)
        assert code == 1
        text = out.read_text()
        assert "DISAGREE" in text or '"agree": false' in text
    assert "Worst rows" in (tmp_path / "audit.html").read_text()
    # no logged column: exit 2 with the columns listed
    q = write(cols, tmp_path / "none.parquet")
    code, _, err = main_rc(capsys, "audit", q, *VERL, "--device", "cpu")
    assert code == 2 and "--against" in err
    code, _, err = main_rc(capsys, "audit", p, *VERL, "--against", "nope", "--device", "cpu")
    assert code == 2 and "nope" in err
    # a logged list whose length differs from the mask
    bad = [row + [0.0] for row in ref]
    r2 = write(cols, tmp_path / "len.parquet", bad)
    code, _, err = main_rc(capsys, "audit", r2, *VERL, "--device", "cpu")
    assert code == 2 and "length" in err


def test_classify_pure():
    """The pure functions on hand-made arrays (no pipeline)."""
    from advcli.audit.checks import compare_chunk, fit_params, hypothesis_agreement

    offs = np.array([0, 3, 5])
    A = np.array([1.0, 1.0, 0.0, -2.0, -2.0])
    m = np.array([1, 1, 0, 1, 1], bool)
    L = 3 * A
    rt = compare_chunk(offs, L, A, m, 1e-4, 1e-5)
    assert rt.bad_valid.tolist() == [2, 2] and rt.bad_masked.tolist() == [0, 0]
    assert rt.worst_pos.tolist() == [0, 0] and rt.max_err.tolist() == [2.0, 4.0]
    p = fit_params(rt, np.array([0, 1]))
    assert p["c"] == pytest.approx(3.0)
    h = hypothesis_agreement(offs, L, A, m, np.array([0, 1]), p, 1e-4, 1e-5)
    assert h["scale"].sum() == 0 and h["group_scale"].sum() == 0 and h["sign"].sum() == 4


def test_padded_lists(tmp_path, capsys):
    """Fixed-width lists: advcli's rows end at the last mask=1 token; the padding is not compared."""
    cols, gid, masks = make_dump(11)
    ref = verl_grpo(cols["reward"], gid, masks)
    W = max(len(m) for m in masks) + 3

    def fixed(rows, typ):
        flat = [x for r in rows for x in list(r) + [0] * (W - len(r))]
        return pa.FixedSizeListArray.from_arrays(pa.array(flat, typ), W)

    ref[4] = [a + 2.0 for a in ref[4]]
    t = pa.table({"prompt_id": cols["prompt_id"], "step": pa.array(cols["step"]),
                  "reward": pa.array(cols["reward"], pa.float32()),
                  "response_mask": fixed(masks, pa.int8()), "advantages": fixed(ref, pa.float32())})
    p = str(tmp_path / "padded.parquet")
    pq.write_table(t, p)
    code, rep = audit_json(capsys, p, *VERL, "--no-search", "--chunk-rows", "5")
    assert code == 1 and rep["rows_disagreeing"] == 1 and rep["worst"][0]["row"] == 4
    assert rep["valid_tokens"] == sum(sum(m) for m in masks)


def test_nonfinite_logged_values(tmp_path, capsys):
    cols, masks, ref = _ref(12)
    ref[2] = [float("nan")] * len(ref[2])
    p = write(cols, tmp_path / "nan.parquet", ref)
    code, rep = audit_json(capsys, p, *VERL, "--no-search")
    assert code == 1 and rep["nonfinite_logged"] == sum(masks[2])
    kinds = [f["kind"] for f in rep["findings"]]
    assert kinds[:2] == ["nonfinite", "isolated"] and rep["worst"][0]["row"] == 2
    # strict JSON (the Infinity literal was written, which strict parsers refuse) that says what the row logged
    code, out, _ = main_rc(capsys, "audit", p, *VERL, "--no-search", "--device", "cpu", "--json")
    strict = json.loads(out, parse_constant=lambda c: pytest.fail(f"non-standard JSON constant {c}"))
    assert strict["max_abs_diff"] == "inf" and strict["worst"][0]["abs_diff"] == "inf"
    assert strict["worst"][0]["logged"] == "nan"
    code, _, err = main_rc(capsys, "audit", p, *VERL, "--no-search", "--device", "cpu")
    assert code == 1 and "logged nan, recomputed" in err


# ------------------------------------------------------------------ trainer dumps, as the importer reads them
def test_nemo_dump_audited_with_no_flags_names_the_planted_row(tmp_path, capsys):
    """`advcli audit DIR` on NeMo RL's own train_data_step{N}.jsonl: the logged advantages the importer kept
    (logged_advantages) are checked with the nemo flavor, which the report says it chose. A row whose
    logged values were raised by 0.5 is named by its file and line and its prompt. That row (step 2, line
    3: prompt [8, 9], reward 1.0; its group's other reward 0.25) has NeMo's leave-one-out advantage
    1.0 − 0.25 = 0.75 (one other row: no std)."""
    import test_format_nemo as nemo

    d = tmp_path / "logs" / "exp_001"
    d.mkdir(parents=True)
    nemo.write_step(d / "train_data_step1.jsonl", nemo.SAMPLES, 1)
    nemo.write_step(d / "train_data_step2.jsonl", nemo.SAMPLES[::-1], 2)
    code, rep = audit_json(capsys, str(tmp_path / "logs"))
    assert code == 0 and rep["agree"] and rep["flavor"] == "nemo", rep
    assert rep["logged_column"] == "logged_advantages" and "flavor of the dump's trainer" in rep["ran"]
    assert rep["inputs"] == [str(tmp_path / "logs")]

    bad = tmp_path / "planted" / "exp_001"
    bad.mkdir(parents=True)
    (bad / "train_data_step1.jsonl").write_text((d / "train_data_step1.jsonl").read_text())
    step2 = bad / "train_data_step2.jsonl"
    lines = (d / "train_data_step2.jsonl").read_text().splitlines()
    rec = json.loads(lines[2])
    rec["advantages"] = [[v + 0.5 for v in rec["advantages"][0]]]
    lines[2] = json.dumps(rec)
    step2.write_text("\n".join(lines) + "\n")
    code, rep = audit_json(capsys, str(tmp_path / "planted"), "--no-search")
    assert code == 1 and rep["rows_disagreeing"] == 1
    w = rep["worst"][0]
    assert w["where"] == f"{step2}:3" and w["prompt"] == "prompt [8, 9]" and w["step"] == 2
    assert w["recomputed"] == pytest.approx(0.75, abs=1e-6) and w["logged"] == pytest.approx(1.25, abs=1e-6)
    code, out, err = main_rc(capsys, "audit", str(tmp_path / "planted"), "--no-search", "--device", "cpu")
    assert code == 1 and f"{step2}:3: step 2" in err and '"prompt [8, 9]"' in err
    assert "advcli-import-" not in err + out


def test_a_step_file_the_audit_left_out_is_said(tmp_path, capsys):
    """An empty train_data_step2.jsonl (the trainer still writing it) was passed over in silence: exit 0 on step
    1's rows alone. run warned of it; the audit's report now lists it, in --json and the summary."""
    import test_format_nemo as nemo

    d = tmp_path / "logs"
    d.mkdir()
    nemo.write_step(d / "train_data_step1.jsonl", nemo.SAMPLES, 1)
    (d / "train_data_step2.jsonl").write_text("")
    code, rep = audit_json(capsys, str(d))
    assert code == 0 and rep["agree"] and rep["rows"] == len(nemo.SAMPLES)
    assert rep["files_not_read"] == [f"{d / 'train_data_step2.jsonl'} (empty)"]
    code, out, err = main_rc(capsys, "audit", str(d), "--device", "cpu")
    assert code == 0 and "left out, not read" in err and "(empty) (not audited)" in " ".join(err.split())


def test_a_record_without_its_logged_field_is_said_missing(tmp_path, capsys):
    """A NeMo record without 'advantages' was 'has length 0, its response mask length 3': the field is missing."""
    import test_format_nemo as nemo

    d = tmp_path / "logs"
    d.mkdir()
    nemo.write_step(d / "train_data_step1.jsonl", nemo.SAMPLES, 1)
    lines = (d / "train_data_step1.jsonl").read_text().splitlines()
    rec = json.loads(lines[1])
    del rec["advantages"]
    lines[1] = json.dumps(rec)
    (d / "train_data_step1.jsonl").write_text("\n".join(lines) + "\n")
    code, out, err = main_rc(capsys, "audit", str(d), "--no-search", "--device", "cpu")
    assert code == 2, (out, err)
    assert f"{d / 'train_data_step1.jsonl'}:2" in err
    assert "has no value (null: the field is missing), its response mask length 2" in " ".join(err.split())


def test_trl_dump_audited_with_its_own_flavor(tmp_path, capsys):
    """With no --flavor, a TRL completions dump is recomputed with TRL's GRPO (ε = 1e-4), which its logged
    `advantage` column matches (test_format_trl.trl_grpo, from TRL's formula); verl's GRPO (ε = 1e-6)
    would not be the trainer's."""
    import test_format_trl as trl

    d = tmp_path / "out" / "completions"
    d.mkdir(parents=True)
    trl.write_step(d / "completions_00010.parquet", 10, 1)
    code, rep = audit_json(capsys, str(d), "--set", f"num_generations={trl.G}", "--set",
                           "reward_funcs=[accuracy_reward,format_reward]", "--no-search")
    assert code == 0 and rep["agree"] and rep["flavor"] == "trl" and rep["logged_column"] == "advantage"


def test_primerl_rows_without_a_logged_value_are_not_checked(tmp_path, capsys):
    """prime-rl logs an advantage only on the traces it ships (effective/); the others' logged_advantage is
    null: not checked, and counted. The shipped ones are r − cohort mean (test_format_primerl.build)."""
    import test_format_primerl as primerl

    primerl.build(tmp_path / "out")
    code, rep = audit_json(capsys, str(tmp_path / "out"), "--no-search")
    assert code == 0 and rep["agree"] and rep["flavor"] == "prime-rl", rep
    assert rep["logged_column"] == "logged_advantage" and rep["rows_without_logged_value"] > 0
    # the verdict counts the rows it checked
    checked = rep["rows"] - rep["rows_without_logged_value"]
    code, out, err = main_rc(capsys, "audit", str(tmp_path / "out"), "--no-search", "--device", "cpu")
    assert code == 0 and f"0 of {checked} rows disagree" in " ".join((out + err).split()), out + err


def test_a_primerl_dump_that_shipped_no_trace_has_nothing_to_audit(tmp_path, capsys):
    """Every effective/traces.jsonl empty (every cohort scored alike): no row holds a logged value. The audit said
    'agree: 0 of 0 mask=1 tokens' with exit 0; it is refused as nothing to audit (exit 2)."""
    import test_format_primerl as primerl

    primerl.build(tmp_path / "out")
    for p in (tmp_path / "out" / "rollouts").glob("step_*/train/effective/traces.jsonl"):
        p.write_text("")
    code, out, err = main_rc(capsys, "audit", str(tmp_path / "out"), "--no-search", "--device", "cpu")
    assert code == 2, (out, err)
    assert "no row holds a logged value in 'logged_advantage' (9 rows), so there is nothing to audit" in err


def test_long_group_ids_are_printed_whole(tmp_path, capsys):
    """The worst rows name their group in full on an 80-column terminal (a uid is read whole, not cut)."""
    cols, gid, masks = make_dump(3, groups=4, n=3)
    cols["prompt_id"] = [f"{'x' * 90}-{g}" for g in gid]
    logged = verl_grpo(cols["reward"], gid, masks)
    logged[5] = [v + 1.0 for v in logged[5]]
    p = write(cols, tmp_path / "d.parquet", logged)
    code, out, err = main_rc(capsys, "audit", p, *VERL, "--no-search", "--device", "cpu")
    assert code == 1
    assert f"{p}, row 5: step {int(cols['step'][5])}, group {cols['prompt_id'][5]}, token" in err
