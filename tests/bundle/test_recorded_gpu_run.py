"""The recorded H200 run (examples/h200-run): its signed bundle verifies against the committed key, and what
docs/gpu.md says about it is what the bundle holds (the verdicts, the coverage under CUDA graphs counted by the
device, the equivalence drift, the perf intervals)."""

from __future__ import annotations

from pathlib import Path

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
from fasttrack.report import render_report

RUN = ROOT / "examples" / "h200-run"
DOC = (ROOT / "docs" / "gpu.md").read_text()


def test_the_h200_bundle_verifies_against_the_committed_key() -> None:
    verdicts = verified_verdicts(RUN)
    assert verdicts == {
        "isolation": "not_run",
        "kernels": "pass",
        "equivalence": "fail",
        "features": "fail",
        "coverage": "not_run",
        "evals": "pass",
        "perf": "fail",
    }
    # the table in docs/gpu.md says the same
    for name, v in verdicts.items():
        if name != "isolation":
            assert f"| {name} | {v.replace('not_run', 'not run')} |" in DOC, name


def test_the_fast_path_ran_in_every_replayed_decode_step_by_the_device_counter() -> None:
    rows = [r for r in bundle_rows(RUN, "coverage", "coverage") if r["in_plan"]]
    assert len(rows) == 17 and "17 (point, check) pairs" in DOC
    for r in rows:
        assert r["verdict"] == "pass" and r["candidate_optimized_fraction"] == 1.0
        assert r["candidate_device_unconfirmed_steps"] == 0 and r["baseline_optimized_ops"] == 0
    # every window read the device counter but the evals' (their windows took no counters then; they do now)
    assert {r["check"] for r in rows if not r["candidate_device_counted"]} == {"evals"}
    assert "In 16 pairs the device counter confirmed every optimized step" in DOC
    assert {int(r["point"].split("-b")[1].split("-")[0]) for r in rows} == {1, 2, 4, 8}


def test_the_equivalence_drift_and_the_perf_intervals_are_the_documented_ones() -> None:
    eq = equivalence_by_batch(RUN)
    assert drift_phrase(eq) in DOC
    assert all(r["close_fraction"] == 1.0 for r in eq.values())
    assert max(r["kl_mean"] for r in eq.values()) <= 0.0073 and "KL mean at most 0.0073" in DOC
    pts = gated_perf_points(RUN)
    assert len(pts) == 8 and all(r["verdict"] == "fail" for r in pts)
    assert interval_phrase(pts) in DOC
    assert geo_mean_phrase(pts) in DOC
    # the raw run values are in the bundle: every point kept its 6 + 6 interleaved runs
    for r in pts:
        base, cand = r["baseline_run_values"], r["candidate_run_values"]
        assert [len(x) for x in base] == [6] and [len(x) for x in cand] == [6]


def test_the_h200_report_renders_here(tmp_path: Path) -> None:
    data = render_report(RUN / "bundle.tar.gz", tmp_path / "report.html", keys=[RUN / "h200.pub"])
    assert data.verdict == "fail"
    html = (tmp_path / "report.html").read_text()
    assert "demo-llama-gpu" in html and "NVIDIA H200" in html and "verified" in html
