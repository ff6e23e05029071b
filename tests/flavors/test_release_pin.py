"""A pin that holds, whatever chooses the estimator: ``--flavor NAME@RELEASE`` runs that release's semantics
whether the estimator comes from the flavor's own key (``--set``), ``--estimator``, ``advcli.mix``, a
``--config`` file or :func:`advcli.run`, and the label and the output's provenance name the release that ran.

The configurations are compared for every flavor that has releases, every release and every estimator name
of the flavor (against the same run chosen with the flavor's own key at that release); the numbers for
verl 0.8.0's REINFORCE++ (before verl #7300 the discounted return restarts at each mask=0 token:
``running_return = running_return * response_mask[:, t]`` in ``compute_reinforce_plus_plus_outcome_advantage``,
verl/trainer/ppo/core_algos.py at v0.8.0) against an expectation computed here, and NeMo RL @7ea279a's GRPO
(every row votes, before #3837's valid mask) against ``tests/formats/test_format_nemo.py``'s reference."""
import json
import math

import numpy as np
import pyarrow.parquet as pq
import pytest
from conftest import SAMPLE, run_main
from test_format_nemo import nemo_grpo
from test_releases import MASKS, SAMPLES, _dump

import advcli
from advcli.errors import AdvcliError
from advcli.flavors import FlavorAt, at, config_file_flavor, known_releases, listed, resolve

# the settings some estimators need to run at all (a group size, reward components), per flavor
NEEDS = {"openrlhf": [("rollout.n_samples_per_prompt", 4)],
         "roll": [("actor_infer.generating_args.num_return_sequences", 4)],
         "slime": [("normalize_advantages", True)], "verl": [("algorithm.gdpo_reward_keys", ["acc", "fmt"])]}
# the registered estimators tried where a flavor has no estimator key of its own
REGISTERED = ("grpo", "rloo", "reinforce_plus_plus")


def _pinned():
    """(flavor, release) for every release of every flavor that has releases."""
    return [(fl, r) for fl in listed() if fl.name != "advcli" for r in known_releases(fl)]


def _names(fl) -> tuple[str, ...]:
    if not fl.estimator_key:
        return REGISTERED
    return tuple(fl.keys[fl.estimator_key].choices or fl.estimator_names)


def _strip(cfg: dict) -> dict:
    return {k: v for k, v in cfg.items() if k != "estimator"}


@pytest.mark.parametrize("fl,release", _pinned(), ids=lambda x: getattr(x, "name", None))
def test_every_route_to_an_estimator_keeps_the_release(fl, release, tmp_path):
    spec = f"{fl.name}@{release.name}"
    fa = at(spec)
    assert isinstance(fa, FlavorAt) and fa.release == release and fa.as_dict()["name"] == release.name
    extra = NEEDS.get(fl.name, [])
    tried = 0
    for name in _names(fl):
        if fl.estimator_key:  # the reference: the flavor's own key at that release
            try:
                want, _ = resolve(spec, extra + [(fl.estimator_key, name)])
            except AdvcliError:
                continue  # this estimator needs more than NEEDS gives; every route refuses it alike
        else:  # no key of its own: the registered estimator around the release's pipeline
            want = {**resolve(spec, extra)[0], "estimator": None}
        tried += 1

        def same(got, route, want=want, name=name):
            if fl.estimator_key:
                assert got == want, f"{spec} {name} by {route}"
            else:
                assert _strip(got) == _strip(want), f"{spec} {name} by {route}: not the release's pipeline"
                assert got["estimator"]["name"] == name

        same(resolve(spec, extra + [("advcli.estimator", name)])[0], "--estimator")
        same(resolve(fa, extra + [("advcli.estimator", name)])[0], "--estimator (FlavorAt)")
        mixed = resolve(spec, extra + [("advcli.mix", f"0.5*{name}+0.5*{name}")])[0]
        assert _strip(mixed) == _strip(want), f"{spec} {name} by advcli.mix: not the release's pipeline"
        if fl.estimator_key:
            for term in mixed["estimator"]["terms"]:
                section = {k: v for k, v in term.items() if k != "weight"}
                assert section == {k: v for k, v in want["estimator"].items() if k in section}, (spec, name)
                assert section["name"] == want["estimator"]["name"]
        # a --config file naming the release, the estimator in the file by each of its keys
        keys = [fl.estimator_key, "advcli.estimator"] if fl.estimator_key else ["advcli.estimator"]
        for key in keys:
            path = tmp_path / f"{name}.yaml"
            path.write_text(json.dumps({"flavor": spec, key: name, **dict(extra)}))
            named = config_file_flavor(str(path), None)
            same(resolve(named, [], str(path))[0], f"--config ({key})")
            same(resolve(config_file_flavor(str(path), fl.name), [], str(path))[0], f"--config ({key}) + --flavor")
    assert tried, spec


