"""The packaged trainers' published releases (advcli/flavors/index/DIST.json, the package index's list recorded by
tools/refresh_releases.py) against the flavors' release tables: every recorded release is a table entry's name or
alias (``--flavor trl@1.13.0`` runs the entry whose advantage code 1.13.0 has), or older than the table's oldest
entry and refused naming the release and why. A refresh that records a new release fails here until the release
is added to the table (after tools/conformance_matrix.py has run it)."""
from __future__ import annotations

import json
import os
import sys

import pytest
from _released import advcli_run
from conftest import run_main

from advcli.errors import AdvcliError
from advcli.flavors import get, release_of
from advcli.flavors._releases import INDEX_DIR, NOT_REPRODUCED, _version, index_mapping, published

PACKAGED = ("verl", "trl", "openrlhf", "skyrl", "areal")


@pytest.mark.parametrize("name", PACKAGED)
def test_every_recorded_release_has_an_entry_or_is_older(name):
    releases = get(name).releases
    rows = index_mapping(releases, name)
    assert rows, f"no recorded list of {name}'s releases in {INDEX_DIR}"
    oldest = _version(releases[0].name)
    for version, _, entry in rows:
        if entry is not None:
            assert release_of(get(name), version) is entry
            continue
        assert _version(version) is not None and _version(version) < oldest, (
            f"{name} {version} is published (recorded in index/{name}.json) but has no entry in --flavor {name}'s "
            f"release table: run tools/conformance_matrix.py {name}=={version} and add it (an alias of the entry "
            "whose advantage code it has, or a new entry)")
        assert NOT_REPRODUCED[name], f"{name}: releases older than {releases[0].name} are refused without a reason"
        with pytest.raises(AdvcliError, match=f"{name} {version} .*is published, but advcli does not reproduce it"):
            release_of(get(name), version)


@pytest.mark.parametrize("name", PACKAGED)
def test_every_versioned_entry_is_published(name):
    """A table entry or alias named as a version is a release the index lists (no typo, no unpublished one), or
    an entry marked as a tagged release the index does not have (``tag_only``), whose note says so."""
    recorded = {r["version"] for r in published(name)["releases"]}
    for r in get(name).releases:
        if r.tag_only:
            assert "package index" in r.note or "GitHub" in r.note, f"{name}@{r.name}: the note says where it is from"
            continue
        for n in (r.name, *r.aliases):
            if _version(n) is not None and "." in n:
                assert n in recorded, f"--flavor {name}@{n}: not a release recorded in index/{name}.json"


def test_the_issues_trl_releases_map_to_their_semantics():
    """Issue 41: 1.7.0-1.9.1 have 1.6.0's advantage code, 1.11.0-1.14.2 1.10.0's; 1.15.0 is where the completions
    parquet logs conversations (#5309). Each is accepted, also as v1.13.0."""
    trl = get("trl")
    for v in ("1.7.0", "1.7.1", "1.8.0", "1.9.0", "1.9.1"):
        assert release_of(trl, v).name == "1.6.0"
    for v in ("1.11.0", "1.12.0", "1.13.0", "1.14.0", "1.14.1", "1.14.2", "v1.13.0"):
        assert release_of(trl, v).name == "1.10.0"
    assert release_of(trl, "1.15.0").name == "1.15.0"
    assert any(c.pr == "#5309" for c in release_of(trl, "1.15.0").changes)


def test_run_at_an_aliased_release_gives_trls_numbers(tmp_path):
    """`advcli run --flavor trl@1.13.0`: GRPO with num_generations 4 on rewards [1,0,0,0 | 1,1,0,0]:
    mean 0.25 and unbiased std 0.5 in the first group, mean 0.5 and std sqrt(1/3) in the second;
    A = (r − mean)/(std + 1e-4), one value over all of a row's positions."""
    rows = [dict(prompt_id=f"p{i // 4}", reward=r, mask=[1, 0, 1], old=[-1.0] * 3, ref=[-1.0] * 3, values=[0.0] * 3)
            for i, r in enumerate([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0])]
    s2 = (1 / 3) ** 0.5
    want = [0.75 / 0.5001, -0.25 / 0.5001, -0.25 / 0.5001, -0.25 / 0.5001,
            0.5 / (s2 + 1e-4), 0.5 / (s2 + 1e-4), -0.5 / (s2 + 1e-4), -0.5 / (s2 + 1e-4)]
    for spec in ("trl@1.13.0", "trl@1.10.0", "trl@1.7.1", "trl@1.15.0"):
        got = advcli_run(tmp_path, rows, spec, {"num_generations": 4})["advantages"]
        for i, (row, w) in enumerate(zip(got, want)):
            assert row == pytest.approx([w] * 3, rel=1e-5), f"{spec} row {i}"


