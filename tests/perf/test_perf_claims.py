"""Claims matching and the interval rule: supported / refuted / inconclusive / not measured, each claim judged
by its own tolerance (never by the perf gate's noise margin)."""

from __future__ import annotations

import pytest

from fasttrack.perf.claims import MeasuredMetric, interval_status, match_claims, point_matches
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
    runs: tuple[float, float] | None = None,
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
        candidate_low=runs[0] if runs else None,
        candidate_high=runs[1] if runs else None,
    )


MEASURED = [
    _m("b1-ctx32", "median_tpot_ms", 1.02, 0.95, 1.10, batch=1),
    _m("b1-ctxfull", "median_tpot_ms", 0.99, 0.90, 1.08, batch=1, context=1000, full=True),
    _m("b1-ctx32", "output_throughput", 1.01, 0.97, 1.05, batch=1, cand=500.0, base=495.0, runs=(490.0, 510.0)),
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
    base: dict = {"id": "c", "text": "t", "point": {"tp": 1, "batch": 1}}
    base.update(kw)
    return Claim(**base)


def _match(claims, *, rehearsal=False, run=("decode", "agent")):
    return match_claims(
        claims,
        MEASURED,
        workload_kinds={"decode": "pure_decode", "agent": "trace_replay", "mixed": "mixed"},
        workloads_run=set(run),
        rehearsal=rehearsal,
    )


def test_speedup_claims_supported_or_refuted() -> None:
    ok, bad = _match(
        [
            _claim(id="ok", metric="speedup_tpot", speedup=1.0, workload="decode"),
            _claim(id="bad", metric="speedup_tpot", speedup=1.5, point={"batch": 4}),
        ]
    )
    assert ok.status == "supported" and ok.point == "b1-ctx32" and ok.other_matches == ["b1-ctxfull"]
    assert ok.measured == pytest.approx(1.02) and ok.ci_high == pytest.approx(1.10)
    assert ok.ci_low == pytest.approx(0.95) and ok.bound == pytest.approx(0.95)
    assert bad.status == "refuted" and "lies below 1.5" in bad.reason and ok.tolerance == 0.05


def test_claim_context_full_matches_the_full_point() -> None:
    # the full point's interval [0.90, 1.08] reaches 0.9 x 0.95 at its lower end
    (r,) = _match([_claim(metric="speedup_tpot", speedup=0.9, point={"batch": 1, "context": "full"})])
    assert r.point == "b1-ctxfull" and r.status == "supported"


def test_a_claim_is_supported_only_by_the_lower_bound() -> None:
    # an older rule (upper end reaches claimed x (1 - margin)) confirmed this; the interval cannot tell
    (r,) = _match([_claim(metric="speedup_tpot", speedup=1.0, point={"batch": 1, "context": "full"})])
    assert r.status == "inconclusive" and "straddles" in r.reason
    assert (r.ci_low, r.ci_high, r.bound) == (pytest.approx(0.90), pytest.approx(1.08), pytest.approx(0.95))


def test_engine_tpot_claims_match_the_engine_timed_metric() -> None:
    measured = [*MEASURED, _m("b1-ctx32", "median_engine_tpot_ms", 0.9, 0.8, 1.0, batch=1)]
    (r,) = match_claims(
        [_claim(metric="speedup_engine_tpot", speedup=1.0, workload="decode", tolerance=0.25)],
        measured,
        workload_kinds={"decode": "pure_decode"},
        workloads_run={"decode"},
        rehearsal=True,
    )
    assert r.status == "supported" and r.measured == pytest.approx(0.9) and r.bound == pytest.approx(0.75)
    assert r.tolerance == 0.25 and "1 x (1 - 0.25) = 0.75" in r.reason


def test_a_slower_candidate_never_supports_a_claim_of_parity() -> None:
    """Claimed 1.0, measured 0.84 [0.75, 0.93]: refuted at the default tolerance, whatever the perf gate's noise
    margin (an older rule judged claims by the margin, 0.6 on the CPU demo, and called this confirmed)."""
    measured = [_m("b1-ctx32", "median_engine_tpot_ms", 0.84, 0.75, 0.93, batch=1)]
    (r,) = match_claims(
        [_claim(metric="speedup_engine_tpot", speedup=1.0, workload="decode")],
        measured,
        workload_kinds={"decode": "pure_decode"},
        workloads_run={"decode"},
        rehearsal=False,
    )
    assert r.status == "refuted" and r.bound == pytest.approx(0.95) and (r.ci_low, r.ci_high) == (0.75, 0.93)
    assert "[0.75, 0.93] lies below 1 x (1 - 0.05) = 0.95: refuted" in r.reason


def test_the_tolerance_is_a_scope_field_with_limits() -> None:
    assert _claim(metric="speedup_tpot", speedup=1.0).tolerance == 0.05
    for bad in (-0.1, 1.0, 2):
        with pytest.raises(ValueError, match="tolerance"):
            _claim(metric="speedup_tpot", speedup=1.0, tolerance=bad)


@pytest.mark.parametrize(
    ("claimed", "low", "high", "higher", "status"),
    [
        (1.0, 0.96, 1.2, True, "supported"),  # lower end reaches 1.0 x 0.95
        (1.0, 0.95, 1.2, True, "supported"),  # exactly at the bound
        (1.0, 0.80, 0.94, True, "refuted"),  # upper end short of the bound
        (1.0, 0.75, 0.93, True, "refuted"),  # 0.84 against a claim of 1: never supported
        (1.0, 0.90, 1.20, True, "inconclusive"),  # straddles the bound
        (1.0, 1.20, 0.96, True, "supported"),  # ends given in either order
        (10.0, 8.0, 10.4, False, "supported"),  # lower is better: upper end within 10 x 1.05
        (10.0, 10.6, 12.0, False, "refuted"),  # lower end beyond the bound
        (10.0, 9.0, 11.0, False, "inconclusive"),
    ],
)
def test_interval_rule(claimed: float, low: float, high: float, higher: bool, status: str) -> None:
    got, bound = interval_status(claimed, low, high, tolerance=0.05, higher_is_better=higher)
    assert got == status
    assert bound == pytest.approx(claimed * (0.95 if higher else 1.05))


def test_absolute_claims_need_the_claims_hardware() -> None:
    claim = _claim(metric="output_throughput", candidate=480.0, baseline=470.0, speedup=1.02)
    (r,) = _match([claim])
    assert r.status == "supported" and r.measured == 500.0 and r.measured_baseline == 495.0
    assert (r.ci_low, r.ci_high) == (490.0, 510.0), "judged by the candidate's per-run range"
    (r,) = _match([_claim(metric="output_throughput", candidate=900.0)])
    assert r.status == "refuted"
    (r,) = _match([_claim(metric="output_throughput", candidate=505.0)])
    assert r.status == "supported", "every run reaches 505 x 0.95"
    (r,) = _match([_claim(metric="output_throughput", candidate=530.0)])
    assert r.status == "inconclusive", "the runs straddle 530 x 0.95 = 503.5"
    # on a rehearsal host the ratio is compared instead, or nothing when there is none
    (r,) = _match([claim], rehearsal=True)
    assert r.status == "supported" and r.claimed == pytest.approx(1.02) and "not comparable" in r.reason
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


AGENTX = {
    "id": "agentx-c1",
    "text": "AgentX: 403.2 vs 223.7 P90 tokens/s/user at concurrency 1 (16 GB300 vs 8)",
    "metric": "interactivity_p90",
    "candidate": 403.2,
    "baseline": 223.7,
    "workload": "agent",
}


def test_the_agentx_claim_across_unequal_gpus_is_a_scope_error_unless_marked() -> None:
    """The vLLM K3 post's AgentX figure: 403.2 P90 tokens/s/user on 16 GB300 against 223.7 on 8. Stated as a
    like-for-like comparison it is refused, naming the claim and what to do."""
    with pytest.raises(ValueError) as exc:
        _claim(**AGENTX, baseline_gpus=8, candidate_gpus=16)
    msg = str(exc.value)
    assert "agentx-c1" in msg and "16 candidate GPUs with 8 baseline GPUs" in msg and "like_for_like: false" in msg
    with pytest.raises(ValueError, match="state baseline_gpus and candidate_gpus"):
        _claim(**AGENTX, like_for_like=False)


def test_the_agentx_claim_is_judged_per_gpu_and_shows_both_per_gpu_figures() -> None:
    claim = _claim(**AGENTX, like_for_like=False, baseline_gpus=8, candidate_gpus=16)
    (r,) = _match([claim], rehearsal=True)
    assert r.like_for_like is False and "not like-for-like" in r.reason
    assert (r.baseline_gpus, r.candidate_gpus) == (8, 16)
    assert r.claimed_candidate_per_gpu == pytest.approx(403.2 / 16)  # 25.2 tokens/s/user per GPU
    assert r.claimed_baseline_per_gpu == pytest.approx(223.7 / 8)  # 27.96 per GPU: the baseline is ahead per GPU
    assert r.claimed_per_gpu_speedup == pytest.approx(403.2 / 223.7 * 8 / 16)  # 0.90x, not 1.80x
    assert "25.2" in r.reason and "27.96" in r.reason
    # the measured trace point (1.1 [1.0, 1.2], equal GPU counts) is held against the per-GPU 0.90x, never 1.80x
    assert r.claimed == pytest.approx(0.901, abs=1e-3) and r.status == "supported"
    # the raw ratio against the same interval would have read as refuted
    assert interval_status(403.2 / 223.7, 1.0, 1.2, tolerance=0.05)[0] == "refuted"


def test_the_shipped_k3_scope_declares_the_agentx_claim_per_gpu() -> None:
    from fasttrack.scope import load_scope

    c = next(c for c in load_scope("kimi-k3").scope.claims if c.id == "agentx-c1")
    assert c.like_for_like is False and (c.baseline_gpus, c.candidate_gpus) == (8, 16)


def test_an_absolute_claim_measured_on_other_gpu_counts_is_compared_per_gpu() -> None:
    claim = _claim(**AGENTX, like_for_like=False, baseline_gpus=8, candidate_gpus=16)
    m = MEASURED[-1].model_copy(update={"baseline_gpus": 8, "candidate_gpus": 8})
    (r,) = match_claims(
        [claim],
        [m],
        workload_kinds={"agent": "trace_replay"},
        workloads_run={"agent"},
        rehearsal=False,
    )
    assert r.measured_candidate_gpus == 8 and "per GPU" in r.reason and r.claimed == pytest.approx(0.901, abs=1e-3)


def test_point_matching_rules() -> None:
    dims = {"tp": 8, "dcp": 1, "spec": "dspark", "draft_length": 7, "batch": 1, "context": 8192, "full_context": False}
    assert point_matches({"tp": 8, "spec": "dspark", "draft_length": 7}, dims, trace=False)
    assert not point_matches({"tp": 16}, dims, trace=False)
    assert not point_matches({"context": "full"}, dims, trace=False)
    assert point_matches({"context": 8192, "batch": 1}, dims, trace=False)
    assert point_matches({"batch": 64}, {"tp": 8}, trace=True)


def test_a_claim_on_an_interval_of_one_lifetime_s_runs_is_inconclusive() -> None:
    """Two lifetimes of one engine differ by more than its runs: an interval that covers one lifetime's runs
    only (no calibration) cannot support or refute a claim, however narrow it is."""
    narrow = _m("b1-ctx32", "median_tpot_ms", 1.0048, 1.00476, 1.00490, batch=1).model_copy(
        update={"lifetime_variance_unmeasured": True}
    )
    (res,) = match_claims(
        [_claim(metric="speedup_tpot", speedup=1.0)],
        [narrow],
        workload_kinds={"decode": "pure_decode"},
        workloads_run={"decode"},
        rehearsal=False,
    )
    assert res.status == "inconclusive" and "lifetime variance unmeasured" in res.reason
    assert res.point == "b1-ctx32" and res.bound is None
