"""Concurrency sweeps: one item per level, closed-loop runs, the interactivity-throughput curve of each side with
intervals and its Pareto frontier, curve dominance as a gate, and the chart in the report."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from perf_testlib import demo_perf_ctx, simulate

from fasttrack.checks.perf import PerfCheck
from fasttrack.perf.curves import dominance, mark_pareto
from fasttrack.perf.loadgen import GenRequest
from fasttrack.perf.metrics import RequestRecord
from fasttrack.perf.workloads import RunInputs, execute
from fasttrack.results import Verdict
from fasttrack.scope import WorkloadSpec

LEVELS = [1, 2, 4, 8]


def _sweep_ctx(tmp: Path, **gate: object):
    ctx = demo_perf_ctx("smoke", tmp, workloads=["sweep"])
    for k, v in gate.items():
        setattr(ctx.scope.gates.perf, k, v)
    return ctx


def test_the_demo_smoke_tier_sweeps_concurrency() -> None:
    from fasttrack.scope import load_scope

    scope = load_scope("demo-llama").scope
    assert scope.tiers["smoke"].workloads == ["decode", "sweep"]
    (sweep,) = [w for w in scope.workloads if w.kind == "concurrency_sweep"]
    assert sweep.concurrencies == LEVELS


def test_a_concurrency_sweep_needs_its_levels() -> None:
    with pytest.raises(ValueError, match="needs concurrencies"):
        WorkloadSpec(name="s", kind="concurrency_sweep")
    with pytest.raises(ValueError, match="distinct positive"):
        WorkloadSpec(name="s", kind="concurrency_sweep", concurrencies=[1, 1])
    with pytest.raises(ValueError, match="apply to concurrency_sweep only"):
        WorkloadSpec(name="s", kind="pure_decode", concurrencies=[1])


def test_sweep_items_one_per_level(tmp_path: Path) -> None:
    ctx = _sweep_ctx(tmp_path)
    chk = PerfCheck()
    assert chk.skip_reason(ctx) is None
    items = [s.item for s in chk.state.items.values()]
    group = ctx.plan.groups[0].id
    assert [it.point for it in items] == [f"{group}-c{c}" for c in LEVELS]
    assert all(it.kind == "concurrency_sweep" and it.mode == "closed" and it.prompt_len == 32 for it in items)
    assert [it.requests_per_run for it in items] == [4 * c for c in LEVELS]


class _Client:
    """Records how many requests are in flight at once."""

    def __init__(self) -> None:
        self.live = 0
        self.peak = 0

    async def stream(self, req: GenRequest) -> RequestRecord:
        self.live += 1
        self.peak = max(self.peak, self.live)
        await asyncio.sleep(0.01)
        self.live -= 1
        return RequestRecord(id=req.id, t_send=0.0, chunk_times=[0.001, 0.002], output_tokens=2)


def test_a_sweep_run_keeps_exactly_its_concurrency_in_flight(tmp_path: Path) -> None:
    from fasttrack.perf.tokens import TokenPool

    ctx = _sweep_ctx(tmp_path)
    chk = PerfCheck()
    assert chk.skip_reason(ctx) is None
    it = next(s.item for s in chk.state.items.values() if s.item.batch == 4)
    client = _Client()
    pool = TokenPool(bos=[1], ids=list(range(100, 400)))
    recs, extra = asyncio.run(execute(client, it, 0, RunInputs(pool=pool, max_model_len=2048)))  # type: ignore[arg-type]
    assert len(recs) == 16 and client.peak == 4 and extra == {"concurrency": 4}


def test_the_curves_table_has_both_sides_per_level_with_intervals(tmp_path: Path) -> None:
    ctx = _sweep_ctx(tmp_path)
    chk = PerfCheck()
    assert chk.skip_reason(ctx) is None
    simulate(chk, ctx, slow_batch=None)
    res = chk.judge(ctx)
    assert res.verdict is Verdict.PASS, res.failures
    curves = res.tables["curves"]
    assert {(r["side"], r["concurrency"]) for r in curves} == {
        (s, c) for s in ("baseline", "candidate") for c in LEVELS
    }
    for r in curves:
        assert r["throughput_ci_low"] <= r["throughput"] <= r["throughput_ci_high"]
        for q in ("p50", "p90"):
            assert r[f"interactivity_{q}_ci_low"] <= r[f"interactivity_{q}"] <= r[f"interactivity_{q}_ci_high"]
        assert r["interactivity_p90"] <= r["interactivity_p50"], "the slow tail is slower"
        assert r["ttft_p99_ms"] >= r["ttft_p50_ms"] and r["itl_p99_ms"] >= r["itl_p50_ms"]
        assert r["throughput_unit"].startswith("tokens/s per engine")  # CPU hosts: no GPU count
        assert r["pareto"] is True, "throughput rises and interactivity falls with concurrency: all on the frontier"
    # every level is compared on throughput and both interactivities, and the candidate's curve dominates
    metrics = {r["metric_name"] for r in res.tables["points"]}
    assert {"output_throughput", "p50_interactivity", "p90_interactivity"} <= metrics
    dom = res.tables["curve_dominance"]
    assert len(dom) == len(LEVELS) and all(d["dominates"] for d in dom)
    assert res.summary["curve_dominance"] == {
        "required": False,
        "levels": 4,
        "dominated": 4,
        "not_dominated": [],
    }


def test_curve_dominance_can_be_required(tmp_path: Path) -> None:
    # the candidate's client-timed gaps are 4x longer at 4 users (its engine-timed TPOT, the gated metric, is
    # unchanged): its curve falls below the baseline's there, which fails only when dominance is required
    ctx = _sweep_ctx(tmp_path, curve_dominance=True)
    chk = PerfCheck()
    assert chk.skip_reason(ctx) is None
    simulate(chk, ctx, slow_batch=None, client={4: (0.25, 0)})
    res = chk.judge(ctx)
    assert res.verdict is Verdict.FAIL
    group = ctx.plan.groups[0].id
    assert res.summary["curve_dominance"]["not_dominated"] == [f"{group}-c4"]
    assert len(res.failures) == 1 and "does not dominate" in res.failures[0] and "p90_interactivity" in res.failures[0]
    assert res.gate is not None and "curve dominates within the margin" in res.gate.rule
    # reported, not required: the same data passes
    ctx2 = _sweep_ctx(tmp_path / "report")
    chk2 = PerfCheck()
    assert chk2.skip_reason(ctx2) is None
    simulate(chk2, ctx2, slow_batch=None, client={4: (0.25, 0)})
    res2 = chk2.judge(ctx2)
    assert res2.verdict is Verdict.PASS and "dominates within the margin at 3 of 4 level(s)" in res2.reason


def test_dominance_and_pareto_rules() -> None:
    rows = [
        {"metric_name": "output_throughput", "speedup": 1.1, "nominal_ci_low": 0.95, "nominal_ci_high": 1.2},
        {"metric_name": "p90_interactivity", "speedup": 0.8, "nominal_ci_low": 0.7, "nominal_ci_high": 0.9},
    ]
    assert dominance(rows, noise_margin=0.2)["dominates"] is False
    assert dominance(rows, noise_margin=0.35)["dominates"] is True
    assert dominance(rows[:1], noise_margin=0.35) is None
    pts = [
        {"workload": "w", "group": "g", "side": "baseline", "throughput": 10.0, "interactivity_p90": 50.0},
        {"workload": "w", "group": "g", "side": "baseline", "throughput": 20.0, "interactivity_p90": 40.0},
        {"workload": "w", "group": "g", "side": "baseline", "throughput": 15.0, "interactivity_p90": 30.0},
    ]
    assert [r["pareto"] for r in mark_pareto(pts)] == [True, True, False]


def test_the_report_draws_both_curves_with_bands(tmp_path: Path) -> None:
    from fasttrack.report.curves import curve_charts

    ctx = _sweep_ctx(tmp_path)
    chk = PerfCheck()
    assert chk.skip_reason(ctx) is None
    simulate(chk, ctx, slow_batch=None)
    res = chk.judge(ctx)
    (chart,) = curve_charts(res.tables["curves"], res.tables["curve_dominance"])
    svg = str(chart.chart)
    assert svg.count('class="curve-band"') == 2, "one interval band per side"
    assert 'class="curve curve-baseline"' in svg and 'class="curve curve-candidate"' in svg
    assert svg.count("curve-dot") >= 2 * len(LEVELS) and "c8</text>" in svg
    assert "P90 interactivity" in svg and "<script" not in svg
    assert "dominates the baseline's within the margin at 4 of 4 level(s)" in chart.dominance
