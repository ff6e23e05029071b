"""The fused Triton kernels of the GPU path (advcli.ops.fused) run by Triton's interpreter on CPU tensors
(TRITON_INTERPRET=1), against the torch path and against the frameworks' loops written out here in float64.

Bits (advcli/ops/fused.py): the scans add inside a tile in a tree, the torch path in a blocked GEMM, the
frameworks left to right; all three differ by rounding only, bounded per row of L tokens by
2·L·ε·Σ|b| (ε float32's unit roundoff, b the recurrence's inputs: rewards or δ). Where every partial sum
is exact (dyadic inputs, c = 0.5) the kernel and the torch path give the same bits. The group sums add
rows in input order, as index_add_ does: bit-equal. Skipped without triton (the `gpu` extra)."""
from __future__ import annotations

import importlib
import os
import sys

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

# before triton is first imported (its knobs read the variable then); restored after this module's tests
_SAVED = {k: os.environ.get(k) for k in ("TRITON_INTERPRET", "ADVCLI_KERNELS")}
os.environ["TRITON_INTERPRET"] = "1"
pytest.importorskip("triton", reason="triton is not installed (pip install 'advcli[gpu]'): the fused GPU "
                                     "kernels are not tested")



def _interpreter_takes_loaded_loop_bounds() -> bool:
    """Whether this triton's interpreter runs ``range(s, e)`` over values loaded from memory, as the kernels'
    row walks do. Triton 3.6's interpreter converts such a bound with ``int()`` of a one-element array, which
    NumPy 2.4 made a TypeError ("only 0-dimensional arrays can be converted to Python scalars"); later tritons
    squeeze it first. The compiled kernels are not affected (tests/project/test_cuda.py runs them on a GPU)."""
    import triton
    import triton.language as tl

    @triton.jit
    def count(offs_ptr, out_ptr):
        row = tl.program_id(0)
        n = 0
        for _ in range(tl.load(offs_ptr + row), tl.load(offs_ptr + row + 1)):
            n += 1
        tl.store(out_ptr + row, n)

    out = torch.zeros(1, dtype=torch.int64)
    try:
        count[(1,)](torch.tensor([0, 3]), out)
    except Exception as exc:  # noqa: BLE001 - triton wraps the TypeError in its InterpreterError
        if "0-dimensional" in repr(exc):
            return False
        raise
    return int(out[0]) == 3


if not _interpreter_takes_loaded_loop_bounds():
    pytest.skip(f"triton {importlib.import_module('triton').__version__}'s interpreter cannot take a loop bound "
                f"loaded from memory with numpy {np.__version__} (numpy >= 2.4 with triton < 3.7); the compiled "
                "kernels are tested on a GPU by tests/project/test_cuda.py", allow_module_level=True)

from advcli.ops import fused, scans  # noqa: E402
from advcli.ops.groups import GroupIndex  # noqa: E402
from advcli.ops.ragged import Ragged  # noqa: E402

EPS32 = float(np.finfo(np.float32).eps) / 2


@pytest.fixture(autouse=True, scope="module")
def interpreted():
    """The kernels built for Triton's interpreter for this module only: a GPU session running other tests
    afterwards gets compiled kernels again (the environment and the kernel module are restored)."""
    saved = _SAVED
    os.environ["TRITON_INTERPRET"] = "1"
    os.environ["ADVCLI_KERNELS"] = "interpret"
    sys.modules.pop("advcli.ops.fused_kernels", None)
    fused._kernels.cache_clear()
    importlib.import_module("advcli.ops.fused_kernels")
    yield
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    sys.modules.pop("advcli.ops.fused_kernels", None)
    fused._kernels.cache_clear()


GAE_K3 = {"algorithm.adv_estimator": "gae", "algorithm.use_kl_in_reward": True,
          "algorithm.kl_penalty": "low_var_kl", "algorithm.gamma": 0.99, "algorithm.lam": 0.95}


