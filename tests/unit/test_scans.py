"""The blocked reverse scan against the plain loop it replaces, and the hole-skipping variants."""
import pytest
import torch

from advcli.ops import scans
from advcli.ops.ragged import Ragged


@pytest.mark.parametrize("c", [1.0, 0.99, 0.95 * 0.9, 0.5, 0.0])
def test_blocked_scan_matches_loop(c):
    torch.manual_seed(0)
    layout = Ragged.from_lengths(torch.tensor([0, 1, 5, 63, 64, 65, 130, 0, 1000, 4097, 64 * 64 + 3]))
    x = torch.randn(layout.num_tokens, dtype=torch.float64)
    got = scans.reverse_discounted_cumsum(x, layout, c)
    want = scans.reverse_discounted_cumsum_reference(x, layout, c)
    assert torch.allclose(got, want, atol=1e-10, rtol=1e-10)


def test_blocked_scan_with_one_coefficient_per_row_matches_loop():
    """A coefficient per row (NeMo RL's length-adaptive γλ_i): each row as the plain loop with its own c, rows of
    one block, several blocks and several levels of blocks (64·64 + 3), c = 0 and 1 among them."""
    torch.manual_seed(0)
    lengths = [0, 1, 5, 63, 64, 65, 130, 0, 1000, 4097, 64 * 64 + 3]
    layout = Ragged.from_lengths(torch.tensor(lengths))
    x = torch.randn(layout.num_tokens, dtype=torch.float64)
    c = torch.tensor([0.3, 0.0, 1.0, 0.9, 0.5, 0.99, 0.7, 0.2, 0.95 * 0.9, 0.999, 0.97], dtype=torch.float64)
    got = scans.reverse_discounted_cumsum(x, layout, c)
    offs = layout.offsets.tolist()
    for i, n in enumerate(lengths):
        one = Ragged.from_lengths(torch.tensor([n]))
        want = scans.reverse_discounted_cumsum_reference(x[offs[i]:offs[i + 1]], one, float(c[i]))
        assert torch.allclose(got[offs[i]:offs[i + 1]], want, atol=1e-10, rtol=1e-10), i


def test_gae_with_one_lambda_per_row_matches_loop():
    """gae_skip_masked and gae_all_positions with λ per row: each row as the loop with its own λ."""
    torch.manual_seed(2)
    lengths = [7, 1, 130, 0, 70, 300]
    layout = Ragged.from_lengths(torch.tensor(lengths))
    n = layout.num_tokens
    r, v = torch.randn(n, dtype=torch.float64), torch.randn(n, dtype=torch.float64)
    m = (torch.rand(n) > 0.3).to(torch.float64)
    lam = torch.tensor([0.0, 0.5, 0.95, 1.0, 0.8, 0.3], dtype=torch.float64)
    got = scans.gae_skip_masked(r, v, m, layout, 0.99, lam)
    got_all = scans.gae_all_positions(r, v, layout, 0.99, lam)
    offs = layout.offsets.tolist()
    for i in range(len(lengths)):
        s, e = offs[i], offs[i + 1]
        want = _gae_loop(r[s:e].tolist(), v[s:e].tolist(), m[s:e].tolist(), 0.99, float(lam[i]))
        assert torch.allclose(got[s:e], torch.tensor(want, dtype=torch.float64), atol=1e-9)
        want_all = _gae_loop(r[s:e].tolist(), v[s:e].tolist(), [1.0] * (e - s), 0.99, float(lam[i]))
        assert torch.allclose(got_all[s:e], torch.tensor(want_all, dtype=torch.float64), atol=1e-9)


def test_scan_by_hand():
    layout = Ragged.from_lengths(torch.tensor([3, 2]))
    x = torch.tensor([1.0, 2.0, 4.0, 1.0, 1.0], dtype=torch.float64)
    # row 0: y2 = 4, y1 = 2 + .5*4 = 4, y0 = 1 + .5*4 = 3; row 1: y1 = 1, y0 = 1.5
    assert scans.reverse_discounted_cumsum(x, layout, 0.5).tolist() == [3.0, 4.0, 4.0, 1.5, 1.0]


def _gae_loop(r, v, m, gamma, lam):
    """verl compute_gae_advantage_return, row by row (core_algos.py L215-263 @1dda039b)."""
    out = [0.0] * len(r)
    nv = g = 0.0
    for t in reversed(range(len(r))):
        delta = r[t] + gamma * nv - v[t]
        g2 = delta + gamma * lam * g
        if m[t]:
            nv, g = v[t], g2
        out[t] = g
    return out


