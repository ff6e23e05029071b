"""--flavor NAME@RELEASE: the release tables, their resolution, and NeMo RL's changes after 7ea279ab on both
sides (the values from NeMo's code: ``nemo_rl/algorithms/utils.py::calculate_baseline_and_std_per_prompt`` and
``advantage_estimator.py::GRPOAdvantageEstimator`` at NVIDIA-NeMo/RL @ 7ea279ab, with #3837's ``valid_mask``
and #4158's ``normalize_mask = (std > 0) & ~is_trivial_distribution`` as merged in 2026-09), and audit
naming the release that reproduces a dump."""
import json
import math
import os
import re
import statistics

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from conftest import run_main
from test_flavor_nemo import EXPECTED, ROWS, _nemo_loo_reference, _rows_of, _write
from test_format_nemo import nemo_grpo, write_step

import advcli
from advcli.flavors import get, history_rows, known_releases, listed, release_of
from advcli.ops.groups import GroupIndex


def nemo_grpo_valid(rewards, groups, valid, loo=True):
    """NeMo RL's GRPO with #3837's valid_mask, float64, Python loops: the sums run over the group's valid
    rows (W·(r·v), less the row itself with LOO), divided by k = (valid rows) − [loo]; a left-out row gets
    the sums over every valid row of its group; a group with ≤ 1 valid row gets 0; divide by std + 1e-6
    where std > 0 (binary/0.5 rewards here: no single-valued set has a residue, #4158 changes nothing)."""
    out = []
    for i, (r, g) in enumerate(zip(rewards, groups)):
        members = [j for j, h in enumerate(groups) if h == g and valid[j]]
        if len(members) <= 1:
            out.append(0.0)
            continue
        peers = [rewards[j] for j in members if not (loo and j == i)]
        k = len(members) - int(loo)
        b = sum(peers) / k
        q = sum(x * x for x in peers) / k
        var = (q - b * b) * k / (k - 1) if k > 1 else float("nan")
        std = math.sqrt(var) if var == var and var > 0 else 0.0
        out.append((r - b) / (std + 1e-6) if std > 0 else r - b)
    return out


# one prompt of four (row 3 dropped by the trainer: sample_loss_mask 0), one of two
SAMPLES = [
    ([5, 6, 7], [10, 11, 12], [1, 1, 1], 1.0),
    ([5, 6, 7], [13, 14], [1, 1], 0.0),
    ([5, 6, 7], [15, 16, 17, 18], [1, 0, 0, 1], 0.5),
    ([5, 6, 7], [19, 20], [1, 1], 0.0),
    ([8, 9], [20, 21, 22], [1, 1, 0], 1.0),
    ([8, 9], [23, 24], [1, 1], 0.0),
]
MASKS = [1.0, 1.0, 1.0, 0.0, 1.0, 1.0]


def _dump(tmp_path, advantages=None, masks=MASKS, samples=SAMPLES, name="exp"):
    d = tmp_path / name
    d.mkdir()
    write_step(d / "train_data_step1.jsonl", samples, 1, sample_masks=masks, advantages=advantages)
    return d


def _adv_rows(path):
    return pq.read_table(path).column("advantages").to_pylist()


# ------------------------------------------------------------------------------------ the tables
def test_every_flavor_accepts_a_release_and_its_table_is_consistent():
    for fl in listed():
        releases = known_releases(fl)
        if fl.name == "advcli":
            assert releases == ()
            continue
        assert releases, fl.name
        keys = set(fl.keys)
        dates = [r.date for r in releases if r.date]
        assert dates == sorted(dates), f"{fl.name}: releases oldest first"
        for r in releases:
            assert set(r.settings) <= keys, f"{fl.name}@{r.name}: settings of keys the flavor lacks"
            for c in r.changes:
                assert set(c.keys) <= keys, f"{fl.name}@{r.name} {c.pr}: keys the flavor lacks"
            assert release_of(fl, r.name) == r
        assert not releases[-1].settings, f"{fl.name}: the KEYS defaults are the newest release's"
        # no @: the newest, or the release the flavor names as its default (NeMo RL: the contract's commit)
        default = [r for r in releases if r.name == fl.default_release] if fl.default_release else [releases[-1]]
        assert len(default) == 1 and release_of(fl, None) == default[0], fl.name
        commit = re.search(r"@\s*([0-9a-f]{7,40})", fl.framework).group(1)
        pinned = release_of(fl, commit[:7])  # the pinned commit is always selectable (older releases may precede it)
        assert any(n.startswith(commit[:7]) for n in (pinned.name, *pinned.aliases)), (fl.name, pinned)


