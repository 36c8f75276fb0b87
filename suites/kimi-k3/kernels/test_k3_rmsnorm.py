"""Fused residual add + RMSNorm against the float64 definition."""

from __future__ import annotations

import k3_common as C
import k3_reference as ref
import pytest
import torch

from fasttrack.kernels.inputs import case_seed, generate, input_scale, positive
from fasttrack.kernels.plugin import require_cuda

KERNEL = "fused_add_rmsnorm"


def make_inputs(b: int, dt: str, dist: str, device: torch.device, hidden: int = C.HIDDEN):
    s = case_seed(KERNEL, b, dt, dist, hidden)
    x = generate((b, hidden), dtype=dt, dist=dist, seed=s, device=device)
    res = generate((b, hidden), dtype=dt, dist="normal" if dist == "nonfinite" else dist, seed=s + 1, device=device)
    w = positive((hidden,), dtype=dt, seed=s + 2, low=0.5, high=1.5, device=device)
    return x, res, w


@pytest.mark.parametrize("case", C.matrix(), ids=C.case_id)
def test_numerics(case, kernel_candidate, kernel_device, kernel_rec):
    b, dt, dist = case
    if not C.supports(kernel_candidate, KERNEL, dt):
        pytest.skip(f"the candidate declares no {dt} variant of {KERNEL}")
    x, res, w = make_inputs(b, dt, dist, kernel_device)
    out, rout = kernel_candidate.fused_add_rmsnorm(x, res, w, C.EPS)
    e_out, e_res = ref.fused_add_rmsnorm(x, res, w, C.EPS)
    scale = input_scale(dist, dt)
    rows = kernel_rec.case(
        kernel=KERNEL,
        shape={"B": b, "hidden": C.HIDDEN},
        dtype=dt,
        dist=dist,
        outputs={"out": (out, e_out), "residual_out": (rout, e_res, scale)},
        device=kernel_device,
    )
    kernel_rec.expect(rows)


@pytest.mark.parametrize("b", (1, 64))
def test_determinism(b, kernel_candidate, kernel_device, kernel_rec):
    dt = C.DTYPES[0]
    x, res, w = make_inputs(b, dt, "normal", kernel_device)
    rows = kernel_rec.determinism(
        kernel=KERNEL,
        shape={"B": b, "hidden": C.HIDDEN},
        dtype=dt,
        fn=lambda: kernel_candidate.fused_add_rmsnorm(x, res, w, C.EPS),
        names=("out", "residual_out"),
        runs=C.DET_RUNS,
        device=kernel_device,
    )
    kernel_rec.expect(rows, "determinism")


def test_perturbation(kernel_candidate, kernel_device, kernel_rec):
    require_cuda(kernel_device, "timing perturbation")
    dt, b = C.DTYPES[0], 64
    x, res, w = make_inputs(b, dt, "normal", kernel_device)

    def run(h):
        xx, rr = h.delayed_inputs(x, res)
        return kernel_candidate.fused_add_rmsnorm(xx, rr, w, C.EPS)

    row = kernel_rec.perturbation(
        kernel=KERNEL,
        shape={"B": b, "hidden": C.HIDDEN},
        dtype=dt,
        run=run,
        kind="inputs delayed on the current stream, busy work on a side stream, NaN-poisoned allocations",
        trials=C.PERTURB_TRIALS,
        device=kernel_device,
    )
    kernel_rec.expect([row], "perturbation")


@pytest.mark.parametrize("b", (64, 4096))
def test_speed_of_light(b, kernel_candidate, kernel_device, kernel_rec):
    require_cuda(kernel_device, "speed of light")
    dt = "bf16"
    x, res, w = make_inputs(b, dt, "normal", kernel_device)
    es = x.element_size()
    kernel_rec.speed(
        kernel=KERNEL,
        shape={"B": b, "hidden": C.HIDDEN},
        dtype=dt,
        fn=lambda: kernel_candidate.fused_add_rmsnorm(x, res, w, C.EPS),
        bytes_moved=(4 * b * C.HIDDEN + C.HIDDEN) * es,
        flops=5 * b * C.HIDDEN,
        device=kernel_device,
    )