def test_gae_skip_masked_matches_verl_loop():
    torch.manual_seed(1)
    lengths = [7, 1, 130, 0, 70]
    layout = Ragged.from_lengths(torch.tensor(lengths))
    n = layout.num_tokens
    r = torch.randn(n, dtype=torch.float64)
    v = torch.randn(n, dtype=torch.float64)
    m = (torch.rand(n) > 0.3).to(torch.float64)
    got = scans.gae_skip_masked(r, v, m, layout, 0.99, 0.95)
    want = []
    offs = layout.offsets.tolist()
    for i in range(len(lengths)):
        s, e = offs[i], offs[i + 1]
        want += _gae_loop(r[s:e].tolist(), v[s:e].tolist(), m[s:e].tolist(), 0.99, 0.95)
    assert torch.allclose(got, torch.tensor(want, dtype=torch.float64), atol=1e-9)


def test_returns_skip_masked_by_hand():
    # verl REINFORCE++ (PR #7300): the return jumps over the hole, rewards on masked tokens dropped
    layout = Ragged.from_lengths(torch.tensor([5]))
    r = torch.tensor([0.0, 0.0, 5.0, 0.0, 1.0], dtype=torch.float64)
    m = torch.tensor([1, 1, 0, 0, 1], dtype=torch.float64)
    got = scans.returns_skip_masked(r, m, layout, 0.5)
    # kept tokens 0,1,4 -> rewards 0,0,1 -> returns .25, .5, 1 ; masked positions 0
    assert got.tolist() == [0.25, 0.5, 0.0, 0.0, 1.0]


# ------------------------------------------------------------------------------------------------
# The grid machinery on awkward layouts: rows of length 0/1, all-masked rows, holes, masked tails,
# kept counts around multiples of 64 (a row's spare cell is the last cell of its blocks when
# kept % 64 == 63, and gets a block of its own when kept % 64 == 0) and rows long enough for two and
# three recursion levels (more than 64 and 64*64 blocks).

def _returns_loop(r, m, gamma):
    """verl compute_reinforce_plus_plus_outcome_advantage, one row (core_algos.py L693-731 @1dda039b)."""
    out = [0.0] * len(r)
    run = 0.0
    for t in reversed(range(len(r))):
        new = r[t] + gamma * run
        out[t] = new * m[t]
        run = new if m[t] else run
    return out


def _gae_all_loop(r, v, gamma, lam):
    """ROLL compute_gae_advantage_return on one row: every position is a step, V_L = 0."""
    out = [0.0] * len(r)
    g = nv = 0.0
    for t in reversed(range(len(r))):
        g = r[t] + gamma * nv - v[t] + gamma * lam * g
        nv = v[t]
        out[t] = g
    return out


