"""Input generators: shapes from the envelope times value distributions.

Values are drawn on the CPU in float64 from a seeded generator, then rounded to the dtype
and moved to the device, so a case has the same inputs on every host. The reference is
computed from the rounded inputs (upcast to float64), so rounding the inputs is not charged
to the kernel.

Distributions:

- ``normal``: standard normal times ``scale``.
- ``large``: standard normal times a large per-dtype magnitude (``LARGE``), chosen so that
  sums of squares and dot products over a few thousand elements stay finite in fp32.
- ``tiny``: log-uniform magnitudes from the dtype's smallest subnormal to 2**8 times its
  smallest normal, random signs: subnormals (denormals) and small normals, exercising
  flush-to-zero and underflow in reductions.
- ``outliers``: standard normal with about 1% of the last-dimension channels scaled by
  ``OUTLIER`` (the activation-outlier pattern of large language models).
- ``nonfinite``: standard normal with NaN, +Inf and -Inf planted at a few positions, for
  kernels where propagation matters (the reference says where they must appear).
"""

from __future__ import annotations

import math
from typing import Iterable, Mapping, Sequence

import torch

from fasttrack.kernels import env
from fasttrack.kernels.metrics import round_to
from fasttrack.kernels.tolerance import dtype_name, to_dtype

DISTRIBUTIONS: tuple[str, ...] = ("normal", "large", "tiny", "outliers", "nonfinite")

#: Magnitude of the "large" distribution per dtype.
LARGE: dict[str, float] = {"fp64": 1e6, "fp32": 1e6, "bf16": 1e6, "fp16": 1e3, "fp8e4m3": 64.0, "fp8e5m2": 1024.0}
#: Factor applied to outlier channels per dtype.
OUTLIER: dict[str, float] = {"fp64": 1e3, "fp32": 1e3, "bf16": 1e3, "fp16": 1e2, "fp8e4m3": 16.0, "fp8e5m2": 64.0}

#: The decode batch envelope: 1..64 including odd sizes and sizes on either side of powers of two.
BATCH_ENVELOPE: tuple[int, ...] = (1, 2, 3, 4, 5, 7, 8, 15, 16, 17, 31, 32, 33, 48, 63, 64)
BATCHES_BY_TIER: dict[str, tuple[int, ...]] = {
    "smoke": (1, 3, 64),
    "standard": (1, 2, 3, 7, 16, 33, 64),
    "full": BATCH_ENVELOPE,
}


def batch_sizes(tier: str | None = None, *, max_batch: int = 64) -> tuple[int, ...]:
    """Batch sizes for the tier (default: the ``FASTTRACK_KERNEL_TIER`` tier)."""
    t = tier or env.tier()
    sizes = [b for b in BATCHES_BY_TIER[t] if b <= max_batch]
    if max_batch not in sizes and any(b > max_batch for b in BATCHES_BY_TIER[t]):
        sizes.append(max_batch)  # the tier's largest batch lies past the envelope: its largest batch stands for it
    return tuple(sizes)


def model_dims(defaults: Mapping[str, int]) -> dict[str, int]:
    """The suite's default dimensions overridden by the scope's (``FASTTRACK_KERNEL_DIMS``)."""
    dims = dict(defaults)
    for k, v in env.json_var(env.DIMS).items():
        if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
            raise ValueError(f"dimension {k!r} must be a positive integer, got {v!r}")
        dims[k] = v
    return dims


def suite_dtypes(defaults: Sequence[str]) -> tuple[str, ...]:
    """Dtypes to run: ``FASTTRACK_KERNEL_DTYPES`` (the scope's list) or the suite's defaults."""
    import os

    raw = os.environ.get(env.DTYPES, "").strip()
    names = [d.strip() for d in raw.split(",") if d.strip()] if raw else list(defaults)
    return tuple(dtype_name(d) for d in names)


def case_seed(*parts: object) -> int:
    """A stable seed for one case, from the base seed and the case's identity."""
    h = 1469598103934665603
    for ch in repr((env.seed(),) + parts).encode():
        h = ((h ^ ch) * 1099511628211) & 0xFFFF_FFFF_FFFF
    return h