def test_release_names_aliases_and_commit_prefixes(capsys):
    nemo = get("nemo")
    pinned = release_of(nemo, "7ea279a")
    for text in ("7ea279abfbeb698b092856d0dab61e7cf39bc909", "7EA279", "7ea2", "pre-3837"):
        assert release_of(nemo, text) is pinned
    assert release_of(nemo, "pre-4158").name == "post-3837"
    assert release_of(nemo, "newest") is known_releases(nemo)[-1]
    # a flavor with one entry (its pinned commit) accepts that commit and refuses another
    roll = get("roll")
    assert release_of(roll, "8eb27cc").name == "8eb27cc"
    code, _, err = run_main(["explain", "--flavor", "roll@abcdef0"], capsys)
    assert code == 2 and "8eb27cc" in err and "Traceback" not in err
    # a longer hash must extend the longest one known: SkyRL's a9564572 (also a956457) is not a9564573
    skyrl = get("skyrl")
    assert release_of(skyrl, "a95645721f").name == release_of(skyrl, "a956457").name == "a9564572"
    for wrong in ("a9564573", "a95645739"):
        code, _, err = run_main(["explain", "--flavor", f"skyrl@{wrong}"], capsys)
        assert code == 2 and "not a release advcli reproduces" in err, wrong


def test_unknown_and_too_old_releases_are_refused(capsys):
    code, _, err = run_main(["explain", "--flavor", "nemo@v0.6.5"], capsys)  # between two known: not guessed
    assert code == 2 and "not a release advcli reproduces" in err
    for name in ("0.5.0", "0.6.0", "0.7.0", "7ea279a", "post-3837", "post-4158"):
        assert name in err
    code, _, err = run_main(["explain", "--flavor", "nemo@v0.3.0"], capsys)
    assert code == 2 and "older than the oldest release advcli reproduces, 0.5.0 (2026-01-30)" in err
    code, _, err = run_main(["explain", "--flavor", "nemo@2026-01-01"], capsys)
    assert code == 2 and "older than the oldest release advcli reproduces, 0.5.0 (2026-01-30)" in err
    code, _, err = run_main(["explain", "--flavor", "advcli@7ea279a"], capsys)
    assert code == 2 and "no upstream releases" in err


def test_versions_compare_as_versions():
    from advcli.errors import AdvcliError
    from advcli.flavors._releases import Release, find

    table = (Release("0.9.0", "2026-05-01"), Release("0.11.2", "2026-09-01"))
    assert find(table, "v0.11.2", "--flavor x").name == "0.11.2"
    with pytest.raises(AdvcliError, match="older than the oldest release advcli reproduces, 0.9.0"):
        find(table, "0.8.5", "--flavor x")
    with pytest.raises(AdvcliError, match="not a release advcli reproduces"):
        find(table, "0.10.0", "--flavor x")  # between two known releases: not verified, not guessed


def test_versions_equal_under_pep_440_and_a_series_of_one_semantics():
    """``0.2.0`` is the release ``0.2`` (PEP 440: pip installs the one for the other); ``0.19`` names the 0.19.x
    releases, taken when they all run one table entry, refused naming each group when they do not."""
    from advcli.errors import AdvcliError
    from advcli.flavors._releases import Release, find

    table = (Release("0.2", "2025-01-01", aliases=("0.2.0.post1",)), Release("0.5.0", "2025-06-01"),
             Release("0.5.2", "2025-07-01", aliases=("0.5.3",)), Release("0.6.0", "2025-08-01", aliases=("0.6.1",)))
    assert find(table, "0.2.0", "--flavor x").name == "0.2"
    assert find(table, "v0.2.0.0", "--flavor x").name == "0.2"
    assert find(table, "0.6", "--flavor x").name == "0.6.0"  # 0.6.0 and 0.6.1: one semantics
    assert find(table, "0.5.2", "--flavor x").name == "0.5.2"
    with pytest.raises(AdvcliError, match=r"0\.5\.x releases do not share one semantics: 0\.5\.0 run 0\.5\.0's; "
                                          r"0\.5\.2, 0\.5\.3 run 0\.5\.2's"):
        find(table, "0.5", "--flavor x")
    # the real tables: TRL's 0.19.x run the 0.16.0 entry; 0.22.0 and 0.22.2 differ (scale_rewards swapped)
    trl = get("trl")
    assert release_of(trl, "0.19").name == release_of(trl, "0.19.1").name == "0.16.0"
    with pytest.raises(AdvcliError, match="0.22.2"):
        release_of(trl, "0.22")
    assert release_of(get("verl"), "0.2.0").name == "0.2"


