"""Router scores and latent input projection sharded across TP ranks (each rank one GEMM over
its share of the [router | latent] rows), gathered, against the full computation in float64.
Ranks are simulated in one process; the exchange is a concatenation."""

from __future__ import annotations

import k3_common as C
import k3_reference as ref
import pytest
import torch

from fasttrack.kernels.inputs import case_seed, generate, input_scale
from fasttrack.kernels.plugin import require_cuda

KERNEL = "router_latent_tp"
E, L, K, TP = C.EXPERTS, C.LATENT, C.HIDDEN, C.TP


def make_inputs(b: int, dt: str, dist: str, device: torch.device):
    s = case_seed(KERNEL, b, dt, dist, E, L, K)
    x = generate((b, K), dtype=dt, dist=dist, seed=s, device=device)
    w_router = generate((E, K), dtype=dt, dist="normal", seed=s + 1, device=device, scale=K**-0.5)
    w_latent = generate((L, K), dtype=dt, dist="normal", seed=s + 2, device=device, scale=K**-0.5)
    return x, w_router, w_latent


def shards_of(w_router, w_latent):
    """Rank r holds rows [r*N/TP, (r+1)*N/TP) of [router | latent] (uneven when N % TP != 0)."""
    return list(torch.tensor_split(torch.cat([w_router, w_latent]), TP, dim=0))


def sharded(cand, x, shards, dtype):
    ys = [cand.router_latent_shard(x, w) for w in shards]
    return cand.router_latent_gather(ys, E, dtype)


def shape(b: int) -> dict:
    return {"B": b, "hidden": K, "experts": E, "latent": L, "tp": TP}


@pytest.mark.parametrize("case", C.matrix(), ids=C.case_id)
def test_numerics(case, kernel_candidate, kernel_device, kernel_rec):
    b, dt, dist = case
    if not C.supports(kernel_candidate, KERNEL, dt):
        pytest.skip(f"the candidate declares no {dt} variant of {KERNEL}")
    x, wr, wl = make_inputs(b, dt, dist, kernel_device)
    scores, latent = sharded(kernel_candidate, x, shards_of(wr, wl), x.dtype)
    e_scores, e_latent = ref.router_latent(x, wr, wl)
    scale = input_scale(dist, dt)
    rows = kernel_rec.case(
        kernel=KERNEL,
        shape=shape(b),
        dtype=dt,
        dist=dist,
        outputs={"scores": (scores, e_scores, scale), "latent": (latent, e_latent, scale)},
        device=kernel_device,
    )
    kernel_rec.expect(rows)


@pytest.mark.parametrize("b", (1, 64))
def test_determinism(b, kernel_candidate, kernel_device, kernel_rec):
    dt = C.DTYPES[0]
    x, wr, wl = make_inputs(b, dt, "normal", kernel_device)
    shards = shards_of(wr, wl)
    rows = kernel_rec.determinism(
        kernel=KERNEL,
        shape=shape(b),
        dtype=dt,
        fn=lambda: sharded(kernel_candidate, x, shards, x.dtype),
        names=("scores", "latent"),
        runs=C.DET_RUNS,
        device=kernel_device,
    )
    kernel_rec.expect(rows, "determinism")


def test_perturbation(kernel_candidate, kernel_device, kernel_rec):
    require_cuda(kernel_device, "timing perturbation")
    dt, b = C.DTYPES[0], 64
    x, wr, wl = make_inputs(b, dt, "normal", kernel_device)
    shards = shards_of(wr, wl)

    def run(h):
        (xx,) = h.delayed_inputs(x)
        return sharded(kernel_candidate, xx, shards, x.dtype)

    row = kernel_rec.perturbation(
        kernel=KERNEL,
        shape=shape(b),
        dtype=dt,
        run=run,
        kind="activations delayed on the current stream, busy work on a side stream, NaN-poisoned allocations",
        trials=C.PERTURB_TRIALS,
        device=kernel_device,
    )
    kernel_rec.expect([row], "perturbation")


@pytest.mark.parametrize("b,ranks", [(1, TP), (64, TP), (64, 1)])
def test_speed_of_light(b, ranks, kernel_candidate, kernel_device, kernel_rec):
    """One rank's GEMM over its share of the rows (ranks=1: the unsharded projection)."""
    require_cuda(kernel_device, "speed of light")
    dt = "bf16"
    x, wr, wl = make_inputs(b, dt, "normal", kernel_device)
    w = torch.tensor_split(torch.cat([wr, wl]), ranks, dim=0)[0].contiguous()
    n = w.shape[0]
    kernel_rec.speed(
        kernel=f"{KERNEL}.shard_gemm",
        shape={"B": b, "N": n, "K": K, "ranks": ranks},
        dtype=dt,
        fn=lambda: kernel_candidate.router_latent_shard(x, w),
        bytes_moved=(n * K + b * K) * 2 + b * n * 4,
        flops=2 * b * n * K,
        device=kernel_device,
    )
