"""slime-train: slime's train dumps (--save-debug-train-data, or DIR/train_data/ of --dump-details; format_version 2
since slime #2266), built here from the layout of spec/dumps.md §6.2: {"format_version": 2, "rollout_id", "rank",
"samples": [one dict per sample, sorted by rollout_position], "dp_shards", "raw_reward": [the whole rollout's]}.
The logged advantages are computed here independently from slime's formulas (grpo: the group z-score of the raw
rewards with the unbiased std + 1e-6, on every position; reinforce_plus_plus_baseline with normalize_advantages: the
centred reward, whitened over the mask=1 tokens), not by advcli."""
import json
import math
import time

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
from conftest import run_main


def grpo(raw: list[float], n: int) -> list[float]:
    """slime's _post_process_rewards for grpo: per block of n, (r − μ)/(std unbiased + 1e-6)."""
    out = []
    for g in range(0, len(raw), n):
        block = raw[g:g + n]
        mu = sum(block) / n
        sd = math.sqrt(sum((x - mu) ** 2 for x in block) / (n - 1))
        out += [(x - mu) / (sd + 1e-6) for x in block]
    return out


def build(root, rollout_id: int, raw: list[float], n: int, seed: int, beside: bool = True,
          logged=None, raw_reward=None):
    """DIR/train_data/{rollout_id}.pt (and DIR/rollout_data/{rollout_id}.pt when ``beside``): samples in rollout
    order, two data-parallel ranks; ``logged(normalised rewards, masks)`` gives each sample's advantages (default:
    grpo's, the normalised reward on every position). Returns (masks, logged advantages)."""
    rng = np.random.default_rng(seed)
    norm = grpo(raw, n)
    masks = []
    for _ in raw:
        length = int(rng.integers(1, 7))
        m = [1] * length
        if length > 2:
            m[1] = 0  # a tool token inside the response
        masks.append(m)
    adv = logged(norm, masks) if logged else [[v] * len(m) for v, m in zip(norm, masks)]
    samples = [{"data_parallel_rank": p % 2, "sample_index": 1000 * rollout_id + p, "rollout_position": p,
                "tokens": torch.arange(len(m) + 3), "response_lengths": len(m), "total_lengths": len(m) + 3,
                "loss_masks": torch.tensor(m, dtype=torch.int), "rewards": norm[p], "truncated": 0,
                "log_probs": torch.full((len(m),), -0.5), "ref_log_probs": torch.full((len(m),), -0.7),
                "values": torch.linspace(0.5, -0.5, len(m)),
                "advantages": torch.tensor(a, dtype=torch.float32), "returns": torch.tensor(a, dtype=torch.float32)}
               for p, (m, a) in enumerate(zip(masks, adv))]
    (root / "train_data").mkdir(parents=True, exist_ok=True)
    torch.save({"format_version": 2, "rollout_id": rollout_id, "rank": 0, "samples": samples, "dp_shards": [],
                "raw_reward": raw if raw_reward is None else raw_reward}, root / "train_data" / f"{rollout_id}.pt")
    if beside:
        (root / "rollout_data").mkdir(parents=True, exist_ok=True)
        torch.save({"rollout_id": rollout_id, "samples": [
            {"group_index": 10 * rollout_id + p // n, "index": 1000 * rollout_id + p, "reward": r,
             "response_length": len(m), "loss_mask": m} for p, (r, m) in enumerate(zip(raw, masks))]},
                   root / "rollout_data" / f"{rollout_id}.pt")
    return masks, adv


RAW = ([1.0, 0.0, 0.5, 0.0, 1.0, 1.0, 0.0, 1.0, 0.25, 0.25, 0.75, 0.0],
       [0.0, 0.0, 1.0, 0.5, 0.5, 1.0, 1.0, 0.0, 0.0, 1.0, 0.25, 0.5])


@pytest.fixture
def details(tmp_path):
    root = tmp_path / "details"
    made = [build(root, k, RAW[k], 4, k) for k in (0, 1)]
    return root, made