def test_whole_run_with_kernels_matches_the_cpu_path(tmp_path, monkeypatch):
    """A whole verl GAE + k3 run with the kernels in place of the scans (as --device cuda runs them; the
    pipeline's worker threads call them) against the CPU's
    torch path: the same tolerance as tests/project/test_cuda.py's GPU-vs-CPU check (1e-6 relative)."""
    from advcli import pipeline
    from advcli.flavors import resolve
    from advcli.sample import make_table

    src = tmp_path / "in.parquet"
    pq.write_table(make_table(24, group_size=4, min_len=1, max_len=60, seed=4, steps=2), src)

    def run(out):
        cfg, native = resolve("verl", list(GAE_K3.items()))
        pipeline.run_pipeline([str(src)], str(out), cfg, flavor="verl", native=native, device="cpu", force=True,
                              chunk_rows=16)
        t = pq.read_table(out)
        return {c: t.column(c).combine_chunks().values.to_numpy() for c in ("advantages", "returns")}

    calls = []
    real = fused.scan
    monkeypatch.setattr(fused, "scan", lambda mode, *a, **k: calls.append(mode) or real(mode, *a, **k))
    before = dict(fused.LAUNCHES)
    fused_run = run(tmp_path / "fused.parquet")
    assert calls, "the run did not use the kernels"
    for kernel in ("token_rewards", "row_moments", "finalize"):  # KL + placement, the whitening's moments and itself
        assert fused.LAUNCHES[kernel] > before.get(kernel, 0), kernel
    monkeypatch.setenv("ADVCLI_KERNELS", "off")
    cpu = run(tmp_path / "cpu.parquet")
    for c in cpu:
        np.testing.assert_allclose(fused_run[c], cpu[c], rtol=1e-6, atol=1e-6, err_msg=c)


LENGTHS = [0, 1, 2, 5, 16, 17, 37, 0, 70, 3]  # empty rows, one token, tile edges (BLOCK 16 below)


def batch(seed=0, dtype=torch.float32, dyadic=False):
    g = torch.Generator().manual_seed(seed)
    lay = Ragged.from_lengths(torch.tensor(LENGTHS))
    n = lay.num_tokens
    if dyadic:  # multiples of 1/8 in [-4, 4]: every partial sum below is exact
        r = (torch.randint(-32, 33, (n,), generator=g) / 8).to(dtype)
        v = (torch.randint(-32, 33, (n,), generator=g) / 8).to(dtype)
    else:
        r = torch.randn(n, generator=g, dtype=torch.float64).to(dtype)
        v = torch.randn(n, generator=g, dtype=torch.float64).to(dtype)
    m = (torch.rand(n, generator=g) > 0.3).to(dtype)
    return lay, r, v, m


# ----------------------------------------------------------------- the frameworks' loops, in float64
def loop_plain(x, offs, c):
    out = np.zeros(len(x))
    for i in range(len(offs) - 1):
        run = 0.0
        for t in range(offs[i + 1] - 1, offs[i] - 1, -1):
            run = x[t] + c * run
            out[t] = run
    return out


def loop_returns_skip(r, m, offs, gamma):
    """verl compute_reinforce_plus_plus_outcome_advantage after PR #7300: new = r + γ·run; ret = new·m;
    run = new where m."""
    out = np.zeros(len(r))
    for i in range(len(offs) - 1):
        run = 0.0
        for t in range(offs[i + 1] - 1, offs[i] - 1, -1):
            new = r[t] + gamma * run
            out[t] = new * m[t]
            run = new if m[t] else run
    return out


def loop_gae_skip(r, v, m, offs, gamma, lam):
    """verl compute_gae_advantage_return: δ = r + γ·nv − V; g' = δ + γλ·g; if m: nv, g = V, g'; A = g."""
    out = np.zeros(len(r))
    for i in range(len(offs) - 1):
        nv = g = 0.0
        for t in range(offs[i + 1] - 1, offs[i] - 1, -1):
            d = r[t] + gamma * nv - v[t]
            new = d + gamma * lam * g
            if m[t]:
                nv, g = v[t], new
            out[t] = g
    return out


def loop_gae_all(r, v, offs, gamma, lam):
    """ROLL compute_gae_advantage_return: every position a step, V_L = 0."""
    out = np.zeros(len(r))
    for i in range(len(offs) - 1):
        nv = g = 0.0
        for t in range(offs[i + 1] - 1, offs[i] - 1, -1):
            g = r[t] + gamma * nv - v[t] + gamma * lam * g
            nv = v[t]
            out[t] = g
    return out


def row_bound(b_abs, offs, eps):
    """Per token: 2·L·ε·Σ_row |b| + the smallest float (the documented bound of the module's docstring)."""
    out = np.zeros(len(b_abs))
    for i in range(len(offs) - 1):
        a, e = offs[i], offs[i + 1]
        out[a:e] = 2 * (e - a) * eps * b_abs[a:e].sum() + 1e-30
    return out


GAMMA, LAM = 0.99, 0.95


