"""Adapter from the demo decode backend's fused ops (``fasttrack_demo_plugin.ops``) to this
suite's interface. The plugin's planted ``numerics-batch`` defect (``FASTTRACK_DEMO_DEFECT``)
is applied here the way the plugin's op applies it: at the tuned batch size the split-K down
projection accumulates into a persistent workspace that is never zeroed, so every call after
the first at that shape adds the previous call's output. The weights are packed into oneDNN
GEMM handles for the call, as the plugin packs its own (so the GEMMs under test are the ones
the engine runs; where oneDNN cannot multiply a dtype, both fall back to ``torch.mm``). In
float32 the MLP runs the native kernel the engine's fast path runs
(``fasttrack_demo::fused_decode_mlp_f32``) when it is built, and the Python op otherwise
(and under the defect, as in the engine).
"""

from __future__ import annotations

import os

import torch

from fasttrack_demo_plugin.ops import (
    fused_decode_mlp_reference,
    handle,
    load_native,
    prepack,
    rms_norm_add,
    split_k_for_batch,
    unpack,
)
from fasttrack_demo_plugin.settings import DEFECT_ENV, NUMERICS_BATCH

DEVICE = "cpu"
NAME = "fasttrack-demo-plugin ops"
SUPPORTED_DTYPES = {"*": ("fp32", "bf16")}

_WORKSPACES: dict[tuple, torch.Tensor] = {}
"""The ``numerics-batch`` defect's never-zeroed workspaces, by shape and dtype."""


def fused_add_rmsnorm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    return rms_norm_add(x, residual, weight, eps)


def fused_decode_mlp(
    attn_out: torch.Tensor,
    residual: torch.Tensor,
    w_o_t: torch.Tensor,
    norm_weight: torch.Tensor,
    w_gate_up_t: torch.Tensor,
    w_down_t: torch.Tensor,
    eps: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    batch = attn_out.shape[0]
    workspace = None
    if os.environ.get(DEFECT_ENV) == "numerics-batch" and batch == NUMERICS_BATCH:
        key = (batch, w_down_t.shape[1], attn_out.dtype)
        workspace = _WORKSPACES.get(key)
        if workspace is None:
            workspace = _WORKSPACES[key] = attn_out.new_zeros(batch, w_down_t.shape[1])
    split_k = split_k_for_batch(batch)
    prepack(w_o_t)
    prepack(w_gate_up_t)
    prepack(w_down_t, (1, split_k))
    try:
        if workspace is None and attn_out.dtype == torch.float32 and load_native():
            return torch.ops.fasttrack_demo.fused_decode_mlp_f32(
                attn_out,
                residual,
                w_o_t,
                handle(w_o_t),
                norm_weight,
                w_gate_up_t,
                handle(w_gate_up_t),
                w_down_t,
                handle(w_down_t),
                eps,
                split_k,
            )
        return fused_decode_mlp_reference(
            attn_out, residual, w_o_t, norm_weight, w_gate_up_t, w_down_t, eps, split_k, workspace
        )
    finally:
        unpack(w_o_t, w_gate_up_t, w_down_t)
