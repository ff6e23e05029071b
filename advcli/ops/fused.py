"""Fused Triton kernels for the GPU path: the token rewards and reverse scans of the token-level
families and the group sums of the row-level ones, each one kernel launch instead of the torch path's dozens.

A token-level chunk (GAE, REINFORCE++, ReMax) makes three launches where the torch path makes dozens:
:func:`token_rewards` (the row reward placed, ``− β·KL``, the clip: the chunk's ``token_level_rewards`` and
KL term, both outputs of the run), :func:`scan` (the estimator's recurrence) and :func:`finalize` (whitening,
re-masking, clip); a whitened estimator's statistics pass adds :func:`row_moments` (each row's Σm, Σvm,
Σv²m for the whitening's mean and variance). The row-level statistics
(:class:`advcli.ops.groups.GroupIndex`'s group sums and squared deviations) are one :func:`group_sums`
launch each. ``LAUNCHES`` counts the launches (``benchmarks/kernels.py`` prints them per chunk).

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
``index_add_`` does on the CPU: bit-equal to :meth:`advcli.ops.groups.GroupIndex.sum`'s CPU path.

**Token rewards** (:func:`token_rewards`, one program per row): the reward at the row's last token, its last
mask=1 token (found walking the row's tiles from its end), every token, or the given token-level scores;
then, with the KL on, ``x = clamp(ref − logp, ±c_in)``, ``kl = clamp(f(x), ±c_out)`` with ``f`` = ``−x`` (k1),
``|x|`` (abs), ``0.5·x·x`` (k2), ``(e^x − x) − 1`` (k3 / low_var_kl) — verl ``kl_penalty``, NeMo RL
``calculate_kl``, ROLL and OpenRLHF ``compute_approx_kl``, cited in :mod:`advcli.ops.kl` — ``kl·m``, and
``tlr − β·kl`` (β per chunk or per row), then the token clip. Each step is one IEEE operation in the torch
path's order (clamps by comparison, so a NaN stays NaN as in ``torch.clamp``), so the result and the KL
term are bit-equal to it, except k3's ``e^x``: the device's exp, libdevice's ``expf`` on the GPU (CUDA's,
which torch's CUDA exp calls; ``tl.exp`` would be the approximate ``ex2``), numpy's under the interpreter
(within 2 ulp of torch's CPU exp, another implementation; tested bit-equal with numpy's exp in the torch
path's order).

Written for advcli from the recurrences above (no framework ships these kernels); the frameworks'
loops they reproduce are cited in :mod:`advcli.ops.scans`.
"""
from __future__ import annotations

import collections
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

    return (fused_kernels.scan_kernel, fused_kernels.group_sum_kernel, fused_kernels.token_rewards_kernel,
            fused_kernels.finalize_kernel, fused_kernels.row_moments_kernel)


# launches of each kernel since the process started (benchmarks/kernels.py reads them; a dict update, no wait)
LAUNCHES: collections.Counter = collections.Counter()


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
    scan_kernel = _kernels()[0]
    coef = _coefficients(float(c), float(gamma), x.dtype, x.device)
    v = values.to(x.dtype).contiguous() if values is not None else x
    m = mask.contiguous() if mask is not None else x
    if m.dtype == torch.bool:
        m = m.to(x.dtype)
    LAUNCHES["scan"] += 1
    with _turn():
        scan_kernel[(num_rows,)](x.contiguous(), v, m, out, offsets, coef, MODE=MODES[mode], BLOCK=block,
                                 **_launch_options(x))
    return out


def group_sums(x, order, starts, num_groups: int, mean=None):
    """Per group: Σ x in x's dtype (rows added in ``order``, each group ``starts[g]..starts[g+1]``) and,
    with ``mean`` [G], Σ (x − mean)² in float64 (what :meth:`GroupIndex.std_1d` sums). Returns (sum, ss); ss is
    empty without ``mean``."""
    group_sum_kernel = _kernels()[1]
    if num_groups == 0 or x.numel() == 0:
        return (torch.zeros(num_groups, dtype=x.dtype, device=x.device),
                torch.zeros(num_groups, dtype=torch.float64, device=x.device))
    # every program writes its group's sums (0 for an empty group): no zero-filling launch
    sums = torch.empty(num_groups, dtype=x.dtype, device=x.device)
    ss = torch.empty(num_groups if mean is not None else 0, dtype=torch.float64, device=x.device)
    mu = mean.to(x.dtype).contiguous() if mean is not None else sums
    LAUNCHES["group_sums"] += 1
    with _turn():  # (without mean, ss's pointer is sums': an empty tensor's may be null, which a launch refuses)
        group_sum_kernel[(num_groups,)](x.contiguous(), order.contiguous(), starts.contiguous(), mu, sums,
                                        ss if mean is not None else sums, SQUARES=mean is not None,
                                        **_launch_options(x))
    return sums, ss



