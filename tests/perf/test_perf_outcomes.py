"""What a perf verdict requires and how it reads: strictly better (the K3 scope), goodput at an SLO, the latency
tails, and a run stopped part way that keeps every decided point ("k of n points measured"). "Measured slower,
within margin" is in tests/report/test_report_perf_outcomes.py (it needs the report's fixtures)."""

from __future__ import annotations

from pathlib import Path

import pytest
from perf_testlib import demo_perf_ctx, simulate

from fasttrack.checks.perf import PerfCheck
from fasttrack.results import Verdict
from fasttrack.scope import ServiceLevel, load_scope

STOPPED = "the run was interrupted (Ctrl-C) before this check finished"


def _gated(res) -> dict[str, dict]:
    return {r["point"]: r for r in res.tables["points"] if r["metric_name"] == "median_engine_tpot_ms"}


def test_the_k3_scope_requires_strictly_better() -> None:
    gate = load_scope("kimi-k3").scope.gates.perf
    assert gate.require == "strictly_better"
    assert load_scope("demo-llama").scope.gates.perf.require == "no_regression"


def test_strictly_better_fails_a_candidate_at_parity_and_passes_a_faster_one(tmp_path: Path) -> None:
    ctx = demo_perf_ctx("smoke", tmp_path / "parity")
    ctx.scope.gates.perf.require = "strictly_better"
    chk = PerfCheck()
    assert chk.skip_reason(ctx) is None
    simulate(chk, ctx, slow_batch=None)
    res = chk.judge(ctx)
    # at parity no lower bound exceeds 1: every point fails the strictly-better gate, though none regressed
    assert res.verdict is Verdict.FAIL and "strictly-better gate" in res.reason and "lower bound > 1" in res.reason
    assert all(r["verdict"] == "fail" and r["threshold"] == 1.0 for r in _gated(res).values())
    assert res.gate is not None and "lower bound > 1 at every point" in res.gate.rule
    # the same candidate 1.5x faster everywhere passes, and says so
    ctx2 = demo_perf_ctx("smoke", tmp_path / "faster")
    ctx2.scope.gates.perf.require = "strictly_better"
    chk2 = PerfCheck()
    assert chk2.skip_reason(ctx2) is None
    simulate(chk2, ctx2, slow_batch=None, factor={b: 1 / 1.5 for b in (1, 2, 3, 4, 8)})
    res2 = chk2.judge(ctx2)
    assert res2.verdict is Verdict.PASS, res2.failures
    assert res2.reason.startswith("strictly better (lower bound > 1) at every one of 10 point(s)")
    assert all(r["ci_low"] > 1 for r in _gated(res2).values())


def test_goodput_at_the_slo_is_reported_and_can_be_gated(tmp_path: Path) -> None:
    ctx = demo_perf_ctx("smoke", tmp_path)
    # the candidate's client-timed gaps are 10x longer at batch 1 (its engine-timed TPOT is unchanged), so its
    # requests miss an ITL bound of 5 ms there; gated, that fails exactly those points
    ctx.scope.gates.perf.slo = ServiceLevel(itl_ms=5.0, ttft_ms=1000.0, gate=True)
    chk = PerfCheck()
    assert chk.skip_reason(ctx) is None
    simulate(chk, ctx, slow_batch=None, client={1: (0.1, 0)})
    res = chk.judge(ctx)
    good = {r["point"]: r for r in res.tables["points"] if r["metric_name"] == "goodput"}
    assert set(good) == {p.id for p in ctx.plan.points}
    assert all(r["gated"] for r in good.values())
    failing = {p for p, r in good.items() if r["verdict"] == "fail"}
    assert failing == {p.id for p in ctx.plan.points if p.batch == 1}
    assert res.verdict is Verdict.FAIL and all("goodput speedup" in f for f in res.failures)
    assert res.summary["slo"] == "TTFT p99 <= 1000 ms, ITL p99 <= 5 ms" and res.summary["slo_gated"]
    runs = [r for r in res.tables["runs"] if r["point"] in failing and r["side"] == "candidate"]
    assert runs and all(r["good_requests"] == 0 and r["goodput"] == 0 for r in runs)