@pytest.mark.parametrize("name", sorted(f.name for f in listed() if f.name != "advcli"))
def test_explain_runs_at_every_release_of_every_flavor(name, capsys):
    """``advcli explain --flavor F@R`` at each release a table lists: the resolved configuration and its
    formulas print (verl 0.6.1 and 0.7.0, whose rollout correction has no IS weights by default, once stopped
    on an internal error there)."""
    for r in known_releases(get(name)):
        code, out, err = run_main(["explain", "--flavor", f"{name}@{r.name}"], capsys)
        assert code == 0 and "internal error" not in err, (r.name, err)
        assert r.name in out, r.name


def test_explain_history_prints_the_table(capsys):
    code, out, _ = run_main(["explain", "--flavor", "nemo", "--history"], capsys)
    assert code == 0
    for release, date, pr, _keys, _effect in history_rows(get("nemo")):
        assert release in out and date in out
        if pr:
            assert pr in out
    assert out.index("\n7ea279a") < out.index("\npost-3837") < out.index("\npost-4158")
    assert "#4158 [advcli.skip_trivial_std]" in out and "#3837 [advcli.grpo_valid_mask]" in out
    code, out, _ = run_main(["explain", "--flavor", "nemo@7ea279a", "--set", "grpo.adv_estimator.name=grpo"], capsys)
    assert code == 0 and "release  NeMo RL @7ea279a" in out


def test_a_release_setting_yields_to_set():
    from advcli.flavors import resolve

    cfg, given = resolve("nemo@7ea279a", [])
    assert cfg["estimator"]["skip_single_valued"] is False and cfg["estimator"]["valid_mask"] is False
    assert given == {}  # a release's defaults are not settings the user gave
    cfg, given = resolve("nemo@7ea279a", [("advcli.grpo_valid_mask", True)])
    assert cfg["estimator"]["valid_mask"] is True and given == {"advcli.grpo_valid_mask": True}
    cfg, _ = resolve("nemo@newest", [])
    assert cfg["estimator"]["skip_single_valued"] is True and cfg["estimator"]["valid_mask"] is True
    cfg, _ = resolve("nemo", [])  # --flavor nemo: 7ea279a, the commit of the cross-check contract
    assert cfg["estimator"]["skip_single_valued"] is False and cfg["estimator"]["valid_mask"] is False


@pytest.mark.parametrize("name", ["verl", "trl", "openrlhf", "skyrl", "areal", "roll", "slime", "prime-rl",
                                  "open-instruct", "nemo"])
def test_newest_names_every_flavors_newest_release(name):
    """`@newest` is the newest release in every flavor's table (it was NeMo's alias only: verl@newest was refused
    as an unknown release), the same release whatever the flavor's no-@ default."""
    from advcli.flavors import at

    fa = at(f"{name}@newest")
    newest = fa.flavor.releases[-1] if fa.flavor.releases else at(name).release  # (one pinned commit: itself)
    assert fa.release == newest and fa.release is not None, (name, fa.release)


# ------------------------------------------------------------------------ NeMo RL #4158, both sides
def test_4158_flags_single_valued_leave_one_out_sets():
    # PR #4158's own unit test (tests/unit/algorithms/test_utils.py): a sample's leave-one-out peers may be
    # identical even when the whole group is not
    g = GroupIndex.from_codes(torch.zeros(8, dtype=torch.int64))
    r = torch.tensor([0.0] + [0.95] * 7)
    assert g.single_valued_std_sets(r, True).tolist() == [True] + [False] * 7
    assert float(g.onepass_baseline_std(r, True)[0][0]) == pytest.approx(0.95)
    # without leave-one-out the set is the whole group; groups of ≤ 1 valid row are flagged whole
    assert g.single_valued_std_sets(r, False).tolist() == [False] * 8
    two = GroupIndex.from_codes(torch.tensor([0, 0, 1]))
    assert two.single_valued_std_sets(torch.tensor([1.0, 0.0, 0.5]), True).tolist() == [True, True, True]
    valid = torch.tensor([True, True, False, True])
    four = GroupIndex.from_codes(torch.zeros(4, dtype=torch.int64))
    # valid rows {1, 0, 1}: row 1's peers {1, 1} are one value; the left-out row 2 sees {1, 0, 1}
    assert four.single_valued_std_sets(torch.tensor([1.0, 0.0, 0.0, 1.0]), True, valid).tolist() == \
        [False, True, False, False]


