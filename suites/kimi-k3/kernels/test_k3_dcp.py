"""Decode context parallelism: per-rank partial attention combined by log-sum-exp, against
attention over the whole context in float64. The KV cache is split across ranks the way
vLLM's DCP stores it (token t on rank t mod R); padding slots hold NaN."""

from __future__ import annotations

import k3_common as C
import k3_reference as ref
import pytest
import torch

from fasttrack.kernels.inputs import case_seed, generate, input_scale
from fasttrack.kernels.plugin import require_cuda

KERNEL = "dcp_attention"
H, HKV, D = C.ATTN_HEADS, C.KV_HEADS, C.HEAD_DIM
SCALE = D**-0.5
CASES = [(c, ctx) for ctx in C.CONTEXTS for c in C.matrix()]


def make_inputs(b: int, dt: str, dist: str, ctx: int, device: torch.device):
    s = case_seed(KERNEL, b, dt, dist, ctx, H, HKV, D)
    q = generate((b, H, D), dtype=dt, dist=dist, seed=s, device=device)
    # Non-finite keys give +-inf scores; a -inf score weights its value row by exactly 0, and
    # whether 0 * Inf in that row is NaN (IEEE) or 0 (masking) is the kernel's choice. So the
    # nonfinite distribution plants NaN/Inf in q and v only.
    k = generate((b, ctx, HKV, D), dtype=dt, dist="normal" if dist == "nonfinite" else dist, seed=s + 1, device=device)
    v = generate((b, ctx, HKV, D), dtype=dt, dist=dist, seed=s + 2, device=device)
    gen = torch.Generator().manual_seed(s + 3)
    lens = torch.randint(1, ctx + 1, (b,), generator=gen, dtype=torch.int32)
    lens[0] = ctx
    for i in range(b):  # slots past a sequence's length are padding: poison them
        k[i, int(lens[i]) :] = float("nan")
        v[i, int(lens[i]) :] = float("nan")
    return q, k, v, lens.to(device)


def shape(b: int, ctx: int) -> dict:
    return {"B": b, "ctx": ctx, "ranks": C.DCP, "H": H, "Hkv": HKV, "D": D}


def partials(cand, q, shards):
    parts = [cand.dcp_partial_attention(q, kl, vl, ll, SCALE) for kl, vl, ll in shards]
    return torch.stack([p[0] for p in parts]), torch.stack([p[1] for p in parts])


@pytest.mark.parametrize("case,ctx", CASES, ids=[f"{C.case_id(c)}-ctx{ctx}" for c, ctx in CASES])
def test_numerics(case, ctx, kernel_candidate, kernel_device, kernel_rec):
    b, dt, dist = case
    if not C.supports(kernel_candidate, KERNEL, dt):
        pytest.skip(f"the candidate declares no {dt} variant of {KERNEL}")
    q, k, v, lens = make_inputs(b, dt, dist, ctx, kernel_device)
    shards = ref.dcp_shard(k, v, lens, C.DCP)
    outs, lses = partials(kernel_candidate, q, shards)
    out = kernel_candidate.dcp_combine(outs, lses, q.dtype)
    e_out, _ = ref.decode_attention(q, k, v, lens, SCALE)
    scale = input_scale(dist, dt)
    outputs = {"out": (out, e_out, scale)}
    if dist != "nonfinite":
        # each rank's partial result against attention over that rank's tokens alone; a rank
        # with no tokens (or only -inf scores) contributes out = 0, lse = -inf. With non-finite
        # inputs only the combined output is compared: how a partial result spells "undefined"
        # (NaN or +inf lse) is the kernel's business as long as the combined output is right.
        e_parts = [ref.decode_attention(q, kl, vl, ll, SCALE) for kl, vl, ll in shards]
        e_plse = torch.stack([pl for _, pl in e_parts])
        e_pout = torch.stack([po for po, _ in e_parts])
        e_pout = torch.where(torch.isneginf(e_plse)[..., None], torch.zeros_like(e_pout), e_pout)
        lse_scale = scale * scale if dist == "large" else scale
        outputs.update(partial_out=(outs, e_pout, scale), partial_lse=(lses, e_plse, lse_scale))
    rows = kernel_rec.case(
        kernel=KERNEL, shape=shape(b, ctx), dtype=dt, dist=dist, outputs=outputs, device=kernel_device
    )
    kernel_rec.expect(rows)


