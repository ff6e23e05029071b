"""slime-pt: slime's --save-debug-rollout-data files, built here from the Sample field list of
spec/dumps.md §6.1 (torch.save of {"rollout_id", "samples": [dict]}). Expected advantages computed
independently: verl GRPO ((s − μ_g)/(σ_g unbiased + 1e-6), × mask)."""
import json
import math
import pickle

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
from conftest import run_main


def sample(g, idx, rng, reward):
    n = int(rng.integers(1, 6))
    lm = [1] * n
    if n > 2:
        lm[1] = 0  # a tool token inside the response
    return {"group_index": g, "index": idx, "rollout_id": None, "prompt": [{"role": "user", "content": f"q{g}"}],
            "tokens": [1, 2, 3] + [10 + j for j in range(n)], "response_length": n, "response": "x", "label": "1",
            "reward": reward, "loss_mask": lm if idx % 2 else None, "rollout_log_probs": [-0.5] * n,
            "weight_versions": ["1"], "status": "completed", "remove_sample": False, "metadata": {}}


def save_rollout(tmp_path, rollout_id, samples):
    """``tmp_path/rollout_data/<rollout_id>.pt`` as slime's ``--save-debug-rollout-data`` writes it; the directory."""
    d = tmp_path / "rollout_data"
    d.mkdir(exist_ok=True)
    torch.save({"rollout_id": rollout_id, "samples": samples}, d / f"{rollout_id}.pt")
    return d


def build(d, rollout_id, seed, groups=3, n=4):
    rng = np.random.default_rng(seed)
    samples = [sample(rollout_id * 10 + g, rollout_id * 100 + g * n + k, rng, float(rng.choice([0.0, 0.5, 1.0])))
               for g in range(groups) for k in range(n)]
    torch.save({"rollout_id": rollout_id, "samples": samples}, d / f"{rollout_id}.pt")
    return samples


@pytest.fixture
def dump(tmp_path):
    d = tmp_path / "details" / "rollout_data"
    d.mkdir(parents=True)
    s = build(d, 0, 0) + build(d, 1, 1)
    torch.save({"rollout_id": "eval_0", "samples": s[:2]}, d / "eval_0.pt")
    t = tmp_path / "details" / "train_data"
    t.mkdir()
    torch.save({"format_version": 2, "samples": [], "raw_reward": []}, t / "0.pt")
    return tmp_path / "details", s


@pytest.mark.parametrize("chunk", ["4096", "5"])
def test_grpo(dump, tmp_path, capsys, chunk):
    root, samples = dump
    out = tmp_path / "o.parquet"
    code, _, err = run_main(["run", root, "-o", out, "--flavor", "verl", "--set", "algorithm.adv_estimator=grpo",
                             "--chunk-rows", chunk, "-q"], capsys)
    assert code == 0, err
    t = pq.read_table(out).to_pylist()
    assert len(t) == len(samples)
    for r, s in zip(t, samples):
        m = [x["reward"] for x in samples if x["group_index"] == s["group_index"]]
        mu = sum(m) / len(m)
        sd = math.sqrt(sum((x - mu) ** 2 for x in m) / (len(m) - 1))
        a = (s["reward"] - mu) / (sd + 1e-6)
        mask = s["loss_mask"] or [1] * s["response_length"]
        assert r["response_mask"] == mask
        assert np.allclose(r["advantages"], [a * x for x in mask], rtol=1e-5, atol=1e-5)


