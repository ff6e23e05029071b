"""The estimator lab: your own estimator (``--estimator``), ``advcli.mix`` and ``compare --estimators``.

Expected values are computed here from the formulas, in numpy, on the input's own rewards and masks:
the user functions' formulas (the win rate of docs/api.md, a TD residual), verl's GRPO and RLOO
(compute_grpo_outcome_advantage / compute_rloo_outcome_advantage at verl @ 1dda039b: (s − mean)/(std +
1e-6) and (s − mean of the others)), and the comparison figures from the separately run outputs.
"""
import json
import math
import os
import re
import shlex

import numpy as np
import pyarrow.parquet as pq
import pytest
from _flavor_rows import write_rows
from conftest import ROOT, SAMPLE, run_main

import advcli
from advcli.errors import AdvcliError

API = os.path.join(ROOT, "docs", "api.md")


# ------------------------------------------------------------------------------------------ helpers
def doc_module() -> str:
    """The ``# my_adv.py`` block of docs/api.md."""
    text = open(API, encoding="utf-8").read()
    return next(b for b in re.findall(r"```python\n(.*?)```", text, re.S) if b.startswith("# my_adv.py"))


def doc_commands() -> list[list[str]]:
    text = open(API, encoding="utf-8").read()
    blocks = re.findall(r"```bash\n(.*?)```", text, re.S)
    return [shlex.split(line)[1:] for b in blocks for line in b.splitlines() if "my_adv.py" in line]


@pytest.fixture
def lab_dir(tmp_path, monkeypatch):
    """A directory holding sample_data/ and docs/api.md's my_adv.py, made the working directory."""
    os.symlink(os.path.dirname(SAMPLE), tmp_path / "sample_data")
    (tmp_path / "my_adv.py").write_text(doc_module())
    (tmp_path / "my_bad.py").write_text(BAD)
    monkeypatch.chdir(tmp_path)
    return tmp_path


BAD = '''import torch


def boom(rewards):
    scale = rewards.sum()
    return rewards[10 ** 9] / scale


def short(rewards):
    return rewards[:-1]


def ints(rewards):
    return (rewards > 0).long()


def nan_at_max(rewards):
    return torch.where(rewards == rewards.max(), torch.tensor(float("nan")), rewards)


def not_a_tensor(rewards):
    return rewards.tolist()
'''


def sample():
    t = pq.read_table(SAMPLE).to_pydict()
    r = np.array(t["reward"], dtype=np.float64)
    keys = list(zip(t["step"], t["prompt_id"]))
    codes = {k: i for i, k in enumerate(dict.fromkeys(keys))}
    g = np.array([codes[k] for k in keys])
    return r, g, t["response_mask"], np.array(t["step"]), t["prompt_id"]


def win_rate(r, g):
    """The docs/api.md function's formula, per row: (#lower − #higher) / max(n − 1, 1) over its group."""
    out = np.zeros(r.size)
    for i in range(r.size):
        same = g == g[i]
        n = int(same.sum())
        out[i] = ((r[same] < r[i]).sum() - (r[same] > r[i]).sum()) / max(n - 1, 1)
    return out


def verl_grpo(r, g, eps=1e-6):
    out = np.zeros(r.size)
    for k in np.unique(g):
        m = g == k
        if m.sum() == 1:
            out[m] = r[m]  # verl: mean 0, std 1 for a group of one
        else:
            out[m] = (r[m] - r[m].mean()) / (r[m].std(ddof=1) + eps)
    return out


def verl_rloo(r, g):
    out = np.zeros(r.size)
    for k in np.unique(g):
        m = g == k
        n = int(m.sum())
        out[m] = r[m] - (r[m].sum() - r[m]) / (n - 1) if n > 1 else 0.0
    return out


def on_mask(row_adv, masks):
    return [[float(a) * x for x in m] for a, m in zip(row_adv, masks)]


def varied(rows: list, r, g) -> list:
    """The rows of groups whose rewards are not all equal: a uniform group's GRPO advantage is 0 in exact
    arithmetic, and verl's float32 (s − mean)/(0 + 1e-6) turns its rounding residue into a small nonzero
    value (the float32_cancellation diagnostic); those groups are left out of the formula comparisons."""
    keep = [np.ptp(r[g == g[i]]) > 0 for i in range(r.size)]
    return [x for x, k in zip(rows, keep) if k]