def test_the_tails_table_has_p50_p90_p99_of_ttft_itl_and_tpot_per_point(tmp_path: Path) -> None:
    ctx = demo_perf_ctx("smoke", tmp_path)
    chk = PerfCheck()
    assert chk.skip_reason(ctx) is None
    simulate(chk, ctx, slow_batch=4)
    res = chk.judge(ctx)
    tails = res.tables["tails"]
    for p in ctx.plan.points:
        mine = {(r["metric"], r["statistic"]) for r in tails if r["point"] == p.id}
        assert {
            (m, s) for m in ("ttft_ms", "itl_ms", "tpot_ms", "engine_tpot_ms") for s in ("p50", "p90", "p99")
        } <= mine
    for r in tails:
        assert r["baseline_ci_low"] <= r["baseline"] <= r["baseline_ci_high"], r
        assert r["candidate_ci_low"] <= r["candidate"] <= r["candidate_ci_high"], r
        assert r["ci_low"] <= r["speedup"] <= r["ci_high"]
    slow = [r for r in tails if r["metric"] == "tpot_ms" and r["batch"] == 4]
    assert slow and all(r["ci_high"] < 0.5 for r in slow), "the 4x slower batch reads as such in every tail"
    # the demo SLO's percentile carries its bound and whether each side met it
    p99 = [r for r in tails if r["metric"] == "itl_ms" and r["statistic"] == "p99"]
    assert p99 and all(r["slo_bound"] == 100.0 and r["slo_baseline"] == "met" for r in p99)


def test_a_stopped_run_keeps_every_decided_point(tmp_path: Path) -> None:
    """Three points decided, a fourth with baseline runs only, then Ctrl-C: the partial judgement keeps the
    three points' runs, intervals and verdicts and says '3 of 10 point(s) measured'; nothing passes."""
    ctx = demo_perf_ctx("smoke", tmp_path)
    chk = PerfCheck()
    assert chk.skip_reason(ctx) is None
    keys = list(chk.state.items)
    simulate(chk, ctx, slow_batch=None, keys=keys[:3])
    simulate(chk, ctx, slow_batch=None, keys=keys[3:4], sides=("baseline",))
    assert [chk.state.items[k].final for k in keys[:4]] == [True, True, True, False]
    res = chk.judge_partial(ctx, STOPPED)
    assert res.verdict is Verdict.NOT_RUN
    assert res.reason.startswith("3 of 10 point(s) measured before the run stopped (the run was interrupted (Ctrl-C)")
    assert res.summary["partial"] is True and res.summary["points_measured"] == 3
    rows = _gated(res)
    decided = {chk.state.items[k].item.point for k in keys[:3]}
    for p in decided:
        r = rows[p]
        assert r["verdict"] == "pass" and r["ci_low"] <= r["speedup"] <= r["ci_high"] and r["runs"] >= 8
    fourth = chk.state.items[keys[3]].item.point
    assert rows[fourth]["verdict"] == "not_run" and "not decided when the run stopped" in rows[fourth]["statement"]
    runs = res.tables["runs"]
    assert {r["point"] for r in runs} == decided | {fourth}, "every run taken is kept, the undecided point's too"
    assert sum(1 for r in runs if r["point"] == fourth) == ctx.scope.gates.perf.min_runs
    assert not any(lk.get("at_judge") for lk in res.tables["looks"] if lk["point"] == fourth), "no decision taken"
    assert {r["point"] for r in res.tables["tails"]} == decided
    # a decided failure makes the partial result a failure
    ctx2 = demo_perf_ctx("smoke", tmp_path / "fail")
    chk2 = PerfCheck()
    assert chk2.skip_reason(ctx2) is None
    b4 = [k for k, s in chk2.state.items.items() if s.item.batch == 4][:1]
    simulate(chk2, ctx2, slow_batch=4, keys=b4)
    res2 = chk2.judge_partial(ctx2, STOPPED)
    assert res2.verdict is Verdict.FAIL and res2.reason.startswith("1 of 10 point(s) measured") and res2.failures


def test_a_stopped_run_before_any_point_says_none_was_measured(tmp_path: Path) -> None:
    ctx = demo_perf_ctx("smoke", tmp_path)
    chk = PerfCheck()
    assert chk.skip_reason(ctx) is None
    res = chk.judge_partial(ctx, STOPPED)
    assert res.verdict is Verdict.NOT_RUN and res.reason.startswith("0 of 10 point(s) measured before the run stopped")


@pytest.mark.parametrize("raises", [False, True])
def test_the_pipeline_asks_a_stopped_check_for_its_partial_result(tmp_path: Path, raises: bool) -> None:
    from fasttrack.pipeline.engines import stopped_result

    ctx = demo_perf_ctx("smoke", tmp_path)
    chk = PerfCheck()
    assert chk.skip_reason(ctx) is None
    if raises:
        chk.state.items = None  # type: ignore[assignment]  # judging it raises
    res = stopped_result(chk, ctx, STOPPED, required=True)
    assert res.verdict is Verdict.NOT_RUN and res.required
    if raises:
        assert res.reason.startswith(STOPPED) and "could not be judged" in res.reason
    else:
        assert res.reason.startswith("0 of 10 point(s) measured")
