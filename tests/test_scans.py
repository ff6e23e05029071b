"""The blocked reverse scan against the plain loop it replaces, and the hole-skipping variants."""
import pytest
import torch

from advcli.ops import scans
from advcli.ragged import Ragged


@pytest.mark.parametrize("c", [1.0, 0.99, 0.95 * 0.9, 0.5, 0.0])
def test_blocked_scan_matches_loop(c):
    torch.manual_seed(0)
    layout = Ragged.from_lengths(torch.tensor([0, 1, 5, 63, 64, 65, 130, 0, 1000, 4097, 64 * 64 + 3]))
    x = torch.randn(layout.num_tokens, dtype=torch.float64)
    got = scans.reverse_discounted_cumsum(x, layout, c)
    want = scans.reverse_discounted_cumsum_reference(x, layout, c)
    assert torch.allclose(got, want, atol=1e-10, rtol=1e-10)


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