def cases(lay, r, v, m):
    """(name, kernel result, torch path result, float64 loop, |b| for the bound) for every mode."""
    offs = lay.offsets.tolist()
    r64, v64, m64 = r.double().numpy(), v.double().numpy(), m.double().numpy()
    nv = np.zeros(len(r64))  # |δ| of the loops, for the bound
    for i in range(len(offs) - 1):
        nxt = 0.0
        for t in range(offs[i + 1] - 1, offs[i] - 1, -1):
            nv[t] = nxt
            if m64[t]:
                nxt = v64[t]
    v_next = np.zeros(len(r64))
    for i in range(len(offs) - 1):
        if offs[i + 1] > offs[i]:
            v_next[offs[i]:offs[i + 1] - 1] = v64[offs[i] + 1:offs[i + 1]]
    d_skip = np.abs(r64 + GAMMA * nv - v64) * m64
    d_all = np.abs(r64 + GAMMA * v_next - v64)
    n = lay.num_rows
    return [
        ("plain", fused.scan("plain", r, lay.offsets, n, GAMMA, block=16),
         scans.reverse_discounted_cumsum(r, lay, GAMMA), loop_plain(r64, offs, GAMMA), np.abs(r64)),
        ("returns_skip", fused.scan("returns_skip", r, lay.offsets, n, GAMMA, mask=m, block=16),
         scans.returns_skip_masked(r, m, lay, GAMMA), loop_returns_skip(r64, m64, offs, GAMMA), np.abs(r64)),
        ("gae_skip", fused.scan("gae_skip", r, lay.offsets, n, GAMMA * LAM, GAMMA, values=v, mask=m, block=16),
         scans.gae_skip_masked(r, v, m, lay, GAMMA, LAM), loop_gae_skip(r64, v64, m64, offs, GAMMA, LAM), d_skip),
        ("gae_all", fused.scan("gae_all", r, lay.offsets, n, GAMMA * LAM, GAMMA, values=v, block=16),
         scans.gae_all_positions(r, v, lay, GAMMA, LAM), loop_gae_all(r64, v64, offs, GAMMA, LAM), d_all),
    ]


def _disable_kernels_for_torch_path(monkeypatch):
    monkeypatch.setenv("ADVCLI_KERNELS", "off")


def test_scans_within_bound_of_the_frameworks_loops(monkeypatch):
    lay, r, v, m = batch(0)
    offs = lay.offsets.tolist()
    with monkeypatch.context() as mp:  # the torch path as the CPU runs it
        _disable_kernels_for_torch_path(mp)
        torch_path = {c[0]: c[2] for c in cases(lay, r, v, m)}
    for name, kern, _, ref, b_abs in cases(lay, r, v, m):
        assert kern.dtype == torch.float32 and kern.shape == r.shape, name
        bound = row_bound(b_abs, offs, EPS32)
        err = np.abs(kern.double().numpy() - ref)
        assert (err <= bound).all(), (name, float(err.max()), float(bound[err.argmax()]))
        # the torch path is within the same bound: kernel and torch path differ by rounding only
        err_t = np.abs(torch_path[name].double().numpy() - ref)
        assert (err_t <= bound).all(), (name, "torch path")


def test_scans_bit_equal_where_every_sum_is_exact(monkeypatch):
    """Dyadic rewards and values with c = 0.5 (γ = 0.5, λ = 1): no addition rounds, so any order gives the
    same bits, and the kernel must give the torch path's exactly (a wrong carry or hole rule shows)."""
    global GAMMA, LAM
    saved = GAMMA, LAM
    GAMMA, LAM = 0.5, 1.0
    try:
        lay = Ragged.from_lengths(torch.tensor([0, 1, 2, 5, 16, 17, 9, 0, 12, 3]))
        g = torch.Generator().manual_seed(3)
        n = lay.num_tokens
        r = torch.randint(-8, 9, (n,), generator=g).float() / 8
        v = torch.randint(-8, 9, (n,), generator=g).float() / 8
        m = (torch.rand(n, generator=g) > 0.3).float()
        with monkeypatch.context() as mp:
            _disable_kernels_for_torch_path(mp)
            torch_path = {c[0]: c[2] for c in cases(lay, r, v, m)}
        for name, kern, _, ref, _ in cases(lay, r, v, m):
            assert torch.equal(kern, torch_path[name]), name
            assert np.array_equal(kern.double().numpy(), ref), name
    finally:
        GAMMA, LAM = saved


def test_scans_float64():
    lay, r, v, m = batch(2, dtype=torch.float64)
    offs = lay.offsets.tolist()
    for name, kern, _, ref, b_abs in cases(lay, r, v, m):
        assert kern.dtype == torch.float64, name
        bound = row_bound(b_abs, offs, float(np.finfo(np.float64).eps) / 2)
        assert (np.abs(kern.numpy() - ref) <= bound).all(), name


