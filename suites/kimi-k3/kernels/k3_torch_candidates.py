"""Example candidates for the K3 kernel families in plain PyTorch (fp32 math), any device.

They mirror the Triton candidates' interface and arithmetic (inputs upcast to fp32, outputs
rounded to the activation dtype) so that a host without a GPU exercises the whole numerics
harness, planted defects included. A candidate module for this suite defines:

- ``fused_add_rmsnorm(x, residual, weight, eps, *, out=None, residual_out=None) -> (out, residual_out)``
- ``kda_decode_step(q, k, v, g, beta, state, scale) -> o`` (updates ``state`` in place)
- ``dcp_partial_attention(q, k, v, lens, scale) -> (out fp32, lse fp32)``
- ``dcp_combine(outs, lses, out_dtype) -> out``
- ``router_latent_shard(x, w_shard) -> fp32 logits of the shard``
- ``router_latent_gather(shards, num_experts, out_dtype) -> (scores fp32, latent)``
- ``shared_expert_side_stream(x, residual, weight, eps, w_shared, *, h_buf, side_stream, before_producer=None)
  -> (y, residual_out)`` (CUDA)
- ``DEVICE`` ('cuda', 'cpu' or 'any') and optionally ``SUPPORTED_DTYPES``.
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch

from fasttrack.kernels import defects

DEVICE = "any"
NAME = "k3-torch-candidates"
SUPPORTED_DTYPES = {"*": ("fp32", "bf16", "fp16")}


def fused_add_rmsnorm(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    *,
    out: torch.Tensor | None = None,
    residual_out: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    z = x.float() + residual.float()
    inv = torch.rsqrt(z.pow(2).mean(-1, keepdim=True) + eps)
    y = (z * inv * weight.float()).to(x.dtype)
    r = z.to(x.dtype)
    if out is not None:
        out.copy_(y)
        y = out
    if residual_out is not None:
        residual_out.copy_(r)
        r = residual_out
    return y, r


def _l2norm(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    return x / torch.sqrt((x * x).sum(-1, keepdim=True) + eps)


def kda_decode_step(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    state: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    qf = _l2norm(q.float()) * scale
    kf = _l2norm(k.float())
    S = state * torch.exp(g.float()).unsqueeze(-1)
    kv = torch.einsum("bhk,bhkv->bhv", kf, S)
    u = beta.float().unsqueeze(-1) * (v.float() - kv)
    S = S + kf.unsqueeze(-1) * u.unsqueeze(-2)
    state.copy_(S)
    return torch.einsum("bhk,bhkv->bhv", qf, S).to(q.dtype)


def dcp_partial_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, lens: torch.Tensor, scale: float
) -> tuple[torch.Tensor, torch.Tensor]:
    B, H, D = q.shape
    S, hkv = k.shape[1], k.shape[2]
    group = H // hkv
    valid = torch.arange(S, device=q.device)[None, :] < lens.to(q.device)[:, None]
    kk = k.float().masked_fill(~valid[:, :, None, None], 0.0)
    vv = v.float().masked_fill(~valid[:, :, None, None], 0.0)
    s = torch.einsum("bngd,bsnd->bngs", q.float().reshape(B, hkv, group, D), kk) * scale
    s = s.masked_fill(~valid[:, None, None, :], float("-inf"))
    m = s.amax(-1, keepdim=True)
    m = torch.where(torch.isinf(m) & (m < 0), torch.zeros_like(m), m)
    p = torch.exp(s - m)
    denom = p.sum(-1)
    o = torch.einsum("bngs,bsnd->bngd", p, vv)
    empty = denom == 0
    out = torch.where(empty[..., None], torch.zeros_like(o), o / denom[..., None])
    lse = torch.where(empty, torch.full_like(denom, float("-inf")), m.squeeze(-1) + torch.log(denom))
    return out.reshape(B, H, -1), lse.reshape(B, H)


def dcp_combine(outs: torch.Tensor, lses: torch.Tensor, out_dtype: torch.dtype) -> torch.Tensor:
    """Combine per-rank partial attention by log-sum-exp: sum_r exp(lse_r - lse) * out_r."""
    ranks = outs.shape[0]
    used = ranks - 1 if defects.active("dcp-off-by-one") else ranks
    m = torch.full_like(lses[0], float("-inf"))
    for r in range(used):
        m = torch.maximum(m, lses[r])
    num = torch.zeros_like(outs[0])
    den = torch.zeros_like(lses[0])
    for r in range(used):
        w = torch.exp(lses[r] - m)
        num = num + w.unsqueeze(-1) * outs[r]
        den = den + w
    return (num / den.unsqueeze(-1)).to(out_dtype)


def router_latent_shard(x: torch.Tensor, w_shard: torch.Tensor) -> torch.Tensor:
    return x.float() @ w_shard.float().T


def router_latent_gather(
    shards: Sequence[torch.Tensor], num_experts: int, out_dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    y = torch.cat(list(shards), dim=-1)
    return torch.sigmoid(y[:, :num_experts]), y[:, num_experts:].to(out_dtype)


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
    """Producer (add + RMSNorm into ``h_buf``) on the current stream, consumer on ``side_stream``."""
    main = torch.cuda.current_stream(x.device)
    if before_producer is not None:
        before_producer(main)
    _, r = fused_add_rmsnorm(x, residual, weight, eps, out=h_buf)
    produced = torch.cuda.Event()
    produced.record(main)
    if not defects.active("race-read-before-write"):
        side_stream.wait_event(produced)
    with torch.cuda.stream(side_stream):
        y = (h_buf.float() @ w_shared.float().T).to(x.dtype)
    consumed = torch.cuda.Event()
    consumed.record(side_stream)
    main.wait_event(consumed)
    y.record_stream(main)
    return y, r
