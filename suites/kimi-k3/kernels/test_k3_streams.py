"""The side-stream pair: add + RMSNorm (producer, current stream) feeding the shared-expert
projection (consumer, side stream), as in K3's shared expert on a side stream. The consumer
must wait for the producer's event; timing perturbation with a NaN-poisoned intermediate
buffer shows a read that runs ahead of its wait."""

from __future__ import annotations

import k3_common as C
import k3_reference as ref
import torch

from fasttrack.kernels.inputs import case_seed, generate, positive
from fasttrack.kernels.perturb import poison_
from fasttrack.kernels.plugin import require_cuda

KERNEL = "shared_expert_side_stream"


def make_inputs(b: int, dt: str, device: torch.device):
    s = case_seed(KERNEL, b, dt)
    x = generate((b, C.HIDDEN), dtype=dt, dist="normal", seed=s, device=device)
    res = generate((b, C.HIDDEN), dtype=dt, dist="normal", seed=s + 1, device=device)
    w = positive((C.HIDDEN,), dtype=dt, seed=s + 2, low=0.5, high=1.5, device=device)
    w_shared = generate(
        (C.SHARED_INTER, C.HIDDEN), dtype=dt, dist="normal", seed=s + 3, device=device, scale=C.HIDDEN**-0.5
    )
    return x, res, w, w_shared


def test_side_stream_pair(kernel_candidate, kernel_device, kernel_rec):
    require_cuda(kernel_device, "the two-stream producer/consumer pair")
    dt, b = C.DTYPES[0], 64
    x, res, w, w_shared = make_inputs(b, dt, kernel_device)
    shape = {"B": b, "hidden": C.HIDDEN, "inter": C.SHARED_INTER}
    h_buf = torch.empty(b, C.HIDDEN, dtype=x.dtype, device=kernel_device)
    side = torch.cuda.Stream(device=kernel_device)
    e_y, e_r = ref.shared_expert(x, res, w, C.EPS, w_shared)

    poison_(h_buf)
    torch.cuda.synchronize(kernel_device)
    y, r = kernel_candidate.shared_expert_side_stream(x, res, w, C.EPS, w_shared, h_buf=h_buf, side_stream=side)
    torch.cuda.synchronize(kernel_device)
    rows = kernel_rec.case(
        kernel=KERNEL,
        shape=shape,
        dtype=dt,
        dist="normal",
        outputs={"y": (y, e_y), "residual_out": (r, e_r)},
        device=kernel_device,
    )

    def run(h):
        return kernel_candidate.shared_expert_side_stream(
            x, res, w, C.EPS, w_shared, h_buf=h_buf, side_stream=side, before_producer=h.before_producer
        )

    row = kernel_rec.perturbation(
        kernel=KERNEL,
        shape=shape,
        dtype=dt,
        run=run,
        poison=[h_buf],
        kind="producer delayed on its stream, consumer on a side stream, intermediate buffer NaN-poisoned",
        trials=C.PERTURB_TRIALS,
        device=kernel_device,
        expected_nan=[torch.isnan(e_y), torch.isnan(e_r)],
    )
    kernel_rec.expect(rows + [row], "side-stream")