# ------------------------------------------------------------------------ verl 0.8.0's REINFORCE++, numbers
def verl_080_reinforce_pp(path: str, gamma: float = 1.0) -> list[np.ndarray]:
    """verl 0.8.0's REINFORCE++ outcome advantage, float64, by loops: the score at the response's last position,
    the discounted return run backwards and restarted (multiplied by the mask) after each token, then whitened
    over each step's mask=1 tokens (masked_whiten: unbiased variance, eps 1e-8, mean not added back) and
    masked."""
    t = pq.read_table(path).to_pydict()
    rets, masks = [], []
    for reward, mask in zip(t["reward"], t["response_mask"]):
        m = np.asarray(mask, dtype=np.float64)
        r = np.zeros(len(m))
        r[-1] = reward
        ret, running = np.zeros(len(m)), 0.0
        for i in range(len(m) - 1, -1, -1):
            running = r[i] + gamma * running
            ret[i] = running
            running *= m[i]
        rets.append(ret)
        masks.append(m)
    out = [None] * len(rets)
    steps = np.asarray(t["step"])
    for s in np.unique(steps):
        rows = np.flatnonzero(steps == s)
        vals = np.concatenate([rets[i][masks[i] > 0] for i in rows])
        mean, var = vals.mean(), vals.var(ddof=1)
        for i in rows:
            out[i] = (rets[i] - mean) / math.sqrt(var + 1e-8) * masks[i]
    return out


def verl_newest_reinforce_pp_differs(path: str) -> bool:
    """Whether the newest verl (the return carried over mask=0 tokens) gives other numbers on this dump: some
    row has a mask=0 token before a mask=1 one."""
    t = pq.read_table(path).to_pydict()
    return any(0 in m[: max(i for i, x in enumerate(m) if x) + 1] for m in t["response_mask"] if any(m))


def _advantages(path) -> list:
    return pq.read_table(str(path)).column("advantages").to_pylist()