@pytest.mark.parametrize("pos", [0, 2, 4, 7])
def test_4158_the_7x03_1x09_group_on_both_sides(tmp_path, pos):
    """7×0.3 + 1×0.9 in one prompt, leave-one-out + normalize_rewards. Newest (#4158): the 0.9 row's peers
    are all 0.3, so it is not divided: 0.9 − 0.3 = 0.6. 7ea279a (plain --flavor nemo): NeMo's own float32 calls
    on this machine (a std residue may divide it, A in the thousands, depending on the BLAS's summation order)."""
    samples = [([5, 6], [10 + i, 11], [1, 1], 0.3) for i in range(7)]
    samples.insert(pos, ([5, 6], [30, 31, 32], [1, 1, 1], 0.9))
    rewards = [s[3] for s in samples]
    d = _dump(tmp_path, advantages=[0.0] * 8, masks=None, samples=samples)
    out = tmp_path / "new.parquet"
    advcli.run(str(d), str(out), flavor="nemo@newest", device="cpu")
    new = _adv_rows(out)
    assert new[pos][0] == pytest.approx(0.6, abs=1e-6)
    peers = [0.3] * 6 + [0.9]  # a 0.3 row's leave-one-out set: (0.3 − mean) / (unbiased std + 1e-6)
    others = [row[0] for i, row in enumerate(new) if i != pos]
    assert others == pytest.approx([(0.3 - statistics.mean(peers)) / (statistics.stdev(peers) + 1e-6)] * 7, rel=1e-5)
    old = tmp_path / "old.parquet"
    advcli.run(str(d), str(old), flavor="nemo@7ea279a", device="cpu")
    want = _nemo_loo_reference(rewards)
    assert [row[0] for row in _adv_rows(old)] == pytest.approx(want.tolist(), rel=1e-6)
    plain = tmp_path / "plain.parquet"
    advcli.run(str(d), str(plain), flavor="nemo", device="cpu")
    assert _adv_rows(plain) == _adv_rows(old)


def test_4158_all_equal_group_without_leave_one_out(tmp_path):
    """grpo without LOO: group d (0.9 ×3) at 7ea279a divides its float32 residue by the residue std
    (NeMo's numbers: 0.000140622113); from #4158 on the set is single-valued, so A = r − mean ≈ 0."""
    src = _write(os.path.join(tmp_path, "in.parquet"))
    out = os.path.join(tmp_path, "out.parquet")
    advcli.run(src, out, flavor="nemo@post-4158", settings={"grpo.adv_estimator.use_leave_one_out_baseline": False},
               device="cpu")
    got = [row[0] for row in _adv_rows(out)]
    for i, (pid, *_rest) in enumerate(ROWS):
        if pid == "d":
            assert abs(got[i]) < 1e-6 and EXPECTED["grpo_noloo"][i] > 1e-4  # the pinned value moved
        else:
            assert got[i] == pytest.approx(EXPECTED["grpo_noloo"][i], rel=1e-5, abs=1e-6)