def test_masked_tokens_follow_the_frameworks_hole_rules():
    """A row with holes, by hand (γ = 1, λ = 1): returns_skip gives 0 at the holes and carries over them;
    gae_skip gives a hole the next kept token's advantage."""
    lay = Ragged.from_lengths(torch.tensor([4]))
    r = torch.tensor([1.0, 2.0, 4.0, 8.0])
    m = torch.tensor([1.0, 0.0, 1.0, 0.0])
    v = torch.tensor([0.5, 100.0, 0.25, 100.0])
    ret = fused.scan("returns_skip", r, lay.offsets, 1, 1.0, mask=m, block=16)
    assert ret.tolist() == [5.0, 0.0, 4.0, 0.0]  # 1 + 4 (the 2 and the 8 dropped), 4
    adv = fused.scan("gae_skip", r, lay.offsets, 1, 1.0, 1.0, values=v, mask=m, block=16)
    # kept tokens 0 and 2: δ2 = 4 + 0 − 0.25 = 3.75; δ0 = 1 + 0.25 − 0.5 = 0.75; A0 = 0.75 + 3.75
    assert adv.tolist() == [4.5, 3.75, 3.75, 0.0]


def test_group_sums_bit_equal_to_index_add():
    g = torch.Generator().manual_seed(5)
    codes = torch.randint(0, 40, (700,), generator=g)
    codes[codes == 7] = 8  # an empty group: 0, as index_add_ leaves it
    codes[5] = 41  # and the last group one row
    x = torch.rand(700, generator=g) * 0.3  # non-dyadic: the order of the adds shows in the bits
    gi = GroupIndex.from_codes(codes)
    order = torch.argsort(codes, stable=True)
    starts = torch.zeros(gi.num_groups + 1, dtype=torch.int64)
    torch.cumsum(gi.sizes, 0, out=starts[1:])
    want_sum = torch.zeros(gi.num_groups).index_add_(0, codes, x)  # the CPU path (GroupIndex.sum unfused)
    mean = want_sum / gi.sizes.to(x.dtype)  # NaN for the empty group: its squares stay 0
    sums, ss = fused.group_sums(x, order, starts, gi.num_groups, mean)
    assert torch.equal(sums, want_sum) and sums[7] == 0
    dev = x.double() - mean[codes].double()
    want = torch.zeros(gi.num_groups, dtype=torch.float64).index_add_(0, codes, dev * dev)
    assert torch.equal(ss, want)


def test_kernels_only_on_cuda_tensors_unless_interpreted(monkeypatch):
    monkeypatch.setenv("ADVCLI_KERNELS", "auto")
    assert not fused.enabled(torch.zeros(1))  # the CPU keeps the torch path
    monkeypatch.setenv("ADVCLI_KERNELS", "off")
    assert not fused.enabled(torch.zeros(1))


# ----------------------------------------------------- token rewards: placement, KL, β and clip in one kernel
def torch_path_rewards(r, m, lay, place, kind, lp, ref, beta, ic, oc, kl_mask=True, mask_placed=False, clip=None,
                       exp=None):
    """advcli.pipeline.tokens.token_chunk's torch path, step for step (its ops, in its order); ``exp`` replaces
    torch.exp in k3 (numpy's, which the interpreter's tl.exp is)."""
    from advcli.ops import kl as klops

    n = lay.num_tokens
    if place == "all":
        t = lay.broadcast(r)
    else:
        idx = lay.last_index() if place == "last" else lay.last_true_index(m.bool())
        if place == "last_valid_or_last":
            idx = torch.where(idx >= 0, idx, lay.last_index())
        t = torch.zeros(n + 1, dtype=m.dtype)
        t[torch.where(idx >= 0, idx, n)] = r
        t = t[:n]
    if mask_placed:
        t = t * m
    if exp is None:
        k = klops.kl_per_token(lp, ref, kind, ic, oc)
    else:
        x = (ref - lp).clamp(-ic, ic)
        k = (exp(x) - x - 1).clamp(-oc, oc)
    if kl_mask:
        k = k * m
    b = beta if beta.numel() == 1 else lay.broadcast(beta)
    t = t - b * k
    if clip:
        t = t.clamp(min=clip[0], max=clip[1])
    return t, k


