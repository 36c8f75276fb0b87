"""Reference implementations of the Kimi K3 decode kernel families, in float64 PyTorch.

Each reference is the mathematical definition, computed in float64 on whatever device its
inputs are on (CPU included), from the candidate's own (dtype-rounded) inputs. They are
written for clarity, not speed: the KDA reference is the sequential recurrence, the DCP
reference is attention over the whole (unsharded) context, the router reference is the
full, unsharded projection.
"""

from __future__ import annotations

import torch

F64 = torch.float64


def fused_add_rmsnorm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """out = RMSNorm(x + residual) * weight; also returns the new residual x + residual."""
    r = x.to(F64) + residual.to(F64)
    var = r.pow(2).mean(-1, keepdim=True)
    return r * torch.rsqrt(var + eps) * weight.to(F64), r


def l2norm(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    return x / torch.sqrt((x * x).sum(-1, keepdim=True) + eps)


def kda_recurrence(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    state0: torch.Tensor,
    scale: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Kimi Delta Attention (gated delta rule with per-channel decay), step by step.

    Shapes: q, k [T, B, H, K]; v [T, B, H, V]; g (log decay, <= 0) [T, B, H, K];
    beta [T, B, H]; state0 [B, H, K, V]. For each step t, with q and k L2-normalised::

        S = diag(exp(g_t)) S
        S = S + beta_t * k_t (v_t - k_t^T S)^T
        o_t = scale * q_t^T S

    Returns o [T, B, H, V] and the final state [B, H, K, V], in float64.
    """
    S = state0.to(F64).clone()
    outs = []
    for t in range(q.shape[0]):
        qt = l2norm(q[t].to(F64)) * scale
        kt = l2norm(k[t].to(F64))
        S = S * torch.exp(g[t].to(F64)).unsqueeze(-1)
        kv = torch.einsum("bhk,bhkv->bhv", kt, S)
        u = beta[t].to(F64).unsqueeze(-1) * (v[t].to(F64) - kv)
        S = S + kt.unsqueeze(-1) * u.unsqueeze(-2)
        outs.append(torch.einsum("bhk,bhkv->bhv", qt, S))
    return torch.stack(outs), S


def decode_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, lens: torch.Tensor, scale: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Full decode attention (one query token per sequence), grouped-query.

    q [B, H, D]; k [B, S, Hkv, D]; v [B, S, Hkv, Dv]; lens [B] valid tokens per sequence
    (slots at or past ``lens`` are padding and may hold anything, NaN included).
    Returns out [B, H, Dv] and the log-sum-exp of the scaled scores [B, H], in float64.
    """
    B, H, D = q.shape
    S, hkv = k.shape[1], k.shape[2]
    group = H // hkv
    pos = torch.arange(S, device=q.device)
    valid = pos[None, :] < lens.to(q.device)[:, None]  # [B, S]
    kk = k.to(F64).masked_fill(~valid[:, :, None, None], 0.0)
    vv = v.to(F64).masked_fill(~valid[:, :, None, None], 0.0)
    qg = q.to(F64).reshape(B, hkv, group, D)
    scores = torch.einsum("bngd,bsnd->bngs", qg, kk) * scale
    scores = scores.masked_fill(~valid[:, None, None, :], float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    p = torch.exp(scores - lse[..., None])
    out = torch.einsum("bngs,bsnd->bngd", p, vv)
    return out.reshape(B, H, -1), lse.reshape(B, H)


def dcp_shard(
    k: torch.Tensor, v: torch.Tensor, lens: torch.Tensor, world: int, interleave: int = 1
) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """Split a KV cache across ``world`` decode-context-parallel ranks, as vLLM's DCP stores it.

    Token t lives on rank (t // interleave) % world. Returns, per rank, its local k, v
    (padded to the longest local length, padding poisoned with NaN) and local lengths.
    """
    B, S = k.shape[0], k.shape[1]
    pos = torch.arange(S)
    owner = (pos // interleave) % world
    out = []
    for r in range(world):
        idx = torch.nonzero(owner == r).reshape(-1)
        local_lens = torch.stack([(idx < int(n)).sum() for n in lens.cpu()]).to(torch.int32)
        n_max = max(int(local_lens.max()), 1)
        kl = torch.full((B, n_max, *k.shape[2:]), float("nan"), dtype=k.dtype, device=k.device)
        vl = torch.full((B, n_max, *v.shape[2:]), float("nan"), dtype=v.dtype, device=v.device)
        take = idx[:n_max].to(k.device)
        kl[:, : take.numel()] = k[:, take]
        vl[:, : take.numel()] = v[:, take]
        for b in range(B):  # slots past the sequence's own length are padding: poison them
            kl[b, int(local_lens[b]) :] = float("nan")
            vl[b, int(local_lens[b]) :] = float("nan")
        out.append((kl, vl, local_lens.to(k.device)))
    return out


def router_latent(x: torch.Tensor, w_router: torch.Tensor, w_latent: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Router scores (sigmoid of the logits, as Kimi K2 scores experts) and the latent projection."""
    x64 = x.to(F64)
    logits = x64 @ w_router.to(F64).T
    return torch.sigmoid(logits), x64 @ w_latent.to(F64).T


def shared_expert(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float, w_shared: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The side-stream pair: normalised hidden state (producer), then its projection (consumer).

    The normalised state is handed between the two kernels in the activation dtype, so the
    reference rounds it to ``x.dtype`` there too.
    """
    h, r = fused_add_rmsnorm(x, residual, weight, eps)
    h = h.to(torch.float32).to(x.dtype).to(F64)
    return h @ w_shared.to(F64).T, r