# ------------------------------------------------------------------------ NeMo RL #3837, both sides
def test_3837_grpo_leaves_dropped_rows_out_of_the_group_statistics(tmp_path):
    d = _dump(tmp_path, advantages=[0.0] * 6)
    rewards, groups = [s[3] for s in SAMPLES], [tuple(s[0]) for s in SAMPLES]
    out = tmp_path / "new.parquet"
    advcli.run(str(d), str(out), flavor="nemo", settings={"advcli.grpo_valid_mask": True}, device="cpu")
    got = [row[0] for row in _adv_rows(out)]
    want = nemo_grpo_valid(rewards, groups, [m != 0 for m in MASKS])
    # by hand: row 0's valid peers {0, 0.5}: b 0.25, std sqrt(((0 + 0.25)/2 − 0.0625)·2) = sqrt(0.125)
    assert want[0] == pytest.approx(0.75 / (math.sqrt(0.125) + 1e-6))
    assert want[3] == pytest.approx((0.0 - 0.75) / (math.sqrt(0.125) + 1e-6))  # the dropped row: sums of all 3
    assert got == pytest.approx(want, rel=1e-5, abs=1e-6)
    old = tmp_path / "old.parquet"
    advcli.run(str(d), str(old), flavor="nemo@7ea279a", device="cpu")
    assert [row[0] for row in _adv_rows(old)] == pytest.approx(nemo_grpo(rewards, groups), rel=1e-5, abs=1e-6)
    assert nemo_grpo(rewards, groups)[0] == pytest.approx(2.88674, rel=1e-5)  # all four vote: b = 1/6


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_3837_left_out_row_has_the_same_std_in_both_precisions(dtype):
    """A left-out row sums its group's c valid values but divides by k = c − 1 (NeMo's matmul with W = 1 − I,
    num_valid = Σ valid − 1). By hand, rewards [1, 1, 0, 0] with row 1 left out: row 1 sums {1, 0, 0}:
    b = 1/2, q = 1/2, std = sqrt((q − b²)·k/(k − 1)) = sqrt(1/2); row 0's peers {0, 0}: 0; rows 2, 3 against
    {1, 0}: b = 1/2, std = sqrt(1/2). float64 (the intended math) gives the same formula's value, so the
    float32 run is not flagged as rounding noise."""
    g = GroupIndex.from_codes(torch.zeros(4, dtype=torch.int64))
    valid = torch.tensor([True, False, True, True])
    b, sd = g.onepass_baseline_std(torch.tensor([1.0, 1.0, 0.0, 0.0], dtype=dtype), True, valid)
    assert b.tolist() == pytest.approx([0.0, 0.5, 0.5, 0.5], abs=1e-7)
    assert sd.tolist() == pytest.approx([0.0, math.sqrt(0.5), math.sqrt(0.5), math.sqrt(0.5)], rel=1e-6)


def test_3837_is_off_on_nemo_dumps_which_the_grpo_train_loops_write(tmp_path, capsys):
    """NeMo's train_data_step dumps come from the legacy grpo_train / async loops, whose compute_advantage
    call passes no valid_mask (#3837 reached the single-controller path; #4160, open, would change the loops):
    on such a dump the newest release, with no --set, lets every row vote, and says so in the summary. The
    same rows in advcli's Parquet keep #3837 (the single-controller path's semantics)."""
    rewards, groups = [s[3] for s in SAMPLES], [tuple(s[0]) for s in SAMPLES]
    every_row = nemo_grpo(rewards, groups)
    d = _dump(tmp_path, advantages=every_row)
    out = tmp_path / "o.parquet"
    code, _, err = run_main(["run", d, "-o", out, "--flavor", "nemo"], capsys)
    assert code == 0, err
    assert [row[0] for row in _adv_rows(out)] == pytest.approx(every_row, rel=1e-5, abs=1e-6)
    assert "advcli.grpo_valid_mask=false" in err and "#4160" in " ".join(err.split())
    code, _, err = run_main(["audit", d, "--flavor", "nemo"], capsys)
    assert code == 0, err
    # the library, on the dump: the same numbers
    lib = tmp_path / "lib.parquet"
    advcli.run(str(d), str(lib), flavor="nemo", device="cpu")
    assert [row[0] for row in _adv_rows(lib)] == pytest.approx(every_row, rel=1e-5, abs=1e-6)


def test_3837_leaves_gdpo_unchanged(tmp_path):
    """GDPO takes no valid_mask (#3837 changed GRPO only): a sample_loss_mask column with zeros changes
    nothing; the components are 0/0.5/1, so #4158 changes nothing either: NeMo's numbers at 7ea279ab."""
    src = _write(os.path.join(tmp_path, "in.parquet"))
    t = pq.read_table(src)
    t = t.append_column("sample_loss_mask", pa.array([1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0, 1.0, 0.0, 1.0], pa.float32()))
    pq.write_table(t, src)
    out = os.path.join(tmp_path, "out.parquet")
    advcli.run(src, out, flavor="nemo", settings={"grpo.adv_estimator.name": "gdpo",
                                                   "grpo.adv_estimator.reward_weights": [1.0, 0.5]}, device="cpu")
    got = _adv_rows(out)
    want = _rows_of(EXPECTED["gdpo_w"])
    assert [g[0] for g in got] == pytest.approx([w[0] for w in want], rel=1e-5, abs=5e-6)


