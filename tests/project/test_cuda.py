"""The same results on the GPU as on the CPU (skipped without CUDA).

The math runs on the device (token columns through pinned host memory, asynchronous copies);
outputs are written as float32. Row-level estimators give the same bits (the group statistics
run on the CPU row table); token estimators may differ in the last bits where CUDA's exp and
matrix products round differently from the CPU's, so they are compared to 1e-6 relative (1e-5 with the
fused Triton scans, which add in another order). On the
GPU, as on the CPU, the bits do not depend on --chunk-rows."""
from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

from advcli import pipeline
from advcli.flavors import resolve
from advcli.ops import fused
from advcli.sample import make_table

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

CONFIGS = {
    "grpo": {"algorithm.adv_estimator": "grpo"},
    "rloo": {"algorithm.adv_estimator": "rloo"},
    "gae_k3": {"algorithm.adv_estimator": "gae", "algorithm.use_kl_in_reward": True,
               "algorithm.kl_penalty": "low_var_kl", "algorithm.gamma": 0.99, "algorithm.lam": 0.95},
    "reinforce_plus_plus": {"algorithm.adv_estimator": "reinforce_plus_plus", "algorithm.gamma": 0.99},
    "remax_kl": {"algorithm.adv_estimator": "remax", "algorithm.use_kl_in_reward": True},
}
EXACT = {"grpo", "rloo"}


@pytest.fixture(scope="module")
def dump(tmp_path_factory):
    p = tmp_path_factory.mktemp("cuda") / "in.parquet"
    pq.write_table(make_table(400, group_size=8, min_len=1, max_len=300, seed=4, steps=2), p)
    return str(p)


def run(src, out, settings, device, chunk_rows):
    cfg, native = resolve("verl", list(settings.items()))
    pipeline.run_pipeline([src], str(out), cfg, flavor="verl", native=native, device=device, force=True,
                          chunk_rows=chunk_rows)
    t = pq.read_table(out)
    return {c: t.column(c).combine_chunks().values.to_numpy() for c in ("advantages", "returns")}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_cuda_matches_cpu(name, dump, tmp_path):
    cpu = run(dump, tmp_path / "cpu.parquet", CONFIGS[name], "cpu", 4096)
    gpus = []
    for rows in (37, 4096):
        gpu = run(dump, tmp_path / f"gpu{rows}.parquet", CONFIGS[name], "cuda", rows)
        for c in cpu:
            if name in EXACT:
                assert np.array_equal(cpu[c], gpu[c]), c
            else:
                # the fused scans (advcli/ops/fused.py, with triton) add in another order than the CPU's blocked
                # GEMM: rounding only, a few ulps of each row's sum of |δ| (the interpreter's order reached 0.9
                # of 1e-6 on this dump), so 1e-5 here; the torch path on the GPU stays within 1e-6
                tol = 1e-5 if fused.enabled(torch.zeros(1, device="cuda")) else 1e-6
                np.testing.assert_allclose(gpu[c], cpu[c], rtol=tol, atol=tol, err_msg=c)
        gpus.append(gpu)
    # and the GPU's bits do not depend on the chunking (the scans' GEMM runs in calls of one shape; a fused
    # scan is one program per row)
    for c in cpu:
        assert np.array_equal(gpus[0][c], gpus[1][c]), c


def test_to_device_pins_and_copies(dump):
    t = torch.arange(10, dtype=torch.float32)
    d = pipeline.to_device(t, torch.device("cuda"))
    assert d.device.type == "cuda" and torch.equal(d.cpu(), t)


@pytest.mark.parametrize("kernels", ["auto", "off"])
def test_row_partials_come_back_to_the_host(kernels, monkeypatch):
    """The statistics pass's row sums (MomentSums.row_partials) return on the host in one copy, so the exact
    per-scope accumulation (Python integers) never reads a device tensor; the same sums as the CPU's rows
    (the kernel's tree sum: within L·ε₆₄·Σ|term|; the torch path: the same bits)."""
    from advcli.ops.ragged import Ragged
    from advcli.ops.whiten import MomentSums

    monkeypatch.setenv("ADVCLI_KERNELS", kernels)
    g = torch.Generator().manual_seed(3)
    lengths = torch.tensor([5, 0, 300, 1, 0, 70])
    layout = Ragged.from_lengths(lengths)
    v = torch.randn(int(lengths.sum()), generator=g)
    m = (torch.rand(v.numel(), generator=g) > 0.3).float()
    scope = torch.tensor([0, 1, 1, 2, 2, 3])
    parts, scopes = MomentSums.row_partials(v.cuda(), m.cuda(), layout.to("cuda"), scope)
    want, want_scopes = MomentSums.row_partials(v, m, layout, scope)
    assert all(p.device.type == "cpu" for p in (*parts, scopes))
    assert torch.equal(scopes, want_scopes) and torch.equal(scopes, torch.tensor([0, 1, 2, 3]))
    for p, w in zip(parts, want):
        torch.testing.assert_close(p, w, rtol=1e-12, atol=1e-9)
