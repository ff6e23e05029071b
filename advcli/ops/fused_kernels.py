"""The Triton kernels of :mod:`advcli.ops.fused` (what they compute, when they run and their bits are
described there). Imported only by ``fused._kernels``, on the first chunk that uses them: importing
this module imports ``triton``. Triton's jit resolves the helpers a kernel calls among the module's
globals, so the kernels live at module level here rather than inside a function of ``fused``.
"""
import triton
import triton.language as tl
from triton.language.extra import libdevice


@triton.jit
def _combine(a_late, b_late, a_early, b_early):
    # reverse scan: the accumulated later part first, then the earlier element
    return a_late * a_early, b_late * a_early + b_early

@triton.jit
def _first(v, idx, first):
    return tl.sum(tl.where(idx == first, v, 0.0), 0)

@triton.jit
def scan_kernel(x_ptr, v_ptr, m_ptr, out_ptr, offs_ptr, coef_ptr, MODE: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    s = tl.load(offs_ptr + row)
    e = tl.load(offs_ptr + row + 1)
    c = tl.load(coef_ptr)  # the scan's coefficient (c, γ or γλ), in the data's dtype
    gamma = tl.load(coef_ptr + 1)
    zero = c * 0.0
    ones = tl.full([BLOCK], 1.0, c.dtype)
    nil = tl.zeros([BLOCK], c.dtype)
    carry = zero  # y at the first token of the tile after this one
    carry_nv = zero  # gae_skip: the next kept token's value seen from that token
    ntiles = tl.cdiv(e - s, BLOCK)
    for k in range(0, ntiles):
        lo = e - (k + 1) * BLOCK
        idx = lo + tl.arange(0, BLOCK)
        inrow = (idx >= s) & (idx < e)
        first = tl.maximum(lo, s)
        x = tl.load(x_ptr + idx, mask=inrow, other=0.0)
        if MODE == 0:
            a = tl.where(inrow, c, ones)
            b = x
        elif MODE == 1:
            keep = tl.load(m_ptr + idx, mask=inrow, other=0.0) != 0
            a = tl.where(keep, c, ones)
            b = tl.where(keep, x, 0.0)
        elif MODE == 2:
            v = tl.load(v_ptr + idx, mask=inrow, other=0.0)
            nxt = (idx + 1 < e) & inrow
            v1 = tl.load(v_ptr + idx + 1, mask=nxt, other=0.0)
            a = tl.where(inrow, c, ones)
            b = tl.where(inrow, (x + gamma * v1) - v, 0.0)
        else:
            v = tl.load(v_ptr + idx, mask=inrow, other=0.0)
            keep = tl.load(m_ptr + idx, mask=inrow, other=0.0) != 0
            nxt = (idx + 1 < e) & inrow
            keep1 = tl.load(m_ptr + idx + 1, mask=nxt, other=0.0) != 0
            v1 = tl.load(v_ptr + idx + 1, mask=nxt, other=0.0)
            a_nv = tl.where(keep1, nil, ones)
            b_nv = tl.where(keep1, v1, 0.0)
            a_nv_run, nv = tl.associative_scan((a_nv, b_nv), 0, _combine, reverse=True)
            nv = nv + a_nv_run * carry_nv  # selections only: exact
            carry_nv = _first(nv, idx, first)
            a = tl.where(keep, c, ones)
            b = tl.where(keep, (x + gamma * nv) - v, 0.0)
        a_run, y = tl.associative_scan((a, b), 0, _combine, reverse=True)
        y = y + a_run * carry
        carry = _first(y, idx, first)
        if MODE == 1:
            y = tl.where(keep, y, 0.0)
        tl.store(out_ptr + idx, y, mask=inrow)

@triton.jit
def group_sum_kernel(x_ptr, order_ptr, starts_ptr, mean_ptr, sum_ptr, ss_ptr, SQUARES: tl.constexpr):
    g = tl.program_id(0)
    s = tl.load(starts_ptr + g)
    e = tl.load(starts_ptr + g + 1)
    # 0 in x's dtype (and float64), from a masked load: an empty group reads nothing, and a NaN or inf
    # value does not leak into the start value (x·0 would)
    acc = tl.zeros_like(tl.load(x_ptr + tl.load(order_ptr + s, mask=s < e, other=0), mask=s < e, other=0.0))
    if SQUARES:
        mu = tl.load(mean_ptr + g).to(tl.float64)
        acc2 = tl.zeros_like(mu)
    for i in range(s, e):  # input order, one add at a time: index_add_'s bits
        val = tl.load(x_ptr + tl.load(order_ptr + i))
        acc += val
        if SQUARES:
            d = val.to(tl.float64) - mu
            acc2 += d * d
    tl.store(sum_ptr + g, acc)
    if SQUARES:
        tl.store(ss_ptr + g, acc2)

@triton.jit
def _clamp(x, lo, hi):
    # torch.clamp's rule: a NaN stays NaN (comparisons with NaN are false), no min/max instruction
    x = tl.where(x < lo, lo, x)
    return tl.where(x > hi, hi, x)

@triton.jit
def token_rewards_kernel(r_ptr, lp_ptr, ref_ptr, m_ptr, beta_ptr, coef_ptr, offs_ptr, tlr_ptr, kld_ptr,
                         PLACE: tl.constexpr, MASK_PLACED: tl.constexpr, KL: tl.constexpr, IN_CLAMP: tl.constexpr,
                         OUT_CLAMP: tl.constexpr, KL_MASK: tl.constexpr, BETA_PER_ROW: tl.constexpr,
                         CLIP_LO: tl.constexpr, CLIP_HI: tl.constexpr, LIBDEVICE_EXP: tl.constexpr,
                         BLOCK: tl.constexpr):
    row = tl.program_id(0)
    s = tl.load(offs_ptr + row)
    e = tl.load(offs_ptr + row + 1)
    # the placed token: e − 1 (``last``), the last mask=1 token (``last_valid``, −1: none; PLACE 2: e − 1 then),
    # found by walking the row's tiles from its end until one holds a kept token
    last = e - 1
    if PLACE == 1 or PLACE == 2:
        last = s * 0 - 1
        hi = e
        while (last < 0) & (hi > s):
            idx = hi - BLOCK + tl.arange(0, BLOCK)
            inrow = (idx >= s) & (idx < hi)
            keep = tl.load(m_ptr + idx, mask=inrow, other=0.0) != 0
            last = tl.max(tl.where(keep & inrow, idx, -1), 0)
            hi = hi - BLOCK
        if PLACE == 2:
            last = tl.where(last < 0, e - 1, last)
    if PLACE != 4:
        r = tl.load(r_ptr + row)
    if KL != 0:
        if BETA_PER_ROW:
            beta = tl.load(beta_ptr + row)
        else:
            beta = tl.load(beta_ptr)
    for k in range(0, tl.cdiv(e - s, BLOCK)):
        idx = s + k * BLOCK + tl.arange(0, BLOCK)
        inrow = idx < e
        m = tl.load(m_ptr + idx, mask=inrow, other=0.0)
        if PLACE == 4:  # token-level scores given: the row's own column (cast to the run's dtype by the host)
            t = tl.load(r_ptr + idx, mask=inrow, other=0.0)
        elif PLACE == 3:  # every position
            t = tl.zeros_like(m) + r
        else:
            t = tl.where(idx == last, r, 0.0)
        if MASK_PLACED:
            t = t * m
        if KL != 0:
            lp = tl.load(lp_ptr + idx, mask=inrow, other=0.0)
            ref = tl.load(ref_ptr + idx, mask=inrow, other=0.0)
            x = ref - lp
            if IN_CLAMP:
                ic = tl.load(coef_ptr).to(x.dtype)
                x = _clamp(x, -ic, ic)
            if KL == 1:  # k1
                f = -x
            elif KL == 2:  # abs
                f = tl.abs(x)
            elif KL == 3:  # k2: 0.5·x·x, left to right
                f = 0.5 * x
                f = f * x
            else:  # k3: (e^x − x) − 1
                if LIBDEVICE_EXP:  # CUDA's expf, the one torch's exp calls (tl.exp is ex2.approx)
                    ex = libdevice.exp(x)
                else:
                    ex = tl.exp(x)
                f = ex - x
                f = f - 1.0
            if OUT_CLAMP:
                oc = tl.load(coef_ptr + 1).to(f.dtype)
                f = _clamp(f, -oc, oc)
            kld = f.to(m.dtype)  # exact: the host takes this path only where it widens or keeps the dtype
            if KL_MASK:
                kld = kld * m
            tl.store(kld_ptr + idx, kld, mask=inrow)
            t = t - beta * kld
        if CLIP_LO:
            t = tl.where(t < tl.load(coef_ptr + 2).to(t.dtype), tl.load(coef_ptr + 2).to(t.dtype), t)
        if CLIP_HI:
            t = tl.where(t > tl.load(coef_ptr + 3).to(t.dtype), tl.load(coef_ptr + 3).to(t.dtype), t)
        tl.store(tlr_ptr + idx, t, mask=inrow)

@triton.jit
def finalize_kernel(adv_ptr, m_ptr, mean_ptr, rstd_ptr, scope_ptr, coef_ptr, offs_ptr, out_ptr,
                    WHITEN: tl.constexpr, PER_SCOPE: tl.constexpr, REMASK: tl.constexpr, CLIP_LO: tl.constexpr,
                    CLIP_HI: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    s = tl.load(offs_ptr + row)
    e = tl.load(offs_ptr + row + 1)
    if WHITEN:  # the row's scope: its mean and 1/std (float64), read once for the row
        if PER_SCOPE:
            sc = tl.load(scope_ptr + row)
        else:
            sc = 0
        mu = tl.load(mean_ptr + sc)
        rstd = tl.load(rstd_ptr + sc)
    for k in range(0, tl.cdiv(e - s, BLOCK)):
        idx = s + k * BLOCK + tl.arange(0, BLOCK)
        inrow = idx < e
        a = tl.load(adv_ptr + idx, mask=inrow, other=0.0)
        m = tl.load(m_ptr + idx, mask=inrow, other=0).to(a.dtype)  # 0/1 (a bool mask too): exact
        if WHITEN:  # (x − μ)·rstd in float64, rounded once to the run's dtype
            x = a.to(tl.float64) - mu
            x = x * rstd
            a = x.to(m.dtype)
        if REMASK == 1:  # masked_fill: 0 at m = 0, whatever a holds (NaN included)
            a = tl.where(m == 0, 0.0, a)
        elif REMASK == 2:  # a·m: a NaN at m = 0 stays NaN
            a = a * m
        if CLIP_LO:
            lo = tl.load(coef_ptr + 2).to(a.dtype)
            a = tl.where(a < lo, lo, a)
        if CLIP_HI:
            hi = tl.load(coef_ptr + 3).to(a.dtype)
            a = tl.where(a > hi, hi, a)
        tl.store(out_ptr + idx, a, mask=inrow)

@triton.jit
def row_moments_kernel(v_ptr, w_ptr, offs_ptr, out_ptr, num_rows, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    s = tl.load(offs_ptr + row)
    e = tl.load(offs_ptr + row + 1)
    zero = tl.load(out_ptr + row) * 0.0  # a float64 0 (the output holds zeros)
    acc0 = zero
    acc1 = zero
    acc2 = zero
    for k in range(0, tl.cdiv(e - s, BLOCK)):
        idx = s + k * BLOCK + tl.arange(0, BLOCK)
        inrow = idx < e
        v = tl.load(v_ptr + idx, mask=inrow, other=0.0).to(tl.float64)
        w = tl.load(w_ptr + idx, mask=inrow, other=0.0).to(tl.float64)
        vw = v * w  # the terms as MomentSums._terms forms them: m, v·m, v·(v·m)
        acc0 += tl.sum(w, 0)
        acc1 += tl.sum(vw, 0)
        acc2 += tl.sum(v * vw, 0)
    tl.store(out_ptr + row, acc0)
    tl.store(out_ptr + num_rows + row, acc1)
    tl.store(out_ptr + 2 * num_rows + row, acc2)
