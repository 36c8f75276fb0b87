"""The small selection run under compute-sanitizer (memcheck, racecheck, synccheck): every
candidate kernel once at a small shape, and the side-stream pair once. Deselected from the
main run (the numerics tests cover these shapes there)."""

from __future__ import annotations

import k3_common as C
import k3_reference as ref
import pytest
import test_k3_dcp as dcp
import test_k3_kda as kda
import test_k3_rmsnorm as rms
import test_k3_router as router
import test_k3_streams as streams
import torch

from fasttrack.kernels.perturb import poison_
from fasttrack.kernels.plugin import require_cuda

pytestmark = pytest.mark.sanitize
B = 3


def test_rmsnorm(kernel_candidate, kernel_device, kernel_rec):
    require_cuda(kernel_device, "the sanitizer selection")
    dt = C.DTYPES[0]
    x, res, w = rms.make_inputs(B, dt, "normal", kernel_device)
    out, rout = kernel_candidate.fused_add_rmsnorm(x, res, w, C.EPS)
    e_out, e_res = ref.fused_add_rmsnorm(x, res, w, C.EPS)
    kernel_rec.expect(
        kernel_rec.case(
            kernel=rms.KERNEL,
            shape={"B": B},
            dtype=dt,
            dist="normal",
            outputs={"out": (out, e_out), "residual_out": (rout, e_res)},
        )
    )


def test_kda(kernel_candidate, kernel_device, kernel_rec):
    require_cuda(kernel_device, "the sanitizer selection")
    dt = C.DTYPES[0]
    q, k, v, g, beta, state0 = kda.make_inputs(B, dt, "normal", kernel_device, steps=2)
    o, st = kda.run_steps(kernel_candidate, q, k, v, g, beta, state0)
    e_o, e_st = ref.kda_recurrence(q, k, v, g, beta, state0, kda.SCALE)
    kernel_rec.expect(
        kernel_rec.case(
            kernel=kda.KERNEL,
            shape={"B": B, "steps": 2},
            dtype=dt,
            dist="normal",
            outputs={"o": (o, e_o), "state": (st, e_st)},
        )
    )


def test_dcp(kernel_candidate, kernel_device, kernel_rec):
    require_cuda(kernel_device, "the sanitizer selection")
    dt, ctx = C.DTYPES[0], 77
    q, k, v, lens = dcp.make_inputs(B, dt, "normal", ctx, kernel_device)
    outs, lses = dcp.partials(kernel_candidate, q, ref.dcp_shard(k, v, lens, C.DCP))
    out = kernel_candidate.dcp_combine(outs, lses, q.dtype)
    e_out, _ = ref.decode_attention(q, k, v, lens, dcp.SCALE)
    kernel_rec.expect(
        kernel_rec.case(
            kernel=dcp.KERNEL, shape={"B": B, "ctx": ctx}, dtype=dt, dist="normal", outputs={"out": (out, e_out)}
        )
    )


def test_router(kernel_candidate, kernel_device, kernel_rec):
    require_cuda(kernel_device, "the sanitizer selection")
    dt = C.DTYPES[0]
    x, wr, wl = router.make_inputs(B, dt, "normal", kernel_device)
    scores, latent = router.sharded(kernel_candidate, x, router.shards_of(wr, wl), x.dtype)
    e_s, e_l = ref.router_latent(x, wr, wl)
    kernel_rec.expect(
        kernel_rec.case(
            kernel=router.KERNEL,
            shape={"B": B},
            dtype=dt,
            dist="normal",
            outputs={"scores": (scores, e_s), "latent": (latent, e_l)},
        )
    )


def test_side_stream_pair(kernel_candidate, kernel_device, kernel_rec):
    require_cuda(kernel_device, "the sanitizer selection")
    dt = C.DTYPES[0]
    x, res, w, ws = streams.make_inputs(B, dt, kernel_device)
    h_buf = torch.empty(B, C.HIDDEN, dtype=x.dtype, device=kernel_device)
    poison_(h_buf)
    side = torch.cuda.Stream(device=kernel_device)
    y, r = kernel_candidate.shared_expert_side_stream(x, res, w, C.EPS, ws, h_buf=h_buf, side_stream=side)
    torch.cuda.synchronize(kernel_device)
    e_y, e_r = ref.shared_expert(x, res, w, C.EPS, ws)
    kernel_rec.expect(
        kernel_rec.case(
            kernel=streams.KERNEL,
            shape={"B": B},
            dtype=dt,
            dist="normal",
            outputs={"y": (y, e_y), "residual_out": (r, e_r)},
        )
    )
