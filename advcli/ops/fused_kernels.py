"""The Triton kernels of :mod:`advcli.ops.fused` (what they compute, when they run and their bits are
described there). Imported only by ``fused._kernels``, on the first chunk that uses them: importing
this module imports ``triton``. Triton's jit resolves the helpers a kernel calls among the module's
globals, so the kernels live at module level here rather than inside a function of ``fused``.
"""
import triton
import triton.language as tl


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
