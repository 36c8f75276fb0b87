"""Ops of the demo decode backend, registered with ``torch.library`` under the
``fasttrack_demo`` namespace so profiler traces name them.

Optimized-path ops (path markers), each used only on fast decode steps, which the
model's eager outer ``forward`` runs layer by layer (see ``model.py``):

- ``fasttrack_demo::fused_decode_qkv_rope``: residual add + input RMSNorm + QKV
  projection + rotary embedding.
- ``fasttrack_demo::fused_decode_mlp``: attention output projection + residual
  add + post-attention RMSNorm + gate/up projection + SiLU-and-mul + down
  projection, with a split-K down projection at batch 3 (its shape table).
- ``fasttrack_demo::fused_decode_logits``: the output layer on fast steps.

In float32 (the demo's dtype) the fast path calls the same two blocks as native CPU
kernels, ``fasttrack_demo::fused_decode_qkv_rope_f32`` and
``fasttrack_demo::fused_decode_mlp_f32`` (``csrc/fused_decode.cpp``, built with
torch's C++ extension loader the first time the backend is enabled, about 20 s, and
cached): one dispatcher call per block instead of a Python body of eight or so ops.
They are path markers too. The Python implementations stay the reference (the
kernel suite and ``tests/demo`` hold the native ones to them) and serve every other
dtype, a host that cannot build the extension (logged once at startup), and the
``numerics-batch`` defect.

Stock-path marker of the candidate:

- ``fasttrack_demo::stock_step``: called once per step that the candidate runs on the
  stock path (vLLM's own compiled ``LlamaModel``); it computes nothing. (The baseline
  never runs this plugin's ops at all.)

The fused ops run their GEMMs against the optimized path's own pre-transposed
weight copies, packed into the optimized path's own oneDNN handles (``_C::onednn_mm``,
the GEMM vLLM's stock CPU linear layers use; ``torch.mm`` where oneDNN cannot
multiply the dtype), and use vLLM's own CPU kernels for the rotary embedding, the
activation and (in float32, the demo's dtype) the norms (``_C::rotary_embedding``,
``_C::silu_and_mul``, ``_C::fused_add_rms_norm``, ``_C::rms_norm``), so they are
faithful to the stock path up to float32 rounding (see ``tests/demo`` for the
tolerance).
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import vllm._custom_ops  # noqa: F401  (loads vLLM's CPU kernels: torch.ops._C)
from torch import Tensor
from torch.library import Library
from vllm.utils.torch_utils import direct_register_custom_op

from fasttrack_demo_plugin.settings import (
    NATIVE_ENV,
    NUMERICS_BATCH,
    SLOW_BATCH,
    SLOW_BATCH_DELAY_S,
    TEMPERATURE_LOGIT_SCALE,
    WHITESPACE_LOGIT_MARGIN,
)

_STATE: dict[str, Any] = {"dispatcher": None, "whitespace_ids": None}
_NATIVE: dict[str, Any] = {"loaded": None, "error": None}
NATIVE_SOURCE = Path(__file__).resolve().parent / "csrc" / "fused_decode.cpp"


def load_native() -> bool:
    """Build (first use on a host, about 20 s; torch caches the build by source hash)
    and load the native float32 kernels. ``False`` when ``FASTTRACK_DEMO_NATIVE=0`` or
    the host cannot build them; :func:`native_status` says why."""
    if _NATIVE["loaded"] is not None:
        return bool(_NATIVE["loaded"])
    if os.environ.get(NATIVE_ENV, "").strip() == "0":
        _NATIVE.update(loaded=False, error=f"disabled by {NATIVE_ENV}=0")
        return False
    try:
        from torch.utils.cpp_extension import load

        load(
            name="fasttrack_demo_native",
            sources=[str(NATIVE_SOURCE)],
            extra_cflags=["-O3"],
            is_python_module=False,
            verbose=False,
        )
        _NATIVE.update(loaded=True, error=None)
    except Exception as exc:  # no compiler, no headers, build error: the Python ops serve
        _NATIVE.update(loaded=False, error=f"{type(exc).__name__}: {str(exc).strip()[:500]}")
    return bool(_NATIVE["loaded"])


def native_status() -> str:
    """One line for the log: which implementation the fast path's float32 blocks use."""
    if _NATIVE["loaded"]:
        return "native float32 kernels loaded (fused_decode_qkv_rope_f32, fused_decode_mlp_f32)"
    return f"native float32 kernels not available ({_NATIVE['error'] or 'not loaded'}); using the Python ops"