def test_a_converted_dump_takes_its_group_size_and_flavor(dump, tmp_path, capsys):
    """A Parquet file `advcli convert` wrote of slime's rollout dumps (token level) records their group sizes:
    `--flavor slime` on it stopped asking for n_samples_per_prompt, and with no flavor it ran verl's GRPO; it runs
    as the dump does, n taken from the groups, the trainer's flavor chosen."""
    root, samples = dump
    conv = tmp_path / "c.parquet"
    assert run_main(["convert", root, "-o", conv], capsys)[0] == 0
    outs = []
    for k, args in enumerate((["--flavor", "slime"], [])):
        code, _, err = run_main(["run", conv, "-o", tmp_path / f"{k}.parquet", *args], capsys)
        assert code == 0 and "group size 4 from the dump's group_index" in err and "slime" in err, err
        outs.append(pq.read_table(tmp_path / f"{k}.parquet").column("advantages").to_pylist())
    assert outs[0] == outs[1]
    # filter keeps the recorded group sizes (it keeps or drops whole groups); the library reads the file under the
    # name it is given each time (a relative name, then the absolute one after a chdir)
    kept = tmp_path / "kept.parquet"
    assert run_main(["filter", conv, "--min-group-size", "2", "-o", kept], capsys)[0] == 0
    code, _, err = run_main(["run", kept, "-o", tmp_path / "f.parquet"], capsys)
    assert code == 0 and "group size 4 from the dump's group_index" in " ".join(err.split()) and "slime" in err, err
    assert pq.read_table(tmp_path / "f.parquet").column("advantages").to_pylist() == outs[0]
    import os

    import advcli

    here = os.getcwd()
    try:
        os.chdir(tmp_path)
        assert advcli.run("c.parquet", None).flavor.startswith("slime")
        (tmp_path / "sub").mkdir()
        os.chdir(tmp_path / "sub")
        assert advcli.run(str(conv), None).flavor.startswith("slime")
    finally:
        os.chdir(here)
    for adv, s in zip(outs[0], samples):  # slime's grpo: the group z-score (unbiased std + 1e-6) on every position
        m = [x["reward"] for x in samples if x["group_index"] == s["group_index"]]
        mu = sum(m) / len(m)
        sd = math.sqrt(sum((x - mu) ** 2 for x in m) / (len(m) - 1))
        assert np.allclose(adv, [(s["reward"] - mu) / (sd + 1e-6)] * s["response_length"], rtol=1e-5, atol=1e-5)


def test_companions_skipped_and_the_train_dump_read_on_its_own(dump, tmp_path, capsys):
    """The --dump-details folder is read through its rollout dumps (the train dump and eval rollouts skipped); the
    train dump given alone is read as slime's train dump (tests/formats/test_format_slime_train.py), this one
    holding no sample."""
    root, _ = dump
    code, _, err = run_main(["convert", root, "-o", tmp_path / "c.parquet"], capsys)
    assert code == 0, err
    assert "train_data/0.pt" in err and "eval_0.pt" in err
    code, _, err = run_main(["convert", root / "train_data" / "0.pt", "-o", tmp_path / "d.parquet"], capsys)
    assert code == 2 and "holds no rows" in err, err


def test_a_train_dump_from_before_2266_is_skipped_in_a_directory_and_refused_alone(dump, tmp_path, capsys):
    """slime v0.3.1 and older write the train dump per rank, train_data/{rollout_id}_{rank}.pt holding
    {rollout_id, rank, rollout_data} (slime/utils/train_dump_utils.py L9-15 @v0.3.1; #2266 made it one file with
    format_version 2): a --dump-details directory of those releases is read through its rollout_data/, and the
    file alone is refused as the train dump it is, not as a rollout dump missing its samples."""
    root, samples = dump
    torch.save({"rollout_id": 0, "rank": 1, "rollout_data": {"tokens": [[1, 2]], "rewards": [0.5]}},
               root / "train_data" / "0_1.pt")
    out = tmp_path / "o.parquet"
    code, _, err = run_main(["run", root, "-o", out, "--flavor", "slime", "-q"], capsys)
    assert code == 0, err
    assert pq.read_table(out).num_rows == len(samples)
    code, _, err = run_main(["convert", root / "train_data" / "0_1.pt", "-o", tmp_path / "d.parquet"], capsys)
    assert code == 2 and "train dump" in err and "rollout dump" in err and "expected the fields" not in err


class Custom:
    pass


def test_arbitrary_classes_refused(tmp_path, capsys):
    d = save_rollout(tmp_path, 3, [{"group_index": 0, "reward": 1.0, "response_length": 1, "metadata": Custom()}])
    code, _, err = run_main(["convert", d, "-o", tmp_path / "c.parquet"], capsys)
    assert code == 2 and "never unpickles" in err and "torch.save" in err
    assert not (tmp_path / "c.parquet").exists()