def test_run_reads_the_train_dump_with_its_groups_from_the_rollout_dump_beside_it(details, tmp_path, capsys):
    root, made = details
    out = tmp_path / "o.parquet"
    code, _, err = run_main(["run", root / "train_data", "-o", out, "--flavor", "slime"], capsys)
    assert code == 0, err
    assert "group size 4" in err  # from the rollout dump's group_index
    t = pq.read_table(out).to_pydict()
    want = [a for masks, adv in made for a in adv]
    assert t["reward"] == [r for raw in RAW for r in raw]
    assert t["prompt_id"][:5] == ["0", "0", "0", "0", "1"]
    for got, exp, mask in zip(t["advantages"], want, [m for masks, _ in made for m in masks]):
        np.testing.assert_allclose([g * x for g, x in zip(got, mask)], [e * x for e, x in zip(exp, mask)],
                                   rtol=1e-5, atol=1e-6)
    assert t["logged_advantages"][0] == pytest.approx(want[0], rel=1e-6)


def test_audit_agrees_with_the_advantages_slime_trained_on_and_says_where_they_differ(details, tmp_path, capsys):
    root, _ = details
    code, out, err = run_main(["audit", root / "train_data", "--flavor", "slime", "--json"], capsys)
    assert code == 0, err
    rep = json.loads(out)
    assert rep["agree"] and rep["logged_column"] == "logged_advantages" and rep["logged_per"] == "token"
    # the same dump audited as grpo without the std: the logged values are not that
    code, out, err = run_main(["audit", root / "train_data", "--flavor", "slime", "--set",
                               "grpo_std_normalization=false", "--json"], capsys)
    assert code == 1 and not json.loads(out)["agree"], err
    # the --dump-details folder: audit reads its train dumps (run reads its rollout dumps), the library's too
    code, out, err = run_main(["audit", root, "--flavor", "slime", "--json"], capsys)
    rep = json.loads(out)
    assert code == 0 and rep["agree"] and rep["inputs"][0].endswith("train_data"), err
    import advcli
    assert advcli.audit(str(root), flavor="slime").agree
    # the rollout dumps alone log no advantages: said where slime writes them
    code, _, err = run_main(["audit", root / "rollout_data", "--flavor", "slime"], capsys)
    assert code == 2 and "advcli audit DIR/train_data --flavor slime" in err


