"""The H200 rerun after the first run's fixes (examples/h200-rerun): its signed bundle verifies against the
committed key, and what docs/gpu.md says of it is what the bundle holds (the verdicts, every coverage pair
confirmed by the device counter, the mixed prefill-decode probe, the equivalence drift, the perf intervals)."""

from __future__ import annotations

import math

from gpu_run_testlib import (
    bundle_rows,
    drift_phrase,
    equivalence_by_batch,
    gated_perf_points,
    geo_mean_phrase,
    interval_phrase,
    verified_verdicts,
)

from fasttrack import ROOT

RUN = ROOT / "examples" / "h200-rerun"
DOC = (ROOT / "docs" / "gpu.md").read_text()
SECTION = DOC[DOC.index("### The rerun after the fixes") : DOC.index("### Not yet measured")]


def test_the_rerun_bundle_verifies_and_its_verdicts_are_the_documented_ones() -> None:
    verdicts = verified_verdicts(RUN)
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
    rows = [r for r in bundle_rows(RUN, "coverage", "coverage") if r["in_plan"]]
    assert len(rows) == 17 and "all 17 (point, check) pairs" in SECTION
    for r in rows:
        assert r["verdict"] == "pass" and r["candidate_optimized_fraction"] == 1.0
        assert r["candidate_device_counted"], r["check"]  # the evals' windows too, since the fix
    mixed = {r["side"]: r for r in bundle_rows(RUN, "coverage", "fallback") if r["situation"] == "mixed_prefill_decode"}
    assert set(mixed) == {"baseline", "candidate"} and all(r["verdict"] == "pass" for r in mixed.values())
    assert mixed["candidate"]["stock_steps"] >= 1 and mixed["candidate"]["fallback_visible"]


def test_the_rerun_drift_and_perf_intervals_are_the_documented_ones() -> None:
    eq = equivalence_by_batch(RUN)
    assert drift_phrase(eq) in SECTION
    assert all(r["close_fraction"] == 1.0 and r["verdict"] == "fail" for r in eq.values())
    kl = max(r["kl_mean"] for r in eq.values())
    assert f"KL mean at most {math.ceil(kl * 1e4) / 1e4:.4f}" in SECTION
    pts = gated_perf_points(RUN)
    assert len(pts) == 8 and all(r["verdict"] == "fail" for r in pts)
    assert interval_phrase(pts) in SECTION
    assert geo_mean_phrase(pts) in SECTION
    speedups = [r["speedup"] for r in pts]
    assert f"speedups {min(speedups):.2f}-{max(speedups):.2f}" in SECTION
