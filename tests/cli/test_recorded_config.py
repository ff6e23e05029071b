"""An advcli output carries the configuration that made it (its ``advcli`` metadata: flavor, release, settings).
Given such a file and no --flavor or --config, audit, run and the library take that configuration (the release
pinned, --set of that flavor's keys on top), as stats reads it, and say so; verl's keys or --flavor choose as
for any other Parquet."""
from __future__ import annotations

import json
import os

import pyarrow.parquet as pq
from conftest import run_main

import advcli

SAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "sample_data", "rollouts.parquet")


def _output(tmp_path, capsys, *flags):
    out = tmp_path / "nemo_out.parquet"
    code, _, err = run_main(["run", SAMPLE, "-o", out, "--flavor", "nemo", *flags, "-q"], capsys)
    assert code == 0, err
    return out


def test_audit_of_an_advcli_output_uses_the_recorded_configuration(tmp_path, capsys):
    out = _output(tmp_path, capsys, "--set", "grpo.adv_estimator.use_leave_one_out_baseline=false")
    code, stdout, err = run_main(["audit", out, "--json"], capsys)
    assert code == 0, err  # verl's grpo, the default flavor's, disagreed on 75,051 of 79,545 tokens
    rep = json.loads(stdout)
    assert rep["agree"] and rep["flavor"] == "nemo@7ea279a" and rep["release"]["name"] == "7ea279a"
    assert "the configuration recorded in the advcli output: --flavor nemo@7ea279a with " \
           "grpo.adv_estimator.use_leave_one_out_baseline=false" in json.dumps(rep)
    lib = advcli.audit(str(out))  # the library: the same choice
    assert lib.agree
    # --set of the recorded flavor's keys goes on top of the recorded ones: leave-one-out back on disagrees
    code, _, _ = run_main(["audit", out, "--set", "grpo.adv_estimator.use_leave_one_out_baseline=true", "-q"],
                          capsys)
    assert code == 1
    # verl's keys, or --flavor, choose as on any Parquet
    code, stdout, _ = run_main(["audit", out, "--json", "--set", "algorithm.adv_estimator=grpo"], capsys)
    assert json.loads(stdout)["flavor"] == "verl"


def test_run_on_an_advcli_output_reruns_its_configuration(tmp_path, capsys):
    out = _output(tmp_path, capsys)
    again = tmp_path / "again.parquet"
    code, _, err = run_main(["run", out, "-o", again], capsys)
    assert code == 0, err
    assert "the configuration recorded in the advcli output: --flavor nemo@7ea279a" in " ".join(err.split())
    a, b = pq.read_table(out), pq.read_table(again)
    assert a.column("advantages").to_pylist() == b.column("advantages").to_pylist()
    assert json.loads(b.schema.metadata[b"advcli"])["flavor"] == "nemo@7ea279a"  # the release pinned
