"""Gate logic on synthetic runs: look schedule, adaptive repetition, per-point verdicts, MDE,
intersection-union, drift, per-GPU normalisation and the check's result tables."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest
from perf_testlib import SLOW_FACTOR, calibrate, demo_perf_ctx, fake_run, measure, simulate

from fasttrack.checks.base import Verdict
from fasttrack.checks.perf import PerfCheck, gpus_from_args, measure_item
from fasttrack.perf.analysis import ItemState, judge_item
from fasttrack.perf.loadgen import run_loop
from fasttrack.perf.metrics import RunMetrics
from fasttrack.perf.schedule import LookSchedule
from fasttrack.perf.workloads import WorkItem
from fasttrack.results import claim_verdict
from fasttrack.scope import PerfGate


def _item(point: str = "p-b1", batch: int = 1) -> WorkItem:
    return WorkItem(
        key=f"decode@{point}",
        workload="decode",
        kind="pure_decode",
        point=point,
        group="g",
        batch=batch,
        context=32,
        full_context=False,
        prompt_len=32,
        output_len=64,
        requests_per_run=24,
        mode="waves",
        point_dims={"tp": 1, "batch": batch, "context": 32, "full_context": False},
    )


GATE = PerfGate(noise_margin=0.1, confidence=0.95, min_runs=3, max_runs=6, interleave_settle_s=0)
GATE_PAIRS = PerfGate(noise_margin=0.1, confidence=0.95, min_runs=4, max_runs=8, interleave=True, interleave_settle_s=0)


def _measure(
    state: ItemState,
    sched: LookSchedule,
    side: str,
    lifetime: int,
    *,
    tpot: float,
    seed: int,
    sd: float = 0.03,
    failed: int = 0,
    gpus: int = 0,
    gate: PerfGate = GATE,
) -> int:
    rng = np.random.default_rng(seed)

    async def run_once(k: int) -> RunMetrics:
        return fake_run(state.item, side, lifetime, k, tpot=tpot, rng=rng, sd=sd, failed=failed, gpus=gpus)

    state.gpus[side] = gpus
    return measure(state, sched, gate, side, lifetime, run_once)


# ---------------------------------------------------------------------------------- schedule


def test_look_schedule_by_tier() -> None:
    smoke = LookSchedule.for_group(["baseline", "candidate"], min_runs=3, max_runs=6)
    assert smoke.look_positions() == [1] and smoke.planned_looks == 4
    assert not smoke.looks_allowed("baseline", 0) and smoke.looks_allowed("candidate", 0)
    std = LookSchedule.for_group(["baseline", "candidate"] * 2, min_runs=3, max_runs=6)
    assert std.min_lifetimes == 2 and std.look_positions() == [3] and std.planned_looks == 4
    full = LookSchedule.for_group(["baseline", "candidate"] * 3, min_runs=3, max_runs=8)
    assert full.look_positions() == [3, 4, 5] and full.planned_looks == 18
    assert full.per_look_confidence(0.95) == pytest.approx(1 - 0.05 / 18)
    assert full.position("candidate", 2) == 5 and full.position("candidate", 3) is None
    with pytest.raises(ValueError):
        LookSchedule.for_group(["baseline", "candidate"], min_runs=4, max_runs=3)


# ---------------------------------------------------------------------------------- adaptive repetition


def test_equal_sides_decide_pass_at_the_first_look() -> None:
    sched = LookSchedule.for_group(["baseline", "candidate"], min_runs=3, max_runs=6)
    s = ItemState(item=_item())
    assert _measure(s, sched, "baseline", 0, tpot=2.0, seed=1) == 3 and not s.looks
    assert _measure(s, sched, "candidate", 0, tpot=2.0, seed=2) == 3
    assert s.final and s.decision == "decided_pass" and len(s.looks) == 1
    assert s.looks[0]["per_look_confidence"] == pytest.approx(1 - 0.05 / 4)


def test_a_clear_regression_fails_at_the_first_look() -> None:
    sched = LookSchedule.for_group(["baseline", "candidate"], min_runs=3, max_runs=6)
    s = ItemState(item=_item())
    _measure(s, sched, "baseline", 0, tpot=2.0, seed=1)
    assert _measure(s, sched, "candidate", 0, tpot=4.0, seed=2) == 3
    assert s.decision == "decided_fail" and s.final and s.looks[0]["ci_high"] < 0.9


def test_an_undecided_point_runs_to_max_runs_and_fails_at_the_last_look() -> None:
    # a true 10% slowdown against a 10% margin with noisy runs: never decides early
    sched = LookSchedule.for_group(["baseline", "candidate"], min_runs=3, max_runs=6)
    s = ItemState(item=_item())
    _measure(s, sched, "baseline", 0, tpot=2.0, seed=1, sd=0.25)
    assert _measure(s, sched, "candidate", 0, tpot=2.2, seed=2, sd=0.25) == 6
    assert [lk["look"] for lk in s.looks] == [1, 2, 3, 4]
    assert s.final and s.decision == "decided_fail"
    assert "last planned look" in s.looks[-1]["reason"]


def test_standard_tier_skips_decided_points_on_later_lifetimes_and_looks_only_with_two_lifetimes() -> None:
    sched = LookSchedule.for_group(["baseline", "candidate"] * 3, min_runs=3, max_runs=5)
    s = ItemState(item=_item())
    _measure(s, sched, "baseline", 0, tpot=2.0, seed=1)
    _measure(s, sched, "candidate", 0, tpot=2.0, seed=2)
    assert not s.looks  # one lifetime per side: too early to decide
    _measure(s, sched, "baseline", 1, tpot=2.0, seed=3)
    _measure(s, sched, "candidate", 1, tpot=2.0, seed=4)
    assert s.final and s.decision == "decided_pass"
    assert s.looks[0]["per_look_confidence"] == pytest.approx(1 - 0.05 / 9)


def test_harness_error_in_a_run_is_recorded() -> None:
    sched = LookSchedule.for_group(["baseline", "candidate"], min_runs=3, max_runs=6)
    s = ItemState(item=_item())

    async def boom(k: int) -> RunMetrics:
        raise RuntimeError("no route")

    assert (
        asyncio.run(
            measure_item(s, side="baseline", lifetime=0, looks_here=False, sched=sched, gate=GATE, run_once=boom)
        )
        == 0
    )
    assert "no route" in s.errors[0]


# ---------------------------------------------------------------------------------- judging one point


def test_judge_item_rows_carry_interval_mde_and_raw_values() -> None:
    sched = LookSchedule.for_group(["baseline", "candidate"], min_runs=3, max_runs=6)
    s = ItemState(item=_item())
    _measure(s, sched, "baseline", 0, tpot=2.0, seed=1)
    _measure(s, sched, "candidate", 0, tpot=1.6, seed=2)
    j = judge_item(
        s,
        metrics=["median_tpot_ms", "output_throughput"],
        gated="median_tpot_ms",
        noise_margin=0.1,
        confidence=0.95,
        planned_looks=sched.planned_looks,
    )
    assert j.verdict == "pass" and j.strictly_better and j.failure is None
    tpot, thr = j.rows
    assert tpot["gated"] and tpot["verdict"] == "pass" and thr["verdict"] is None
    assert tpot["speedup"] == pytest.approx(1.25, rel=0.05) and tpot["ci_low"] > 1.0
    assert tpot["confidence"] == pytest.approx(1 - 0.05 / 4) and thr["confidence"] == 0.95
    assert 0 < tpot["mde"] < 0.2 and 0.05 < tpot["gate_detectable_slowdown"] <= 0.1
    assert "would have been detected" in tpot["statement"] and "ignores lifetime" not in tpot["statement"]
    # one lifetime per side: the interval's lifetime variance is the calibration's
    assert tpot["ignores_lifetime_variance"] is False and not tpot["inconclusive"]
    assert tpot["lifetime_variance"].startswith("calibrated: the tests' calibration")
    # strictly better is judged at the family-wise level: a lower bound below the nominal one
    assert tpot["strict_low"] is not None and 1.0 < tpot["strict_low"] <= tpot["ci_low"]
    assert len(tpot["baseline_run_values"][0]) == 3 and tpot["runs"] == 6
    assert thr["speedup"] == pytest.approx(1.25, rel=0.05)


def test_lifetime_t_interval_counts_lifetime_variance_and_falls_back_below_three_lifetimes() -> None:
    gate_t = GATE.model_copy(update={"interval": "lifetime_t"})
    sched = LookSchedule.for_group(["baseline", "candidate"] * 2, min_runs=3, max_runs=5)
    rows = {}
    for interval, gate in (("bootstrap", GATE), ("lifetime_t", gate_t)):
        s = ItemState(item=_item())
        # no change between the sides, a lifetime-to-lifetime shift of 20% on both
        for lt, (tb, tc) in enumerate(((2.0, 2.4), (2.4, 2.0))):
            _measure(s, sched, "baseline", lt, tpot=tb, seed=10 + lt, gate=gate)
            _measure(s, sched, "candidate", lt, tpot=tc, seed=20 + lt, gate=gate)
        assert s.looks, interval
        j = judge_item(
            s,
            metrics=["median_tpot_ms"],
            gated="median_tpot_ms",
            noise_margin=0.1,
            confidence=0.95,
            planned_looks=sched.planned_looks,
            interval=interval,
        )
        rows[interval] = j.rows[0]
    t, b = rows["lifetime_t"], rows["bootstrap"]
    assert "t interval on log per-lifetime statistics" in t["method"] and "df = 2" in t["method"]
    assert "t interval" not in b["method"]
    assert t["ignores_lifetime_variance"] is False
    # the t interval is wider than the bootstrap's with two lifetimes per side
    assert (t["ci_high"] / t["ci_low"]) > (b["ci_high"] / b["ci_low"])
    # one lifetime per side: lifetime_t cannot be computed; the calibrated lifetime interval is used instead
    sched1 = LookSchedule.for_group(["baseline", "candidate"], min_runs=3, max_runs=6)
    s = ItemState(item=_item())
    _measure(s, sched1, "baseline", 0, tpot=2.0, seed=1, gate=gate_t)
    _measure(s, sched1, "candidate", 0, tpot=2.0, seed=2, gate=gate_t)
    j = judge_item(
        s,
        metrics=["median_tpot_ms"],
        gated="median_tpot_ms",
        noise_margin=0.1,
        confidence=0.95,
        planned_looks=sched1.planned_looks,
        interval="lifetime_t",
    )
    row = j.rows[0]
    assert row["ignores_lifetime_variance"] is False and row["verdict"] == "pass"
    assert row["lifetime_variance"].startswith("calibrated")


def test_unequal_gpus_are_compared_per_gpu() -> None:
    sched = LookSchedule.for_group(["baseline", "candidate"], min_runs=3, max_runs=6)
    s = ItemState(item=_item())
    _measure(s, sched, "baseline", 0, tpot=2.0, seed=1, gpus=8)
    # twice as fast on twice the GPUs: per GPU it is no better
    _measure(s, sched, "candidate", 0, tpot=1.0, seed=2, gpus=16)
    j = judge_item(
        s,
        metrics=["median_tpot_ms"],
        gated="median_tpot_ms",
        noise_margin=0.1,
        confidence=0.95,
        planned_looks=sched.planned_looks,
    )
    (row,) = j.rows
    assert row["per_gpu"] and row["raw_speedup"] == pytest.approx(2.0, rel=0.05)
    assert row["speedup"] == pytest.approx(1.0, rel=0.05)
    assert gpus_from_args(["--tensor-parallel-size", "8", "-pp", "2"], 1) == 16
    assert gpus_from_args(["--tensor-parallel-size=4"], 1) == 4 and gpus_from_args([], 3) == 3


def test_candidate_request_failures_fail_the_point() -> None:
    sched = LookSchedule.for_group(["baseline", "candidate"], min_runs=3, max_runs=6)
    s = ItemState(item=_item())
    _measure(s, sched, "baseline", 0, tpot=2.0, seed=1)
    _measure(s, sched, "candidate", 0, tpot=2.0, seed=2, failed=1)
    j = judge_item(
        s, metrics=["median_tpot_ms"], gated="median_tpot_ms", noise_margin=0.1, confidence=0.95, planned_looks=4
    )
    assert j.verdict == "fail" and "candidate failed" in (j.failure or "") and "boom" in (j.failure or "")


# ------------------------------------------------------------------------ the check end to end (synthetic engines)


def test_smoke_check_fails_exactly_the_slow_batch_and_reports_every_point(tmp_path: Path) -> None:
    ctx = demo_perf_ctx("smoke", tmp_path)
    chk = PerfCheck()
    assert chk.skip_reason(ctx) is None
    simulate(chk, ctx, slow_batch=4)
    res = chk.judge(ctx)
    assert res.verdict is Verdict.FAIL
    failing = {r["point"] for r in res.tables["points"] if r.get("verdict") == "fail"}
    assert failing == {p.id for p in ctx.plan.points if p.batch == 4}
    assert len(res.failures) == 2 and all("-b4-" in f for f in res.failures)
    gated = [r for r in res.tables["points"] if r["gated"]]
    assert {r["point"] for r in gated} == {p.id for p in ctx.plan.points}
    for r in gated:
        assert r["ci_low"] <= r["speedup"] <= r["ci_high"] and r["mde"] is not None and r["runs"] >= 6
    assert res.summary["ignores_lifetime_variance"] is False and "ignore lifetime variance" not in res.reason
    assert all(r["lifetime_variance"].startswith("calibrated") for r in gated)
    assert res.gate is not None and res.gate.threshold == pytest.approx(1 - ctx.scope.gates.perf.noise_margin)
    assert len(res.tables["runs"]) == sum(r["runs"] for r in gated)
    assert all(run["tpot_ms"] for run in res.tables["runs"])
    (claim,) = res.tables["claims"]
    assert claim["id"] == "demo-b1" and "-b1-ctx32" in claim["point"]
    # judged by the engine-timed TPOT interval against the claim's own 1.0 x (1 - 0.05), not the gate's margin
    assert claim["metric"] == "speedup_engine_tpot" and claim["bound"] == pytest.approx(0.95) != res.gate.threshold
    assert claim["status"] == claim_verdict(1.0, claim["ci_low"], claim["ci_high"], tolerance=0.05)[0], claim
    # every row says whether its metric is client-timed and how many requests arrived in bursts
    timed = {r["metric_name"]: r["client_timed"] for r in res.tables["points"] if "client_timed" in r}
    assert timed == {
        "median_engine_tpot_ms": False,
        "median_tpot_ms": True,
        "output_throughput": False,
        "goodput": True,  # the demo scope's SLO adds goodput, judged on client timing
    }
    assert all(r["burst_delivered"] == 0 for r in res.tables["points"])


def test_engine_timed_gate_without_engine_timing_is_not_run_and_says_why(tmp_path: Path) -> None:
    ctx = demo_perf_ctx("smoke", tmp_path)
    assert ctx.scope.gates.perf.gated_metric == "median_engine_tpot_ms"
    chk = PerfCheck()
    assert chk.skip_reason(ctx) is None
    simulate(chk, ctx, slow_batch=None, engine_timed=("candidate",))  # e.g. an attached baseline without the flag
    res = chk.judge(ctx)
    assert res.verdict is Verdict.NOT_RUN
    assert (
        "baseline engine reported no per-request timing" in res.reason and "--enable-per-request-metrics" in res.reason
    )
    assert (
        res.summary["engine_timed_requests"]["baseline"] == 0 and res.summary["engine_timed_requests"]["candidate"] > 0
    )


def test_clean_smoke_check_passes(tmp_path: Path) -> None:
    ctx = demo_perf_ctx("smoke", tmp_path)
    chk = PerfCheck()
    assert chk.skip_reason(ctx) is None
    simulate(chk, ctx, slow_batch=None)
    res = chk.judge(ctx)
    assert res.verdict is Verdict.PASS, res.failures
    assert res.summary["passed"] == len(ctx.plan.points) and not res.failures


def test_standard_tier_resamples_lifetimes_and_checks_drift(tmp_path: Path) -> None:
    ctx = demo_perf_ctx("standard", tmp_path)
    chk = PerfCheck()
    assert chk.skip_reason(ctx) is None
    kinds = {s.item.kind for s in chk.state.items.values()}
    assert kinds == {"pure_decode", "context_sweep", "mixed", "prompts", "trace_replay", "concurrency_sweep"}
    simulate(chk, ctx, slow_batch=None, lifetime_effect=0.02)
    res = chk.judge(ctx)
    assert res.summary["ignores_lifetime_variance"] is False
    assert res.tables["drift"] and all(
        d["first_lifetimes"] == [0] and d["second_lifetimes"] == [1] for d in res.tables["drift"]
    )
    rows = [r for r in res.tables["points"] if r["gated"]]
    assert all(r["lifetimes_baseline"] == 2 and r["lifetimes_candidate"] == 2 for r in rows)
    # a 2% lifetime-to-lifetime effect is far inside the demo scope's noise margin: every point passes
    assert res.verdict is Verdict.PASS, res.failures


def test_nothing_measured_is_not_run(tmp_path: Path) -> None:
    ctx = demo_perf_ctx("smoke", tmp_path)
    chk = PerfCheck()
    assert chk.skip_reason(ctx) is None
    res = chk.judge(ctx)
    assert res.verdict is Verdict.NOT_RUN and "no point" in res.reason


def test_missing_trace_makes_the_check_not_run(tmp_path: Path) -> None:
    ctx = demo_perf_ctx("standard", tmp_path)
    ctx.scope = ctx.scope.model_copy(deep=True)
    for w in ctx.scope.workloads:
        if w.kind == "trace_replay":
            w.trace = "traces/does-not-exist.jsonl"
    why = PerfCheck().skip_reason(ctx)
    assert why is not None and "does-not-exist.jsonl" in why and "does not exist" in why


def test_trailing_baseline_lifetime_is_a_drift_check(tmp_path: Path) -> None:
    sched = LookSchedule.for_group(["baseline", "candidate", "baseline"], min_runs=3, max_runs=6)
    assert sched.drift_position == 2 and sched.look_positions() == [1] and sched.planned_looks == 4
    assert sched.is_drift_lifetime("baseline", 1) and not sched.looks_allowed("baseline", 1)
    ctx = demo_perf_ctx("smoke", tmp_path)
    for g in ctx.plan.groups:
        g.order = ["baseline", "candidate", "baseline"]
    chk = PerfCheck()
    assert chk.skip_reason(ctx) is None
    rng = np.random.default_rng(5)
    gate = ctx.scope.gates.perf
    drift = 1.4 + gate.noise_margin  # the drift tolerance is the gate's noise margin
    group = ctx.plan.groups[0]
    sched = chk.state.schedules[group.id]
    counts = {"baseline": 0, "candidate": 0}
    from fasttrack.checks.perf import measure_drift

    for side in group.order:
        lt = counts[side]
        counts[side] += 1
        assert chk.wants(ctx, group, side, lt)
        for s in chk.state.items.values():
            # the machine got slower before the last baseline lifetime, by 40% more than the scope's margin
            tpot = (1.0 + 0.3 * s.item.batch) * (drift if (side, lt) == ("baseline", 1) else 1.0)

            async def run_once(k: int, s=s, side=side, lt=lt, tpot=tpot) -> RunMetrics:
                return fake_run(s.item, side, lt, k, tpot=tpot, rng=rng)

            if sched.is_drift_lifetime(side, lt):
                assert asyncio.run(measure_drift(s, gate=gate, run_once=run_once)) == gate.min_runs
            elif not s.final:
                measure(s, sched, gate, side, lt, run_once)
    res = chk.judge(ctx)
    assert res.verdict is Verdict.PASS, res.failures  # the drift lifetime never enters the gate
    assert len(res.tables["drift"]) == len(ctx.plan.points)
    assert all(d["drifted"] and d["second_lifetimes"] == [1] and d["ratio"] > drift - 0.1 for d in res.tables["drift"])
    assert "drift between baseline lifetimes" in res.reason
    assert sum(1 for r in res.tables["runs"] if r.get("drift_only")) == gate.min_runs * len(ctx.plan.points)


def test_a_harness_failure_in_collect_is_recorded_not_raised(tmp_path: Path) -> None:
    from fasttrack.checks.context import EngineSession

    class NoTokenizer:
        base_url = "http://127.0.0.1:9"
        model = "m"
        args: list[str] = []

        def check_alive(self, **kw) -> None:
            return None

    ctx = demo_perf_ctx("smoke", tmp_path)
    chk = PerfCheck()
    assert chk.skip_reason(ctx) is None
    session = EngineSession(side="baseline", group=ctx.plan.groups[0], lifetime=0, engine=NoTokenizer())  # type: ignore[arg-type] - a stand-in engine without a tokenizer
    run_loop(chk.collect(ctx, session))
    assert chk.state.errors and "baseline lifetime 0" in chk.state.errors[0]
    res = chk.judge(ctx)
    assert res.verdict is Verdict.NOT_RUN and "baseline lifetime 0" in res.reason


def test_a_side_without_usable_samples_is_not_measured_not_a_crash() -> None:
    """Runs whose tokens all arrived in one chunk have no positive TPOT sample: no look is
    taken on them, and the judge says the point was not measured (and why)."""
    sched = LookSchedule.for_group(["baseline", "candidate"], min_runs=3, max_runs=6)
    s = ItemState(item=_item())
    rng = np.random.default_rng(0)
    for k in range(3):
        s.add(fake_run(s.item, "baseline", 0, k, tpot=2.0, rng=rng).model_copy(update={"tpot_ms": [0.0] * 24}))
    assert _measure(s, sched, "candidate", 0, tpot=2.0, seed=2) == 6, "no decision without baseline samples"
    assert not s.looks
    j = judge_item(
        s,
        metrics=["median_tpot_ms", "output_throughput"],
        gated="median_tpot_ms",
        noise_margin=0.1,
        confidence=0.95,
        planned_looks=sched.planned_looks,
    )
    assert j.verdict == "not_run"
    gated = next(r for r in j.rows if r["metric_name"] == "median_tpot_ms")
    assert gated["verdict"] == "not_run" and "no usable median_tpot_ms samples on baseline" in gated["statement"]


# ---------------------------------------------------------------------------------- interleaved (both engines up)


def test_interleaved_schedule_looks_only_where_a_pair_is_complete() -> None:
    smoke = LookSchedule.for_group(["baseline", "candidate"], min_runs=4, max_runs=8, interleaved=True)
    # looks after whole A B B A blocks: 4, 6 and 8 run pairs
    assert smoke.look_positions() == [1] and smoke.planned_looks == 3 and smoke.pair_looks_allowed(0)
    assert [k for k in range(1, 9) if smoke.look_after(k)] == [4, 6, 8]
    full = LookSchedule.for_group(["baseline", "candidate"] * 3, min_runs=4, max_runs=8, interleaved=True)
    # interleaved: only where pairs 2 and 3 are complete
    assert full.look_positions() == [3, 5] and full.planned_looks == 6
    assert not full.pair_looks_allowed(0) and full.pair_looks_allowed(1) and full.pair_looks_allowed(2)
    assert not full.pair_looks_allowed(3)
    drift = LookSchedule.for_group(["baseline", "candidate", "baseline"], min_runs=4, max_runs=6, interleaved=True)
    assert drift.drift_position == 2 and drift.look_positions() == [1]
    assert full.describe()["interleaved"] is True
    # one engine at a time: a look after every run from min_runs on
    seq = LookSchedule.for_group(["baseline", "candidate"], min_runs=3, max_runs=6)
    assert [k for k in range(1, 7) if seq.look_after(k)] == [3, 4, 5, 6] and seq.planned_looks == 4


def test_an_interleaved_gate_needs_whole_abba_blocks() -> None:
    with pytest.raises(ValueError, match="A B B A blocks"):
        PerfGate(min_runs=3, max_runs=6, interleave=True)
    PerfGate(min_runs=3, max_runs=6)  # one engine at a time: any count


def _pair_runner(
    state: ItemState,
    calls: list[tuple[str, int]],
    *,
    tpot: dict[str, float],
    seed: int,
    host: list[float] | None = None,
    fail_at: tuple[str, int] | None = None,
):
    rng = np.random.default_rng(seed)
    calibrate(state)

    def make(side: str):
        async def run_once(k: int) -> RunMetrics:
            calls.append((side, k))
            if fail_at == (side, k):
                raise RuntimeError("socket closed")
            f = host[k] if host else 1.0
            return fake_run(state.item, side, 0, k, tpot=tpot[side] * f, rng=rng)

        return run_once

    return {"baseline": make("baseline"), "candidate": make("candidate")}


def test_measure_pair_runs_abba_blocks_and_looks_after_each_block() -> None:
    from fasttrack.checks.perf import measure_pair

    sched = LookSchedule.for_group(["baseline", "candidate"], min_runs=4, max_runs=8, interleaved=True)
    s = ItemState(item=_item())
    calls: list[tuple[str, int]] = []
    taken = asyncio.run(
        measure_pair(
            s,
            lifetime=0,
            looks_here=True,
            sched=sched,
            gate=GATE_PAIRS,
            run_once=_pair_runner(s, calls, tpot={"baseline": 2.0, "candidate": 2.0}, seed=1),
        )
    )
    b, c = "baseline", "candidate"
    # A B B A, A B B A: never A B A B
    assert [sd for sd, _ in calls] == [b, c, c, b, b, c, c, b]
    assert [k for _, k in calls] == [0, 0, 1, 1, 2, 2, 3, 3]
    assert taken == {"baseline": 4, "candidate": 4} and s.interleaved
    assert s.final and s.decision == "decided_pass" and len(s.looks) == 1
    j = judge_item(
        s,
        metrics=["median_tpot_ms"],
        gated="median_tpot_ms",
        noise_margin=0.1,
        confidence=0.95,
        planned_looks=sched.planned_looks,
    )
    assert j.rows[0]["interleaved"] and j.rows[0]["paired"]
    assert j.rows[0]["lifetime_variance"].startswith("paired run differences within each lifetime pair; calibrated")
    # on the next lifetime pair the candidate opens each block: B A A B
    s2 = ItemState(item=_item())
    calls2: list[tuple[str, int]] = []
    asyncio.run(
        measure_pair(
            s2,
            lifetime=1,
            looks_here=False,
            sched=sched,
            gate=GATE_PAIRS,
            run_once=_pair_runner(s2, calls2, tpot={"baseline": 2.0, "candidate": 2.0}, seed=1),
        )
    )
    assert [sd for sd, _ in calls2] == [c, b, b, c, c, b, b, c]


def test_measure_pair_lets_the_engine_that_ran_settle_before_the_other_side_runs() -> None:
    import time

    from fasttrack.checks.perf import measure_pair

    gate = PerfGate(
        noise_margin=0.1, confidence=0.95, min_runs=2, max_runs=2, interleave=True, interleave_settle_s=0.05
    )
    sched = LookSchedule.for_group(["baseline", "candidate"], min_runs=2, max_runs=2, interleaved=True)
    s = ItemState(item=_item())
    stamps: list[tuple[str, float, float]] = []
    runners = _pair_runner(s, [], tpot={"baseline": 2.0, "candidate": 2.0}, seed=1)

    def timed_runner(side: str):
        async def run_once(k: int) -> RunMetrics:
            t0 = time.monotonic()
            rm = await runners[side](k)
            stamps.append((side, t0, time.monotonic()))
            return rm

        return run_once

    asyncio.run(
        measure_pair(
            s,
            lifetime=0,
            looks_here=False,
            sched=sched,
            gate=gate,
            run_once={side: timed_runner(side) for side in ("baseline", "candidate")},
        )
    )
    assert [x[0] for x in stamps] == ["baseline", "candidate", "candidate", "baseline"]
    gaps = [b[1] - a[2] for a, b in zip(stamps, stamps[1:], strict=False)]
    assert all(g >= 0.045 for g in gaps), gaps


def test_measure_pair_places_each_run_before_its_settle_pause() -> None:
    """``before_run(side, k)`` comes before every run, in A B B A order, ahead of the settle pause (the engine
    about to run moves to the measuring cores, ``cpu_pinning.alternate: runs``), so the move has settled too."""
    import time

    from fasttrack.checks.perf import measure_pair

    gate = PerfGate(
        noise_margin=0.1, confidence=0.95, min_runs=4, max_runs=4, interleave=True, interleave_settle_s=0.05
    )
    sched = LookSchedule.for_group(["baseline", "candidate"], min_runs=4, max_runs=4, interleaved=True)
    s = ItemState(item=_item())
    events: list[tuple[str, str, int, float]] = []
    runners = _pair_runner(s, [], tpot={"baseline": 2.0, "candidate": 2.0}, seed=1)

    def logged(side: str):
        async def run_once(k: int) -> RunMetrics:
            events.append(("run", side, k, time.monotonic()))
            return await runners[side](k)

        return run_once

    asyncio.run(
        measure_pair(
            s,
            lifetime=1,
            looks_here=False,
            sched=sched,
            gate=gate,
            run_once={side: logged(side) for side in ("baseline", "candidate")},
            before_run=lambda side, k: events.append(("place", side, k, time.monotonic())),
        )
    )
    b, c = "baseline", "candidate"
    assert [(e[0], e[1], e[2]) for e in events] == [
        (what, side, k)
        for k, sides in enumerate([(c, b), (b, c), (c, b), (b, c)])
        for side in sides
        for what in ("place", "run")
    ]
    places = [e for e in events if e[0] == "place"]
    runs = [e for e in events if e[0] == "run"]
    assert all(r[3] - p[3] >= 0.045 for p, r in list(zip(places, runs, strict=True))[1:]), "the pause follows"


def test_measure_pair_without_looks_takes_min_runs_pairs_and_records_a_harness_error() -> None:
    from fasttrack.checks.perf import measure_pair

    sched = LookSchedule.for_group(["baseline", "candidate"] * 2, min_runs=4, max_runs=8, interleaved=True)
    s = ItemState(item=_item())
    calls: list[tuple[str, int]] = []
    taken = asyncio.run(
        measure_pair(
            s,
            lifetime=0,
            looks_here=sched.pair_looks_allowed(0),
            sched=sched,
            gate=GATE_PAIRS,
            run_once=_pair_runner(s, calls, tpot={"baseline": 2.0, "candidate": 2.0}, seed=2),
        )
    )
    assert taken == {"baseline": 4, "candidate": 4} and not s.looks
    s2 = ItemState(item=_item())
    calls2: list[tuple[str, int]] = []
    taken2 = asyncio.run(
        measure_pair(
            s2,
            lifetime=0,
            looks_here=True,
            sched=sched,
            gate=GATE_PAIRS,
            run_once=_pair_runner(
                s2, calls2, tpot={"baseline": 2.0, "candidate": 2.0}, seed=2, fail_at=("baseline", 1)
            ),
        )
    )
    assert taken2 == {"baseline": 1, "candidate": 2}
    assert s2.errors and "baseline lifetime 0 run 1: RuntimeError: socket closed" in s2.errors[0]


def test_interleaved_gate_holds_through_host_slowdowns_that_fail_the_sequential_one() -> None:
    """A host that runs 2.5x slower for a while: with one lifetime per side, measured one
    after the other, the slow spell lands on the candidate's lifetime and fails an identical
    candidate; interleaved, it lands on run pairs, and the paired interval cancels it."""
    from fasttrack.checks.perf import measure_pair

    gate = PerfGate(noise_margin=0.25, confidence=0.95, min_runs=4, max_runs=6, interleave=True, interleave_settle_s=0)
    sched = LookSchedule.for_group(["baseline", "candidate"], min_runs=4, max_runs=6, interleaved=True)
    host = [1.0, 2.5, 2.5, 1.0, 1.0, 2.5]
    s = ItemState(item=_item())
    asyncio.run(
        measure_pair(
            s,
            lifetime=0,
            looks_here=True,
            sched=sched,
            gate=gate,
            run_once=_pair_runner(s, [], tpot={"baseline": 2.0, "candidate": 2.0}, seed=3, host=host),
        )
    )
    j = judge_item(
        s,
        metrics=["median_tpot_ms"],
        gated="median_tpot_ms",
        noise_margin=0.25,
        confidence=0.95,
        planned_looks=sched.planned_looks,
    )
    assert j.verdict == "pass", j.rows[0]["statement"]
    # the same code measured one lifetime after the other, the slow spell during the candidate's lifetime
    seq = LookSchedule.for_group(["baseline", "candidate"], min_runs=4, max_runs=6)
    s2 = ItemState(item=_item())
    _measure(s2, seq, "baseline", 0, tpot=2.0, seed=4, gate=gate)
    _measure(s2, seq, "candidate", 0, tpot=2.0 * 2.5, seed=5, gate=gate)
    j2 = judge_item(
        s2,
        metrics=["median_tpot_ms"],
        gated="median_tpot_ms",
        noise_margin=0.25,
        confidence=0.95,
        planned_looks=seq.planned_looks,
    )
    assert j2.verdict == "fail"
    # and a real regression at a point still fails interleaved, through the same slow spells
    s3 = ItemState(item=_item())
    asyncio.run(
        measure_pair(
            s3,
            lifetime=0,
            looks_here=True,
            sched=sched,
            gate=gate,
            run_once=_pair_runner(s3, [], tpot={"baseline": 2.0, "candidate": 8.0}, seed=6, host=host),
        )
    )
    j3 = judge_item(
        s3,
        metrics=["median_tpot_ms"],
        gated="median_tpot_ms",
        noise_margin=0.25,
        confidence=0.95,
        planned_looks=sched.planned_looks,
    )
    assert j3.verdict == "fail" and j3.rows[0]["ci_high"] < 0.5


def test_an_interleaving_check_is_measured_on_pairs_and_fails_exactly_the_slow_batch(tmp_path: Path) -> None:
    from fasttrack.checks.perf import measure_pair

    ctx = demo_perf_ctx("smoke", tmp_path, interleave=True)
    chk = PerfCheck()
    assert chk.skip_reason(ctx) is None and chk.paired(ctx)
    group = ctx.plan.groups[0]
    for side in ("baseline", "candidate"):
        assert not chk.wants(ctx, group, side, 0), "pairs only"
    assert chk.wants_pair(ctx, group, 0)
    gate = ctx.scope.gates.perf
    sched = chk.state.schedules[group.id]
    assert sched.interleaved
    host = [1.0, 2.5, 1.0, 2.5, 2.5, 1.0]
    for i, s in enumerate(chk.state.items.values()):
        base = 1.0 + 0.3 * (s.item.batch or 1)
        tpot = {"baseline": base, "candidate": base * (SLOW_FACTOR if s.item.batch == 4 else 1.0)}
        asyncio.run(
            measure_pair(
                s,
                lifetime=0,
                looks_here=sched.pair_looks_allowed(0),
                sched=sched,
                gate=gate,
                run_once=_pair_runner(s, [], tpot=tpot, seed=10 + i, host=host[i % 2 :] + host[: i % 2]),
            )
        )
    assert not chk.wants_pair(ctx, group, 0), "every point decided"
    res = chk.judge(ctx)
    failing = {r["point"] for r in res.tables["points"] if r.get("verdict") == "fail"}
    assert failing == {p.id for p in ctx.plan.points if p.batch == 4}
    assert res.summary["interleaved"] is True and "interleaved in time" in res.reason
    assert "slowed both sides alike" in res.summary["lifetime_note"]
    assert all(r["paired"] for r in res.tables["points"] if r.get("gated"))


def test_pipeline_engine_slots_pair_the_kth_lifetimes() -> None:
    from fasttrack.pipeline import engine_slots

    b, c = "baseline", "candidate"
    assert engine_slots([b, c, b, c], paired=False) == [[(b, 0)], [(c, 0)], [(b, 1)], [(c, 1)]]
    assert engine_slots([b, c, b, c], paired=True) == [[(b, 0), (c, 0)], [(b, 1), (c, 1)]]
    assert engine_slots([b, c, b], paired=True) == [[(b, 0), (c, 0)], [(b, 1)]]
    assert engine_slots([c, b], paired=True) == [[(b, 0), (c, 0)]]