def test_refusal_of_an_older_published_release_names_it(capsys):
    """TRL 0.8.6 has neither RLOOTrainer nor GRPOTrainer (trl/trainer/ at v0.8.6): accepted as a published name,
    refused saying so, and the hint does not send the user to 0.9.2 as if its advantage code were the same."""
    code, _, err = run_main(["explain", "--flavor", "trl@0.8.6"], capsys)
    assert code == 2
    flat = " ".join(err.split())
    assert "trl 0.8.6 (2024-04-22) is published" in flat and "older than 0.9.2" in flat
    assert "neither RLOOTrainer" in flat and "Traceback" not in err
    assert "the same" not in flat and "nearest" not in flat


def test_a_release_with_only_the_old_rlootrainer_runs_it(capsys):
    """TRL 0.13.0 has no GRPOTrainer; its RLOOTrainer (the old online one) is what the release runs."""
    code, out, err = run_main(["explain", "--flavor", "trl@0.13.0"], capsys)
    assert code == 0, err
    assert "rloo" in out.lower()


def test_history_shows_each_published_release_and_its_semantics(capsys):
    code, out, _ = run_main(["explain", "--flavor", "trl", "--history"], capsys)
    assert code == 0
    assert "1.10.0, 1.11.0, 1.12.0, 1.13.0, 1.14.0, 1.14.1, 1.14.2 -> 1.10.0" in out
    assert "1.6.0, 1.7.0, 1.7.1, 1.8.0, 1.9.0, 1.9.1, 1.9.2 -> 1.6.0" in out
    assert "1.15.0 -> 1.15.0" in out
    assert "0.27.0, 0.27.1, 0.27.2, 0.28.0, 0.29.0, 0.29.1, 1.0.0, 1.1.0, 1.2.0, 1.3.0, 1.4.0, 1.5.0, 1.5.1 -> 0.27.0" \
        in out
    assert "0.22.0, 0.22.1 -> 0.22.0" in out and "0.14.0 -> 0.14.0" in out
    assert "0.11.0, 0.11.1, 0.11.2, 0.11.3, 0.11.4, 0.12.0, 0.12.1, 0.12.2, 0.13.0 -> 0.11.0" in out
    assert "0.9.2, 0.9.3, 0.9.4, 0.9.6, 0.10.1 -> 0.9.2" in out
    assert "0.8.6, 0.8.5" in out and "not reproduced" in out


def test_refresh_tool_writes_what_it_read(tmp_path, monkeypatch):
    """tools/refresh_releases.py without the network: the index's answer, pre-releases left out, newest first,
    one release a line, read back by advcli as the recorded list."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(__file__))), "tools"))
    import refresh_releases as tool

    monkeypatch.setattr(tool, "INDEX_DIR", str(tmp_path))
    monkeypatch.setattr(tool, "fetch", lambda dist: ([{"version": "1.10.0", "date": "2026-08-13"},
                                                      {"version": "1.9.2", "date": "2026-07-28"}], "test"))
    assert tool.main(["trl"]) == 0
    text = (tmp_path / "trl.json").read_text()
    assert '  {"version": "1.10.0", "date": "2026-08-13"},\n' in text
    doc = json.loads(text)
    assert [r["version"] for r in doc["releases"]] == ["1.10.0", "1.9.2"] and doc["package"] == "trl"
    assert tool.main(["trl", "--check"]) == 0
    assert tool._key("1.10.0") > tool._key("1.9.2") > tool._key("0.10.1.post2") > tool._key("0.10.1")