def rewards_batch(seed=0, dtype=torch.float32, lp_dtype=None):
    g = torch.Generator().manual_seed(seed)
    lay = Ragged.from_lengths(torch.tensor([0, 1, 2, 5, 16, 17, 37, 0, 40, 3]))
    n, b = lay.num_tokens, lay.num_rows
    m = (torch.rand(n, generator=g) > 0.3).to(dtype)
    m[int(lay.offsets[8]):int(lay.offsets[9])] = 0  # a long row whose only kept token is 30 from its end
    m[int(lay.offsets[8]) + 9] = 1
    m[int(lay.offsets[9]):] = 0  # and a row with none
    lp = (-torch.rand(n, generator=g, dtype=torch.float64) * 4).to(lp_dtype or dtype)
    ref = (-torch.rand(n, generator=g, dtype=torch.float64) * 4).to(lp_dtype or dtype)
    lp[3] = -30.0  # past the input clamp
    r = torch.randn(b, generator=g, dtype=torch.float64).to(dtype)
    beta = (torch.rand(b, generator=g, dtype=torch.float64) * 0.2).to(dtype)
    return lay, m, lp, ref, r, beta


@pytest.mark.parametrize("kind,ic,oc,place,mask_placed,kl_mask,per_row,clip", [
    ("k1", None, None, "last", False, True, False, None),
    ("k1", 20.0, 10.0, "last_valid", True, True, True, (-0.5, None)),
    ("abs", None, 10.0, "last_valid_or_last", False, False, True, None),
    ("k2", 20.0, None, "all", True, True, False, (None, 0.25)),
    ("k2", 20.0, 0.5, "last_valid", False, False, False, (-0.1, 0.1)),  # the output clamp bites
])
def test_token_rewards_bit_equal_to_the_torch_path(kind, ic, oc, place, mask_placed, kl_mask, per_row, clip):
    """The elementwise KL kinds, every placement, β per chunk or per row, the masks and clips: each an IEEE
    operation in the torch path's order, so the kernel gives its bits (token rewards and the KL term)."""
    lay, m, lp, ref, r, beta = rewards_batch(1)
    beta = beta if per_row else beta[:1]
    tlr, kld = fused.token_rewards(r, m, lay.offsets, lay.num_rows, place, mask_placed=mask_placed, kl=kind,
                                   logp=lp, ref=ref, beta=beta, input_clamp=ic, output_clamp=oc, kl_mask=kl_mask,
                                   clip=clip, block=16)
    want_t, want_k = torch_path_rewards(r, m, lay, place, kind, lp, ref, beta, ic, oc, kl_mask, mask_placed, clip)
    assert torch.equal(kld, want_k) and torch.equal(tlr, want_t)


def test_token_rewards_from_token_level_scores():
    """reward_source token_level_scores: the dump's scores are the rewards (× mask with mask_placed), then the
    KL term as for a placed reward."""
    lay, m, lp, ref, _, beta = rewards_batch(5)
    scores = torch.randn(lay.num_tokens, generator=torch.Generator().manual_seed(2))
    tlr, kld = fused.token_rewards(scores, m, lay.offsets, lay.num_rows, "scores", mask_placed=True, kl="k1",
                                   logp=lp, ref=ref, beta=beta, block=16)
    k = (lp - ref) * m
    assert torch.equal(kld, k) and torch.equal(tlr, scores * m - lay.broadcast(beta) * k)


def test_token_rewards_float64_run_on_float32_log_probs():
    """--precision float64 on a dump's float32 log-probs: the KL in float32 (torch's ref − logp), widened at
    × mask; the reward maths in float64."""
    lay, m, lp, ref, r, beta = rewards_batch(2, dtype=torch.float64, lp_dtype=torch.float32)
    tlr, kld = fused.token_rewards(r, m, lay.offsets, lay.num_rows, "last", kl="k2", logp=lp, ref=ref,
                                   beta=beta[:1], kld_dtype=torch.float64, block=16)
    want_t, want_k = torch_path_rewards(r, m, lay, "last", "k2", lp, ref, beta[:1], None, None)
    assert tlr.dtype == kld.dtype == torch.float64
    assert torch.equal(kld, want_k) and torch.equal(tlr, want_t)


