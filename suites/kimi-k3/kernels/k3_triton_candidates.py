"""Example Triton candidates for the Kimi K3 decode kernel families.

These are the kernels the tier runs on a GPU when the scope names no candidate of its own
(a PR's model module replaces them). They are straightforward, not tuned: one program per
row / head / tile, fp32 arithmetic on upcast inputs, outputs rounded to the activation dtype.
The interface is the one described in ``k3_torch_candidates``.

With ``TRITON_INTERPRET=1`` Triton runs these kernels on the CPU (slowly); ``DEVICE`` follows.
"""

from __future__ import annotations

import os
from typing import Callable, Sequence

import torch
import triton
import triton.language as tl

from fasttrack.kernels import defects

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
DEVICE = "cpu" if INTERPRET else "cuda"
NAME = "k3-triton-candidates"
SUPPORTED_DTYPES = {"*": ("fp32", "bf16", "fp16")}


def _precision(dtype: torch.dtype) -> str | None:
    """fp32 dots in IEEE precision (Triton defaults to tf32), others as they are."""
    return "ieee" if dtype == torch.float32 else None


#: Triton's CPU interpreter computes bf16 ``tl.dot`` wrongly (it multiplies the raw bit
#: patterns), so under TRITON_INTERPRET the dot operands are upcast to fp32 first. Products of
#: bf16 values are exact in fp32, so the numerics match an fp32-accumulating bf16 MMA.
UPCAST_DOT = INTERPRET


# --------------------------------------------------------------------------- add + RMSNorm


@triton.jit
def _fused_add_rmsnorm_kernel(
    x_ptr,
    r_ptr,
    w_ptr,
    out_ptr,
    rout_ptr,
    N,
    eps,
    stride_x,
    stride_r,
    stride_o,
    stride_ro,
    BLOCK: tl.constexpr,
):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    r = tl.load(r_ptr + row * stride_r + cols, mask=mask, other=0.0).to(tl.float32)
    z = x + r
    tl.store(rout_ptr + row * stride_ro + cols, z.to(rout_ptr.dtype.element_ty), mask=mask)
    var = tl.sum(z * z, axis=0) / N
    inv = 1.0 / tl.sqrt(var + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * stride_o + cols, (z * inv * w).to(out_ptr.dtype.element_ty), mask=mask)


