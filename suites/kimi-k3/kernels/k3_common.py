"""Shared settings of the Kimi K3 kernel suite: dimensions, dtypes, case matrices.

Kimi K3's dimensions are not public. The defaults below are plausible values extrapolated
from the public Kimi K2 and Kimi Linear configurations (hidden 7168, 64 attention heads of
128, KDA heads of 128, 384 routed experts), stated as assumptions; the scope's
``kernels[].dims`` overrides any of them (``FASTTRACK_KERNEL_DIMS``).
"""

from __future__ import annotations

from fasttrack.kernels import env
from fasttrack.kernels.inputs import model_dims, suite_dtypes, tiered_matrix

#: Plausible K3 dimensions (totals across the TP group unless noted). Not published: assumptions.
DEFAULT_DIMS: dict[str, int] = {
    "hidden": 7168,
    "kda_heads": 64,
    "kda_head_dim": 128,
    "attn_heads": 64,
    "head_dim": 128,
    "kv_heads": 8,
    "experts": 384,
    "latent": 1536,
    "shared_inter": 2048,
    "tp": 8,
    "dcp": 8,
    "max_context": 262144,
}

DIMS = model_dims(DEFAULT_DIMS)
TP = DIMS["tp"]
DCP = DIMS["dcp"]
HIDDEN = DIMS["hidden"]
KDA_HEADS = max(1, DIMS["kda_heads"] // TP)
"""KDA heads on one TP rank."""
KDA_DIM = DIMS["kda_head_dim"]
ATTN_HEADS = max(1, DIMS["attn_heads"] // TP)
"""Query heads on one TP rank."""
KV_HEADS = max(1, DIMS["kv_heads"] // TP)
"""KV heads on one TP rank."""
HEAD_DIM = DIMS["head_dim"]
EXPERTS = DIMS["experts"]
LATENT = DIMS["latent"]
SHARED_INTER = max(1, DIMS["shared_inter"] // TP)
"""Shared-expert projection width on one TP rank."""
EPS = 1e-6

#: Dtypes the suite runs by default (the scope's list replaces it).
DTYPES = suite_dtypes(("bf16", "fp32"))
TIER = env.tier()

#: Context lengths of the DCP cases per tier (tokens across all DCP ranks).
CONTEXTS = tuple(
    c
    for c in {
        "smoke": (1, 77, 1000),
        "standard": (1, 7, 129, 1000, 4096),
        "full": (1, 7, 8, 9, 129, 1000, 4096, 16384),
    }[TIER]
    if c <= DIMS["max_context"]
)
#: Decode steps chained in the KDA cases.
KDA_STEPS = {"smoke": 3, "standard": 4, "full": 8}[TIER]
#: Repeated runs in the determinism tests and trials in the perturbation tests.
DET_RUNS = {"smoke": 3, "standard": 10, "full": 20}[TIER]
PERTURB_TRIALS = {"smoke": 10, "standard": 20, "full": 40}[TIER]


def matrix(dists=None, max_batch: int = 64):
    kw = {} if dists is None else {"dists": dists}
    return tiered_matrix(dtypes=DTYPES, tier=TIER, max_batch=max_batch, **kw)


def case_id(case) -> str:
    b, dt, dist = case
    return f"b{b}-{dt}-{dist}"


def supports(candidate, kernel: str, dtype: str) -> bool:
    """Whether the candidate declares ``dtype`` for ``kernel`` (``SUPPORTED_DTYPES``)."""
    table = getattr(candidate, "SUPPORTED_DTYPES", None)
    if not table:
        return True
    return dtype in table.get(kernel, table.get("*", ()))
