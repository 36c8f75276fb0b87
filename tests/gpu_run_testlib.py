"""The recorded H200 runs (``examples/h200-run``, ``examples/h200-rerun``): their signed bundles' verdicts and
rows, and the figures ``docs/gpu.md`` quotes from them, phrased as the document phrases them."""

from __future__ import annotations

import math
from pathlib import Path

from fasttrack import bundle as B


def bundle_rows(run: Path, check: str, table: str) -> list[dict]:
    """One table of one check in the run's bundle."""
    with B.open_bundle(run / "bundle.tar.gz") as view:
        return list(view.rows(check, table))


def verified_verdicts(run: Path) -> dict[str, str]:
    """The run's per-check verdicts, after its bundle verified against the committed key (``h200.pub``) and
    proved to be the GPU demo target's smoke run, failing overall."""
    res = B.verify_bundle(run / "bundle.tar.gz", keys=[run / "h200.pub"])
    assert res.verified, res.failures
    with B.open_bundle(run / "bundle.tar.gz") as view:
        m = view.manifest
        assert (m.scope.model, m.scope.tier, m.verdict) == ("demo-llama-gpu", "smoke", "fail")
        return {name: c.verdict for name, c in m.checks.items()}


def equivalence_by_batch(run: Path) -> dict[int, dict]:
    return {int(r["batch"]): r for r in bundle_rows(run, "equivalence", "equivalence_points")}


def drift_phrase(eq: dict[int, dict]) -> str:
    """The largest |Δ logprob| per batch, as quoted: ``0.19, 0.19, 0.34 and 0.44 at batches 1, 2, 4 and 8``."""
    quoted = ", ".join(f"{eq[b]['max_abs_logprob_diff']:.2f}" for b in (1, 2, 4))
    return f"{quoted} and {eq[8]['max_abs_logprob_diff']:.2f} at batches 1, 2, 4 and 8"


def gated_perf_points(run: Path) -> list[dict]:
    """The perf rows of the gated metric (engine-timed TPOT)."""
    return [r for r in bundle_rows(run, "perf", "points") if r["metric_name"] == "median_engine_tpot_ms"]


def interval_phrase(pts: list[dict]) -> str:
    """The narrowest and widest speedup interval, as quoted: ``intervals 14-52% wide``."""
    widths = [r["ci_high"] - r["ci_low"] for r in pts]
    return f"intervals {round(min(widths) * 100)}-{round(max(widths) * 100)}% wide"


def geo_mean_phrase(pts: list[dict]) -> str:
    """The speedups' geometric mean, as quoted: ``geometric mean 0.998``."""
    return f"geometric mean {math.exp(sum(math.log(r['speedup']) for r in pts) / len(pts)):.3f}"
