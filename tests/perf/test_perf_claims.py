"""Claims matching: confirmed / not confirmed / not measured."""

from __future__ import annotations

import pytest

from fasttrack.perf.claims import MeasuredMetric, match_claims, point_matches
from fasttrack.scope import Claim


def _m(
    point: str,
    metric: str,
    speedup: float,
    lo: float,
    hi: float,
    *,
    batch: int,
    context: int = 32,
    full: bool = False,
    workload: str = "decode",
    kind: str = "pure_decode",
    cand: float | None = None,
    base: float | None = None,
) -> MeasuredMetric:
    return MeasuredMetric(
        workload=workload,
        kind=kind,
        point=point,
        metric=metric,
        speedup=speedup,
        ci_low=lo,
        ci_high=hi,
        confidence=0.95,
        point_dims={
            "tp": 1,
            "dcp": 1,
            "spec": "none",
            "draft_length": None,
            "batch": batch,
            "context": context,
            "full_context": full,
        },
        baseline_value=base,
        candidate_value=cand,
        detectable_slowdown=0.1,
    )


MEASURED = [
    _m("b1-ctx32", "median_tpot_ms", 1.02, 0.95, 1.10, batch=1),
    _m("b1-ctxfull", "median_tpot_ms", 0.99, 0.90, 1.08, batch=1, context=1000, full=True),
    _m("b1-ctx32", "output_throughput", 1.01, 0.97, 1.05, batch=1, cand=500.0, base=495.0),
    _m("b4-ctx32", "median_tpot_ms", 0.50, 0.45, 0.55, batch=4),
    _m(
        "g-trace",
        "p90_interactivity",
        1.1,
        1.0,
        1.2,
        batch=0,
        workload="agent",
        kind="trace_replay",
        cand=300.0,
        base=270.0,
    ),
]


def _claim(**kw) -> Claim:
    base = {"id": "c", "text": "t", "point": {"tp": 1, "batch": 1}}
    base.update(kw)
    return Claim(**base)


def _match(claims, *, rehearsal=False, run=("decode", "agent")):
    return match_claims(
        claims,
        MEASURED,
        workload_kinds={"decode": "pure_decode", "agent": "trace_replay", "mixed": "mixed"},
        workloads_run=set(run),
        noise_margin=0.05,
        rehearsal=rehearsal,
    )


def test_speedup_claims_confirmed_or_not() -> None:
    ok, bad = _match(
        [
            _claim(id="ok", metric="speedup_tpot", speedup=1.0, workload="decode"),
            _claim(id="bad", metric="speedup_tpot", speedup=1.5, point={"batch": 4}),
        ]
    )
    assert ok.status == "confirmed" and ok.point == "b1-ctx32" and ok.other_matches == ["b1-ctxfull"]
    assert ok.measured == pytest.approx(1.02) and ok.ci_high == pytest.approx(1.10)
    assert bad.status == "not_confirmed" and "below 1.5" in bad.reason


def test_claim_context_full_matches_the_full_point() -> None:
    (r,) = _match([_claim(metric="speedup_tpot", speedup=1.0, point={"batch": 1, "context": "full"})])
    assert r.point == "b1-ctxfull" and r.status == "confirmed"


def test_absolute_claims_need_the_claims_hardware() -> None:
    claim = _claim(metric="output_throughput", candidate=480.0, baseline=470.0, speedup=1.02)
    (r,) = _match([claim])
    assert r.status == "confirmed" and r.measured == 500.0 and r.measured_baseline == 495.0
    (r,) = _match([_claim(metric="output_throughput", candidate=900.0)])
    assert r.status == "not_confirmed"
    # on a rehearsal host the ratio is compared instead, or nothing when there is none
    (r,) = _match([claim], rehearsal=True)
    assert r.status == "confirmed" and r.claimed == pytest.approx(1.02) and "not comparable" in r.reason
    (r,) = _match([_claim(metric="output_throughput", candidate=900.0)], rehearsal=True)
    assert r.status == "not_measured" and "rehearsal" in r.reason


def test_not_measured_reasons() -> None:
    rs = _match(
        [
            _claim(id="k", metric="kernels_per_layer", candidate=13, baseline=23),
            _claim(id="w", metric="speedup_tpot", speedup=1.2, workload="mixed"),
            _claim(id="u", metric="speedup_tpot", speedup=1.2, workload="nope"),
            _claim(id="p", metric="speedup_tpot", speedup=1.2, point={"tp": 16, "batch": 1}),
        ]
    )
    assert [r.status for r in rs] == ["not_measured"] * 4
    assert "profiler" in rs[0].reason
    assert "not run" in rs[1].reason
    assert "does not declare" in rs[2].reason
    assert "no measured point matches tp=16" in rs[3].reason


def test_trace_claim_ignores_batch_and_flags_unequal_resources() -> None:
    claim = _claim(metric="interactivity_p90", candidate=403.2, baseline=223.7, workload="agent", like_for_like=False)
    (r,) = _match([claim], rehearsal=True)
    # on a rehearsal host: the claimed ratio 403.2 / 223.7 is compared with the measured interval
    assert r.status == "not_confirmed" and r.claimed == pytest.approx(403.2 / 223.7)
    assert "not like-for-like" in r.reason and r.like_for_like is False


def test_point_matching_rules() -> None:
    dims = {"tp": 8, "dcp": 1, "spec": "dspark", "draft_length": 7, "batch": 1, "context": 8192, "full_context": False}
    assert point_matches({"tp": 8, "spec": "dspark", "draft_length": 7}, dims, trace=False)
    assert not point_matches({"tp": 16}, dims, trace=False)
    assert not point_matches({"context": "full"}, dims, trace=False)
    assert point_matches({"context": 8192, "batch": 1}, dims, trace=False)
    assert point_matches({"batch": 64}, {"tp": 8}, trace=True)