def test_token_rewards_by_hand():
    """Two rows by hand: k1 = logp − ref, β = 0.5, the reward at the last mask=1 token; a row with no kept
    token places its reward nowhere."""
    lay = Ragged.from_lengths(torch.tensor([4, 2]))
    m = torch.tensor([1.0, 1.0, 0.0, 0.0, 0.0, 0.0])
    lp = torch.tensor([-1.0, -2.0, -0.5, -0.25, -1.0, -1.0])
    ref = torch.tensor([-1.5, -1.0, -0.5, -4.0, -3.0, -1.0])
    tlr, kld = fused.token_rewards(torch.tensor([2.0, 7.0]), m, lay.offsets, 2, "last_valid", kl="k1", logp=lp,
                                   ref=ref, beta=torch.tensor([0.5]), block=16)
    assert kld.tolist() == [0.5, -1.0, 0.0, 0.0, 0.0, 0.0]  # (logp − ref)·m
    assert tlr.tolist() == [-0.25, 2.5, 0.0, 0.0, 0.0, 0.0]  # 0 − 0.5·0.5; 2 − 0.5·(−1)


def test_token_rewards_k3_exp_is_the_only_difference():
    """k3 (low_var_kl): the kernel's e^x is the interpreter's (numpy's exp; libdevice's expf on a GPU), torch's
    CPU exp is another implementation: with numpy's exp in the torch path's op order the bits are equal, and
    against torch's own exp the KL differs by at most 2 ulp of e^x (the two exps' documented difference)."""
    lay, m, lp, ref, r, beta = rewards_batch(3)
    tlr, kld = fused.token_rewards(r, m, lay.offsets, lay.num_rows, "last", kl="k3", logp=lp, ref=ref,
                                   beta=beta[:1], input_clamp=20.0, output_clamp=10.0, block=16)
    np_exp = lambda x: torch.from_numpy(np.exp(x.numpy()))  # noqa: E731
    want_t, want_k = torch_path_rewards(r, m, lay, "last", "k3", lp, ref, beta[:1], 20.0, 10.0, exp=np_exp)
    assert torch.equal(kld, want_k) and torch.equal(tlr, want_t)
    _, torch_k = torch_path_rewards(r, m, lay, "last", "k3", lp, ref, beta[:1], 20.0, 10.0)
    ex = torch.exp((ref - lp).clamp(-20, 20)).double()
    assert ((kld.double() - torch_k.double()).abs() <= 2 * EPS32 * 2 * ex + 2 * EPS32).all()


KL_K2 = {"algorithm.adv_estimator": "reinforce_plus_plus", "algorithm.use_kl_in_reward": True,
         "algorithm.kl_penalty": "mse", "algorithm.gamma": 0.99, "algorithm.kl_ctrl.type": "adaptive"}


def test_whole_run_token_rewards_bit_equal(tmp_path):
    """A whole verl REINFORCE++ run with k2 in the reward and the adaptive controller (β per step, two steps
    a chunk): the kernel's token_level_rewards are the torch path's, bit for bit; the advantages within the
    scan's bound (1e-6 relative, as above)."""
    from advcli import pipeline
    from advcli.flavors import resolve
    from advcli.sample import make_table

    src = tmp_path / "in.parquet"
    pq.write_table(make_table(16, group_size=4, min_len=1, max_len=40, seed=6, steps=2), src)

    def run(out):
        cfg, native = resolve("verl", list(KL_K2.items()))
        pipeline.run_pipeline([str(src)], str(out), cfg, flavor="verl", native=native, device="cpu", force=True,
                              chunk_rows=16)
        t = pq.read_table(out)
        return {c: t.column(c).combine_chunks().values.to_numpy() for c in ("advantages", "token_level_rewards")}

    before = fused.LAUNCHES["token_rewards"]
    kern = run(tmp_path / "fused.parquet")
    assert fused.LAUNCHES["token_rewards"] > before, "the run did not use the kernel"
    os.environ["ADVCLI_KERNELS"] = "off"
    try:
        cpu = run(tmp_path / "cpu.parquet")
    finally:
        os.environ["ADVCLI_KERNELS"] = "interpret"
    assert np.array_equal(kern["token_level_rewards"], cpu["token_level_rewards"])
    np.testing.assert_allclose(kern["advantages"], cpu["advantages"], rtol=1e-6, atol=1e-6)


