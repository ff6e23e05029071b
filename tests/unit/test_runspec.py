"""The run spec: the configuration resolved once into typed, frozen sections that the pipeline reads."""
from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys

import pytest
from conftest import ROOT

from advcli.config import SCHEMA, default_config, set_path
from advcli.config.runspec import RunSpec


def spec_value(run: RunSpec, path: str):
    """The spec field that holds the configuration key ``path``."""
    head, _, rest = path.partition(".")
    if path == "diagnostics.rule":
        return run.diagnostics_rule
    if not rest:
        return getattr(run, head)
    if head == "advantage" and (rest.startswith("whiten") or rest == "batch_normalize"):
        name = {"whiten": "whiten", "batch_normalize": "batch_normalize"}.get(rest, rest.removeprefix("whiten_"))
        return getattr(run.whitening, name)
    node = getattr(run, {"rollout_correction": "correction"}.get(head, head))
    for part in rest.split("."):
        node = getattr(node, part)
    return node


@pytest.mark.parametrize("path", sorted(SCHEMA))
def test_every_configuration_key_lands_in_the_spec(path):
    """Each key of the schema is a field of the spec: a value set in the configuration is the value the
    pipeline reads (a key the spec lost would silently fall back to its default)."""
    cfg = default_config()
    sentinel = object()
    set_path(cfg, path, sentinel)
    run = RunSpec.from_config(cfg)
    assert spec_value(run, path) is sentinel
    # the default of the spec's field is the schema's default (a section built from a partial dict agrees;
    # the spec holds a list default as a tuple)
    default = SCHEMA[path].default
    assert spec_value(RunSpec.from_config({}), path) == (tuple(default) if isinstance(default, list) else default)


def test_lists_in_the_spec_are_read_only_all_the_way_down():
    """A list key (reward.components, reward.weights, rollout_correction.rs and its [name, lo, hi] entries,
    gate_bounds) is held as tuples: no stage can change the run another stage reads, and the caller's list
    changed afterwards does not change the spec."""
    cfg = default_config()
    comps = ["acc", "fmt"]
    cfg["reward"]["components"] = comps
    cfg["reward"]["weights"] = [1.0, 0.5]
    cfg["rollout_correction"]["rs"] = [["seq_max_k2", None, 2.5]]
    run = RunSpec.from_config(cfg)
    comps.append("len")
    assert run.reward.components == ("acc", "fmt") and run.reward.weights == (1.0, 0.5)
    assert run.correction.rs == (("seq_max_k2", None, 2.5),)
    assert run.correction.gate_bounds == (0.5, 5.0)
    with pytest.raises(AttributeError):
        run.reward.components.append("x")
    with pytest.raises(TypeError):
        run.correction.rs[0][2] = 9.0


def test_spec_is_frozen_and_estimator_parameters_live_once():
    cfg = default_config()
    cfg["estimator"] = {"name": "gae", "lam": 0.9}
    run = RunSpec.from_config(cfg)
    assert run.estimator.name == "gae" and run.estimator.given == {"lam": 0.9}
    with pytest.raises(dataclasses.FrozenInstanceError):
        run.kl.coef = 1.0
    with pytest.raises(dataclasses.FrozenInstanceError):
        run.reward = None


def test_pipeline_reads_no_configuration_by_string_path():
    """The stages read their section of the spec; none looks a key up in the configuration dict."""
    pipeline = os.path.join(ROOT, "advcli", "pipeline")
    for name in sorted(os.listdir(pipeline)):
        if name.endswith(".py"):
            with open(os.path.join(pipeline, name), encoding="utf-8") as fh:
                src = fh.read()
            assert not re.search(r"\bget_path\b|\bplan\.cfg\b|\bcfg\[", src), name


def test_a_key_is_declared_once_in_the_spec():
    """config.SCHEMA is the spec's declaration read back: the same keys, defaults, choices and docs, and
    config.py declares none of its own (a key added to a dataclass with key() is a key everywhere)."""
    from advcli.config.runspec import declared_keys

    fields = declared_keys()
    assert list(fields) == list(SCHEMA)
    for path, f in fields.items():
        assert f.metadata["doc"] == SCHEMA[path].doc and f.metadata["choices"] == SCHEMA[path].choices
    with open(os.path.join(ROOT, "advcli", "config", "__init__.py"), encoding="utf-8") as fh:
        assert not re.search(r'^\s*"[a-z_.]+": Key\(', fh.read(), re.M)


