"""The H200 rerun after the first run's fixes (examples/h200-rerun): its signed bundle verifies against the
committed key, and what docs/gpu.md says of it is what the bundle holds (the verdicts, every coverage pair
confirmed by the device counter, the mixed prefill-decode probe, the equivalence drift, the perf intervals)."""

from __future__ import annotations

import math

from fasttrack import ROOT
from fasttrack import bundle as B

RUN = ROOT / "examples" / "h200-rerun"
DOC = (ROOT / "docs" / "gpu.md").read_text()
SECTION = DOC[DOC.index("### The rerun after the fixes") : DOC.index("### Not yet measured")]


def _rows(check: str, table: str) -> list[dict]:
    with B.open_bundle(RUN / "bundle.tar.gz") as view:
        return list(view.rows(check, table))


def test_the_rerun_bundle_verifies_and_its_verdicts_are_the_documented_ones() -> None:
    res = B.verify_bundle(RUN / "bundle.tar.gz", keys=[RUN / "h200.pub"])
    assert res.verified, res.failures
    with B.open_bundle(RUN / "bundle.tar.gz") as view:
        m = view.manifest
        assert (m.scope.model, m.scope.tier, m.verdict) == ("demo-llama-gpu", "smoke", "fail")
        verdicts = {name: c.verdict for name, c in m.checks.items()}
    assert verdicts == {
        "isolation": "not_run",
        "kernels": "pass",
        "equivalence": "fail",
        "features": "fail",
        "coverage": "pass",
        "evals": "pass",
        "perf": "fail",
    }
    for name, v in verdicts.items():
        if name != "isolation":
            assert f"| {name} | {v.value}" in SECTION, name


def test_every_coverage_pair_is_device_counted_and_the_mixed_step_formed() -> None:
    rows = [r for r in _rows("coverage", "coverage") if r["in_plan"]]
    assert len(rows) == 17 and "all 17 (point, check) pairs" in SECTION
    for r in rows:
        assert r["verdict"] == "pass" and r["candidate_optimized_fraction"] == 1.0
        assert r["candidate_device_counted"], r["check"]  # the evals' windows too, since the fix
    mixed = {r["side"]: r for r in _rows("coverage", "fallback") if r["situation"] == "mixed_prefill_decode"}
    assert set(mixed) == {"baseline", "candidate"} and all(r["verdict"] == "pass" for r in mixed.values())
    assert mixed["candidate"]["stock_steps"] >= 1 and mixed["candidate"]["fallback_visible"]


def test_the_rerun_drift_and_perf_intervals_are_the_documented_ones() -> None:
    eq = {int(r["batch"]): r for r in _rows("equivalence", "equivalence_points")}
    quoted = ", ".join(f"{eq[b]['max_abs_logprob_diff']:.2f}" for b in (1, 2, 4))
    assert f"{quoted} and {eq[8]['max_abs_logprob_diff']:.2f} at batches 1, 2, 4 and 8" in SECTION
    assert all(r["close_fraction"] == 1.0 and r["verdict"] == "fail" for r in eq.values())
    kl = max(r["kl_mean"] for r in eq.values())
    assert f"KL mean at most {math.ceil(kl * 1e4) / 1e4:.4f}" in SECTION
    pts = [r for r in _rows("perf", "points") if r["metric_name"] == "median_engine_tpot_ms"]
    assert len(pts) == 8 and all(r["verdict"] == "fail" for r in pts)
    widths = [r["ci_high"] - r["ci_low"] for r in pts]
    assert f"intervals {round(min(widths) * 100)}-{round(max(widths) * 100)}% wide" in SECTION
    geo = math.exp(sum(math.log(r["speedup"]) for r in pts) / len(pts))
    assert f"geometric mean {geo:.3f}" in SECTION
    speedups = [r["speedup"] for r in pts]
    assert f"speedups {min(speedups):.2f}-{max(speedups):.2f}" in SECTION