def test_a_whitened_estimator_is_audited_over_the_mask(tmp_path, capsys):
    """reinforce_plus_plus_baseline (kl_coef 0) with normalize_advantages: the group-centred reward on every
    position, whitened with the mean and unbiased variance of the mask=1 tokens (rsqrt(var + 1e-8))."""
    def centred_whitened(norm, masks):  # norm is the z-score; rf++ baseline centres only: recompute from RAW[0]
        raw = RAW[0]
        cen = [x - sum(raw[g // 4 * 4:g // 4 * 4 + 4]) / 4 for g, x in enumerate(raw)]
        vals = [c for c, m in zip(cen, masks) for x in m if x]
        mu = sum(vals) / len(vals)
        var = sum((v - mu) ** 2 for v in vals) / (len(vals) - 1)
        return [[(c - mu) / math.sqrt(var + 1e-8)] * len(m) for c, m in zip(cen, masks)]

    build(tmp_path / "d", 0, RAW[0], 4, 3, logged=centred_whitened)
    code, out, err = run_main(["audit", tmp_path / "d" / "train_data", "--flavor", "slime", "--set",
                               "advantage_estimator=reinforce_plus_plus_baseline", "--set",
                               "normalize_advantages=true", "--json"], capsys)
    assert code == 0 and json.loads(out)["agree"], err


def test_alone_the_train_dump_needs_the_group_size(tmp_path, capsys):
    root = tmp_path / "alone"
    masks, adv = build(root, 0, RAW[0], 4, 0, beside=False)
    code, _, err = run_main(["run", root / "train_data", "-o", tmp_path / "o.parquet", "--flavor", "slime"], capsys)
    assert code == 2 and "n_samples_per_prompt" in err
    code, _, err = run_main(["run", root / "train_data" / "0.pt", "-o", tmp_path / "o.parquet", "--flavor", "slime",
                             "--set", "n_samples_per_prompt=4"], capsys)
    assert code == 0, err
    got = pq.read_table(tmp_path / "o.parquet").column("advantages").to_pylist()
    assert got[0][0] == pytest.approx(adv[0][0], rel=1e-5)


def test_a_raw_reward_from_metadata_gives_way_to_the_reward_slime_normalised(tmp_path, capsys):
    """slime overwrites train_data['raw_reward'] with a reward function's metadata['raw_reward'] (rollout.py
    L702-707) after normalising Sample.get_reward_value: with the rollout dump beside, its reward is read."""
    shown = [x + 10 for x in RAW[0]]
    build(tmp_path / "d", 0, RAW[0], 4, 0, raw_reward=shown)
    out = tmp_path / "o.parquet"
    code, _, err = run_main(["run", tmp_path / "d" / "train_data", "-o", out, "--flavor", "slime"], capsys)
    assert code == 0 and "raw_reward other than the rollout dump's reward" in " ".join(err.split()), err
    t = pq.read_table(out).to_pydict()
    assert t["reward"] == RAW[0] and t["raw_reward"] == shown


def test_the_dump_details_folder_still_reads_its_rollout_dumps(details, tmp_path, capsys):
    root, _ = details
    code, _, err = run_main(["convert", root, "-o", tmp_path / "c.parquet"], capsys)
    assert code == 0, err
    assert "train_data/0.pt (slime's train dump, read on its own" in err
    assert pq.read_table(tmp_path / "c.parquet").num_rows == sum(len(r) for r in RAW)


@pytest.mark.parametrize("damage, said", [
    (lambda s: s.pop("rollout_position"), "no rollout_position"),
    (lambda s: s.update(rollout_position=99), "rollout_position 99 is not a place in raw_reward"),
    (lambda s: s.update(loss_masks=torch.tensor([1, 2])), "holds 2 at position 1"),
    (lambda s: s.update(log_probs=torch.zeros(9)), "log_probs has 9 values but loss_masks has"),
])
def test_a_damaged_sample_is_named(tmp_path, capsys, damage, said):
    build(tmp_path / "d", 0, RAW[0], 4, 0)
    path = tmp_path / "d" / "train_data" / "0.pt"
    obj = torch.load(path, weights_only=True)
    damage(obj["samples"][2])
    torch.save(obj, path)
    code, _, err = run_main(["run", path, "-o", tmp_path / "o.parquet", "--flavor", "slime"], capsys)
    assert code == 2 and "sample 2" in err and said in err, err
    assert not (tmp_path / "o.parquet").exists()


def test_audit_follows_the_train_dumps_with_the_rollout_dumps_beside_them(details, capsys, monkeypatch):
    """--follow copies each step's train dump with the rollout dump it reads its groups from, and names the files as
    the user named the folder."""
    root, _ = details
    monkeypatch.chdir(root)
    code, out, err = run_main(["audit", "--follow", "train_data", "--flavor", "slime", "--until-idle", "1"], capsys)
    assert code == 0, err
    assert out.count("agree") == 2 and "followed train_data: 2 step(s)" in err, (out, err)
    # a step whose rollout dump is missing keeps the group size the first step's gave the follow
    torch.save({**torch.load("train_data/1.pt", weights_only=True), "rollout_id": 2}, "train_data/2.pt")
    code, out, err = run_main(["audit", "--follow", "train_data", "--flavor", "slime", "--until-idle", "1"], capsys)
    assert code == 0 and "followed train_data: 3 step(s)" in err, err
    # a disagreeing step names the user's file, not the follower's copy
    obj = torch.load("train_data/2.pt", weights_only=True)
    obj["samples"][0]["advantages"] = obj["samples"][0]["advantages"] + 1
    torch.save(obj, "train_data/2.pt")
    code, out, err = run_main(["audit", "--follow", "train_data", "--flavor", "slime", "--until-idle", "1"], capsys)
    assert code == 1 and "worst train_data/2.pt: sample 0" in out, out


def test_audit_follows_the_dump_details_folder_through_its_train_dumps(details, capsys, monkeypatch):
    """`audit --follow` on slime's --dump-details folder follows its train_data/, as the one-off audit reads it
    (it followed the rollout dumps and refused: they log no advantages); where slime has not written train_data/ yet
    it is waited for, and a folder that never gets one ends with exit 2 naming it."""
    import shutil
    import threading

    root, _ = details
    monkeypatch.chdir(root.parent)
    code, out, err = run_main(["audit", "--follow", "details", "--flavor", "slime", "--until-idle", "1"], capsys)
    assert code == 0 and out.count("agree") == 2, (out, err)
    assert "following details/train_data: the slime rollout dump (.pt) files beside it log no advantages" in err
    assert "followed details/train_data: 2 step(s)" in err, err
    # live: the follow starts before slime has written its first train dump
    shutil.copytree(root / "rollout_data", root.parent / "live" / "rollout_data")
    later = threading.Timer(0.5, shutil.copytree, (root / "train_data", root.parent / "live" / "train_data"))
    later.start()
    try:
        code, out, err = run_main(["audit", "--follow", "live", "--flavor", "slime", "--until-idle", "3"], capsys)
    finally:
        later.join()
    assert code == 0 and out.count("agree") == 2 and "live/train_data (not written yet)" in err, (out, err)
    shutil.copytree(root / "rollout_data", root.parent / "never" / "rollout_data")
    code, out, err = run_main(["audit", "--follow", "never", "--flavor", "slime", "--until-idle", "1"], capsys)
    assert code == 2 and "never/train_data: not written in 1 s (--until-idle)" in err, err
    # another trainer's dump beside an empty rollout_data/ (or --flavor naming another trainer) is followed as it is
    (root.parent / "other" / "rollout_data").mkdir(parents=True)
    code, out, err = run_main(["audit", "--follow", "other", "--flavor", "slime", "--until-idle", "1"], capsys)
    assert "following" not in err, err
    code, out, err = run_main(["audit", "--follow", "live", "--flavor", "trl", "--until-idle", "1"], capsys)
    assert "following" not in err, err
    # started on a folder slime has not written anything into yet: its first files show the layout
    (root.parent / "empty").mkdir()

    def slime_writes():
        shutil.copytree(root / "rollout_data", root.parent / "empty" / "rollout_data")
        time.sleep(0.5)
        shutil.copytree(root / "train_data", root.parent / "empty" / "train_data")

    later = threading.Timer(0.5, slime_writes)
    later.start()
    try:
        code, out, err = run_main(["audit", "--follow", "empty", "--until-idle", "3", "--settle", "0.3"], capsys)
    finally:
        later.join()
    assert code == 0 and out.count("agree") == 2 and "followed empty/train_data: 2 step(s)" in err, (out, err)


def test_train_dumps_named_by_slimes_other_templates(details, tmp_path, capsys):
    """--save-debug-train-data TEMPLATE: train_data/{rollout_id}_{rank}.pt (the {rank} placeholder, the name the
    per-rank dumps had before #2266) and slime's debugging guide's folder, data_{rollout_id}.pt beside
    train_{rollout_id}.pt, are told apart by content: they were skipped as old per-rank dumps, or read as rollout
    dumps and refused. run reads the guide's folder's rollout dumps, audit its train dumps, the groups from the
    rollout dump of the same rollout beside each."""
    import shutil

    root, _ = details
    ranked = tmp_path / "ranked"
    shutil.copytree(root / "rollout_data", ranked / "rollout_data")
    for k in (0, 1):
        (ranked / "train_data").mkdir(exist_ok=True)
        shutil.copy(root / "train_data" / f"{k}.pt", ranked / "train_data" / f"{k}_0.pt")
    code, out, err = run_main(["audit", ranked / "train_data", "--flavor", "slime"], capsys)
    assert code == 0 and "agree: 0 of" in err and "24 rows" in " ".join(err.split()), err
    # followed: a step is the rollout id (the name's first number), not the rank (its last)
    code, out, err = run_main(["audit", "--follow", ranked, "--flavor", "slime", "--until-idle", "1"], capsys)
    assert code == 0 and "step 0: 12 rows, agree" in out and "step 1: 12 rows, agree" in out, (out, err)
    guide = tmp_path / "debug"
    guide.mkdir()
    for k in (0, 1):
        shutil.copy(root / "rollout_data" / f"{k}.pt", guide / f"data_{k}.pt")
        shutil.copy(root / "train_data" / f"{k}.pt", guide / f"train_{k}.pt")
    code, out, err = run_main(["audit", guide, "--flavor", "slime"], capsys)
    assert code == 0 and "agree: 0 of" in err and "n_samples_per_prompt=4" in err, err
    code, _, err = run_main(["run", guide, "-o", tmp_path / "o.parquet", "--flavor", "slime"], capsys)
    assert code == 0, err
    assert pq.read_table(tmp_path / "o.parquet").num_rows == sum(len(r) for r in RAW)
    assert "logged_advantages" not in pq.read_table(tmp_path / "o.parquet").column_names  # the rollout dumps
    code, _, err = run_main(["audit", guide / "train_1.pt", "--flavor", "slime"], capsys)
    assert code == 0 and "agree: 0 of" in err, err
    code, _, err = run_main(["audit", str(guide / "*.pt"), "--flavor", "slime"], capsys)  # a glob of both kinds
    assert code == 0 and "agree: 0 of" in err and "24 rows" in " ".join(err.split()), err
    code, out, err = run_main(["audit", "--follow", guide, "--flavor", "slime", "--until-idle", "1"], capsys)
    assert code == 0 and out.count("12 rows, agree") == 2 and "2 step(s)" in err, (out, err)


def test_a_rollout_dump_beside_it_of_another_rollout_is_refused(details, tmp_path, capsys):
    """A rerun into the same --dump-details folder that stopped between the two dumps leaves a rollout dump of
    another rollout beside a train dump: its groups and rewards were read (a disagreement, only a note about the
    rewards); refused, naming both rollouts, or the sample whose index differs."""
    import shutil

    root, _ = details
    shutil.copy(root / "rollout_data" / "0.pt", root / "rollout_data" / "1.pt")
    code, _, err = run_main(["audit", root / "train_data", "--flavor", "slime"], capsys)
    assert code == 2 and "is of rollout 0, this train dump of rollout 1" in err, err
    obj = torch.load(root / "rollout_data" / "1.pt", weights_only=True)
    obj["rollout_id"] = 1  # the same rollout id, but the samples of another run
    torch.save(obj, root / "rollout_data" / "1.pt")
    code, _, err = run_main(["audit", root / "train_data", "--flavor", "slime"], capsys)
    assert code == 2 and "sample 0: sample_index 1000, where the rollout dump beside it holds sample 0" in err, err


def test_without_the_rollout_dump_a_metadata_raw_reward_is_named_as_a_cause(tmp_path, capsys):
    """Alone, a train dump whose raw_reward a reward function's metadata overwrote disagrees; the audit names that
    cause and what reproduces slime: each sample's rewards (normalized_reward), which grpo already normalised."""
    build(tmp_path / "d", 0, RAW[0], 4, 0, beside=False, raw_reward=RAW[0][::-1])
    args = ["audit", tmp_path / "d" / "train_data", "--flavor", "slime", "--set", "n_samples_per_prompt=4"]
    code, out, err = run_main([*args, "--no-search", "--json"], capsys)
    assert code == 1 and any(f["kind"] == "reward" and "metadata[\"raw_reward\"]" in f["explanation"]
                             for f in json.loads(out)["findings"]), out
    code, _, err = run_main([*args, "--column", "reward=normalized_reward", "--set", "rewards_normalization=false"],
                            capsys)
    assert code == 0 and "agree: 0 of" in err, err


def test_samples_of_the_rollout_left_out_of_training_are_said(tmp_path, capsys):
    """slime's data-parallel schedule drops trailing samples when global_batch_size does not divide the rollout,
    after normalising over every sample (raw_reward holds them all): the run says how many it did not see."""
    build(tmp_path / "d", 0, RAW[0], 4, 0)
    path = tmp_path / "d" / "train_data" / "0.pt"
    obj = torch.load(path, weights_only=True)
    obj["samples"] = obj["samples"][:8]  # the last group of 4 left out of training
    torch.save(obj, path)
    code, out, err = run_main(["run", tmp_path / "d" / "train_data", "-o", tmp_path / "o.parquet", "--flavor",
                               "slime", "--json"], capsys)
    assert code == 0, err
    assert any("4 sample(s) of the rollouts (first: rollout 0) are in raw_reward but not in the train dump" in w
               for w in json.loads(out)["warnings"]), out


def test_a_dict_raw_reward_is_read_as_missing_and_the_trained_reward_is_the_samples_own(tmp_path, capsys):
    """slime writes a sample's whole (dict) reward into raw_reward where a reward function gave other samples a
    metadata raw_reward (rollout.py L704-707): it was refused as a damaged file; it is read as missing, said, and
    each sample's rewards field (what slime trained on) audits the dump."""
    shown = list(RAW[0])
    shown[2] = {"acc": 1.0, "fmt": 0.5}
    build(tmp_path / "d", 0, RAW[0], 4, 0, beside=False, raw_reward=shown)
    args = ["audit", tmp_path / "d" / "train_data", "--flavor", "slime", "--set", "n_samples_per_prompt=4"]
    code, _, err = run_main(args, capsys)
    assert code == 2 and "column 'reward', row 2" in err and "null" in err, err
    code, out, err = run_main([*args, "--column", "reward=normalized_reward", "--set", "rewards_normalization=false",
                               "--json"], capsys)
    assert code == 0 and json.loads(out)["agree"], err
    code, _, err = run_main(["convert", tmp_path / "d" / "train_data", "-o", tmp_path / "c.parquet"], capsys)
    assert code == 0 and "1 sample(s) (first: sample 2) have a dict raw_reward" in " ".join(err.split()), err