# ------------------------------------------------------------------- which release ran, everywhere
def test_summary_json_and_provenance_name_the_release(tmp_path, capsys):
    d = _dump(tmp_path)
    out = tmp_path / "o.parquet"
    code, stdout, _ = run_main(["run", d, "-o", out, "--flavor", "nemo", "--json"], capsys)
    assert code == 0
    rep = json.loads(stdout)
    assert rep["release"]["name"] == "7ea279a" and rep["release"]["newest"] is False
    assert rep["release"]["asked"] is None and rep["release"]["label"].startswith("NeMo RL @7ea279a, the default")
    prov = json.loads(pq.read_schema(out).metadata[b"advcli"])
    assert prov["release"]["name"] == "7ea279a"
    code, stdout, _ = run_main(["run", d, "-o", out, "--flavor", "nemo@newest", "--json", "--force"], capsys)
    assert code == 0
    rel = json.loads(stdout)["release"]
    assert rel["name"] == "post-4158" and rel["newest"] is True and rel["asked"] == "newest"
    from advcli.flavors import at

    assert at("verl").label().startswith("verl @ newest verified (0.9.1") and at("verl").newest
    # the note's own "verl 0.9.1: " is not said twice ("(0.9.1: verl 0.9.1: the advantage ...")
    assert at("verl").label().startswith("verl @ newest verified (0.9.1: the advantage")
    assert at("trl@1.16.0").label().startswith("TRL @1.16.0 (the advantage code of 1.10.0")
    code, _, err = run_main(["run", d, "-o", out, "--flavor", "nemo@7ea279a", "--force"], capsys)
    assert code == 0 and "NeMo RL @7ea279a" in err
    assert json.loads(pq.read_schema(out).metadata[b"advcli"])["release"]["name"] == "7ea279a"
    result = advcli.run(str(d), None, flavor="nemo@7ea279a", device="cpu")
    assert result.release["name"] == "7ea279a" and result.release["asked"] == "7ea279a"


def test_config_file_names_the_flavor_and_its_release(tmp_path, capsys):
    d = _dump(tmp_path)
    cfg = tmp_path / "run.yaml"
    cfg.write_text("flavor: nemo@7ea279a\ngrpo:\n  adv_estimator:\n    name: grpo\n")
    out = tmp_path / "o.parquet"
    code, _, err = run_main(["run", d, "-o", out, "--config", cfg], capsys)
    assert code == 0, err
    assert json.loads(pq.read_schema(out).metadata[b"advcli"])["release"]["name"] == "7ea279a"
    code, _, err = run_main(["run", d, "-o", tmp_path / "x.parquet", "--config", cfg, "--flavor", "verl"], capsys)
    assert code == 2 and "config file" in err and "flavor: nemo@7ea279a" in err and "Traceback" not in err
    assert not (tmp_path / "x.parquet").exists()
    cfg.write_text("flavor: nemo@1999-01-01\n")
    code, _, err = run_main(["run", d, "-o", tmp_path / "x.parquet", "--config", cfg], capsys)
    assert code == 2 and "oldest" in err


# --------------------------------------------------------------------------- audit finds the release
def _nemo_noloo_float32(rewards: list[float]) -> list[float]:
    """NeMo RL's GRPO without leave-one-out for one group at 7ea279a, in float32 as its code runs it
    (calculate_baseline_and_std_per_prompt L149-196, GRPOAdvantageEstimator L82-96 @7ea279ab): W = ones,
    b = W·r / n, q = W·r² / n, std = sqrt((q − b²)·n/(n − 1)), A = (r − b)/(std + 1e-6) where std > 0.
    For three equal values every summation order gives the same bits."""
    v = torch.tensor(rewards, dtype=torch.float32)
    n = v.numel()
    w = torch.ones((n, n), dtype=torch.float32)
    b = torch.matmul(w, v.clone()) / n
    q = torch.matmul(w, torch.pow(v, 2)) / n
    std = ((q - b.square()) * (n / (n - 1))).sqrt().nan_to_num(0)
    return torch.where(std > 0, (v - b) / (std + 1e-6), v - b).tolist()


