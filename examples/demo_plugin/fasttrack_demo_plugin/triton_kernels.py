"""Triton kernels of the demo decode backend's CUDA fast path (needs only torch and triton).

- ``fasttrack_demo_fused_add_rmsnorm``: residual add + RMSNorm in one pass, the kernel that replaces
  vLLM's RMSNorm in every decoder layer on a fast decode step. Its first row's program of the first
  layer's launch also counts the step in a device counter (:data:`COUNT_FAST`): the counter is
  incremented by the kernel that runs, so it counts CUDA-graph replays, not graph captures.
- ``fasttrack_demo_stock_step``: one tiny kernel per candidate step on the stock path; it counts
  the step in :data:`COUNT_STOCK` (the candidate's stock-path marker under CUDA graphs).

The norm follows the order of operations and roundings of the stock path it replaces: vLLM's native
``fused_add_rms_norm`` / ``rms_norm`` (``vllm.ir.ops``) as inductor compiles it. The residual is added in
float32 and stored rounded to the activation dtype; the unrounded float32 sum is normalized
(``x * rsqrt(mean(x**2) + eps)``) and multiplied by the weight in float32 (inductor's Triton code keeps the
op's ``x.to(weight.dtype)`` in float32, unlike eager torch), and the product is rounded once, at the store.
Only the float32 reduction order of the sum of squares is the kernel's own.

Planted defects read a small device tensor (``flags``), so a test can switch them while an engine
runs, also inside captured CUDA graphs (the host writes the tensor; the graph reads it on replay):

- ``numerics-from-batch``: from ``flags[1]`` rows on, the sum of squares covers only the first quarter
  of each row (a split reduction that drops three partial sums): the norm's scale is wrong.
- ``atomic-order``: the sum of squares is accumulated with float32 atomics in whatever order the
  threads arrive, so the result changes in its last bits from run to run.
- ``slow-batch``: at exactly ``flags[1]`` rows, the counting program busy-waits ``flags[2]`` ns on the
  GPU's global timer (a slowdown of a few percent of a decode step).
- ``context-fallback``: when a request of the batch is longer than ``flags[1]`` tokens, the kernel takes
  its generic branch and the step is not counted as fast: a silent fallback no host code sees.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

COUNT_FAST = 0
"""Device counter slot: fast decode steps (counted by the first layer's norm kernel)."""
COUNT_STOCK = 1
"""Device counter slot: candidate steps on the stock path."""
COUNT_SLOTS = 4

FLAG_SLOTS = 4
"""``flags``: [defect code, parameter a, parameter b, reserved] (int64)."""
DEFECT_NONE = 0
DEFECT_NUMERICS = 1
DEFECT_ATOMIC = 2
DEFECT_SLOW = 3
DEFECT_CONTEXT = 4
DEVICE_DEFECTS = {
    "numerics-from-batch": DEFECT_NUMERICS,
    "atomic-order": DEFECT_ATOMIC,
    "slow-batch": DEFECT_SLOW,
    "context-fallback": DEFECT_CONTEXT,
}
"""Planted defects the kernels apply, by name (``graph-stale`` is the model's, at capture time)."""


@triton.jit
def _globaltimer():
    return tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False, pack=1)


