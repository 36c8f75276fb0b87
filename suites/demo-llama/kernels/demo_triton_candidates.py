"""Adapter from the demo decode backend's CUDA fast path (``fasttrack_demo_plugin.triton_kernels``) to this
suite's interface: the Triton fused add + RMSNorm the engine's fast decode steps run, alone and inside the
post-attention block as the fast step composes it (output projection, fused add + RMSNorm, gate/up
projection, SiLU-and-mul, down projection). The kernel defects of the CUDA path
(``FASTTRACK_DEMO_DEFECT``: ``numerics-from-batch``, ``atomic-order``) reach the kernel through its device
flags, as in the engine. Needs only torch and triton (no vLLM).
"""

from __future__ import annotations

import os

import torch
import torch.nn.functional as F

from fasttrack_demo_plugin import triton_kernels as tk
from fasttrack_demo_plugin.cuda_path import device_flags
from fasttrack_demo_plugin.settings import DEFECT_ENV

DEVICE = "cuda"
NAME = "fasttrack-demo-plugin Triton kernels (CUDA fast path)"
SUPPORTED_DTYPES = {"*": ("fp32", "bf16")}

_STATE: dict[str, torch.Tensor] = {}


def _flags(device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    if "flags" not in _STATE:
        defect = os.environ.get(DEFECT_ENV, "").strip() or None
        _STATE["flags"] = torch.tensor(device_flags(defect), dtype=torch.int64, device=device)
        _STATE["scratch"] = torch.zeros(64, dtype=torch.float32, device=device)
    return _STATE["flags"], _STATE["scratch"]


def fused_add_rmsnorm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    back = x.device
    cuda = torch.device("cuda")
    flags, scratch = _flags(cuda)
    out, res = tk.fused_add_rmsnorm(x.to(cuda), residual.to(cuda), weight.to(cuda), eps, flags=flags, scratch=scratch)
    return out.to(back), res.to(back)


def fused_decode_mlp(
    attn_out: torch.Tensor,
    residual: torch.Tensor,
    w_o_t: torch.Tensor,
    norm_weight: torch.Tensor,
    w_gate_up_t: torch.Tensor,
    w_down_t: torch.Tensor,
    eps: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The post-attention block around the Triton fused add + RMSNorm, on the GPU. The fast step's GEMMs and
    SiLU-and-mul are vLLM's own (not the PR's kernels), so they run here in float32 on the rounded inputs; the
    norm runs in the activation dtype on the output projection's result rounded to it, as in the engine."""
    back, dtype = attn_out.device, attn_out.dtype
    cuda = torch.device("cuda")
    a, r, wo, nw, wgu, wd = (t.to(cuda) for t in (attn_out, residual, w_o_t, norm_weight, w_gate_up_t, w_down_t))
    hidden = (a.float() @ wo.float()).to(dtype)
    normed, new_residual = fused_add_rmsnorm(hidden, r, nw, eps)
    gate_up = normed.to(cuda).float() @ wgu.float()
    inter = gate_up.shape[-1] // 2
    act = F.silu(gate_up[:, :inter]) * gate_up[:, inter:]
    return (act @ wd.float()).to(dtype).to(back), new_residual.to(back)