def test_audit_names_the_releases_that_reproduce_a_pre_4158_dump(tmp_path, capsys):
    """Logged advantages made before #4158 (grpo without leave-one-out): three rows of 0.9 leave a float32
    residue std that 7ea279a divides by (A ≈ 1.4e-4), which #4158 no longer does (A ≈ 0). The newest release
    disagrees, and audit names the two releases before #4158 (on a NeMo dump #3837 is off in every release:
    the grpo_train loops that write it pass no valid_mask); plain --flavor nemo (7ea279a) agrees."""
    samples = [([5, 6], [10, 11], [1, 1], 0.9), ([5, 6], [12], [1], 0.9), ([5, 6], [13, 14, 15], [1, 1, 1], 0.9),
               ([8, 9], [20, 21], [1, 1], 1.0), ([8, 9], [22], [1], 0.0)]
    logged = _nemo_noloo_float32([0.9] * 3) + _nemo_noloo_float32([1.0, 0.0])
    assert abs(logged[0]) > 1e-4 and logged[3] == pytest.approx(0.707106, rel=1e-5)  # the residue, by NeMo's ops
    d = _dump(tmp_path, advantages=logged, masks=None, samples=samples)
    no_loo = ["--set", "grpo.use_leave_one_out_baseline=false"]
    newest = ["--flavor", "nemo@newest"]
    code, stdout, _ = run_main(["audit", d, "--json", *newest, *no_loo], capsys)
    assert code == 1
    rep = json.loads(stdout)
    assert rep["release"]["name"] == "post-4158"
    # the GitHub releases v0.5.0-v0.7.0 have 7ea279a's grpo (no #3837, no #4158): they reproduce it too
    assert sorted(m.split(" (")[0] for m in rep["release_matches"]) == [
        "NeMo RL @0.5.0", "NeMo RL @0.6.0", "NeMo RL @0.7.0", "NeMo RL @7ea279a", "NeMo RL @post-3837"]
    tried = {r["release"]: r for r in rep["releases_tried"]}
    assert set(tried) == {"0.5.0", "0.6.0", "0.7.0", "7ea279a", "post-3837"}
    code, _, err = run_main(["audit", d, *newest, *no_loo], capsys)
    err = " ".join(err.split())
    assert code == 1 and "matches release" in err and "NeMo RL @7ea279a" in err and "NeMo RL @post-3837" in err
    report = tmp_path / "audit.md"
    run_main(["audit", d, "--report", report, "-q", *newest, *no_loo], capsys)
    assert "Releases tried" in report.read_text() and "NeMo RL @7ea279a" in report.read_text()
    for flavor in (["--flavor", "nemo@7ea279a"], ["--flavor", "nemo"], []):
        code, _, err = run_main(["audit", d, *flavor, *no_loo], capsys)
        assert code == 0, (flavor, err)


def test_audit_of_a_post_4158_dump_names_that_release(tmp_path, capsys):
    """The other way round: logged after #4158 (the 0.9 group's set single-valued: A = r − mean, not divided);
    plain --flavor nemo (7ea279a) divides the residue and disagrees, and audit names post-4158."""
    samples = [([5, 6], [10, 11], [1, 1], 0.9), ([5, 6], [12], [1], 0.9), ([5, 6], [13, 14, 15], [1, 1, 1], 0.9),
               ([8, 9], [20, 21], [1, 1], 1.0), ([8, 9], [22], [1], 0.0)]
    v = torch.tensor([0.9] * 3, dtype=torch.float32)
    b = torch.matmul(torch.ones((3, 3), dtype=torch.float32), v.clone()) / 3
    logged = (v - b).tolist() + _nemo_noloo_float32([1.0, 0.0])
    d = _dump(tmp_path, advantages=logged, masks=None, samples=samples)
    no_loo = ["--set", "grpo.use_leave_one_out_baseline=false"]
    code, stdout, _ = run_main(["audit", d, "--json", *no_loo], capsys)
    assert code == 1
    rep = json.loads(stdout)
    assert rep["release"]["name"] == "7ea279a"
    assert [m.split(" (")[0] for m in rep["release_matches"]] == ["NeMo RL @post-4158"]
    # the release is the whole story: not "float32 noise", and the summary does not say nothing reproduces them
    assert [f["kind"] for f in rep["findings"]] == ["release"]
    assert "--flavor nemo@post-4158 reproduces them" in rep["findings"][0]["explanation"]
    code, _, err = run_main(["audit", d, *no_loo], capsys)
    flat = " ".join(err.split())
    assert code == 1 and "(--flavor nemo@post-4158 runs it)" in flat, flat
    assert f"reproduced by the release above; none of the {len(rep['search'])} other configurations tried" in flat
    assert "float32 noise" not in flat