PLACES = {"last": 0, "last_valid": 1, "last_valid_or_last": 2, "all": 3, "scores": 4}
KL_CODES = {None: 0, "k1": 1, "abs": 2, "k2": 3, "k3": 4}


def token_rewards(reward, mask, offsets, num_rows: int, place: str, mask_placed: bool = False, kl: str | None = None,
                  logp=None, ref=None, beta=None, input_clamp: float | None = None,
                  output_clamp: float | None = None, kl_mask: bool = True, clip=None, kld_dtype=None,
                  block: int = BLOCK):
    """(token rewards [N], KL term [N] or None) of one chunk in one launch: the placed reward minus β·KL.

    ``reward`` is [B] per row, placed by ``place`` (a key of :data:`PLACES`: the row's last token; its last
    mask=1 token or nowhere; that or its last token when it has none (fixed-width dumps); every token), or
    with ``place="scores"`` the [N] token-level scores themselves; with ``mask_placed`` the result is × mask.
    With ``kl`` (k1, abs, k2, k3): ``x = clamp(ref − logp, ±input_clamp)``, ``kl = clamp(f(x), ±output_clamp)``
    (f as :mod:`advcli.ops.kl`), × mask with ``kl_mask``, and ``tlr − β·kl`` (``beta`` [1] or [B]); then
    ``clip = (lo, hi)`` (either None) clamps the result. Every step is the torch path's operation in its
    order (:func:`advcli.pipeline.tokens.token_chunk`), one rounding each, no fused multiply-add: the same
    bits, except k3's ``e^x``, which is the device's exp: on the GPU libdevice's ``expf`` (CUDA's, the
    one torch's CUDA exp calls), under the interpreter numpy's (within 2 ulp of torch's CPU exp, which
    is another implementation). The math runs in ``mask``'s dtype (the run's); the log-probs are read in
    their own (float32 or float64), the estimate rounded there as torch computes it, then widened.
    ``kld_dtype``: the KL output's dtype (the torch path's: the log-probs' unless × mask promotes it)."""
    dt = mask.dtype
    n = mask.numel()
    tlr = torch.empty(n, dtype=dt, device=mask.device)
    kld = None
    if kl is not None:
        kld = torch.empty(n, dtype=kld_dtype or dt, device=mask.device)
    if n == 0 or num_rows == 0:
        return tlr, kld
    lo, hi = clip if clip else (None, None)
    coef = _coefficients4((input_clamp, output_clamp, lo, hi), mask.device)
    kernel = _kernels()[2]
    LAUNCHES["token_rewards"] += 1
    with _turn():
        kernel[(num_rows,)](reward.contiguous(), (logp if kl else mask).contiguous(),
                            (ref if kl else mask).contiguous(), mask.contiguous(),
                            beta.contiguous() if kl else mask, coef, offsets, tlr, kld if kl else tlr,
                            PLACE=PLACES[place], MASK_PLACED=bool(mask_placed), KL=KL_CODES[kl],
                            IN_CLAMP=input_clamp is not None, OUT_CLAMP=output_clamp is not None,
                            KL_MASK=bool(kl_mask), BETA_PER_ROW=bool(kl) and beta.numel() != 1,
                            CLIP_LO=lo is not None, CLIP_HI=hi is not None,
                            LIBDEVICE_EXP=mask.device.type == "cuda", BLOCK=block, **_launch_options(mask))
    return tlr, kld