def read_adv(path, col="advantages"):
    return pq.read_table(path).column(col).to_pylist()


def assert_lists_close(got, expected, rtol=1e-5, atol=1e-6):
    assert len(got) == len(expected)
    for i, (a, b) in enumerate(zip(got, expected)):
        assert np.allclose(np.array(a, dtype=np.float64), np.array(b, dtype=np.float64), rtol=rtol, atol=atol), \
            f"row {i}: {a[:5]} != {b[:5]}"


# ------------------------------------------------------------------------------------ your own estimator
def test_docs_example_runs_through_run_audit_and_compare(lab_dir, capsys):
    """The commands docs/api.md shows, on its own my_adv.py: run writes the win rate on every mask=1 token,
    audit agrees with the output the function wrote, compare writes its HTML side by side."""
    cmds = doc_commands()
    assert [c[0] for c in cmds] == ["run", "audit", "compare"]
    for argv in cmds:
        code, out, err = run_main(argv, capsys)
        assert code == 0, (argv, out + err)
    r, g, masks, _, _ = sample()
    assert_lists_close(read_adv("win_rate.parquet"), on_mask(win_rate(r, g), masks))
    html = open("pairs.html", encoding="utf-8").read()
    assert "Pairs side by side" in html and "E1 vs E3" in html and "./my_adv.py:win_rate" in html


def test_audit_with_your_estimator_finds_the_rows_it_disagrees_with(lab_dir, capsys):
    """A dump whose logged advantages are verl's GRPO: audited with the win rate, it disagrees (exit 1)."""
    code, _, err = run_main(["run", SAMPLE, "-o", "grpo.parquet", "--estimator", "grpo", "-q"], capsys)
    assert code == 0, err
    r, g, masks, _, _ = sample()
    assert_lists_close(varied(read_adv("grpo.parquet"), r, g), varied(on_mask(verl_grpo(r, g), masks), r, g))
    code, out, err = run_main(["audit", "grpo.parquet", "--estimator", "./my_adv.py:win_rate", "--no-search",
                               "--json"], capsys)
    rep = json.loads(out)
    assert code == 1 and not rep["agree"], err
    logged = [row[m.index(1)] for row, m in zip(read_adv("grpo.parquet"), masks)]  # the row's value, as written
    expected_rows = sum(1 for a, b in zip(win_rate(r, g), logged) if abs(a - b) > 1e-5 + 1e-4 * abs(a))
    assert rep["rows_disagreeing"] == expected_rows


def test_python_api_takes_the_function_or_its_reference(lab_dir, monkeypatch):
    monkeypatch.syspath_prepend(str(lab_dir))
    import my_adv

    r, g, masks, _, _ = sample()
    a = advcli.run(SAMPLE, "a.parquet", estimator=my_adv.win_rate, chunk_rows=50, device="cpu")
    b = advcli.run(SAMPLE, "b.parquet", estimator="my_adv:win_rate", device="cpu")
    assert a.config["estimator"]["name"] == "my_adv:win_rate" and b.config["estimator"]["name"] == "my_adv:win_rate"
    for p in ("a.parquet", "b.parquet"):
        assert_lists_close(read_adv(p), on_mask(win_rate(r, g), masks))


def test_entry_point_names_an_installed_estimator(tmp_path, monkeypatch):
    site = tmp_path / "site"
    dist = site / "lab_plugin-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: lab-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[advcli.estimators]\nlab_win = lab_plugin_mod:win_rate\n")
    (site / "lab_plugin_mod.py").write_text(doc_module())
    monkeypatch.syspath_prepend(str(site))
    out = tmp_path / "o.parquet"
    result = advcli.run(SAMPLE, out, estimator="lab_win", device="cpu")
    assert result.config["estimator"]["name"] == "lab_win"
    r, g, masks, _, _ = sample()
    assert_lists_close(read_adv(out), on_mask(win_rate(r, g), masks))


TD = '''import advcli


@advcli.estimator(level="token", needs=("values",))
def td(token_rewards, mask, values):
    """δ_t = r_t − V_t"""
    return (token_rewards - values) * mask
'''