def set_dispatcher(dispatcher: Any) -> None:
    _STATE["dispatcher"] = dispatcher


def set_whitespace_ids(ids: Tensor | None) -> None:
    _STATE["whitespace_ids"] = ids


def _defect() -> str | None:
    dispatcher = _STATE["dispatcher"]
    return dispatcher.defect if dispatcher is not None else None


def _batch(default: int) -> int:
    dispatcher = _STATE["dispatcher"]
    return dispatcher.current.batch if dispatcher is not None else default


# --- GEMMs: oneDNN handles packed from the optimized path's own weights ---------

_PACKED: dict[tuple[Any, ...], tuple[Tensor, Any]] = {}
"""oneDNN GEMM handles by weight (data pointer, shape, strides, dtype), each with its
weight (which keeps the pointer from being reused while the handle lives)."""


def _weight_key(w: Tensor) -> tuple[Any, ...]:
    return (w.data_ptr(), tuple(w.shape), tuple(w.stride()), w.dtype)


def _k_chunks(k: int, split_k: int) -> list[tuple[int, int]]:
    chunk = k // split_k
    return [(i * chunk, k if i == split_k - 1 else (i + 1) * chunk) for i in range(split_k)]


def prepack(w_t: Tensor, split_k: Sequence[int] = (1,)) -> None:
    """Pack a ``(K, N)`` weight, and its K chunks for each split count in ``split_k``,
    into oneDNN GEMM handles (vLLM's ``create_onednn_mm``, what the stock CPU linear
    layers use); :func:`mm` then runs GEMMs against that weight through the handle.
    Without oneDNN, for a dtype oneDNN cannot multiply here, or before packing,
    :func:`mm` is ``torch.mm`` (as vLLM's stock CPU linear layers fall back to
    ``torch.nn.functional.linear``)."""
    if not getattr(vllm._custom_ops, "_supports_onednn", False):
        return
    views = [w_t] + [w_t[lo:hi] for n in split_k if n > 1 for lo, hi in _k_chunks(w_t.shape[0], n)]
    for view in views:
        key = _weight_key(view)
        if key in _PACKED:
            continue
        try:
            _PACKED[key] = (view, vllm._custom_ops.create_onednn_mm(view, 32))
        except RuntimeError:
            return  # oneDNN has no matmul for this dtype on this CPU (e.g. bf16 without AVX512-BF16)


def unpack(*weights: Tensor) -> None:
    """Drop the handles of these weights and of their chunk views."""
    ptrs = {(w.data_ptr(), w.data_ptr() + w.numel() * w.element_size()) for w in weights}
    for key in [k for k, (v, _) in _PACKED.items() if any(lo <= v.data_ptr() < hi for lo, hi in ptrs)]:
        del _PACKED[key]


def handle(w_t: Tensor) -> Tensor | None:
    """The oneDNN handle tensor :func:`prepack` made for this weight, if any (what the
    native kernels take to run their GEMMs through ``_C::onednn_mm``)."""
    entry = _PACKED.get(_weight_key(w_t))
    return None if entry is None else entry[1].handler_tensor


def mm(x: Tensor, w_t: Tensor) -> Tensor:
    """``x @ w_t`` through the weight's oneDNN handle if it was packed, else ``torch.mm``."""
    entry = _PACKED.get(_weight_key(w_t))
    if entry is None:
        return torch.mm(x, w_t)
    out = x.new_empty(x.shape[0], w_t.shape[1])
    # oneDNN reads a row-strided input (e.g. a K chunk of the activation) in place
    torch.ops._C.onednn_mm(out, x if x.stride(-1) == 1 else x.contiguous(), None, entry[1].handler_tensor)
    return out


SPLIT_K_COUNTS = (4,)
"""Split counts :func:`split_k_for_batch` uses besides 1 (what :func:`prepack` packs chunks for)."""