# ------------------------------------------------------------- GroupIndex's group statistics on the kernels
def test_group_statistics_on_the_kernels_bit_equal_to_the_cpu_path(monkeypatch):
    """GroupIndex.sum, std_1d (unbiased and population) and std_two_pass where the kernels run: the group sums
    in input order, as index_add_ adds them, so every statistic keeps the CPU path's bits (non-dyadic values,
    groups of 1..9 rows in scattered order, float32 and float64)."""
    g = torch.Generator().manual_seed(8)
    codes = torch.randint(0, 30, (160,), generator=g)
    codes[codes == 4] = 5  # a missing code: an empty group
    for dtype in (torch.float32, torch.float64):
        x = (torch.rand(160, generator=g, dtype=torch.float64) * 0.7 + 0.1).to(dtype)

        def stats(x=x):
            gi = GroupIndex.from_codes(codes)
            mean = gi.mean_f32(x)
            return [gi.sum(x), mean, gi.std_1d(x, mean), gi.std_1d(x, mean, population=True),
                    gi.std_two_pass(x, mean), gi.std_two_pass(x, mean, min_denominator=0)]

        before = fused.LAUNCHES["group_sums"]
        kern = stats()
        assert fused.LAUNCHES["group_sums"] - before == 5, "sum, std_1d ×2, std_two_pass ×2: one launch each"
        with monkeypatch.context() as mp:
            _disable_kernels_for_torch_path(mp)
            cpu = stats()
        for i, (a, b) in enumerate(zip(kern, cpu)):
            assert a.dtype == b.dtype and torch.equal(a.nan_to_num(-7.0), b.nan_to_num(-7.0)), (dtype, i)


GRPO = {"algorithm.adv_estimator": "grpo"}


@pytest.mark.parametrize("settings", [GRPO, {**GRPO, "advcli.group_var": "one_pass"}])
def test_whole_grpo_run_on_the_kernels_bit_equal(tmp_path, monkeypatch, settings):
    """A whole verl GRPO run (group mean and std, two-pass and 0.6-0.7's one-pass variance) with the group sums
    on the kernels gives the CPU path's advantages bit for bit."""
    from advcli import pipeline
    from advcli.flavors import resolve
    from advcli.sample import make_table

    src = tmp_path / "in.parquet"
    pq.write_table(make_table(24, group_size=4, min_len=1, max_len=8, seed=9, steps=2), src)

    def run(out):
        cfg, native = resolve("verl", list(settings.items()))
        pipeline.run_pipeline([str(src)], str(out), cfg, flavor="verl", native=native, device="cpu", force=True,
                              chunk_rows=16)
        return pq.read_table(out).column("advantages").combine_chunks().values.to_numpy()

    before = fused.LAUNCHES["group_sums"]
    kern = run(tmp_path / "fused.parquet")
    assert fused.LAUNCHES["group_sums"] > before, "the run did not use the kernels"
    with monkeypatch.context() as mp:
        _disable_kernels_for_torch_path(mp)
        cpu = run(tmp_path / "cpu.parquet")
    assert np.array_equal(kern, cpu)


# ---------------------------------------------------- final advantages: whitening, re-masking, clip in one kernel
def torch_path_final(adv, mask, lay, mean, rstd, scope, remask, clip):
    """advcli.pipeline.tokens.chunk_final's torch path, step for step."""
    if mean is not None:
        if scope is not None:
            st = lay.broadcast(scope)
            mean, rstd = torch.index_select(mean, 0, st), torch.index_select(rstd, 0, st)
        adv = adv.to(torch.float64, copy=True).sub_(mean).mul_(rstd).to(adv.dtype)
    if remask == "fill":
        adv = adv.masked_fill(mask == 0, 0.0)
    elif remask == "mul":
        adv = adv * mask
    if clip:
        adv = adv.clamp(min=clip[0], max=clip[1])
    return adv


@pytest.mark.parametrize("scopes,remask,clip,bool_mask", [
    (1, None, None, False), (3, "fill", None, False), (1, "mul", (-1.0, 1.5), False), (3, "mul", (None, 0.5), True),
    (0, "fill", (-0.2, None), True),  # no whitening: re-masking and clip only
])
def test_finalize_bit_equal_to_the_torch_path(scopes, remask, clip, bool_mask):
    """Whitening in float64 with one scope or a scope per row, re-masking by masked_fill or × mask (a NaN at a
    masked token: filled, or kept), the clip: the torch path's operations in its order, so its bits."""
    lay, r, v, m = batch(4)
    adv = r * 3 + 0.1
    adv[5] = float("nan")
    m[5] = 0.0
    g = torch.Generator().manual_seed(11)
    mean = rstd = scope = None
    if scopes:
        mean = torch.randn(scopes, generator=g, dtype=torch.float64)
        rstd = 1 / (torch.rand(scopes, generator=g, dtype=torch.float64) + 0.3)
        scope = torch.randint(0, scopes, (lay.num_rows,), generator=g) if scopes > 1 else None
    mk = m.bool() if bool_mask else m
    out = fused.finalize(adv, mk, lay.offsets, lay.num_rows, mean=mean, rstd=rstd, scope=scope, remask=remask,
                         clip=clip, block=16)
    want = torch_path_final(adv, mk, lay, mean, rstd, scope, remask, clip)
    assert out.dtype == want.dtype and torch.equal(out.nan_to_num(-9.0), want.nan_to_num(-9.0))
    assert out[5].isnan().item() == (remask != "fill")


