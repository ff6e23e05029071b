"""advcli.pipeline.read.to_host_async, the write pass's copy of a chunk's results back to the host: on the CPU path
it hands the tensors back as they are and never touches CUDA (the GPU side, a copy stream of its own, is checked
by tests/project/test_cuda_copies.py where there is a device)."""
from __future__ import annotations

import torch

from advcli.pipeline import read


def test_host_tensors_come_back_as_they_are_without_touching_cuda(monkeypatch):
    def no_cuda(*a, **k):
        raise AssertionError("the CPU path touched CUDA")

    for name in ("Stream", "Event", "current_stream", "stream", "synchronize"):
        monkeypatch.setattr(torch.cuda, name, no_cuda)
    a, b = torch.arange(5, dtype=torch.float32), torch.ones(3, dtype=torch.bool)
    got, event = read.to_host_async([a, None, b, a])
    assert event is None
    assert got[0] is a and got[1] is None and got[2] is b and got[3] is a
    assert read._COPY_STREAMS == {}