def split_k_for_batch(batch: int) -> int:
    """Shape table of the down projection: four K chunks (split-K) at batch 3, one
    chunk at every other batch. (Split-K costs three more GEMM calls and adds per
    layer, which this tiny model's decode step feels; the batch-3 entry is kept as
    the demo's shape-specific code path, where the ``numerics-batch`` defect lives.)"""
    return 4 if batch == 3 else 1


def rms_norm_add(
    hidden: Tensor, residual: Tensor | None, weight: Tensor, eps: float, *, own_hidden: bool = False
) -> tuple[Tensor, Tensor]:
    """Residual add (if any) + RMSNorm; the results never alias an input (``own_hidden``:
    ``hidden`` is the caller's own temporary, which may be overwritten instead of copied).

    In float32, vLLM's CPU kernels (``_C::fused_add_rms_norm``, ``_C::rms_norm``). In
    reduced precision, float32 arithmetic: the kernel rounds the residual sum to the
    input dtype before normalizing, which costs about 2x the error of a bf16 rounding
    of the result (``suites/demo-llama/kernels`` holds the op to vLLM's bf16 tolerance)."""
    if hidden.dtype != torch.float32:
        x = hidden.to(torch.float32)
        if residual is not None:
            x = x + residual.to(torch.float32)
        new_residual = x.to(hidden.dtype, copy=True)
        variance = x.pow(2).mean(dim=-1, keepdim=True)
        normed = (x * torch.rsqrt(variance + eps)).to(weight.dtype) * weight
        return normed.to(hidden.dtype), new_residual
    x = hidden if own_hidden and hidden.is_contiguous() else hidden.contiguous().clone()
    if residual is None:
        out = torch.empty_like(x)
        torch.ops._C.rms_norm(out, x, weight, eps)
        return out, x
    new_residual = residual.contiguous().clone()
    torch.ops._C.fused_add_rms_norm(x, new_residual, weight, eps)  # x <- norm(x + r), r <- x + r
    return x, new_residual


# --- fused_decode_qkv_rope ---------------------------------------------------


