"""Fused Triton kernels for the GPU path: the reverse scans of the token-level families and the
group sums of the row-level ones, each one kernel launch instead of the torch path's dozens.

**When they run.** :func:`enabled` says whether a tensor's device takes them: a CUDA tensor when
``triton`` imports (the ``gpu`` extra), never a CPU tensor — the torch path of :mod:`advcli.ops.scans`
stays the CPU path and the fallback. For tests, ``ADVCLI_KERNELS=interpret`` (with
``TRITON_INTERPRET=1`` set before ``triton`` is imported) runs them on CPU tensors through Triton's
interpreter; ``ADVCLI_KERNELS=off`` keeps the torch path on a GPU too.

**Grid.** One program per row (scans) or per group (group sums): the grid is the number of rows of the
chunk, which the host knows from its offsets, so no launch waits for the device to size it. Each
program walks its row from the end in tiles of ``BLOCK`` tokens; inside a tile the recurrence
``y_t = b_t + a_t·y_{t+1}`` is one ``tl.associative_scan`` (reverse) over the pairs ``(a, b)``, and the
tile's first value carries into the tile before it. Every mode is that one recurrence:

===============  ===============================  ===============================================
mode             a_t                              b_t
===============  ===============================  ===============================================
``plain``        c                                x_t
``returns_skip`` γ if m_t else 1                  r_t if m_t else 0 (output 0 at m_t = 0)
``gae_all``      γλ                               δ_t = r_t + γ·V_{t+1} − V_t (V_L = 0)
``gae_skip``     γλ if m_t else 1                 δ_t = r_t + γ·nv_t − V_t if m_t else 0
===============  ===============================  ===============================================

where ``nv_t``, the value of the next kept token of the row (0 when none follows, verl's carry over
holes), is itself a reverse scan with ``a = 1 − m_{t+1}``, ``b = m_{t+1}·V_{t+1}``: selections only,
so it is exact.

**Bits.** δ is formed as ``(r + γ·nv) − V`` without fused multiply-adds (``enable_fp_fusion=False``
on the GPU), the torch path's order, so δ is bit-equal. The scan itself adds in a tree inside each
tile, as the torch path's blocked GEMM adds in its own order; neither is the frameworks' sequential
loop, and each differs from it by rounding only: for a row of ``L`` tokens the difference is bounded
by ``2·L·ε·Σ_u |b_u|`` (ε the dtype's unit roundoff), the bound ``tests/unit/test_fused.py`` checks
against a float64 loop. The group sums (:func:`group_sums`) add each group's rows in input order, as
``index_add_`` does on the CPU: bit-equal to :meth:`advcli.ops.groups.GroupIndex.sum`.

Written for advcli from the recurrences above (no framework ships these kernels); the frameworks'
loops they reproduce are cited in :mod:`advcli.ops.scans`.
"""
from __future__ import annotations

import contextlib
import functools
import os
import threading

from ..lazy_torch import torch

BLOCK = 256  # tokens per tile of a scan program
MODES = {"plain": 0, "returns_skip": 1, "gae_all": 2, "gae_skip": 3}
# Triton's interpreter patches triton.language for the length of a call: not thread-safe, and the pipeline
# runs chunks' math on worker threads. Interpreted launches take turns; compiled ones need no lock.
_INTERPRET_LOCK = threading.Lock()


def _turn():
    return _INTERPRET_LOCK if os.environ.get("TRITON_INTERPRET") == "1" else contextlib.nullcontext()


def _setting() -> str:
    return os.environ.get("ADVCLI_KERNELS", "auto").strip().lower()


@functools.lru_cache(maxsize=1)
def triton_available() -> bool:
    """Whether ``triton`` imports here (cached: one attempt a process)."""
    try:
        import triton  # noqa: F401
        import triton.language  # noqa: F401
    except Exception:  # noqa: BLE001 - any failure to import means: not available
        return False
    return True


def enabled(t) -> bool:
    """Whether the fused kernels run on tensor ``t``'s device (see the module's docstring)."""
    setting = _setting()
    if setting == "off":
        return False
    if setting == "interpret":
        return triton_available()
    return t.device.type == "cuda" and triton_available()


