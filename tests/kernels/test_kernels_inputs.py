"""Input generators: envelope shapes and value distributions."""

from __future__ import annotations

import json

import pytest
import torch

from fasttrack.kernels import env
from fasttrack.kernels.inputs import (
    BATCH_ENVELOPE,
    DISTRIBUTIONS,
    LARGE,
    batch_sizes,
    case_seed,
    generate,
    input_scale,
    model_dims,
    suite_dtypes,
    tiered_matrix,
)


def test_batch_envelope_covers_1_to_64_with_odd_sizes():
    assert BATCH_ENVELOPE[0] == 1 and BATCH_ENVELOPE[-1] == 64
    assert {3, 7, 33, 63} <= set(BATCH_ENVELOPE)
    for tier in env.TIERS:
        bs = batch_sizes(tier)
        assert bs[0] == 1 and bs[-1] == 64 and any(b % 2 for b in bs if b > 1)
    assert batch_sizes("full", max_batch=8) == tuple(b for b in BATCH_ENVELOPE if b <= 8)


def test_a_smaller_envelope_keeps_its_largest_batch_in_every_tier():
    """The smoke tier's batches are 1, 3 and 64; an envelope that ends at 8 tests 8 in place of 64 (a defect
    from some batch size on must not hide past the envelope's end)."""
    assert batch_sizes("smoke", max_batch=8) == (1, 3, 8)
    assert batch_sizes("standard", max_batch=8)[-1] == 8
    assert (8, "fp32", "normal") in tiered_matrix(dtypes=["fp32"], tier="smoke", max_batch=8)


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16", "fp8"])
@pytest.mark.parametrize("dist", DISTRIBUTIONS)
def test_generate_is_deterministic_and_in_dtype(dtype, dist):
    a = generate((4, 300), dtype=dtype, dist=dist, seed=7)
    b = generate((4, 300), dtype=dtype, dist=dist, seed=7)
    assert a.shape == (4, 300) and str(a.dtype).endswith(
        {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "fp8": "float8_e4m3fn"}[dtype]
    )
    assert torch.equal(a.view(torch.uint8), b.view(torch.uint8))
    assert not torch.equal(a.view(torch.uint8), generate((4, 300), dtype=dtype, dist=dist, seed=8).view(torch.uint8))


def test_distributions_have_their_character():
    normal = generate((64, 1000), dtype="fp32", dist="normal", seed=1).double()
    assert 0.9 < normal.std().item() < 1.1
    large = generate((64, 1000), dtype="fp32", dist="large", seed=1).double()
    assert large.abs().median().item() > LARGE["fp32"] / 10
    tiny = generate((64, 1000), dtype="bf16", dist="tiny", seed=1).double()
    fi = torch.finfo(torch.bfloat16)
    assert tiny.abs().max().item() < 2**9 * fi.smallest_normal
    assert ((tiny != 0) & (tiny.abs() < fi.smallest_normal)).any(), "no subnormals"
    outl = generate((8, 1000), dtype="fp32", dist="outliers", seed=1).double()
    chans = (outl.abs().amax(0) > 50).sum().item()
    assert 1 <= chans <= 20
    nf = generate((8, 1000), dtype="bf16", dist="nonfinite", seed=1).double()
    assert torch.isnan(nf).any() and (nf == float("inf")).any() and (nf == float("-inf")).any()
    assert torch.isfinite(nf).float().mean().item() > 0.99


def test_fp16_large_stays_finite():
    assert torch.isfinite(generate((64, 4096), dtype="fp16", dist="large", seed=3).float()).all()


def test_input_scale():
    assert input_scale("normal", "bf16") == 1.0 and input_scale("large", "bf16") == LARGE["bf16"]


def test_unknown_distribution():
    with pytest.raises(ValueError, match="unknown distribution"):
        generate((2,), dtype="fp32", dist="uniform", seed=0)


def test_case_seed_is_stable_and_distinct(monkeypatch):
    monkeypatch.delenv(env.SEED, raising=False)
    assert case_seed("k", 1, "bf16") == case_seed("k", 1, "bf16")
    assert case_seed("k", 1, "bf16") != case_seed("k", 3, "bf16")
    monkeypatch.setenv(env.SEED, "5")
    assert case_seed("k", 1, "bf16") != case_seed("k", 1, "bf16", "x")


def test_model_dims_override_and_validation(monkeypatch):
    monkeypatch.setenv(env.DIMS, json.dumps({"hidden": 512}))
    assert model_dims({"hidden": 7168, "heads": 8}) == {"hidden": 512, "heads": 8}
    monkeypatch.setenv(env.DIMS, json.dumps({"hidden": -1}))
    with pytest.raises(ValueError, match="positive integer"):
        model_dims({"hidden": 7168})
    monkeypatch.setenv(env.DIMS, "[1]")
    with pytest.raises(ValueError, match="JSON object"):
        model_dims({})


def test_suite_dtypes(monkeypatch):
    monkeypatch.delenv(env.DTYPES, raising=False)
    assert suite_dtypes(("bf16", "fp32")) == ("bf16", "fp32")
    monkeypatch.setenv(env.DTYPES, "fp16,bfloat16")
    assert suite_dtypes(("fp32",)) == ("fp16", "bf16")


def test_tiered_matrix():
    full = tiered_matrix(dtypes=("bf16",), tier="full")
    assert len(full) == len(BATCH_ENVELOPE) * len(DISTRIBUTIONS)
    smoke = tiered_matrix(dtypes=("bf16", "fp32"), tier="smoke")
    assert {(3, d, v) for d in ("bf16", "fp32") for v in DISTRIBUTIONS} <= set(smoke)
    assert (1, "bf16", "normal") in smoke and (64, "fp32", "normal") in smoke