def test_verl_080_reinforce_pp_by_every_route(tmp_path, capsys):
    assert verl_newest_reinforce_pp_differs(SAMPLE)  # else this test could not tell the releases apart
    want = verl_080_reinforce_pp(SAMPLE)
    key = ("--set", "algorithm.adv_estimator=reinforce_plus_plus")
    cfg = tmp_path / "run.yaml"
    cfg.write_text("flavor: verl@0.8.0\nadvcli.estimator: reinforce_plus_plus\n")
    routes = {
        "key": ["--flavor", "verl@0.8.0", *key],
        "estimator": ["--flavor", "verl@0.8.0", "--estimator", "reinforce_plus_plus"],
        "mix": ["--flavor", "verl@0.8.0", "--set", "advcli.mix=0.5*reinforce_plus_plus+0.5*reinforce_plus_plus"],
        "config": ["--config", cfg],
        "config+flavor": ["--config", cfg, "--flavor", "verl"],
    }
    outs = {}
    for route, args in routes.items():
        out = tmp_path / f"{route}.parquet"
        code, stdout, err = run_main(["run", SAMPLE, "-o", out, "--device", "cpu", "--json", *args], capsys)
        assert code == 0, (route, err)
        rep = json.loads(stdout)
        assert rep["release"]["name"] == "0.8.0" and rep["release"]["label"].startswith("verl @0.8.0"), route
        assert json.loads(pq.read_schema(out).metadata[b"advcli"])["release"]["name"] == "0.8.0", route
        outs[route] = _advantages(out)
    lib = {
        "run(settings=key)": advcli.run(SAMPLE, str(tmp_path / "l1.parquet"), flavor="verl@0.8.0", device="cpu",
                                        settings={"algorithm.adv_estimator": "reinforce_plus_plus"}),
        "run(estimator=)": advcli.run(SAMPLE, str(tmp_path / "l2.parquet"), flavor="verl@0.8.0", device="cpu",
                                      estimator="reinforce_plus_plus"),
        "run(advcli.mix)": advcli.run(SAMPLE, str(tmp_path / "l3.parquet"), flavor="verl@0.8.0", device="cpu",
                                      settings={"advcli.mix": "0.5*reinforce_plus_plus+0.5*reinforce_plus_plus"}),
    }
    for route, result in lib.items():
        assert result.release["name"] == "0.8.0", route
        outs[route] = _advantages(result.outputs[0])
    for route, got in outs.items():
        assert got == outs["key"], f"{route} differs from --set algorithm.adv_estimator at 0.8.0"
    for g, w in zip(outs["key"], want):
        np.testing.assert_allclose(np.asarray(g, dtype=np.float64), w, rtol=1e-4, atol=1e-5)
    newest = tmp_path / "newest.parquet"
    code, _, _ = run_main(["run", SAMPLE, "-o", newest, "--device", "cpu", "--flavor", "verl", *key], capsys)
    assert code == 0
    assert max(float(np.max(np.abs(np.asarray(a) - w))) for a, w in zip(_advantages(newest), want)) > 0.1


# ----------------------------------------------------------------------- NeMo RL @7ea279a's GRPO, numbers
def test_nemo_7ea279a_grpo_by_every_route(tmp_path, capsys):
    """At 7ea279a every row of a prompt votes in GRPO's baseline, the row the trainer dropped too (#3837 came
    later); --estimator grpo used to lose that and run the newest valid-mask rule."""
    d = _dump(tmp_path)
    rewards, groups = [s[3] for s in SAMPLES], [tuple(s[0]) for s in SAMPLES]
    want = nemo_grpo(rewards, groups)
    assert any(m == 0 for m in MASKS)  # a dropped row: the releases differ on this dump
    cfg = tmp_path / "run.yaml"
    cfg.write_text("flavor: nemo@7ea279a\nadvcli.estimator: grpo\n")
    routes = {
        "key": ["--flavor", "nemo@7ea279a", "--set", "grpo.adv_estimator.name=grpo"],
        "estimator": ["--flavor", "nemo@7ea279a", "--estimator", "grpo"],
        "mix": ["--flavor", "nemo@7ea279a", "--set", "advcli.mix=0.5*grpo+0.5*grpo"],
        "config": ["--config", cfg],
    }
    outs = {}
    for route, args in routes.items():
        out = tmp_path / f"{route}.parquet"
        code, _, err = run_main(["run", d, "-o", out, "--device", "cpu", *args], capsys)
        assert code == 0, (route, err)
        assert "NeMo RL @7ea279a" in err, route
        assert json.loads(pq.read_schema(out).metadata[b"advcli"])["release"]["name"] == "7ea279a"
        outs[route] = [row[0] for row in _advantages(out)]
    res = advcli.run(str(d), str(tmp_path / "lib.parquet"), flavor="nemo@7ea279a", estimator="grpo", device="cpu")
    assert res.release["name"] == "7ea279a"
    outs["advcli.run"] = [row[0] for row in _advantages(res.outputs[0])]
    for route, got in outs.items():
        assert got == outs["key"], route
        assert got == pytest.approx(want, rel=1e-5, abs=1e-6), route