@functools.lru_cache(maxsize=1)
def _kernels():
    """The jitted kernels, imported on first use (``import triton`` costs a second: only a run that uses them)."""
    from . import fused_kernels

    return fused_kernels.scan_kernel, fused_kernels.group_sum_kernel


def _launch_options(t) -> dict:
    # no fused multiply-add on the GPU: δ keeps the torch path's bits (the interpreter never fuses)
    return {"enable_fp_fusion": False} if t.device.type == "cuda" else {}


_COEFS: dict = {}


def _coefficients(c: float, gamma: float, dtype, device):
    """[c, γ] as a tensor of the data's dtype on its device, made once per run's values (every chunk of a run
    scans with the same ones): no host-to-device copy, and no wait, per chunk."""
    key = (c, gamma, dtype, str(device))
    t = _COEFS.get(key)
    if t is None:
        if len(_COEFS) > 64:
            _COEFS.clear()
        t = _COEFS[key] = torch.tensor([c, gamma], dtype=dtype).to(device)
    return t


def scan(mode: str, x, offsets, num_rows: int, c: float, gamma: float = 0.0, values=None, mask=None,
         block: int = BLOCK):
    """Flat [N] result of the reverse scan ``mode`` (table in the module's docstring) over the rows
    delimited by ``offsets`` ([B+1] int64 on x's device; ``num_rows`` = B, from the host)."""
    out = torch.empty_like(x)
    if x.numel() == 0 or num_rows == 0:
        return out.zero_()
    scan_kernel, _ = _kernels()
    coef = _coefficients(float(c), float(gamma), x.dtype, x.device)
    v = values.to(x.dtype).contiguous() if values is not None else x
    m = mask.contiguous() if mask is not None else x
    if m.dtype == torch.bool:
        m = m.to(x.dtype)
    with _turn():
        scan_kernel[(num_rows,)](x.contiguous(), v, m, out, offsets, coef, MODE=MODES[mode], BLOCK=block,
                                 **_launch_options(x))
    return out


def group_sums(x, order, starts, num_groups: int, mean=None):
    """Per group: Σ x in x's dtype (rows added in ``order``, each group ``starts[g]..starts[g+1]``) and,
    with ``mean`` [G], Σ (x − mean)² in float64 (what :meth:`GroupIndex.std_1d` sums). Returns (sum, ss)."""
    _, group_sum_kernel = _kernels()
    sums = torch.zeros(num_groups, dtype=x.dtype, device=x.device)
    ss = torch.zeros(num_groups, dtype=torch.float64, device=x.device)
    if num_groups == 0 or x.numel() == 0:
        return sums, ss
    mu = mean.to(x.dtype).contiguous() if mean is not None else sums
    with _turn():
        group_sum_kernel[(num_groups,)](x.contiguous(), order.contiguous(), starts.contiguous(), mu, sums, ss,
                                        SQUARES=mean is not None, **_launch_options(x))
    return sums, ss


# --device auto takes the GPU for token-level runs of at least this many tokens: below it the CUDA context's
# start-up (about a second) and the copies outweigh what the fused kernels save (a rule set from the CPU's
# measured costs; the GPU's own figures are not yet measured: docs/performance.md)
AUTO_GPU_MIN_TOKENS = 1 << 24


def auto_device(cuda: bool, kernels: bool, level: str, tokens: int) -> tuple[str, str]:
    """(cpu or cuda, why) for --device auto: ``cuda`` whether a CUDA device is available, ``kernels`` whether
    the fused kernels can run there (triton), ``level`` the estimator's (row or token), ``tokens`` the dump's."""
    if not cuda:
        return "cpu", "no CUDA device here"
    if level == "row":
        return "cpu", ("a row-level estimator: its group statistics run on the host's row table, so the GPU "
                       "would only add copies")
    if not kernels:
        return "cpu", ("the GPU's fused kernels need triton (pip install 'advcli[gpu]'); without them the GPU "
                       "path is slower than the CPU")
    if tokens < AUTO_GPU_MIN_TOKENS:
        return "cpu", (f"{tokens:,} tokens, under {AUTO_GPU_MIN_TOKENS:,}: the CUDA start-up and copies "
                       "would outweigh the kernels")
    return "cuda", f"a token-level estimator on {tokens:,} tokens (at least {AUTO_GPU_MIN_TOKENS:,})"
