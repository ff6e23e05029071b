"""The statistics pass's results beyond the memory budget: kept in an anonymous temporary file so
that the write pass reads them back instead of decoding the inputs and computing the estimator again.

Whitening is global: every advantage of a scope must be computed before the first one is written. The
statistics pass computes them all; :mod:`.moments` keeps them in memory up to
:data:`.moments.TOKEN_CACHE_BYTES`. Beyond that they go here, raw (no encoding: the bytes of the
tensors), in chunk order, to one file in the temporary directory (``TMPDIR``) that the operating
system removes when the process ends, whatever happens. The write pass reads each chunk back into
fresh buffers (``os.preadv``, no ``mmap``: the resident memory stays one chunk), so memory stays
bounded whatever the input's size. Raw tensors cost 13 bytes a token for float32 advantages, returns
and token rewards plus the mask; the file is used only when the directory has room for twice that
and 1 GiB besides (:func:`open_spill`), otherwise the write pass computes the chunks again.
"""
from __future__ import annotations

import os
import shutil
import tempfile

import numpy as np
import torch

from ..errors import disk_full, is_disk_full

SPILL_MARGIN = 1 << 30  # free space left on the temporary directory's filesystem beside twice the need


class TokenSpill:
    """Tensors appended to an anonymous temporary file and read back by reference."""

    def __init__(self, directory: str, need_bytes: int | None = None):
        self.fh = tempfile.TemporaryFile(dir=directory)
        self.size = 0
        self.directory, self.need_bytes = directory, need_bytes

    def put(self, tensors: list[torch.Tensor | None]) -> list[tuple | None]:
        """Append ``tensors`` (any device; None kept as None); returns one reference each."""
        refs: list[tuple | None] = []
        for t in tensors:
            if t is None:
                refs.append(None)
                continue
            arr = np.ascontiguousarray(t.detach().cpu().numpy())
            try:
                self.fh.write(memoryview(arr).cast("B"))
            except OSError as e:  # the temporary directory filled up after open_spill looked (another process)
                if is_disk_full(e):
                    raise disk_full(self.directory, "the statistics pass's temporary file (TMPDIR)",
                                    self.need_bytes) from None
                raise
            refs.append((self.size, arr.dtype.str, arr.size, t.device))
            self.size += arr.nbytes
        return refs

    def get(self, refs: list[tuple | None]) -> list[torch.Tensor | None]:
        """The tensors of :meth:`put`'s references, on the device they came from."""
        self.fh.flush()
        out: list[torch.Tensor | None] = []
        for ref in refs:
            if ref is None:
                out.append(None)
                continue
            offset, dtype, numel, device = ref
            arr = np.empty(numel, dtype=np.dtype(dtype))
            view = memoryview(arr).cast("B")
            done = 0
            while done < arr.nbytes:  # pread may return less than asked
                n = os.preadv(self.fh.fileno(), [view[done:]], offset + done)
                if n <= 0:
                    raise OSError(f"the statistics pass's temporary file ended early ({done} of {arr.nbytes} bytes)")
                done += n
            out.append(torch.from_numpy(arr).to(device))
        return out

    def close(self) -> None:
        try:
            self.fh.close()
        except OSError:
            pass


def open_spill(need_bytes: int) -> TokenSpill | None:
    """A :class:`TokenSpill` in the temporary directory when its filesystem has room for twice
    ``need_bytes`` plus :data:`SPILL_MARGIN`; None otherwise (the write pass then recomputes)."""
    directory = tempfile.gettempdir()
    try:
        if shutil.disk_usage(directory).free < 2 * need_bytes + SPILL_MARGIN:
            return None
        return TokenSpill(directory, need_bytes)
    except OSError:
        return None
