"""Helpers shared by the kernel-tier tests: small model dimensions so suites run fast on a CPU."""

from __future__ import annotations

from pathlib import Path

from fasttrack import ROOT

K3_SUITE = ROOT / "suites" / "kimi-k3" / "kernels"
DEMO_SUITE = ROOT / "suites" / "demo-llama" / "kernels"

#: K3 suite dimensions shrunk for CPU CI (the suite's defaults are the plausible full-size ones).
SMALL_K3_DIMS = {
    "hidden": 512,
    "kda_heads": 16,
    "kda_head_dim": 64,
    "attn_heads": 32,
    "head_dim": 64,
    "kv_heads": 8,
    "experts": 64,
    "latent": 128,
    "shared_inter": 256,
    "max_context": 100,
}


def rows_by(doc: dict, table: str, **match) -> list[dict]:
    return [r for r in doc.get(table, []) if all(r.get(k) == v for k, v in match.items())]


def suite_path(p: Path) -> str:
    return str(p)