def test_inspect_names_the_releases_of_the_command_it_suggests(tmp_path, capsys):
    d = _dump(tmp_path)
    code, out, _ = run_main(["inspect", d, "--json"], capsys)
    assert code == 0
    rel = json.loads(out)["dump"]["releases"]
    assert rel["flavor"] == "nemo" and rel["others"] == ["nemo@post-4158", "nemo@post-3837", "nemo@0.7.0",
                                                         "nemo@0.6.0", "nemo@0.5.0"]
    assert rel["default"].startswith("NeMo RL @7ea279a, the default")
    code, out, _ = run_main(["inspect", d], capsys)
    assert "--flavor nemo@post-4158" in out
    o = tmp_path / "o.parquet"
    run_main(["run", d, "-o", o, "--flavor", "nemo@7ea279a", "-q"], capsys)
    code, out, _ = run_main(["inspect", o], capsys)
    assert code == 0 and "NeMo RL @7ea279a" in out


# NeMo RL #3467's table (open draft): one prompt, rewards [1, 1, 0, 0], the second row fully masked (its
# sample_loss_mask 0). The values below are computed here by hand from NeMo's formula (spec: nemo.md §2-3,
# utils.py::calculate_baseline_and_std_per_prompt, advantage_estimator.py::GRPOAdvantageEstimator): non-LOO
# b = the mean over the rows that count, σ = their unbiased std, A = r − b, divided by σ + 1e-6 where σ > 0.
# 7ea279a counts every row (valid_mask = 1): b = 0.5, σ = sqrt(1/3); #3837 (post-3837, post-4158) leaves the
# masked row out: b = 1/3, σ = sqrt(((2/3)² + 2·(1/3)²)/2) = sqrt(1/3). LOO at post-3837: row 0 against
# {0, 0} (σ = 0: raw 1 − 0), rows 2 and 3 against {1, 0} (b = 0.5, σ = sqrt(0.5)); at 7ea279a row 0 against
# {1, 0, 0} and rows 2, 3 against {1, 1, 0} (b = 1/3 and 2/3, σ = sqrt(1/3) each).
_S3 = math.sqrt(1 / 3)
NEMO_3467 = {  # (release, LOO, normalize) -> advantages of rows 0, 2, 3 (row 1 is masked: not trained)
    ("7ea279a", False, False): [0.5, -0.5, -0.5],
    ("7ea279a", False, True): [0.5 / (_S3 + 1e-6), -0.5 / (_S3 + 1e-6), -0.5 / (_S3 + 1e-6)],
    ("post-3837", False, False): [2 / 3, -1 / 3, -1 / 3],
    ("post-3837", False, True): [(2 / 3) / (_S3 + 1e-6), (-1 / 3) / (_S3 + 1e-6), (-1 / 3) / (_S3 + 1e-6)],
    ("post-4158", False, False): [2 / 3, -1 / 3, -1 / 3],
    ("post-4158", False, True): [(2 / 3) / (_S3 + 1e-6), (-1 / 3) / (_S3 + 1e-6), (-1 / 3) / (_S3 + 1e-6)],
    ("7ea279a", True, True): [(2 / 3) / (_S3 + 1e-6), (-2 / 3) / (_S3 + 1e-6), (-2 / 3) / (_S3 + 1e-6)],
    ("post-3837", True, True): [1.0, -0.5 / (math.sqrt(0.5) + 1e-6), -0.5 / (math.sqrt(0.5) + 1e-6)],
    ("post-4158", True, True): [1.0, -0.5 / (math.sqrt(0.5) + 1e-6), -0.5 / (math.sqrt(0.5) + 1e-6)],
}


@pytest.mark.parametrize("release,loo,normalize", sorted(NEMO_3467))
def test_nemo_3467_table_masked_row_under_each_release(tmp_path, release, loo, normalize):
    samples = [([5, 6], [10, 11], [1, 1], 1.0), ([5, 6], [12, 13], [0, 0], 1.0), ([5, 6], [14, 15], [1, 1], 0.0),
               ([5, 6], [16, 17], [1, 1], 0.0)]
    d = _dump(tmp_path, masks=[1.0, 0.0, 1.0, 1.0], samples=samples)
    out = tmp_path / "o.parquet"
    # the single-controller path's valid_mask from #3837 on (a NeMo dump alone keeps it off: the grpo_train
    # loops that write it pass none)
    advcli.run(str(d), str(out), flavor=f"nemo@{release}", device="cpu", precision="float64",
               settings={"grpo.adv_estimator.use_leave_one_out_baseline": loo,
                         "grpo.adv_estimator.normalize_rewards": normalize,
                         "advcli.grpo_valid_mask": release != "7ea279a"})
    adv = _adv_rows(out)
    got = [adv[i][-1] for i in (0, 2, 3)]
    assert got == pytest.approx(NEMO_3467[(release, loo, normalize)], rel=1e-6, abs=1e-9)