def td_rows():
    """Rows with values and a mask=0 token inside (never the last: the reward lands on the last token)."""
    rng = np.random.default_rng(3)
    rows = []
    for i in range(11):
        L = int(rng.integers(2, 7))
        hole = int(rng.integers(0, L - 1))
        rows.append({"reward": float(rng.choice([0.0, 0.5, 1.0])), "prompt_id": f"p{i // 3}",
                     "mask": [0 if t == hole else 1 for t in range(L)],
                     "values": [float(np.float32(v)) for v in rng.normal(size=L)]})
    return rows


def test_token_level_function_gets_padded_token_columns(tmp_path, monkeypatch, capsys):
    (tmp_path / "lab_td.py").write_text(TD)
    monkeypatch.syspath_prepend(str(tmp_path))
    rows = td_rows()
    src = write_rows(rows, str(tmp_path / "in.parquet"))
    out = tmp_path / "o.parquet"
    code, _, err = run_main(["run", src, "-o", out, "--flavor", "verl", "--estimator", "lab_td:td", "--chunk-rows",
                             "4", "-q"], capsys)
    assert code == 0, err
    expected = []
    for row in rows:
        m = row["mask"]
        last = len(m) - 1
        tlr = [row["reward"] if t == last else 0.0 for t in range(len(m))]
        expected.append([np.float32(np.float32(x) - np.float32(v)) * k for x, v, k in zip(tlr, row["values"], m)])
    assert_lists_close(read_adv(out), expected, rtol=0, atol=0)


@pytest.mark.parametrize("fn, says", [
    ("boom", ["./my_bad.py:boom failed on step 0 (rows 0..191)", "IndexError", "my_bad.py:6: return rewards[10 ** 9]"]),
    ("short", ["./my_bad.py:short on step 0 (rows 0..191): returned shape [191]; expected [192]"]),
    ("ints", ["returned dtype torch.int64; expected a floating tensor"]),
    ("not_a_tensor", ["returned list; expected a torch tensor of shape [192]"]),
])
def test_errors_in_user_code_name_the_function_and_the_rows(lab_dir, capsys, fn, says):
    code, out, err = run_main(["run", SAMPLE, "-o", "x.parquet", "--estimator", f"./my_bad.py:{fn}"], capsys)
    assert code == 2
    for text in says:
        assert text in err, err
    assert "Traceback" not in err and not os.path.exists("x.parquet")


def test_nan_returned_is_refused_at_the_first_offending_row(lab_dir, capsys):
    r, _, _, step, _ = sample()
    first = int(np.flatnonzero((step == step[0]) & (r == r[step == step[0]].max()))[0])
    count = int(((step == step[0]) & (r == r[step == step[0]].max())).sum())
    code, _, err = run_main(["run", SAMPLE, "-o", "x.parquet", "--estimator", "./my_bad.py:nan_at_max"], capsys)
    assert code == 2 and f"returned nan (not finite) at row {first}; {count} non-finite value(s)" in err, err
    assert not os.path.exists("x.parquet")


def test_unknown_references_are_one_message(lab_dir, capsys):
    for ref, text in (("./nope.py:f", "file ./nope.py not found"), ("./my_adv.py:nope", "has no function 'nope'"),
                      ("no_such_module_xyz:f", "module 'no_such_module_xyz' cannot be imported")):
        code, _, err = run_main(["run", SAMPLE, "-o", "x.parquet", "--estimator", ref], capsys)
        assert code == 2 and text in err and "Traceback" not in err, err


def test_your_estimator_on_a_trainer_dump(lab_dir, capsys):
    """verl's own rollout dump (rollout_data_dir JSONL): the win rate per response, and compare on it."""
    from test_format_verl import v1_records, write

    d = lab_dir / "rollout_data"
    d.mkdir()
    recs = v1_records(1, 1) + v1_records(2, 2)
    write(d / "1.jsonl", recs[:12])
    write(d / "2.jsonl", recs[12:])
    code, _, err = run_main(["run", d, "-o", "o.parquet", "--estimator", "./my_adv.py:win_rate", "-q"], capsys)
    assert code == 0, err
    keys = [(x["step"], x["uid"].rsplit("_", 2)[0]) for x in recs]
    codes = {k: i for i, k in enumerate(dict.fromkeys(keys))}
    r, g = np.array([x["score"] for x in recs]), np.array([codes[k] for k in keys])
    assert np.allclose(read_adv("o.parquet"), win_rate(r, g), atol=1e-6)
    code, out, err = run_main(["compare", d, "--estimators", "grpo,./my_adv.py:win_rate", "--json"], capsys)
    assert code == 0, err
    pair = json.loads(out)["pairs"][0]
    assert pair["tokens"]["pearson"] == pytest.approx(np.corrcoef(verl_grpo(r, g), win_rate(r, g))[0, 1], rel=1e-5)