def test_verls_transfer_queue_cache_is_named_as_verls(tmp_path, capsys):
    """verl v1's RolloutSkip cache for the transfer queue, {dump_dir}/.../tq_batch.pt (torch.save of a TensorDict),
    was taken for a slime rollout dump: refused with slime's advice (d['samples']). It is named as verl's, with
    verl's way out."""
    d = tmp_path / "3" / "0"
    d.mkdir(parents=True)
    torch.save({"batch": torch.zeros(2, 3)}, d / "tq_batch.pt")
    for target in (d / "tq_batch.pt", tmp_path):
        code, _, err = run_main(["run", target, "-o", tmp_path / "o.parquet"], capsys)
        assert code == 2 and "verl RolloutSkip cache" in err and "slime" not in err, err


def test_framework_pickles_refused(tmp_path, capsys):
    p = tmp_path / "dumped_data"
    p.mkdir()
    f = p / "global_step_3_training_input.pkl"
    f.write_bytes(pickle.dumps({"x": 1}))
    code, _, err = run_main(["inspect", f], capsys)
    assert code == 2 and "SkyRL training batch" in err and "export it" in err
    g = tmp_path / "gen_batch.dp"
    g.write_bytes(pickle.dumps({"x": 1}))
    code, _, err = run_main(["run", g, "-o", tmp_path / "o.parquet"], capsys)
    assert code == 2 and "verl RolloutSkip" in err


def test_dict_rewards(tmp_path, capsys):
    rng = np.random.default_rng(0)
    d = save_rollout(tmp_path, 5, [sample(0, k, rng, {"acc": float(k % 2), "fmt": 0.5}) for k in range(4)])
    out = tmp_path / "o.parquet"
    code, _, err = run_main(["run", d, "-o", out, "--flavor", "verl", "--set", "algorithm.adv_estimator=rloo",
                             "--column", "reward=reward/acc", "-q"], capsys)
    assert code == 0, err
    t = pq.read_table(out).to_pylist()
    assert [r["advantages"][0] for r in t] == pytest.approx([-2 / 3, 2 / 3, -2 / 3, 2 / 3], abs=1e-6)


def test_inspect(dump, capsys):
    root, _ = dump
    code, out, err = run_main(["inspect", root / "rollout_data"], capsys)
    assert code == 0, err
    assert "slime-pt" in out and "group_index" in out and "eval_0.pt" in out


def test_removed_sample_mask_zeroed_and_teacher_read(tmp_path, capsys):
    """slime writes the rollout dump (rollout.py L500) before _convert_samples_to_train_data zeroes the loss
    mask of a sample with remove_sample=True (slime/ray/rollout.py L680 @624b824a). The removed sample keeps
    its place in its group's reward statistics (_post_process_rewards L608-633) but leaves the whitening
    (distributed_masked_whiten over the m=1 tokens, distributed_utils.py L111-170)."""
    rewards = [1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 0.5]
    lens = [3, 2, 4, 1, 2, 3, 2, 2]
    removed = {2, 5}
    samples = [{"group_index": k // 4, "index": k, "rollout_id": None, "tokens": [1] * (2 + lens[k]),
                "response_length": lens[k], "reward": rewards[k], "loss_mask": [1] * lens[k],
                "rollout_log_probs": [-0.5] * lens[k], "teacher_log_probs": [-0.25 * (j + 1) for j in range(lens[k])],
                "remove_sample": k in removed, "status": "completed"} for k in range(8)]
    d = save_rollout(tmp_path, 0, samples)
    out = tmp_path / "o.parquet"
    code, _, err = run_main(["run", d, "-o", out, "--flavor", "slime", "--set", "n_samples_per_prompt=4",
                             "--set", "normalize_advantages=true", "-q"], capsys)
    assert code == 0, err
    t = pq.read_table(out).to_pylist()
    # group z-score over all 4 samples of each block, removed ones included: (r − μ)/(std_unbiased + 1e-6)
    z = []
    for g in range(2):
        r = np.array(rewards[4 * g:4 * g + 4], np.float64)
        c = r - r.mean()
        z += list(c / (c.std(ddof=1) + 1e-6))
    # whitening statistics over the m=1 tokens of the kept samples only, unbiased, rsqrt(var + 1e-8)
    toks = np.concatenate([[z[k]] * lens[k] for k in range(8) if k not in removed])
    mu, var = toks.mean(), toks.var(ddof=1)
    for k, row in enumerate(t):
        assert row["response_mask"] == ([0] * lens[k] if k in removed else [1] * lens[k])
        assert row["teacher_log_probs"] == pytest.approx([-0.25 * (j + 1) for j in range(lens[k])])
        assert row["advantages"] == pytest.approx([(z[k] - mu) / math.sqrt(var + 1e-8)] * lens[k], rel=1e-4, abs=1e-5)