@triton.jit
def fasttrack_demo_fused_add_rmsnorm(
    X,
    R,
    W,
    OUT,
    RES_OUT,
    COUNTS,
    FLAGS,
    SEQ_LENS,
    SCRATCH,
    n_rows,
    n_cols,
    stride_x,
    stride_r,
    stride_o,
    stride_ro,
    eps,
    HAS_RES: tl.constexpr,
    COUNT: tl.constexpr,
    HAS_SEQ: tl.constexpr,
    DEFECTS: tl.constexpr,
    BLOCK: tl.constexpr,
):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(X + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    if HAS_RES:
        r = tl.load(R + row * stride_r + cols, mask=mask, other=0.0).to(tl.float32)
        # as the stock path (vLLM's native fused_add_rms_norm, compiled by inductor): the new residual is stored
        # rounded to the activation dtype, and the norm normalizes the unrounded float32 sum
        summed = x + r
        tl.store(RES_OUT + row * stride_ro + cols, summed.to(RES_OUT.dtype.element_ty), mask=mask)
        x = summed
    sq = x * x
    defect = 0
    param_a = 0
    if DEFECTS:
        defect = tl.load(FLAGS)
        param_a = tl.load(FLAGS + 1)
    if defect == 2:  # atomic-order: float32 atomics in arrival order
        tl.atomic_add(SCRATCH + row + cols * 0, sq, mask=mask)
        tl.debug_barrier()
        ss = tl.load(SCRATCH + row)
        tl.debug_barrier()
        tl.store(SCRATCH + row, 0.0)
    elif (defect == 1) & (n_rows >= param_a):  # numerics-from-batch: a quarter of the partial sums
        ss = tl.sum(tl.where(cols < n_cols // 4, sq, 0.0), axis=0) * 4.0
    else:
        ss = tl.sum(sq, axis=0)
    # one rsqrt, as inductor compiles the stock op's torch.rsqrt (it calls libdevice.rsqrt, which Triton's CPU
    # interpreter cannot run; whether the two round alike on the GPU is not yet measured)
    rstd = tl.math.rsqrt(ss / n_cols + eps)
    w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
    # the stock op's ``x.to(weight.dtype) * weight`` as inductor compiles it: its Triton code keeps the cast in
    # float32 (no rounding before the weight multiply), so the output is rounded once, at the store
    y = x * rstd * w
    tl.store(OUT + row * stride_o + cols, y.to(OUT.dtype.element_ty), mask=mask)
    if COUNT:
        if row == 0:
            fast = 1
            if HAS_SEQ:
                if defect == 4:  # context-fallback: the generic branch above a context length, uncounted
                    rows_idx = tl.arange(0, 64)
                    lens = tl.load(SEQ_LENS + rows_idx, mask=rows_idx < n_rows, other=0)
                    if tl.max(lens, axis=0) > param_a:
                        fast = 0
            if (defect == 3) & (n_rows == param_a):  # slow-batch: busy-wait on the global timer
                delay = tl.load(FLAGS + 2)
                start = _globaltimer()
                while _globaltimer() - start < delay:
                    pass
            tl.store(COUNTS, tl.load(COUNTS) + fast)


@triton.jit
def fasttrack_demo_stock_step(COUNTS, SLOT: tl.constexpr):
    tl.store(COUNTS + SLOT, tl.load(COUNTS + SLOT) + 1)


def fused_add_rmsnorm(
    x: torch.Tensor,
    residual: torch.Tensor | None,
    weight: torch.Tensor,
    eps: float,
    *,
    counts: torch.Tensor | None = None,
    flags: torch.Tensor | None = None,
    seq_lens: torch.Tensor | None = None,
    scratch: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(norm(x + residual) * weight, x + residual)`` (``residual`` None: ``(norm(x) * weight, x)``).

    ``counts``: count this launch as a fast step in ``counts[COUNT_FAST]`` (the first layer's call only);
    ``flags``: the planted-defect tensor (None: no defect code is compiled in); ``seq_lens``: the
    batch's sequence lengths (``context-fallback``); ``scratch``: a zeroed float32 tensor of at least
    ``x.shape[0]`` elements (``atomic-order``)."""
    if x.dim() != 2:
        raise ValueError(f"fused_add_rmsnorm takes (tokens, hidden) activations, got shape {tuple(x.shape)}")
    n_rows, n_cols = x.shape
    out = torch.empty_like(x)
    res_out = torch.empty_like(x) if residual is not None else x
    if n_rows == 0:
        return out, res_out
    block = triton.next_power_of_2(n_cols)
    dummy = flags if flags is not None else (counts if counts is not None else x)
    if flags is not None and scratch is None:
        raise ValueError("fused_add_rmsnorm: a defect flags tensor needs a scratch tensor")
    fasttrack_demo_fused_add_rmsnorm[(n_rows,)](
        x,
        residual if residual is not None else x,
        weight,
        out,
        res_out,
        counts if counts is not None else dummy,
        flags if flags is not None else dummy,
        seq_lens if seq_lens is not None else dummy,
        scratch if scratch is not None else dummy,
        n_rows,
        n_cols,
        x.stride(0),
        residual.stride(0) if residual is not None else 0,
        out.stride(0),
        res_out.stride(0),
        eps,
        HAS_RES=residual is not None,
        COUNT=counts is not None,
        HAS_SEQ=seq_lens is not None,
        DEFECTS=flags is not None,
        BLOCK=block,
        # at least 4 warps: the atomic-order defect's atomics then race across warps, as in a real split reduction
        num_warps=max(4, min(16, block // 256)),
    )
    return out, res_out


def count_stock_step(counts: torch.Tensor) -> None:
    """Count one candidate step on the stock path in ``counts[COUNT_STOCK]``."""
    fasttrack_demo_stock_step[(1,)](counts, SLOT=COUNT_STOCK)