def finalize(adv, mask, offsets, num_rows: int, mean=None, rstd=None, scope=None, remask=None, clip=None,
             block: int = BLOCK):
    """The chunk's final advantages in one launch (:func:`advcli.pipeline.tokens.chunk_final`'s steps):
    with ``mean``/``rstd`` ([1], or [S] with ``scope`` [B] each row's scope; float64) the whitening
    ``((x − μ)·rstd)`` in float64 rounded once to ``mask``'s dtype; ``remask`` ``"fill"`` (0 at m = 0,
    ``masked_fill``) or ``"mul"`` (``x·m``, a NaN stays); ``clip = (lo, hi)`` (either None). ``adv`` is of the
    run's dtype, ``mask`` of it or bool; the result is of ``adv``'s dtype. Each step is
    the torch path's operation in its order: bit-equal (mean and 1/std come from the statistics pass,
    as on the torch path; this kernel only applies them)."""
    out = torch.empty(mask.numel(), dtype=adv.dtype, device=mask.device)
    if mask.numel() == 0 or num_rows == 0:
        return out
    lo, hi = clip if clip else (None, None)
    coef = _coefficients4((None, None, lo, hi), mask.device)
    whiten = mean is not None
    kernel = _kernels()[3]
    LAUNCHES["finalize"] += 1
    with _turn():
        kernel[(num_rows,)](adv.contiguous(), mask.contiguous(), mean if whiten else coef, rstd if whiten else coef,
                            scope if scope is not None else offsets, coef, offsets, out, WHITEN=whiten,
                            PER_SCOPE=scope is not None, REMASK={None: 0, "fill": 1, "mul": 2}[remask],
                            CLIP_LO=lo is not None, CLIP_HI=hi is not None, BLOCK=block, **_launch_options(mask))
    return out


def row_moments(values, weights, offsets, num_rows: int, block: int = BLOCK):
    """[3, B] float64: per row Σm, Σv·m, Σv²·m (``m`` the weights) in one launch, the terms formed as
    :meth:`advcli.ops.whiten.MomentSums.row_partials` forms them (``v·m``, ``v·(v·m)`` in float64: the same
    bits), summed per tile in a tree and across tiles in order: not the torch path's left-to-right order, so
    each sum is within ``L·ε₆₄·Σ|term|`` of the exact sum for a row of L tokens (tested against ``math.fsum``).
    These row sums then go into the whitening's exact per-scope accumulation as on the torch path."""
    out = torch.zeros(3, num_rows, dtype=torch.float64, device=values.device)
    if values.numel() == 0 or num_rows == 0:
        return out
    kernel = _kernels()[4]
    LAUNCHES["row_moments"] += 1
    with _turn():
        kernel[(num_rows,)](values.contiguous(), weights.contiguous(), offsets, out, num_rows, BLOCK=block,
                            **_launch_options(values))
    return out

def _coefficients4(values: tuple, device):
    """The clamps as a float64 tensor on the device (0 for an unset one), made once per run's values."""
    key = ("clamps", values, str(device))
    t = _COEFS.get(key)
    if t is None:
        if len(_COEFS) > 64:
            _COEFS.clear()
        t = _COEFS[key] = torch.tensor([0.0 if v is None else float(v) for v in values],
                                       dtype=torch.float64).to(device)
    return t

# --device auto takes the GPU for token-level runs of at least this many tokens: below it the CUDA context's
# start-up (about a second) and the copies outweigh what the fused kernels save (a rule set from the CPU's
# measured costs; the GPU's own figures are not yet measured: docs/performance.md)
AUTO_GPU_MIN_TOKENS = 1 << 24


def auto_device(cuda: bool, kernels, level: str, tokens: int) -> tuple[str, str]:
    """(cpu or cuda, why) for --device auto: ``cuda`` whether a CUDA device is available, ``kernels`` whether
    the fused kernels can run there (triton; a bool, or a callable asked only when the answer matters:
    ``import triton`` costs most of a second, which a CPU-only machine must not pay), ``level`` the
    estimator's (row or token), ``tokens`` the dump's."""
    if not cuda:
        return "cpu", "no CUDA device here"
    if level == "row":
        return "cpu", ("a row-level estimator: its group statistics run on the host's row table, so the GPU "
                       "would only add copies")
    if not (kernels() if callable(kernels) else kernels):
        return "cpu", ("the GPU's fused kernels need triton (pip install 'advcli[gpu]'); without them the GPU "
                       "path is slower than the CPU")
    if tokens < AUTO_GPU_MIN_TOKENS:
        return "cpu", (f"{tokens:,} tokens, under {AUTO_GPU_MIN_TOKENS:,}: the CUDA start-up and copies "
                       "would outweigh the kernels")
    return "cuda", f"a token-level estimator on {tokens:,} tokens (at least {AUTO_GPU_MIN_TOKENS:,})"