@pytest.mark.parametrize("b", (1, 64))
def test_determinism(b, kernel_candidate, kernel_device, kernel_rec):
    dt, ctx = C.DTYPES[0], max(C.CONTEXTS)
    q, k, v, lens = make_inputs(b, dt, "normal", ctx, kernel_device)
    shards = ref.dcp_shard(k, v, lens, C.DCP)

    def fn():
        outs, lses = partials(kernel_candidate, q, shards)
        return kernel_candidate.dcp_combine(outs, lses, q.dtype), outs, lses

    rows = kernel_rec.determinism(
        kernel=KERNEL,
        shape=shape(b, ctx),
        dtype=dt,
        fn=fn,
        names=("out", "partial_out", "partial_lse"),
        runs=C.DET_RUNS,
        device=kernel_device,
    )
    kernel_rec.expect(rows, "determinism")


def test_perturbation(kernel_candidate, kernel_device, kernel_rec):
    require_cuda(kernel_device, "timing perturbation")
    dt, b, ctx = C.DTYPES[0], 64, max(C.CONTEXTS)
    q, k, v, lens = make_inputs(b, dt, "normal", ctx, kernel_device)
    shards = ref.dcp_shard(k, v, lens, C.DCP)

    def run(h):
        qq, *kv = h.delayed_inputs(q, *[t for kl, vl, _ in shards for t in (kl, vl)])
        parts = [
            kernel_candidate.dcp_partial_attention(qq, kv[2 * r], kv[2 * r + 1], shards[r][2], SCALE)
            for r in range(len(shards))
        ]
        outs = torch.stack([p[0] for p in parts])
        lses = torch.stack([p[1] for p in parts])
        return kernel_candidate.dcp_combine(outs, lses, q.dtype)

    row = kernel_rec.perturbation(
        kernel=KERNEL,
        shape=shape(b, ctx),
        dtype=dt,
        run=run,
        kind="q and KV shards delayed on the current stream, busy work on a side stream, NaN-poisoned allocations",
        trials=C.PERTURB_TRIALS,
        device=kernel_device,
    )
    kernel_rec.expect([row], "perturbation")


@pytest.mark.parametrize("b,ctx", [(1, 32768), (64, 32768)])
def test_speed_of_light_partial(b, ctx, kernel_candidate, kernel_device, kernel_rec):
    """One rank's partial attention over its share (ctx / ranks tokens) of a long context."""
    require_cuda(kernel_device, "speed of light")
    dt, local = "bf16", ctx // C.DCP
    q = generate((b, H, D), dtype=dt, dist="normal", seed=1, device=kernel_device)
    kl = generate((b, local, HKV, D), dtype=dt, dist="normal", seed=2, device=kernel_device)
    vl = generate((b, local, HKV, D), dtype=dt, dist="normal", seed=3, device=kernel_device)
    ll = torch.full((b,), local, dtype=torch.int32, device=kernel_device)
    es = q.element_size()
    kernel_rec.speed(
        kernel=f"{KERNEL}.partial",
        shape={"B": b, "local_ctx": local, "H": H, "Hkv": HKV, "D": D},
        dtype=dt,
        fn=lambda: kernel_candidate.dcp_partial_attention(q, kl, vl, ll, SCALE),
        bytes_moved=b * (2 * local * HKV * D * es + H * D * es + H * D * 4 + H * 4),
        flops=4 * b * H * local * D,
        device=kernel_device,
    )


def test_speed_of_light_combine(kernel_candidate, kernel_device, kernel_rec):
    require_cuda(kernel_device, "speed of light")
    b = 64
    outs = torch.randn(C.DCP, b, H, D, device=kernel_device)
    lses = torch.randn(C.DCP, b, H, device=kernel_device)
    kernel_rec.speed(
        kernel=f"{KERNEL}.combine",
        shape={"ranks": C.DCP, "B": b, "H": H, "D": D},
        dtype="bf16",
        fn=lambda: kernel_candidate.dcp_combine(outs, lses, torch.bfloat16),
        bytes_moved=C.DCP * b * H * (D * 4 + 4) + b * H * D * 2,
        flops=3 * C.DCP * b * H * D,
        device=kernel_device,
    )
