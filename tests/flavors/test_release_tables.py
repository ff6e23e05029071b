"""The release tables of the packaged trainers' flavors (verl, TRL, OpenRLHF, SkyRL, AReaL): well formed, and
every release runs through `advcli run` as ``--flavor X`` plus ``--set`` of its settings (what
``--flavor X@RELEASE`` stands for). No trainer package is needed here; tests/conformance/test_conformance_*.py check the
numbers against the released code."""
from __future__ import annotations

import pytest
from _released import advcli_run, group_sizes, random_rows, release_settings

from advcli.flavors import flavor_keys, get

PACKAGED = ("verl", "trl", "openrlhf", "skyrl", "areal")


@pytest.mark.parametrize("name", PACKAGED)
def test_table_is_well_formed(name):
    flavor = get(name)
    releases = flavor.releases
    assert releases, f"--flavor {name} has no releases table"
    dates = [r.date for r in releases]
    assert dates == sorted(dates), f"{name}: releases not oldest first: {dates}"
    names = [n for r in releases for n in (r.name, *r.aliases)]
    assert len(names) == len(set(names)), f"{name}: a release name or alias appears twice: {names}"
    keys = flavor_keys(flavor)
    for r in releases:
        assert r.note, f"{name}@{r.name}: no note"
        unknown = [k for k in r.settings if k not in keys]
        assert not unknown, f"{name}@{r.name}: settings {unknown} are not keys of the flavor"
        for k, v in r.settings.items():
            assert v != keys[k].default, f"{name}@{r.name}: {k}={v!r} is the KEYS default (settings hold differences)"
        for c in r.changes:
            assert c.effect, f"{name}@{r.name}: a change without its effect"


def test_newest_release_is_the_flavor_default():
    """KEYS defaults are the newest verified state: the newest release of each table sets nothing, except
    AReaL, whose only release (1.0.4) is older than the commit the flavor follows."""
    for name in PACKAGED:
        newest = get(name).releases[-1]
        assert newest.settings == {}, f"{name}@{newest.name} is the newest and must hold the KEYS defaults"
    assert get("areal").releases[0].settings == {"advcli.norm_groups": "slices"}


@pytest.mark.parametrize("name,settings", [
    ("verl", {"algorithm.adv_estimator": "grpo"}), ("trl", {"num_generations": 3}),
    ("openrlhf", {"algo.advantage.estimator": "rloo", "rollout.n_samples_per_prompt": 3}),
    ("skyrl", {"trainer.algorithm.advantage_estimator": "grpo"}),
    ("areal", {"actor.reward_norm.mean_level": "group", "actor.reward_norm.std_level": "group",
               "actor.reward_norm.group_size": 3}),
])
def test_every_release_runs(tmp_path, name, settings):
    rows = random_rows(1, [3, 3, 3]) if name in ("trl", "openrlhf", "areal") else random_rows(1, group_sizes(1))
    for release in get(name).releases:
        # TRL's old RLOOTrainer groups the copies of the batch strided; these rows hold each prompt's rows together
        ids = {"advcli.group_by": "id"} if release.settings.get("trainer") == "rloo" else {}
        out = advcli_run(tmp_path, rows, name, {**settings, **ids}, release_settings(release))
        assert len(out["advantages"]) == len(rows), f"{name}@{release.name}"