# ------------------------------------------------------------------------------------------------ mix
def test_mix_is_the_weighted_sum_of_the_estimators_run_alone(lab_dir, capsys):
    runs = {"mix": ["--set", "advcli.mix=0.7*grpo+0.3*rloo"], "grpo": ["--estimator", "grpo"],
            "rloo": ["--estimator", "rloo"]}
    for name, args in runs.items():
        code, _, err = run_main(["run", SAMPLE, "-o", f"{name}.parquet", "--flavor", "verl", *args, "-q"], capsys)
        assert code == 0, err
    r, g, masks, _, _ = sample()
    assert_lists_close(read_adv("rloo.parquet"), on_mask(verl_rloo(r, g), masks))
    mixed = [[0.7 * a + 0.3 * b for a, b in zip(x, y)]
             for x, y in zip(read_adv("grpo.parquet"), read_adv("rloo.parquet"))]
    assert_lists_close(read_adv("mix.parquet"), mixed)
    assert_lists_close(varied(read_adv("mix.parquet"), r, g),
                       varied(on_mask(0.7 * verl_grpo(r, g) + 0.3 * verl_rloo(r, g), masks), r, g))
    # `--estimator mix` with its terms (the hint of `--estimator mix` alone) is the same choice: the same bytes;
    # another estimator beside advcli.mix is two choices, refused
    code, _, err = run_main(["run", SAMPLE, "-o", "named.parquet", "--flavor", "verl", "--estimator", "mix",
                             "--set", "advcli.mix=0.7*grpo+0.3*rloo", "-q"], capsys)
    assert code == 0, err
    assert read_adv("named.parquet") == read_adv("mix.parquet")
    code, _, err = run_main(["run", SAMPLE, "-o", "two.parquet", "--estimator", "mix", "-q"], capsys)
    assert code == 2 and 'hint: --set advcli.mix="0.7*grpo+0.3*rloo"' in err, err
    code, _, err = run_main(["run", SAMPLE, "-o", "two.parquet", "--estimator", "rloo", "--set",
                             "advcli.mix=0.7*grpo+0.3*rloo", "-q"], capsys)
    assert code == 2 and "--estimator rloo) and advcli.mix both choose the estimator" in err, err
    code, out, err = run_main(["inspect", SAMPLE], capsys)
    said = " ".join(out.split())
    assert code == 0 and 'cannot feed mix: needs its terms, a weighted sum of the others: --set advcli.mix="' in said


def test_mix_terms_keep_their_flavor_semantics(lab_dir, capsys):
    """Under --flavor nemo, grpo is NeMo's leave-one-out GRPO broadcast over masked tokens too; the user term
    zeroes them: the sum is taken per token, each term its own way."""
    args = {"mix": ["--set", "advcli.mix=0.5*grpo+0.5*./my_adv.py:win_rate"], "grpo": [],
            "win": ["--estimator", "./my_adv.py:win_rate"]}
    for name, extra in args.items():
        code, _, err = run_main(["run", SAMPLE, "-o", f"{name}.parquet", "--flavor", "nemo", *extra, "-q"], capsys)
        assert code == 0, err
    r, g, masks, _, _ = sample()
    nemo = read_adv("grpo.parquet")
    assert any(a != 0 for row, m in zip(nemo, masks) for a, x in zip(row, m) if x == 0)  # masked tokens kept
    mixed = [[0.5 * a + 0.5 * b for a, b in zip(x, y)] for x, y in zip(nemo, on_mask(win_rate(r, g), masks))]
    assert_lists_close(read_adv("mix.parquet"), mixed)


