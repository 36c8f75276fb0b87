"""KDA (gated delta rule, per-channel decay) single-step decode chained over steps, against the
sequential recurrence in float64: every step's output and the final state."""

from __future__ import annotations

import k3_common as C
import k3_reference as ref
import pytest
import torch

from fasttrack.kernels.inputs import case_seed, generate, input_scale, positive
from fasttrack.kernels.plugin import require_cuda

KERNEL = "kda_decode"
H, K, V = C.KDA_HEADS, C.KDA_DIM, C.KDA_DIM
SCALE = K**-0.5


def make_inputs(b: int, dt: str, dist: str, device: torch.device, steps: int = C.KDA_STEPS):
    s = case_seed(KERNEL, b, dt, dist, H, K, steps)
    q = generate((steps, b, H, K), dtype=dt, dist=dist, seed=s, device=device)
    k = generate((steps, b, H, K), dtype=dt, dist=dist, seed=s + 1, device=device)
    v = generate((steps, b, H, V), dtype=dt, dist=dist, seed=s + 2, device=device)
    g = positive((steps, b, H, K), dtype="fp32", seed=s + 3, low=-0.5, high=-0.01, device=device)
    beta = positive((steps, b, H), dtype="fp32", seed=s + 4, low=0.1, high=0.9, device=device)
    state0 = generate((b, H, K, V), dtype="fp32", dist="normal", seed=s + 5, device=device, scale=0.1)
    return q, k, v, g, beta, state0


def run_steps(cand, q, k, v, g, beta, state0):
    state = state0.clone()
    outs = [cand.kda_decode_step(q[t], k[t], v[t], g[t], beta[t], state, SCALE) for t in range(q.shape[0])]
    return torch.stack(outs), state


def shape(b: int) -> dict:
    return {"B": b, "H": H, "K": K, "V": V, "steps": C.KDA_STEPS}


@pytest.mark.parametrize("case", C.matrix(), ids=C.case_id)
def test_numerics(case, kernel_candidate, kernel_device, kernel_rec):
    b, dt, dist = case
    if not C.supports(kernel_candidate, KERNEL, dt):
        pytest.skip(f"the candidate declares no {dt} variant of {KERNEL}")
    q, k, v, g, beta, state0 = make_inputs(b, dt, dist, kernel_device)
    o, state = run_steps(kernel_candidate, q, k, v, g, beta, state0)
    e_o, e_state = ref.kda_recurrence(q, k, v, g, beta, state0, SCALE)
    scale = input_scale(dist, dt)
    rows = kernel_rec.case(
        kernel=KERNEL,
        shape=shape(b),
        dtype=dt,
        dist=dist,
        outputs={"o": (o, e_o, scale), "state": (state, e_state, scale)},
        device=kernel_device,
    )
    kernel_rec.expect(rows)


@pytest.mark.parametrize("b", (1, 64))
def test_determinism(b, kernel_candidate, kernel_device, kernel_rec):
    dt = C.DTYPES[0]
    inputs = make_inputs(b, dt, "normal", kernel_device)
    rows = kernel_rec.determinism(
        kernel=KERNEL,
        shape=shape(b),
        dtype=dt,
        fn=lambda: run_steps(kernel_candidate, *inputs),
        names=("o", "state"),
        runs=C.DET_RUNS,
        device=kernel_device,
    )
    kernel_rec.expect(rows, "determinism")


def test_perturbation(kernel_candidate, kernel_device, kernel_rec):
    require_cuda(kernel_device, "timing perturbation")
    dt, b = C.DTYPES[0], 64
    q, k, v, g, beta, state0 = make_inputs(b, dt, "normal", kernel_device, steps=1)

    def run(h):
        qq, kk, vv, st = h.delayed_inputs(q[0], k[0], v[0], state0)
        o = kernel_candidate.kda_decode_step(qq, kk, vv, g[0], beta[0], st, SCALE)
        return o, st

    row = kernel_rec.perturbation(
        kernel=KERNEL,
        shape={**shape(b), "steps": 1},
        dtype=dt,
        run=run,
        kind="inputs and state delayed on the current stream, busy work on a side stream, NaN-poisoned allocations",
        trials=C.PERTURB_TRIALS,
        device=kernel_device,
    )
    kernel_rec.expect([row], "perturbation")


@pytest.mark.parametrize("b", (1, 64))
def test_speed_of_light(b, kernel_candidate, kernel_device, kernel_rec):
    require_cuda(kernel_device, "speed of light")
    dt = "bf16"
    q, k, v, g, beta, state0 = make_inputs(b, dt, "normal", kernel_device, steps=1)
    state = state0.clone()
    es = q.element_size()
    nbytes = b * H * (3 * K * es + K * 4 + 4 + 2 * K * V * 4 + V * es)
    kernel_rec.speed(
        kernel=KERNEL,
        shape={**shape(b), "steps": 1},
        dtype=dt,
        fn=lambda: kernel_candidate.kda_decode_step(q[0], k[0], v[0], g[0], beta[0], state, SCALE),
        bytes_moved=nbytes,
        flops=7 * b * H * K * V,
        device=kernel_device,
    )
