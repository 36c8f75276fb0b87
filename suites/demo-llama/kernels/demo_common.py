"""Dimensions and case matrix of the demo Llama (tests/engine/tiny_llama.py builds the model)."""

from __future__ import annotations

from fasttrack.kernels import env
from fasttrack.kernels.inputs import model_dims, suite_dtypes, tiered_matrix

DEFAULT_DIMS = {"hidden": 256, "intermediate": 512, "heads": 4, "head_dim": 64, "max_batch": 8}
DIMS = model_dims(DEFAULT_DIMS)
HIDDEN, INTER = DIMS["hidden"], DIMS["intermediate"]
ATTN_OUT = DIMS["heads"] * DIMS["head_dim"]
MAX_BATCH = DIMS["max_batch"]
"""The demo backend's declared batch range is 1..8."""
EPS = 1e-6
DTYPES = suite_dtypes(("fp32", "bf16"))
TIER = env.tier()
DET_RUNS = {"smoke": 3, "standard": 10, "full": 20}[TIER]


def matrix():
    if TIER == "smoke":
        return tiered_matrix(dtypes=DTYPES, tier=TIER, max_batch=MAX_BATCH)
    return [
        (b, dt, dist)
        for b in range(1, MAX_BATCH + 1)
        for dt in DTYPES
        for dist in ("normal", "large", "tiny", "outliers", "nonfinite")
    ]


def case_id(case) -> str:
    b, dt, dist = case
    return f"b{b}-{dt}-{dist}"