def test_mix_of_a_row_and_a_token_estimator(lab_dir, capsys):
    base = ["--flavor", "advcli", "--chunk-rows", "37", "-q"]
    gae = ["--set", "estimator.lam=0.95", "--set", "estimator.gamma=1.0"]
    runs = {"mix": ["--set", "advcli.mix=0.25*grpo+0.75*gae"] + gae, "grpo": ["--set", "estimator.name=grpo"],
            "gae": ["--set", "estimator.name=gae"] + gae}
    for name, extra in runs.items():
        code, _, err = run_main(["run", SAMPLE, "-o", f"{name}.parquet", *base, *extra], capsys)
        assert code == 0, err
    for col in ("advantages", "returns"):
        expected = [[0.25 * a + 0.75 * b for a, b in zip(x, y)]
                    for x, y in zip(read_adv("grpo.parquet", col), read_adv("gae.parquet", col))]
        assert_lists_close(read_adv("mix.parquet", col), expected, rtol=1e-5, atol=1e-5)


def test_mix_refuses_terms_with_different_pipelines(lab_dir, capsys):
    code, _, err = run_main(["run", SAMPLE, "-o", "x.parquet", "--flavor", "verl",
                             "--set", "advcli.mix=0.5*grpo+0.5*gae"], capsys)
    assert code == 2 and "advantage.whiten (grpo: False, gae: True)" in err and not os.path.exists("x.parquet")
    for bad in ("grpo", "0.5*grpo+x*rloo", "0.5*grpo+0.5*nosuch"):
        with pytest.raises(AdvcliError):
            advcli.run(SAMPLE, None, settings={"advcli.mix": bad})


def test_mix_from_a_config_file(lab_dir, capsys):
    (lab_dir / "lab.yaml").write_text("algorithm:\n  adv_estimator: grpo\nadvcli:\n  mix: 0.5*grpo+0.5*rloo\n")
    code, _, err = run_main(["run", SAMPLE, "-o", "m.parquet", "--flavor", "verl", "--config", "lab.yaml", "-q"],
                            capsys)
    assert code == 0, err
    r, g, masks, _, _ = sample()
    assert_lists_close(varied(read_adv("m.parquet"), r, g),
                       varied(on_mask(0.5 * verl_grpo(r, g) + 0.5 * verl_rloo(r, g), masks), r, g))


# -------------------------------------------------------------------------------------- compare many
def test_compare_many_estimators_every_pair(lab_dir, capsys):
    names = ["grpo", "rloo", "./my_adv.py:win_rate"]
    code, out, err = run_main(["compare", SAMPLE, "--estimators", ",".join(names), "--json", "--top", "3"], capsys)
    assert code == 0, err
    rep = json.loads(out)
    assert [x["label"] for x in rep["runs"]] == names
    for i, name in enumerate(names):
        code, _, err = run_main(["run", SAMPLE, "-o", f"{i}.parquet", "--estimator", name, "-q"], capsys)
        assert code == 0, err
    _, _, masks, step, pid = sample()
    m = np.concatenate([np.array(x, bool) for x in masks])
    valid = np.array([sum(x) for x in masks])
    assert len(rep["pairs"]) == 3
    for pair, (i, j) in zip(rep["pairs"], [(0, 1), (0, 2), (1, 2)]):
        assert (pair["a"]["label"], pair["b"]["label"]) == (names[i], names[j])
        ta = np.concatenate([np.array(x, np.float64) for x in read_adv(f"{i}.parquet")])[m]
        tb = np.concatenate([np.array(x, np.float64) for x in read_adv(f"{j}.parquet")])[m]
        assert pair["tokens"]["pearson"] == pytest.approx(np.corrcoef(ta, tb)[0, 1], rel=1e-6)
        share = float(np.mean(np.sign(ta) != np.sign(tb)))
        assert pair["tokens"]["sign_change_share"] == pytest.approx(share, abs=1e-12)
        ra = np.array([np.sum(np.array(a) * np.array(k)) / max(v, 1) for a, k, v in
                       zip(read_adv(f"{i}.parquet"), masks, valid)])
        rb = np.array([np.sum(np.array(a) * np.array(k)) / max(v, 1) for a, k, v in
                       zip(read_adv(f"{j}.parquet"), masks, valid)])
        assert pair["row_level"]["sign_flips"] == int(np.sum(np.sign(ra) != np.sign(rb)))
        diff = {}
        for k, (s, p) in enumerate(zip(step, pid)):
            diff.setdefault((s, p), []).append(abs(ra[k] - rb[k]))
        means = {k: float(np.mean(v)) for k, v in diff.items()}
        top = pair["groups"]["most_different"][0]
        best = max(means.values())
        assert top["mean_abs_diff"] == pytest.approx(best, rel=1e-5)
        assert top["prompt_id"] in {p for (s, p), v in means.items() if math.isclose(v, best, rel_tol=1e-5)}
        assert len(pair["groups"]["most_different"]) == 3


