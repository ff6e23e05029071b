"""--device auto: the rule that picks the CPU or the GPU for the run it sees, and the summary line saying why;
tested on the CPU with a CUDA device that is only pretended (torch.cuda.is_available patched)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

from advcli.ops.fused import AUTO_GPU_MIN_TOKENS, auto_device
from tests.conftest import SAMPLE, run_cli


def test_rule():
    big = AUTO_GPU_MIN_TOKENS
    assert auto_device(False, True, "token", 10 * big) == ("cpu", "no CUDA device here")
    name, why = auto_device(True, True, "row", 10 * big)
    assert name == "cpu" and "row-level" in why
    name, why = auto_device(True, False, "token", 10 * big)
    assert name == "cpu" and "triton" in why
    name, why = auto_device(True, True, "token", big - 1)
    assert name == "cpu" and f"{big - 1:,} tokens" in why
    name, why = auto_device(True, True, "token", big)
    assert name == "cuda" and "token-level" in why


def test_summary_says_where_and_why(tmp_path):
    r = run_cli("run", SAMPLE, "-o", tmp_path / "o.parquet", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["device"] == "cpu (--device auto: no CUDA device here)"
    r = run_cli("run", SAMPLE, "-o", tmp_path / "o2.parquet", "--device", "cpu")
    assert r.returncode == 0, r.stderr
    assert "cpu (--device cpu)" in r.stdout + r.stderr


@pytest.mark.parametrize("estimator,why", [("grpo", "row-level"), ("gae", "tokens, under")])
def test_auto_with_a_pretended_gpu_keeps_small_and_row_level_runs_on_the_cpu(estimator, why, tmp_path,
                                                                             monkeypatch):
    import torch

    from advcli import pipeline
    from advcli.flavors import resolve
    from advcli.ops import fused
    from advcli.sample import make_table

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(fused, "triton_available", lambda: True)
    src = tmp_path / "in.parquet"
    pq.write_table(make_table(16, group_size=4, min_len=1, max_len=20, seed=1), src)
    cfg, native = resolve("verl", [("algorithm.adv_estimator", estimator)])
    res = pipeline.run_pipeline([str(src)], str(tmp_path / "o.parquet"), cfg, flavor="verl", native=native,
                                device="auto", force=True)
    assert res.device.startswith("cpu (--device auto: ") and why in res.device


def test_a_cpu_only_run_never_imports_triton(tmp_path):
    """``import triton`` costs most of a second; --device auto on a machine with no CUDA device must not pay
    it (it once did: the rule asked whether triton imports before asking whether there is a GPU)."""
    code = ("import sys, runpy; sys.argv = ['advcli', 'run', sys.argv[1], '-o', sys.argv[2], '--estimator', 'gae']\n"
            "try:\n    runpy.run_module('advcli', run_name='__main__')\nexcept SystemExit as e:\n"
            "    assert not e.code, e.code\n"
            "print('triton' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code, str(SAMPLE), str(tmp_path / "o.parquet")],
                       capture_output=True, text=True, env={**os.environ, "ADVCLI_SERVER": "off"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "False"
    name, why = auto_device(False, lambda: pytest.fail("triton asked about on a machine with no GPU"), "token", 10**9)
    assert (name, why) == ("cpu", "no CUDA device here")