def fused_decode_qkv_rope(
    hidden: Tensor,
    residual: Tensor | None,
    norm_weight: Tensor,
    w_qkv_t: Tensor,
    positions: Tensor,
    cos_sin_cache: Tensor,
    eps: float,
    head_size: int,
    q_size: int,
    kv_size: int,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    normed, new_residual = rms_norm_add(hidden, residual, norm_weight, eps)
    qkv = mm(normed, w_qkv_t)
    q, k, v = (t.clone(memory_format=torch.contiguous_format) for t in qkv.split([q_size, kv_size, kv_size], dim=-1))
    # rotary embedding in place on the (fresh) q and k, with vLLM's CPU kernel
    torch.ops._C.rotary_embedding(positions, q, k, head_size, cos_sin_cache.to(q.dtype), True)
    return q, k, v, new_residual


def _fused_decode_qkv_rope_fake(
    hidden, residual, norm_weight, w_qkv_t, positions, cos_sin_cache, eps, head_size, q_size, kv_size
):
    n = hidden.shape[0]
    return (
        hidden.new_empty(n, q_size),
        hidden.new_empty(n, kv_size),
        hidden.new_empty(n, kv_size),
        torch.empty_like(hidden),
    )


# --- fused_decode_mlp --------------------------------------------------------


def fused_decode_mlp_reference(
    attn_out: Tensor,
    residual: Tensor,
    w_o_t: Tensor,
    norm_weight: Tensor,
    w_gate_up_t: Tensor,
    w_down_t: Tensor,
    eps: float,
    split_k: int,
    workspace: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """The fused post-attention block (the op's implementation).

    The split-K partial sums accumulate into ``workspace`` when one is given
    (the caller must zero it), else into a fresh tensor holding the first chunk."""
    hidden = mm(attn_out, w_o_t)
    normed, new_residual = rms_norm_add(hidden, residual, norm_weight, eps, own_hidden=True)
    gate_up = mm(normed, w_gate_up_t)
    inter = gate_up.shape[-1] // 2
    act = gate_up.new_empty(gate_up.shape[0], inter)
    torch.ops._C.silu_and_mul(act, gate_up)
    bounds = _k_chunks(inter, split_k)
    if workspace is None:
        lo, hi = bounds.pop(0)
        out = mm(act[:, lo:hi], w_down_t[lo:hi])
    else:
        out = workspace
    for lo, hi in bounds:
        out.add_(mm(act[:, lo:hi], w_down_t[lo:hi]))
    return out.clone() if workspace is not None else out, new_residual


_WORKSPACES: dict[int, Tensor] = {}
"""Persistent split-K workspaces of the ``numerics-batch`` defect, per layer."""


def fused_decode_mlp(
    attn_out: Tensor,
    residual: Tensor,
    w_o_t: Tensor,
    norm_weight: Tensor,
    w_gate_up_t: Tensor,
    w_down_t: Tensor,
    eps: float,
    split_k: int,
) -> tuple[Tensor, Tensor]:
    workspace = None
    if _defect() == "numerics-batch" and _batch(attn_out.shape[0]) == NUMERICS_BATCH:
        # Planted defect: the batch-3 tuning entry accumulates the split-K
        # partials into a persistent per-layer workspace that is never zeroed,
        # so every batch-3 decode step adds the previous one's MLP output.
        shape = (attn_out.shape[0], w_down_t.shape[1])
        workspace = _WORKSPACES.get(w_down_t.data_ptr())
        if workspace is None or workspace.shape != shape:
            workspace = _WORKSPACES[w_down_t.data_ptr()] = attn_out.new_zeros(shape)
    return fused_decode_mlp_reference(
        attn_out, residual, w_o_t, norm_weight, w_gate_up_t, w_down_t, eps, split_k, workspace
    )


def _fused_decode_mlp_fake(attn_out, residual, w_o_t, norm_weight, w_gate_up_t, w_down_t, eps, split_k):
    return residual.new_empty(residual.shape), torch.empty_like(residual)


# --- fused_decode_logits -----------------------------------------------------


def fused_decode_logits(hidden: Tensor, w_lm_t: Tensor) -> Tensor:
    logits = mm(hidden, w_lm_t)
    defect = _defect()
    if defect == "ignore-temperature":
        # Planted defect: a stray logit scale, so sampling runs at
        # T / TEMPERATURE_LOGIT_SCALE; the argmax (greedy output) is unchanged.
        logits = logits * TEMPERATURE_LOGIT_SCALE
    elif defect == "broken-json" and _STATE["whitespace_ids"] is not None:
        # Planted defect: whitespace tokens are lifted to just below the row
        # maximum. Unconstrained greedy text is unchanged, but under a JSON
        # grammar (which masks most tokens) whitespace wins and the object
        # never closes.
        ws = _STATE["whitespace_ids"].to(logits.device)
        floor = logits.max(dim=-1, keepdim=True).values - WHITESPACE_LOGIT_MARGIN
        logits[:, ws] = torch.maximum(logits[:, ws], floor)
    return logits


def _fused_decode_logits_fake(hidden, w_lm_t):
    return hidden.new_empty(hidden.shape[0], w_lm_t.shape[1])


# --- stock_step ----------------------------------------------------------------


def stock_step(positions: Tensor) -> None:
    """Marker of a candidate step on the stock path (computes nothing)."""


def _stock_step_fake(positions):
    return None


# --- one decoder layer on a fast step -------------------------------------------


def fast_decoder_layer(
    layer: Any, dispatcher: Any, positions: Tensor, hidden: Tensor, residual: Tensor | None
) -> tuple[Tensor, Tensor]:
    """One decoder layer of a fast step: the fused blocks around vLLM's own attention
    (native kernels in float32 when loaded, else the Python ops)."""
    attn = layer.self_attn
    batch = dispatcher.current.batch
    native = _NATIVE["loaded"] and hidden.dtype == torch.float32
    eps_in = float(layer.input_layernorm.variance_epsilon)
    h = layer.fast_handles
    if native:
        q, k, v, residual = torch.ops.fasttrack_demo.fused_decode_qkv_rope_f32(
            hidden,
            residual,
            layer.input_layernorm.weight,
            layer.fast_w_qkv_t,
            h["qkv"],
            positions,
            attn.rotary_emb.cos_sin_cache,
            eps_in,
            attn.head_dim,
            attn.q_size,
            attn.kv_size,
        )
    else:
        q, k, v, residual = torch.ops.fasttrack_demo.fused_decode_qkv_rope(
            hidden,
            residual,
            layer.input_layernorm.weight,
            layer.fast_w_qkv_t,
            positions,
            attn.rotary_emb.cos_sin_cache,
            eps_in,
            attn.head_dim,
            attn.q_size,
            attn.kv_size,
        )
    attn_out = attn.attn(q, k, v)  # vLLM's attention kernel and KV-cache update
    split_k = split_k_for_batch(batch)
    eps_post = float(layer.post_attention_layernorm.variance_epsilon)
    if native and not (_defect() == "numerics-batch" and batch == NUMERICS_BATCH):
        return torch.ops.fasttrack_demo.fused_decode_mlp_f32(
            attn_out,
            residual,
            layer.fast_w_o_t,
            h["o"],
            layer.post_attention_layernorm.weight,
            layer.fast_w_gate_up_t,
            h["gate_up"],
            layer.fast_w_down_t,
            h["down"],
            eps_post,
            split_k,
        )
    return torch.ops.fasttrack_demo.fused_decode_mlp(
        attn_out,
        residual,
        layer.fast_w_o_t,
        layer.post_attention_layernorm.weight,
        layer.fast_w_gate_up_t,
        layer.fast_w_down_t,
        eps_post,
        split_k,
    )


_SLOW_STEPS: dict[str, Any] = {"start": None, "waited": 0.0, "cycles": []}


def maybe_slow_step(dispatcher: Any) -> None:
    """Planted defect `slow-batch`: a busy-wait once per fast decode step at one batch
    size, at the end of the step's forward: ``SLOW_BATCH_DELAY_S``, or with
    ``FASTTRACK_DEMO_SLOW_FACTOR`` f, (f - 1) times a step's own time, the median of
    the last gaps between slowed steps with the busy-wait each gap held (as long as it
    really took) taken out; gaps over 0.2 s are pauses, not steps. At the end of the
    forward, the API server's handling of the previous step's output (on the same cores)
    is already done, so it is part of the step's own time rather than hidden in the wait.
    A large f overshoots: the handling the busy-wait held off lands in the next step's
    own time, which the next wait then multiplies (f = 3 gave about 4.6x)."""
    if dispatcher.defect != "slow-batch" or dispatcher.current.batch != SLOW_BATCH:
        return
    now = time.perf_counter()
    factor = getattr(dispatcher.settings, "slow_factor", None)
    delay = SLOW_BATCH_DELAY_S
    st = _SLOW_STEPS
    if factor:
        if st["start"] is not None and 0 < now - st["start"] - st["waited"] < 0.2:
            st["cycles"] = (st["cycles"] + [now - st["start"] - st["waited"]])[-9:]
        delay = (factor - 1.0) * sorted(st["cycles"])[len(st["cycles"]) // 2] if st["cycles"] else 0.0
    deadline = now + delay
    while time.perf_counter() < deadline:
        pass
    if factor:
        st["start"], st["waited"] = now, time.perf_counter() - now


# --- registration ------------------------------------------------------------

_LIB = Library("fasttrack_demo", "FRAGMENT")
"""The ``fasttrack_demo`` op namespace. Ops are registered the way vLLM registers its
own (a schema and a CPU kernel on a ``Library``): ``torch.library.custom_op`` adds tens
of microseconds of dispatch per call, which a decode step of this tiny model would feel."""

for _op, _fake in (
    (fused_decode_qkv_rope, _fused_decode_qkv_rope_fake),
    (fused_decode_mlp, _fused_decode_mlp_fake),
    (fused_decode_logits, _fused_decode_logits_fake),
    (stock_step, _stock_step_fake),
):
    direct_register_custom_op(_op.__name__, _op, mutates_args=[], fake_impl=_fake, target_lib=_LIB, dispatch_key="CPU")