def test_finalize_by_hand():
    """One row: μ = 1, rstd = 0.5, × mask, clip at 0.75: ((3 − 1)·0.5 = 1 → 0.75), ((0 − 1)·0.5 = −0.5),
    a masked token → 0."""
    lay = Ragged.from_lengths(torch.tensor([3]))
    out = fused.finalize(torch.tensor([3.0, 0.0, 5.0]), torch.tensor([1.0, 1.0, 0.0]), lay.offsets, 1,
                         mean=torch.tensor([1.0], dtype=torch.float64), rstd=torch.tensor([0.5], dtype=torch.float64),
                         remask="mul", clip=(None, 0.75), block=16)
    assert out.tolist() == [0.75, -0.5, 0.0]


# ---------------------------------------------------------------- the whitening's per-row moments in one kernel
def test_row_moments_within_bound_of_the_exact_sums():
    """Σm, Σv·m, Σv²·m per row (float32 values, 0/1 weights and a row of weights 1): each within L·ε₆₄·Σ|term|
    of math.fsum's exact sum of the same float64 terms; where every term and partial sum is exact (dyadic
    values) equal to the torch path's row sums bit for bit."""
    import math

    from advcli.ops.whiten import MomentSums

    lay, r, _, m = batch(6)
    got = fused.row_moments(r, m, lay.offsets, lay.num_rows, block=16)
    terms = [t.numpy() for t in MomentSums._terms(r, m)]
    offs = lay.offsets.tolist()
    eps64 = float(np.finfo(np.float64).eps) / 2
    for i in range(lay.num_rows):
        a, e = offs[i], offs[i + 1]
        for j, t in enumerate(terms):
            exact = math.fsum(t[a:e])
            bound = (e - a) * eps64 * float(np.abs(t[a:e]).sum())
            assert abs(float(got[j, i]) - exact) <= bound, (i, j)
    lay, r, _, m = batch(7, dyadic=True)
    got = fused.row_moments(r, m, lay.offsets, lay.num_rows, block=16)
    want = torch.stack([lay.row_sum(t) for t in MomentSums._terms(r, m)])
    assert torch.equal(got, want)
    # through MomentSums.row_partials, as the statistics pass calls it: the non-empty rows and their scopes
    parts, scopes = MomentSums.row_partials(r, m, lay, torch.arange(lay.num_rows))
    keep = lay.lengths > 0
    assert all(torch.equal(p, w[keep]) for p, w in zip(parts, want)) and torch.equal(scopes, torch.nonzero(keep)[:, 0])


def test_the_command_with_kernels(tmp_path, monkeypatch, capsys):
    """`advcli run` as a user types it (verl GAE, k1 KL in the reward, whitened), the kernels standing in for the
    GPU path: token_level_rewards bit-equal to the torch path's, advantages and returns within the scan's 1e-6."""
    from conftest import run_main

    from advcli.sample import make_table

    src = tmp_path / "in.parquet"
    pq.write_table(make_table(12, group_size=4, min_len=1, max_len=50, seed=12), src)
    sets = ["algorithm.adv_estimator=gae", "algorithm.use_kl_in_reward=true", "algorithm.kl_penalty=kl"]

    def run(out):
        argv = ["run", str(src), "-o", str(out), "--flavor", "verl", "--device", "cpu", "--force"]
        for s in sets:
            argv += ["--set", s]
        code, _, err = run_main(argv, capsys)
        assert code == 0, err
        t = pq.read_table(out)
        return {c: t.column(c).combine_chunks().values.to_numpy()
                for c in ("advantages", "returns", "token_level_rewards")}

    before = dict(fused.LAUNCHES)
    kern = run(tmp_path / "fused.parquet")
    assert all(fused.LAUNCHES[k] > before.get(k, 0) for k in ("token_rewards", "scan", "finalize"))
    with monkeypatch.context() as mp:
        _disable_kernels_for_torch_path(mp)
        cpu = run(tmp_path / "cpu.parquet")
    assert np.array_equal(kern["token_level_rewards"], cpu["token_level_rewards"])
    for c in ("advantages", "returns"):
        np.testing.assert_allclose(kern[c], cpu[c], rtol=1e-6, atol=1e-6, err_msg=c)
