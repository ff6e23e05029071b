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
from advcli.runspec import RunSpec


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
    # the default of the spec's field is the schema's default (a section built from a partial dict agrees)
    assert spec_value(RunSpec.from_config({}), path) == SCHEMA[path].default


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


def test_run_spec_imports_no_torch():
    code = ("import sys\nfrom advcli.runspec import RunSpec\nfrom advcli.config import default_config\n"
            "RunSpec.from_config(default_config())\nprint('TORCH', 'torch' in sys.modules)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "TORCH False"