def _awkward_case(seed, long_rows=()):
    """(lengths, masks) with every kind of row the grid has to get right."""
    g = torch.Generator().manual_seed(seed)
    rows = []  # list of bool masks
    rows += [torch.ones(0, dtype=torch.bool), torch.ones(1, dtype=torch.bool), torch.zeros(1, dtype=torch.bool)]
    rows += [torch.zeros(70, dtype=torch.bool), torch.zeros(0, dtype=torch.bool)]  # all masked, empty
    for kept in (62, 63, 64, 65, 127, 128, 129, 64 * 3 - 1):
        # exactly `kept` kept tokens, with a hole in the middle and a masked tail
        m = torch.ones(kept + 9, dtype=torch.bool)
        m[kept // 2: kept // 2 + 5] = False
        m[-4:] = False
        rows.append(m)
    for length in (5, 64, 100, 200, 333, 1000):
        rows.append(torch.rand(length, generator=g) > 0.3)  # scattered holes
        m = torch.ones(length, dtype=torch.bool)
        m[length // 3: length // 3 + length // 5 + 1] = False  # one observation span
        rows.append(m)
    for length in long_rows:
        m = torch.rand(length, generator=g) > 0.1
        m[-7:] = False
        rows.append(m)
    perm = torch.randperm(len(rows), generator=g).tolist()
    rows = [rows[i] for i in perm]
    lengths = torch.tensor([len(m) for m in rows])
    mask = torch.cat(rows).to(torch.float64)
    return Ragged.from_lengths(lengths), mask, g


def _per_row(layout, fn, *cols):
    out = []
    offs = layout.offsets.tolist()
    for i in range(layout.num_rows):
        s, e = offs[i], offs[i + 1]
        out += fn(*[c[s:e].tolist() for c in cols])
    return torch.tensor(out, dtype=torch.float64)


@pytest.mark.parametrize("seed,long_rows", [(0, ()), (1, (64 * 64 + 70, 64 * 64 * 2 + 3)), (2, (64 * 64 * 64 + 100,))])
def test_skip_masked_scans_match_loops_on_awkward_rows(seed, long_rows):
    layout, m, g = _awkward_case(seed, long_rows)
    n = layout.num_tokens
    r = torch.randn(n, generator=g, dtype=torch.float64)
    v = torch.randn(n, generator=g, dtype=torch.float64)
    for gamma, lam in ((0.99, 0.95), (1.0, 1.0), (0.5, 0.0)):
        got = scans.gae_skip_masked(r, v, m, layout, gamma, lam)
        want = _per_row(layout, lambda rr, vv, mm, g_=gamma, l_=lam: _gae_loop(rr, vv, mm, g_, l_), r, v, m)
        torch.testing.assert_close(got, want, atol=1e-9, rtol=1e-9)
        got = scans.returns_skip_masked(r, m, layout, gamma)
        want = _per_row(layout, lambda rr, mm, g_=gamma: _returns_loop(rr, mm, g_), r, m)
        torch.testing.assert_close(got, want, atol=1e-9, rtol=1e-9)
        assert torch.equal(got[m == 0], torch.zeros(int((m == 0).sum()), dtype=got.dtype))
        got = scans.gae_all_positions(r, v, layout, gamma, lam)
        want = _per_row(layout, lambda rr, vv, g_=gamma, l_=lam: _gae_all_loop(rr, vv, g_, l_), r, v)
        torch.testing.assert_close(got, want, atol=1e-9, rtol=1e-9)


def test_skip_masked_float32_close_to_float64_loop():
    layout, m, g = _awkward_case(3, (5000,))
    n = layout.num_tokens
    r = torch.randn(n, generator=g, dtype=torch.float64)
    v = torch.randn(n, generator=g, dtype=torch.float64)
    got = scans.gae_skip_masked(r.float(), v.float(), m.float(), layout, 0.99, 0.95)
    assert got.dtype == torch.float32
    want = _per_row(layout, lambda rr, vv, mm: _gae_loop(rr, vv, mm, 0.99, 0.95), r, v, m)
    torch.testing.assert_close(got.double(), want, atol=1e-4, rtol=1e-5)


def test_empty_inputs():
    layout = Ragged.from_lengths(torch.tensor([0, 0]))
    e = torch.zeros(0)
    assert scans.gae_skip_masked(e, e, e, layout, 0.9, 0.9).shape == (0,)
    assert scans.returns_skip_masked(e, e, layout, 0.9).shape == (0,)
    assert scans.gae_all_positions(e, e, layout, 0.9, 0.9).shape == (0,)
    assert scans.reverse_discounted_cumsum(e, layout, 0.9).shape == (0,)


DEVICES = ["cpu", "cpu-pieces"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.mark.parametrize("device", DEVICES)
def test_rows_do_not_depend_on_their_neighbours(device, monkeypatch):
    """Each row gets the same bits alone, in a chunk, or with its neighbours shuffled: the grid
    position of a row's blocks changes, the fixed GEMM tile keeps their rounding. ``cpu-pieces``: the
    GPU's way (the GEMM in calls of a fixed number of tiles) on the CPU; ``cuda`` where there is one
    (cuBLAS picks its kernel by the number of tiles too: the pieces keep one shape)."""
    if device == "cpu-pieces":
        monkeypatch.setattr(scans, "PIECE_DEVICES", {"cpu", "cuda"})
        monkeypatch.setattr(scans, "GEMM_TILE", 4)  # small tiles and pieces: a chunk here spans many calls
        monkeypatch.setattr(scans, "PIECE_TILES", 2)
    dev = torch.device("cuda" if device == "cuda" else "cpu")
    layout, m, g = _awkward_case(4, (64 * 64 + 5,))
    n = layout.num_tokens
    r = torch.randn(n, generator=g).to(dev)
    v = torch.randn(n, generator=g).to(dev)
    m = m.float().to(dev)
    fns = {
        "gae": lambda lay, rr, vv, mm: scans.gae_skip_masked(rr, vv, mm, lay, 0.99, 0.95),
        "returns": lambda lay, rr, vv, mm: scans.returns_skip_masked(rr, mm, lay, 0.99),
        "gae_all": lambda lay, rr, vv, mm: scans.gae_all_positions(rr, vv, lay, 0.99, 0.95),
        "cumsum": lambda lay, rr, vv, mm: scans.reverse_discounted_cumsum(rr, lay, 0.97),
    }
    offs = layout.offsets.tolist()
    lengths = layout.lengths
    perm = torch.randperm(layout.num_rows, generator=g).tolist()
    idx = torch.cat([torch.arange(offs[i], offs[i + 1]) for i in perm]).to(dev)
    shuffled = Ragged.from_lengths(lengths[perm]).to(dev)
    layout = layout.to(dev)
    for name, fn in fns.items():
        whole = fn(layout, r, v, m)
        if device == "cpu-pieces":  # the pieces compute the same scan as one call over every tile
            with monkeypatch.context() as mp:
                mp.setattr(scans, "PIECE_DEVICES", set())
                torch.testing.assert_close(whole, fn(layout, r, v, m), rtol=1e-5, atol=1e-5)
        # rows shuffled
        back = torch.empty_like(whole)
        back[idx] = fn(shuffled, r[idx], v[idx], m[idx])
        assert torch.equal(whole, back), name
        # every row alone
        for i in range(layout.num_rows):
            s, e = offs[i], offs[i + 1]
            alone = fn(Ragged.from_lengths(torch.tensor([e - s])).to(dev), r[s:e], v[s:e], m[s:e])
            assert torch.equal(whole[s:e], alone), (name, i)


def test_slots_by_brute_force():
    lengths = torch.tensor([0, 3, 0, 0, 5, 1, 0])
    layout = Ragged.from_lengths(lengths)
    n = layout.num_tokens
    step = torch.tensor([True, False, True, True, True, False, False, True, True])
    base = torch.tensor([100, 7, -3, 40, 1000, 5, 9])
    got = scans._slots(step, base, layout.offsets, n)
    row = layout.row_index.tolist()
    want = [sum(step[:t].tolist()) + int(base[row[t]]) for t in range(n)]
    assert got.tolist() == want
    assert scans._slots(None, base, layout.offsets, n).tolist() == [t + int(base[row[t]]) for t in range(n)]


def test_kept_slots_semantics():
    layout, m, _ = _awkward_case(5, (64 * 64 + 9,))
    keep = m.bool()
    slot, sslot, _, block_offsets, nb, cells = scans._kept_slots(keep, layout, scans.BLOCK)
    offs, bo = layout.offsets.tolist(), block_offsets.tolist()
    assert cells % (scans.BLOCK * scans.GEMM_TILE) == 0 and cells >= nb * scans.BLOCK == bo[-1] * scans.BLOCK
    for i in range(layout.num_rows):
        s, e = offs[i], offs[i + 1]
        k = keep[s:e].tolist()
        first, kept = bo[i] * scans.BLOCK, sum(k)
        assert bo[i + 1] - bo[i] == kept // scans.BLOCK + 1  # room for the spare cell
        j = 0
        for t in range(s, e):  # kept tokens packed from the row's first cell; dropped: the next kept's cell
            assert slot[t] == first + j
            j += k[t - s]
        assert j == kept
    kept_cells = slot[keep]
    assert kept_cells.unique().numel() == kept_cells.numel()
    assert torch.equal(sslot[keep], kept_cells)
    trash = sslot[~keep]
    assert trash.unique().numel() == trash.numel() and bool((trash > cells).all())


def test_count_per_row_equals_the_row_sum_of_the_flags():
    g = torch.Generator().manual_seed(5)
    lengths = torch.tensor([0, 3, 1, 0, 70, 5, 0])
    layout = Ragged.from_lengths(lengths)
    flags = torch.randint(0, 2, (int(lengths.sum()),), generator=g)
    want = layout.row_sum(flags.to(torch.int64))
    for f in (flags.to(torch.int8), flags.bool(), flags.to(torch.float32)):
        got = layout.count_per_row(f)
        assert got.dtype == torch.int64 and torch.equal(got, want)
    assert torch.equal(Ragged.from_lengths(torch.tensor([0, 0])).count_per_row(torch.zeros(0)),
                       torch.zeros(2, dtype=torch.int64))


def test_returns_reset_at_holes_by_hand():
    # verl 0.8.0 REINFORCE++: run = r + γ·run; ret = run; run *= m. G_4 = 1; G_3 = 0 + .5·1 = .5 (masked: kept,
    # then reset); G_2 = 5 + .5·0 = 5 (masked, reset); G_1 = 0 + .5·0 = 0; G_0 = 0. A second row starts afresh.
    layout = Ragged.from_lengths(torch.tensor([5, 2]))
    r = torch.tensor([0.0, 0.0, 5.0, 0.0, 1.0, 2.0, 4.0], dtype=torch.float64)
    m = torch.tensor([1, 1, 0, 0, 1, 1, 1], dtype=torch.float64)
    got = scans.returns_reset_at_holes(r, m, layout, 0.5)
    assert got.tolist() == [0.0, 0.0, 5.0, 0.5, 1.0, 4.0, 4.0]