@pytest.mark.parametrize("damage,said", [
    (lambda b: b[: len(b) // 2], "not a complete torch.save archive"),
    (lambda b: b[:-30], "not a complete torch.save archive"),
    (lambda b: bytes(range(256)) * 4, "not a torch.save file"),
    (lambda b: pickle.dumps({"rollout_id": 0, "samples": []}, protocol=4)[:-6], "a pickle cut short"),
])
def test_a_truncated_or_corrupt_pt_is_said_to_be_so(tmp_path, capsys, damage, said):
    """A .pt cut short (a run killed while saving) or overwritten with other bytes was said to need Python
    classes, with how to load it with weights_only=False: it is damaged, and said so."""
    rng = np.random.default_rng(0)
    d = save_rollout(tmp_path, 0, [sample(0, k, rng, 1.0) for k in range(4)])
    f = d / "0.pt"
    f.write_bytes(damage(f.read_bytes()))
    out = tmp_path / "o.parquet"
    code, _, err = run_main(["run", d, "-o", out, "--flavor", "slime"], capsys)
    assert code == 2 and f"{f}: " in err and said in err and "truncated" in err, err
    assert "unpickling" not in err and "weights_only" not in err and not out.exists()


def test_an_empty_pt_is_left_out_saying_so_as_every_format_leaves_an_empty_file(tmp_path, capsys):
    """A 0-byte rollout_data/1.pt (slime still saving it) was 'truncated or not a torch.save file' (exit 2), where
    every other format leaves an empty step file out with a warning (docs/formats.md)."""
    rng = np.random.default_rng(0)
    d = save_rollout(tmp_path, 0, [sample(0, k, rng, float(k % 2)) for k in range(4)])
    (d / "1.pt").write_bytes(b"")
    out = tmp_path / "o.parquet"
    code, stdout, err = run_main(["run", d, "-o", out, "--flavor", "slime", "--set", "n_samples_per_prompt=4",
                                  "--json"], capsys)
    assert code == 0, err
    assert f"left out of the dump, not read: {d / '1.pt'} (empty)" in json.loads(stdout)["warnings"]
    assert pq.read_table(out).num_rows == 4
    (d / "0.pt").unlink()
    code, _, err = run_main(["run", d, "-o", tmp_path / "p.parquet", "--flavor", "slime"], capsys)
    assert code == 2 and "every dump file is empty" in err, err


def test_a_whole_pickle_needing_classes_is_still_said_to_need_them(tmp_path, capsys):
    d = tmp_path / "rollout_data"
    d.mkdir()
    (d / "0.pt").write_bytes(pickle.dumps({"rollout_id": 0, "samples": [], "x": Custom()}, protocol=4))
    code, _, err = run_main(["convert", d, "-o", tmp_path / "c.parquet"], capsys)
    assert code == 2 and "unpickling Python classes" in err and "never unpickles" in err, err


@pytest.mark.parametrize("field,bad,said", [
    ("rollout_log_probs", "x", "field 'rollout_log_probs' holds 'x' at position 1"),
    ("rollout_log_probs", None, "field 'rollout_log_probs' holds None at position 1"),
    ("teacher_log_probs", "-0.5", "field 'teacher_log_probs' holds '-0.5' at position 1"),
])
def test_a_log_prob_that_is_no_number_is_refused(tmp_path, capsys, field, bad, said):
    """A string (or null) among a sample's log-probs raised ValueError (exit 1, 'internal error')."""
    rng = np.random.default_rng(0)
    samples = [sample(0, k, rng, float(k % 2)) for k in range(4)]
    for s in samples:
        s["response_length"] = 3
        s["loss_mask"], s["rollout_log_probs"], s["teacher_log_probs"] = [1, 1, 1], [-0.5] * 3, [-0.4] * 3
    samples[2][field][1] = bad
    d = save_rollout(tmp_path, 0, samples)
    out = tmp_path / "o.parquet"
    code, _, err = run_main(["run", d, "-o", out, "--flavor", "slime"], capsys)
    assert code == 2 and f"0.pt: sample 2: {said}" in err, err
    assert "internal error" not in err and not out.exists()


@pytest.mark.parametrize("bad", [2, -1, 0.5, None])
def test_a_loss_mask_value_other_than_0_or_1_is_refused(tmp_path, capsys, bad):
    """slime multiplies by loss_mask and sums it as the trained-token count: a 2 was read as 1 (silently
    different numbers from the trainer's); refused as NeMo's token_loss_mask is, naming sample and position."""
    rng = np.random.default_rng(0)
    samples = [sample(0, k, rng, float(k % 2)) for k in range(4)]
    for s in samples:
        s["response_length"], s["loss_mask"], s["rollout_log_probs"] = 3, [1, 1, 1], [-0.5] * 3
    samples[1]["loss_mask"][2] = bad
    d = save_rollout(tmp_path, 0, samples)
    out = tmp_path / "o.parquet"
    code, _, err = run_main(["run", d, "-o", out, "--flavor", "slime"], capsys)
    assert code == 2 and f"0.pt: sample 1: field 'loss_mask' holds {bad!r} at position 2; a loss mask is 0 or 1" in err
    assert not out.exists()


@pytest.mark.parametrize("bad", [None, "g", 1.5])
@pytest.mark.parametrize("flavor", [["--flavor", "slime"],
                                    ["--flavor", "verl", "--set", "algorithm.adv_estimator=grpo"]])
def test_a_group_index_that_is_no_integer_is_refused(tmp_path, capsys, bad, flavor):
    """group_index groups the samples: a null one became a group of its own (advantage 1.0 under verl's GRPO, exit
    0), and under --flavor slime the run said n_samples_per_prompt was not set. Refused, naming the sample."""
    rng = np.random.default_rng(0)
    samples = [sample(k // 2, k, rng, float(k % 2)) for k in range(4)]
    samples[2]["group_index"] = bad
    d = save_rollout(tmp_path, 0, samples)
    out = tmp_path / "o.parquet"
    code, _, err = run_main(["run", d, "-o", out, *flavor], capsys)
    assert code == 2 and f"0.pt: sample 2: field 'group_index' is {bad!r}; expected an integer" in err, err
    assert "n_samples_per_prompt" not in err and "internal error" not in err and not out.exists()


@pytest.mark.parametrize("damage,said", [
    (lambda s: s.__setitem__(2, "oops"), "0.pt: sample 2 is str; expected a dict"),
    (lambda s: s[2].__setitem__("response_length", 2.5), "0.pt: sample 2: field 'response_length' is 2.5; "
                                                           "expected a whole number >= 0"),
    (lambda s: s[2].__setitem__("response_length", -1), "0.pt: sample 2: field 'response_length' is -1"),
    (lambda s: s[2].__setitem__("index", "x7"), "0.pt: sample 2: field 'index' is 'x7', but this dump format "
                                                "reads it as int64"),
])
def test_a_damaged_sample_is_named_as_samples_index(tmp_path, capsys, damage, said):
    """Every message names a sample by its place in the dump's ``samples`` list, from 0: a non-dict sample said
    ``0.pt:3`` (a line of a pickle), a field of the wrong type ``0.pt, record 3``, and a fractional
    response_length was an internal error (exit 1)."""
    rng = np.random.default_rng(0)
    samples = [sample(0, k, rng, float(k % 2)) for k in range(4)]
    damage(samples)
    d = save_rollout(tmp_path, 0, samples)
    out = tmp_path / "o.parquet"
    code, _, err = run_main(["run", d, "-o", out, "--flavor", "slime"], capsys)
    assert code == 2 and said in err, err
    assert "internal error" not in err and not out.exists()