def test_resolved_configuration_is_read_from_the_spec():
    """After resolution no reader restates a default with cfg.get(section, ...) / section.get(key, default): the
    modules that read a run's configuration read the RunSpec's fields."""
    pattern = re.compile(r'\.get\("(grouping|reward|kl|advantage|rollout_correction|precision|padded|columns)"'
                         r'|\.get\("(mode|policy|missing|gate_\w+|is_\w+|bias|scale|shape_clip|overlong)"')
    for rel in ("runs/explain.py", "pipeline/diagnostics.py", "correction/plan.py", "runs/resolution.py",
                "ops/rewards.py", "correction/weights.py", "audit/recompute.py", "audit/stages.py",
                "pipeline/checks.py"):
        with open(os.path.join(ROOT, "advcli", rel), encoding="utf-8") as fh:
            assert not pattern.search(fh.read()), rel


def test_run_spec_imports_no_torch():
    code = ("import sys\nfrom advcli.config.runspec import RunSpec\nfrom advcli.config import default_config\n"
            "RunSpec.from_config(default_config())\nprint('TORCH', 'torch' in sys.modules)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "TORCH False"


# ------------------------------------------------------------------- one key for the KL's log-probs
def _invoke(*args):
    from typer.testing import CliRunner

    from advcli.cli import app

    return CliRunner().invoke(app, [str(a) for a in args], catch_exceptions=False)


def _with_rollout_log_probs(tmp_path):
    """The sample with an inference-engine log-prob column: old_log_probs + 0.25 on every token."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from conftest import SAMPLE

    t = pq.read_table(SAMPLE).slice(0, 16)
    rlp = pa.array([[x + 0.25 for x in row] for row in t.column("old_log_probs").to_pylist()],
                   type=pa.list_(pa.float32()))
    path = tmp_path / "in.parquet"
    pq.write_table(t.append_column("rollout_log_probs", rlp), path)
    return path, t


def test_kl_reads_the_policy_log_probs_kl_policy_names(tmp_path):
    """``kl.policy=rollout_log_probs``: the KL in the reward is k1 = rollout_log_probs − ref_log_probs, so
    token_level_rewards_t = −β·(lp_rollout − ref)·mask_t, plus the reward on the last token."""
    key = "kl.policy"
    import numpy as np
    import pyarrow.parquet as pq

    src, t = _with_rollout_log_probs(tmp_path)
    out = tmp_path / "out.parquet"
    r = _invoke("run", src, "-o", out, "--flavor", "advcli", "--set", "estimator.name=reinforce_plus_plus",
                "--set", "kl.in_reward=true", "--set", "kl.coef=0.5", "--set", f"{key}=rollout_log_probs")
    assert r.exit_code == 0, r.output
    got = pq.read_table(out).column("token_level_rewards").to_pylist()
    for i in range(t.num_rows):
        mask = np.array(t.column("response_mask")[i].as_py(), dtype=np.float64)
        lp = np.array(t.column("old_log_probs")[i].as_py(), dtype=np.float32).astype(np.float64) + 0.25
        ref = np.array(t.column("ref_log_probs")[i].as_py(), dtype=np.float64)
        want = -0.5 * (lp - ref) * mask
        if mask.size:
            want[-1] += float(t.column("reward")[i].as_py())
        assert np.allclose(got[i], want, atol=1e-5), i


# ------------------------------------------------------------------ light commands start without torch
_NO_TORCH = ("import sys\nfrom advcli.cli import main\nsys.argv = ['advcli'] + sys.argv[1:]\n"
             "try:\n    main()\nexcept SystemExit as e:\n    code = e.code\nelse:\n    code = 0\n"
             "print('EXIT', code, 'TORCH', 'torch' in sys.modules)\n")


def _light(tmp_path, name):
    from conftest import SAMPLE
    from test_format_verl import v1_records, write

    if name == "convert":
        d = tmp_path / "rollout_data"
        d.mkdir()
        write(d / "2.jsonl", v1_records(2, 9))
        return ["convert", str(d), "-o", str(tmp_path / "conv.parquet")]
    return {"inspect": ["inspect", SAMPLE, "--json"],
            "filter": ["filter", SAMPLE, "-o", str(tmp_path / "f.parquet"), "--drop-uniform"],
            "explain --keys": ["explain", "--keys"],
            "explain --flavor verl --keys": ["explain", "--flavor", "verl", "--keys"]}[name]


@pytest.mark.parametrize("name", ["inspect", "filter", "convert", "explain --keys", "explain --flavor verl --keys"])
def test_light_commands_do_not_import_torch(tmp_path, name):
    """Commands that do no tensor math finish, successfully, without torch ever imported."""
    r = subprocess.run([sys.executable, "-c", _NO_TORCH, *_light(tmp_path, name)], capture_output=True, text=True,
                       cwd=ROOT, env={**os.environ, "ADVCLI_SERVER": "off"})
    assert r.stdout.strip().splitlines()[-1] == "EXIT 0 TORCH False", (r.stdout[-800:], r.stderr[-800:])