def fused_add_rmsnorm(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    *,
    out: torch.Tensor | None = None,
    residual_out: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    assert x.dim() == 2 and x.stride(-1) == 1 and residual.stride(-1) == 1
    M, N = x.shape
    out = torch.empty_like(x) if out is None else out
    residual_out = torch.empty_like(residual) if residual_out is None else residual_out
    block = triton.next_power_of_2(N)
    _fused_add_rmsnorm_kernel[(M,)](
        x,
        residual,
        weight.contiguous(),
        out,
        residual_out,
        N,
        eps,
        x.stride(0),
        residual.stride(0),
        out.stride(0),
        residual_out.stride(0),
        BLOCK=block,
        num_warps=min(16, max(4, block // 512)),
    )
    return out, residual_out


# --------------------------------------------------------------------------- KDA decode step


@triton.jit
def _kda_step_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    g_ptr,
    beta_ptr,
    s_ptr,
    o_ptr,
    scale,
    DK,
    DV,
    BK: tl.constexpr,
    BV: tl.constexpr,
):
    bh = tl.program_id(0)
    iv = tl.program_id(1)
    rk = tl.arange(0, BK)
    rv = iv * BV + tl.arange(0, BV)
    mk = rk < DK
    mv = rv < DV
    q = tl.load(q_ptr + bh * DK + rk, mask=mk, other=0.0).to(tl.float32)
    k = tl.load(k_ptr + bh * DK + rk, mask=mk, other=0.0).to(tl.float32)
    g = tl.load(g_ptr + bh * DK + rk, mask=mk, other=0.0).to(tl.float32)
    v = tl.load(v_ptr + bh * DV + rv, mask=mv, other=0.0).to(tl.float32)
    beta = tl.load(beta_ptr + bh).to(tl.float32)
    q = q / tl.sqrt(tl.sum(q * q, axis=0) + 1e-6) * scale
    k = k / tl.sqrt(tl.sum(k * k, axis=0) + 1e-6)
    s_ptrs = s_ptr + bh * DK * DV + rk[:, None] * DV + rv[None, :]
    smask = mk[:, None] & mv[None, :]
    S = tl.load(s_ptrs, mask=smask, other=0.0)
    S = S * tl.exp(g)[:, None]
    kv = tl.sum(k[:, None] * S, axis=0)
    u = beta * (v - kv)
    S = S + k[:, None] * u[None, :]
    o = tl.sum(q[:, None] * S, axis=0)
    tl.store(s_ptrs, S, mask=smask)
    tl.store(o_ptr + bh * DV + rv, o.to(o_ptr.dtype.element_ty), mask=mv)


def kda_decode_step(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    state: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    B, H, DK = q.shape
    DV = v.shape[-1]
    assert state.is_contiguous() and state.dtype == torch.float32
    q, k, v, g, beta = (t.contiguous() for t in (q, k, v, g, beta))
    o = torch.empty(B, H, DV, device=q.device, dtype=q.dtype)
    bv = min(32, triton.next_power_of_2(DV))
    _kda_step_kernel[(B * H, triton.cdiv(DV, bv))](
        q,
        k,
        v,
        g,
        beta,
        state,
        o,
        scale,
        DK,
        DV,
        BK=triton.next_power_of_2(DK),
        BV=bv,
        num_warps=4,
    )
    return o


# --------------------------------------------------------------------------- DCP partial attention + combine


@triton.jit
def _partial_attn_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    lens_ptr,
    out_ptr,
    lse_ptr,
    scale,
    H,
    HKV,
    D,
    DV,
    S_LOC,
    G: tl.constexpr,
    BG: tl.constexpr,
    BN: tl.constexpr,
    BD: tl.constexpr,
    BDV: tl.constexpr,
    PRECISION: tl.constexpr,
    UPCAST: tl.constexpr,
):
    b = tl.program_id(0)
    kvh = tl.program_id(1)
    rg = tl.arange(0, BG)
    rd = tl.arange(0, BD)
    rdv = tl.arange(0, BDV)
    rn = tl.arange(0, BN)
    mg = rg < G
    heads = kvh * G + rg
    q = tl.load(q_ptr + (b * H + heads)[:, None] * D + rd[None, :], mask=mg[:, None] & (rd[None, :] < D), other=0.0)
    if UPCAST:
        q = q.to(tl.float32)
    L = tl.load(lens_ptr + b)
    m_i = tl.full([BG], float("-inf"), tl.float32)
    l_i = tl.zeros([BG], tl.float32)
    acc = tl.zeros([BG, BDV], tl.float32)
    for start in range(0, L, BN):
        n = start + rn
        mn = n < L
        kt = tl.load(
            k_ptr + ((b * S_LOC + n) * HKV + kvh)[:, None] * D + rd[None, :],
            mask=mn[:, None] & (rd[None, :] < D),
            other=0.0,
        )
        if UPCAST:
            kt = kt.to(tl.float32)
        s = tl.dot(q, tl.trans(kt), input_precision=PRECISION) * scale
        s = tl.where(mn[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        # while every score so far is -inf, subtract 0 instead (exp(-inf - -inf) would be NaN)
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp(m_i - m_safe)
        p = tl.exp(s - m_safe[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        vt = tl.load(
            v_ptr + ((b * S_LOC + n) * HKV + kvh)[:, None] * DV + rdv[None, :],
            mask=mn[:, None] & (rdv[None, :] < DV),
            other=0.0,
        )
        if UPCAST:
            vt = vt.to(tl.float32)
        acc = acc * alpha[:, None] + tl.dot(p.to(vt.dtype), vt, input_precision=PRECISION)
        m_i = m_new
    # l_i == 0: no valid token (or only -inf scores) on this rank. NaN must stay NaN.
    nonempty = l_i != 0
    out = tl.where(nonempty[:, None], acc / tl.where(nonempty, l_i, 1.0)[:, None], 0.0)
    lse = tl.where(nonempty, m_i + tl.log(tl.where(nonempty, l_i, 1.0)), float("-inf"))
    tl.store(out_ptr + (b * H + heads)[:, None] * DV + rdv[None, :], out, mask=mg[:, None] & (rdv[None, :] < DV))
    tl.store(lse_ptr + b * H + heads, lse, mask=mg)


def dcp_partial_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, lens: torch.Tensor, scale: float
) -> tuple[torch.Tensor, torch.Tensor]:
    B, H, D = q.shape
    S_loc, hkv = k.shape[1], k.shape[2]
    DV = v.shape[-1]
    G = H // hkv
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    lens = lens.to(device=q.device, dtype=torch.int32).contiguous()
    out = torch.empty(B, H, DV, device=q.device, dtype=torch.float32)
    lse = torch.empty(B, H, device=q.device, dtype=torch.float32)
    _partial_attn_kernel[(B, hkv)](
        q,
        k,
        v,
        lens,
        out,
        lse,
        scale,
        H,
        hkv,
        D,
        DV,
        S_loc,
        G=G,
        BG=max(16, triton.next_power_of_2(G)),
        BN=32 if q.dtype == torch.float32 else 64,
        BD=triton.next_power_of_2(D),
        BDV=triton.next_power_of_2(DV),
        PRECISION=_precision(q.dtype),
        UPCAST=UPCAST_DOT,
        num_warps=4,
    )
    return out, lse


@triton.jit
def _combine_kernel(out_ptr, lse_ptr, res_ptr, BH, DV, RANKS_USED, BD: tl.constexpr):
    bh = tl.program_id(0)
    rd = tl.program_id(1) * BD + tl.arange(0, BD)
    md = rd < DV
    m = tl.load(lse_ptr + bh)
    for r in range(1, RANKS_USED):
        m = tl.maximum(m, tl.load(lse_ptr + r * BH + bh))
    den = tl.zeros([1], tl.float32)
    acc = tl.zeros([BD], tl.float32)
    for r in range(0, RANKS_USED):
        w = tl.exp(tl.load(lse_ptr + r * BH + bh) - m)
        den += w
        acc += w * tl.load(out_ptr + (r * BH + bh) * DV + rd, mask=md, other=0.0)
    tl.store(res_ptr + bh * DV + rd, (acc / den).to(res_ptr.dtype.element_ty), mask=md)


def dcp_combine(outs: torch.Tensor, lses: torch.Tensor, out_dtype: torch.dtype) -> torch.Tensor:
    """Combine per-rank partial attention by log-sum-exp: sum_r exp(lse_r - lse) * out_r."""
    R, B, H, DV = outs.shape
    outs, lses = outs.contiguous(), lses.contiguous()
    used = R - 1 if defects.active("dcp-off-by-one") else R
    res = torch.empty(B, H, DV, device=outs.device, dtype=out_dtype)
    bd = min(128, triton.next_power_of_2(DV))
    _combine_kernel[(B * H, triton.cdiv(DV, bd))](outs, lses, res, B * H, DV, used, BD=bd, num_warps=1)
    return res


# --------------------------------------------------------------------------- router + latent projection shard


@triton.jit
def _skinny_gemm_kernel(
    x_ptr,
    w_ptr,
    y_ptr,
    M,
    N,
    K,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
    PRECISION: tl.constexpr,
    UPCAST: tl.constexpr,
):
    pid_n = tl.program_id(0)
    pid_m = tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros([BM, BN], tl.float32)
    for k0 in range(0, K, BK):
        kk = k0 + rk
        a = tl.load(x_ptr + rm[:, None] * K + kk[None, :], mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        b = tl.load(w_ptr + rn[:, None] * K + kk[None, :], mask=(rn[:, None] < N) & (kk[None, :] < K), other=0.0)
        if UPCAST:
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        acc += tl.dot(a, tl.trans(b), input_precision=PRECISION)
    tl.store(
        y_ptr + rm[:, None] * N + rn[None, :],
        acc.to(y_ptr.dtype.element_ty),
        mask=(rm[:, None] < M) & (rn[None, :] < N),
    )


def _gemm(x: torch.Tensor, w: torch.Tensor, out_dtype: torch.dtype, out: torch.Tensor | None = None) -> torch.Tensor:
    M, K = x.shape
    N = w.shape[0]
    x, w = x.contiguous(), w.contiguous()
    y = torch.empty(M, N, device=x.device, dtype=out_dtype) if out is None else out
    bm = 16 if M <= 16 else (32 if M <= 32 else 64)
    bn = 32 if x.dtype == torch.float32 else 64
    bk = 64 if x.dtype == torch.float32 else 128
    _skinny_gemm_kernel[(triton.cdiv(N, bn), triton.cdiv(M, bm))](
        x, w, y, M, N, K, BM=bm, BN=bn, BK=bk, PRECISION=_precision(x.dtype), UPCAST=UPCAST_DOT, num_warps=4
    )
    return y


def router_latent_shard(x: torch.Tensor, w_shard: torch.Tensor) -> torch.Tensor:
    """One TP rank's share of [router | latent] rows, in one GEMM, fp32 output."""
    return _gemm(x, w_shard, torch.float32)


def router_latent_gather(
    shards: Sequence[torch.Tensor], num_experts: int, out_dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """The exchange (simulated: a concatenation), then fp32 sigmoid scores and the latent."""
    y = torch.cat(list(shards), dim=-1)
    return torch.sigmoid(y[:, :num_experts]), y[:, num_experts:].to(out_dtype)


# --------------------------------------------------------------------------- side-stream pair


def shared_expert_side_stream(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    w_shared: torch.Tensor,
    *,
    h_buf: torch.Tensor,
    side_stream: "torch.cuda.Stream",
    before_producer: Callable[["torch.cuda.Stream"], None] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Producer (add + RMSNorm into ``h_buf``) on the current stream; the shared-expert
    projection reads ``h_buf`` on ``side_stream`` after waiting for the producer's event."""
    main = torch.cuda.current_stream(x.device)
    if before_producer is not None:
        before_producer(main)
    _, r = fused_add_rmsnorm(x, residual, weight, eps, out=h_buf)
    produced = torch.cuda.Event()
    produced.record(main)
    if not defects.active("race-read-before-write"):
        side_stream.wait_event(produced)
    with torch.cuda.stream(side_stream):
        y = _gemm(h_buf, w_shared, x.dtype)
    consumed = torch.cuda.Event()
    consumed.record(side_stream)
    main.wait_event(consumed)
    y.record_stream(main)
    return y, r
