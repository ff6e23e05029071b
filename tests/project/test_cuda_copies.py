"""The write pass's copies of a chunk's results back to the host (advcli.pipeline.read.to_host_async) on a copy
stream of their own while the next chunk's kernels run on the current stream (skipped without CUDA): the host
tensors hold exactly the device's values once the event is waited for, even when the device tensors are freed at
once and their memory handed to the next kernels (the copy stream's use is recorded with the allocator)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from advcli.pipeline import read

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]


def test_results_copied_back_while_the_next_kernels_reuse_their_memory():
    n = 1 << 22
    for round_ in range(3):
        x = torch.arange(n, device="cuda", dtype=torch.float32) * 3 + round_  # exact in float32 (< 2^24)
        m = (torch.arange(n, device="cuda") % 7) == 0
        (hx, hm, none), event = read.to_host_async([x, m, None])
        assert event is not None and none is None and hx.is_pinned()
        del x, m  # the next chunk's kernels may get this memory: not before the copies are done
        for _ in range(8):
            y = torch.full((n,), -1.0, device="cuda")
            y.mul_(2).add_(1)
        event.synchronize()
        assert np.array_equal(hx.numpy(), np.arange(n, dtype=np.float32) * 3 + round_)
        assert np.array_equal(hm.numpy(), np.arange(n) % 7 == 0)
    assert torch.cuda.current_stream() == torch.cuda.default_stream()  # the compute stream as it was
