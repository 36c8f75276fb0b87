"""The demo backend's fused decode ops against float64 references, batches 1..8."""

from __future__ import annotations

import demo_common as C
import pytest
import torch
import torch.nn.functional as F

from fasttrack.kernels.inputs import case_seed, generate, input_scale, positive

F64 = torch.float64


def ref_add_rmsnorm(x, residual, weight, eps):
    r = x.to(F64) + residual.to(F64)
    return r * torch.rsqrt(r.pow(2).mean(-1, keepdim=True) + eps) * weight.to(F64), r


def ref_mlp(attn_out, residual, w_o_t, norm_w, w_gate_up_t, w_down_t, eps):
    hidden = attn_out.to(F64) @ w_o_t.to(F64)
    normed, new_res = ref_add_rmsnorm(hidden, residual, norm_w, eps)
    gate_up = normed @ w_gate_up_t.to(F64)
    inter = gate_up.shape[-1] // 2
    act = F.silu(gate_up[:, :inter]) * gate_up[:, inter:]
    return act @ w_down_t.to(F64), new_res


def mlp_inputs(b, dt, dist):
    s = case_seed("demo_fused_mlp", b, dt, dist)
    attn = generate((b, C.ATTN_OUT), dtype=dt, dist=dist, seed=s)
    res = generate((b, C.HIDDEN), dtype=dt, dist="normal" if dist == "nonfinite" else dist, seed=s + 1)
    w_o_t = generate((C.ATTN_OUT, C.HIDDEN), dtype=dt, dist="normal", seed=s + 2, scale=C.ATTN_OUT**-0.5)
    norm_w = positive((C.HIDDEN,), dtype=dt, seed=s + 3, low=0.5, high=1.5)
    w_gu = generate((C.HIDDEN, 2 * C.INTER), dtype=dt, dist="normal", seed=s + 4, scale=C.HIDDEN**-0.5)
    w_down = generate((C.INTER, C.HIDDEN), dtype=dt, dist="normal", seed=s + 5, scale=C.INTER**-0.5)
    return attn, res, w_o_t, norm_w, w_gu, w_down


@pytest.mark.parametrize("case", C.matrix(), ids=C.case_id)
def test_add_rmsnorm(case, kernel_candidate, kernel_device, kernel_rec):
    b, dt, dist = case
    s = case_seed("demo_add_rmsnorm", b, dt, dist)
    x = generate((b, C.HIDDEN), dtype=dt, dist=dist, seed=s)
    res = generate((b, C.HIDDEN), dtype=dt, dist="normal" if dist == "nonfinite" else dist, seed=s + 1)
    w = positive((C.HIDDEN,), dtype=dt, seed=s + 2, low=0.5, high=1.5)
    out, new_res = kernel_candidate.fused_add_rmsnorm(x, res, w, C.EPS)
    e_out, e_res = ref_add_rmsnorm(x, res, w, C.EPS)
    rows = kernel_rec.case(
        kernel="demo_add_rmsnorm",
        shape={"B": b, "hidden": C.HIDDEN},
        dtype=dt,
        dist=dist,
        outputs={"out": (out, e_out), "residual_out": (new_res, e_res, input_scale(dist, dt))},
    )
    kernel_rec.expect(rows)


@pytest.mark.parametrize("case", C.matrix(), ids=C.case_id)
def test_fused_mlp(case, kernel_candidate, kernel_device, kernel_rec):
    b, dt, dist = case
    inputs = mlp_inputs(b, dt, dist)
    out, new_res = kernel_candidate.fused_decode_mlp(*inputs, C.EPS)
    e_out, e_res = ref_mlp(*inputs, C.EPS)
    scale = input_scale(dist, dt)
    rows = kernel_rec.case(
        kernel="demo_fused_mlp",
        shape={"B": b, "hidden": C.HIDDEN, "inter": C.INTER},
        dtype=dt,
        dist=dist,
        outputs={"out": (out, e_out), "residual_out": (new_res, e_res, scale)},
    )
    kernel_rec.expect(rows)


@pytest.mark.parametrize("b", (1, C.MAX_BATCH))
def test_determinism(b, kernel_candidate, kernel_device, kernel_rec):
    dt = C.DTYPES[0]
    inputs = mlp_inputs(b, dt, "normal")
    rows = kernel_rec.determinism(
        kernel="demo_fused_mlp",
        shape={"B": b, "hidden": C.HIDDEN, "inter": C.INTER},
        dtype=dt,
        fn=lambda: kernel_candidate.fused_decode_mlp(*inputs, C.EPS),
        names=("out", "residual_out"),
        runs=C.DET_RUNS,
    )
    kernel_rec.expect(rows, "determinism")