def test_compare_many_needs_two_estimators(lab_dir, capsys):
    code, _, err = run_main(["compare", SAMPLE, "--estimators", "grpo"], capsys)
    assert code == 2 and "at least two" in err
    code, _, err = run_main(["compare", SAMPLE, "--estimators", "grpo,./nope.py:f"], capsys)
    assert code == 2 and "nope.py" in err and "Traceback" not in err


def test_an_edited_file_is_loaded_again(lab_dir):
    """In one Python session the same reference runs the file as it is now, not as it was first loaded."""
    r, g, masks, _, _ = sample()
    (lab_dir / "edit.py").write_text("def f(rewards):\n    return rewards * 2\n")
    advcli.run(SAMPLE, "a.parquet", estimator="./edit.py:f", device="cpu")
    st = os.stat(lab_dir / "edit.py")
    (lab_dir / "edit.py").write_text("def f(rewards):\n    return rewards * 3\n")
    os.utime(lab_dir / "edit.py", ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    advcli.run(SAMPLE, "b.parquet", estimator="./edit.py:f", device="cpu")
    assert_lists_close(read_adv("a.parquet"), on_mask(2 * r, masks))
    assert_lists_close(read_adv("b.parquet"), on_mask(3 * r, masks))


def test_explain_shows_your_function_and_the_mix(lab_dir, capsys):
    code, out, err = run_main(["explain", "--flavor", "nemo", "--set", "advcli.mix=0.7*grpo+0.3*./my_adv.py:win_rate"],
                              capsys)
    assert code == 0, err
    assert "mix: A = 0.7·A[grpo_loo] + 0.3·A[./my_adv.py:win_rate]" in out
    code, out, err = run_main(["explain", "--estimator", "./my_adv.py:win_rate"], capsys)
    assert code == 0, err
    assert "A_i = share of the other rows of its group with a lower reward" in out and "my_adv.py:7" in out


def test_a_declared_token_column_the_dump_lacks_is_named(lab_dir, capsys):
    import pyarrow.parquet as pq

    (lab_dir / "lab_td.py").write_text(TD)
    pq.write_table(pq.read_table(SAMPLE).drop(["values"]), "novals.parquet")
    for cmd in ("validate", "run"):
        extra = ["-o", "x.parquet"] if cmd == "run" else []
        code, _, err = run_main([cmd, "novals.parquet", *extra, "--estimator", "./lab_td.py:td"], capsys)
        assert code == 2 and "missing column 'values' (estimator ./lab_td.py:td needs it)" in err, err
    assert not os.path.exists("x.parquet")


def test_mix_expressions_parse():
    """Terms joined by single +, a weight per term (default 1, a leading or inner - negates), and names that
    end in ++ (SkyRL's reinforce++); an empty term is refused."""
    from advcli.flavors import parse_mix

    assert parse_mix("0.7*grpo+0.3*rloo") == [(0.7, "grpo"), (0.3, "rloo")]
    assert parse_mix("grpo-0.3*rloo") == [(1.0, "grpo"), (-0.3, "rloo")]
    assert parse_mix("1e-3*grpo+rloo") == [(0.001, "grpo"), (1.0, "rloo")]
    assert parse_mix("0.5*reinforce+++0.5*grpo") == [(0.5, "reinforce++"), (0.5, "grpo")]
    assert parse_mix("grpo+0.5*reinforce++") == [(1.0, "grpo"), (0.5, "reinforce++")]
    for bad in ("grpo++rloo", "grpo+", "+grpo+rloo"):
        with pytest.raises(AdvcliError, match="an empty term"):
            parse_mix(bad)


def test_an_estimator_the_flavor_lacks_is_labelled_so(lab_dir, capsys):
    """--flavor verl --estimator pkpo (advcli's) or ./my_adv.py:win_rate (yours): the run says it is not one of
    verl's estimators and what it is, and the output's provenance records where it comes from (your function
    with its file, line and a hash of its code, so that the file says which version of your code made it);
    verl's own rloo is recorded as verl's function."""
    import hashlib

    code, out, err = run_main(["run", "sample_data/rollouts.parquet", "-o", "pk.parquet", "--flavor", "verl",
                               "--estimator", "pkpo"], capsys)
    assert code == 0, err
    said = " ".join((out + err).split())
    assert "pkpo is not one of verl's estimators: advcli's pkpo (PKPO" in said
    assert json.loads(pq.read_schema("pk.parquet").metadata[b"advcli"])["estimator_source"].startswith("PKPO")
    code, out, err = run_main(["run", "sample_data/rollouts.parquet", "-o", "wr.parquet", "--flavor", "verl",
                               "--estimator", "./my_adv.py:win_rate"], capsys)
    assert code == 0, err
    assert "./my_adv.py:win_rate is not one of verl's estimators: your function" in " ".join((out + err).split())
    source = json.loads(pq.read_schema("wr.parquet").metadata[b"advcli"])["estimator_source"]
    text = doc_module()  # the function is the module's last definition: its lines run from its decorator to the end
    want = hashlib.sha256(text[text.index("@advcli.estimator"):].encode()).hexdigest()[:12]
    assert source.startswith("user function ./my_adv.py:win_rate (") and f"code sha256 {want}" in source, source
    code, _, err = run_main(["run", "sample_data/rollouts.parquet", "-o", "rl.parquet", "--flavor", "verl",
                             "--estimator", "rloo", "-q"], capsys)
    assert code == 0, err
    assert "compute_rloo_outcome_advantage" in json.loads(pq.read_schema("rl.parquet").metadata[b"advcli"])[
        "estimator_source"]


@pytest.mark.parametrize("name", ["gae", "raw_reward"])
def test_nemo_ppo_estimators_by_name_are_nemos_own(name, lab_dir, capsys):
    """NeMo RL has two estimator keys: grpo.adv_estimator.name (the GRPO loop) and ppo.adv_estimator.name (gae,
    raw_reward). --estimator gae ran advcli's registered gae (λ = 1, unwhitened, NeMo's gae_lambda ignored) and
    --estimator raw_reward was refused as unknown; both now set NeMo's PPO key: the same bytes as --set, with the
    PPO keys taking effect, by the command line and the library."""
    sample = "sample_data/rollouts.parquet"
    extra = ["--set", "ppo.adv_estimator.gae_lambda=0.9"] if name == "gae" else []
    runs = {"set": ["--set", f"ppo.adv_estimator.name={name}"], "named": ["--estimator", name]}
    for label, args in runs.items():
        code, _, err = run_main(["run", sample, "-o", f"{label}.parquet", "--flavor", "nemo", *args, *extra, "-q"],
                                capsys)
        assert code == 0, err
    assert read_adv("named.parquet") == read_adv("set.parquet")
    lib = advcli.run(sample, "lib.parquet", flavor="nemo", estimator=name,
                     settings=dict([extra[1].split("=")]) if extra else None)
    assert read_adv("lib.parquet") == read_adv("set.parquet") and lib.rows == 384
    if name == "gae":  # the λ given is the one that ran
        code, _, err = run_main(["run", sample, "-o", "lam1.parquet", "--flavor", "nemo", "--estimator", name, "-q"],
                                capsys)
        assert code == 0 and read_adv("lam1.parquet") != read_adv("named.parquet")


def test_the_advcli_command_imports_a_module_from_the_directory_it_runs_in(lab_dir):
    """`advcli run ... --estimator my_adv:win_rate` beside my_adv.py: the console script's path does not hold
    the working directory (python -m does), so the module was 'cannot be imported' though the hint said to run
    from its directory; the command now looks there too, and gives the file reference's numbers."""
    import shutil
    import subprocess
    import sys

    script = shutil.which("advcli", path=os.path.dirname(sys.executable))
    if script is None:
        pytest.skip("no advcli console script beside this python (pip install -e . makes one)")
    for ref, out in (("my_adv:win_rate", "mod.parquet"), ("./my_adv.py:win_rate", "file.parquet")):
        r = subprocess.run([script, "run", "sample_data/rollouts.parquet", "-o", out, "--estimator", ref, "-q"],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
    assert pq.read_table("mod.parquet").column("advantages").equals(pq.read_table("file.parquet").column("advantages"))