def _finfo(name: str) -> torch.finfo:
    return torch.finfo(to_dtype(name))


def generate(
    shape: Sequence[int],
    *,
    dtype: torch.dtype | str,
    dist: str,
    seed: int,
    device: str | torch.device = "cpu",
    scale: float = 1.0,
) -> torch.Tensor:
    """One input tensor of ``shape`` drawn from ``dist``, rounded to ``dtype``, on ``device``."""
    if dist not in DISTRIBUTIONS:
        raise ValueError(f"unknown distribution {dist!r}; known: {', '.join(DISTRIBUTIONS)}")
    name = dtype_name(dtype)
    g = torch.Generator().manual_seed(seed)
    shape = tuple(int(s) for s in shape)
    base = torch.randn(shape, generator=g, dtype=torch.float64)
    if dist == "normal":
        x = base * scale
    elif dist == "large":
        x = base * LARGE[name]
    elif dist == "tiny":
        fi = _finfo(name)
        lo = math.log2(fi.smallest_normal) + math.log2(fi.eps)  # the smallest subnormal
        hi = math.log2(fi.smallest_normal) + 8
        u = torch.rand(shape, generator=g, dtype=torch.float64)
        sign = torch.where(torch.rand(shape, generator=g, dtype=torch.float64) < 0.5, -1.0, 1.0)
        x = sign * torch.exp2(lo + (hi - lo) * u)
    elif dist == "outliers":
        x = base * scale
        if len(shape) and shape[-1] > 0:
            n = shape[-1]
            k = max(1, n // 100)
            chans = torch.randperm(n, generator=g)[:k]
            x[..., chans] *= OUTLIER[name]
    else:  # nonfinite
        x = base * scale
        flat = x.reshape(-1)
        if flat.numel() >= 3:
            k = max(3, flat.numel() // 1000)
            pos = torch.randperm(flat.numel(), generator=g)[:k]
            vals = torch.tensor([float("nan"), float("inf"), float("-inf")], dtype=torch.float64)
            flat[pos] = vals.repeat(k // 3 + 1)[:k]
        x = flat.reshape(shape)
    return round_to(x, to_dtype(name)).to(device)


def input_scale(dist: str, dtype: torch.dtype | str) -> float:
    """Characteristic magnitude of a distribution's values (1 for unit-scale ones).

    Tests multiply atol by it for outputs whose magnitude, or whose rounding error, grows
    with the inputs (atol is stated for unit-scale data).
    """
    name = dtype_name(dtype)
    return {"large": LARGE[name], "outliers": OUTLIER[name]}.get(dist, 1.0)


def positive(
    shape: Sequence[int],
    *,
    dtype: torch.dtype | str,
    seed: int,
    low: float,
    high: float,
    device: str | torch.device = "cpu",
) -> torch.Tensor:
    """Uniform values in [low, high) (gates, decay rates, scales), rounded to ``dtype``."""
    g = torch.Generator().manual_seed(seed)
    x = low + (high - low) * torch.rand(tuple(shape), generator=g, dtype=torch.float64)
    return round_to(x, to_dtype(dtype)).to(device)


def matrix(batches: Iterable[int], dtypes: Iterable[str], dists: Iterable[str]) -> list[tuple[int, str, str]]:
    """The cross product, as a list of (batch, dtype, dist)."""
    return [(b, d, v) for b in batches for d in dtypes for v in dists]


def tiered_matrix(
    *, dtypes: Sequence[str], dists: Sequence[str] = DISTRIBUTIONS, tier: str | None = None, max_batch: int = 64
) -> list[tuple[int, str, str]]:
    """The case matrix of a tier.

    ``full`` and ``standard``: every batch of the tier x every dtype x every distribution.
    ``smoke``: every distribution at an odd batch (3) in every dtype, plus the smallest and
    largest batch with normal values.
    """
    t = tier or env.tier()
    batches = batch_sizes(t, max_batch=max_batch)
    if t != "smoke":
        return matrix(batches, dtypes, dists)
    odd = 3 if 3 <= max_batch else batches[0]
    cases = matrix([odd], dtypes, dists)
    for b in (batches[0], batches[-1]):
        if b != odd:
            cases += matrix([b], dtypes, ["normal"])
    return cases
