"""The cost model (fasttrack/planning/cost.py and each check's ``cost`` declaration): every check's work counted from
the scope and the tier, timed by the scope's ``estimates``; ``plan`` shows it per check, shards balance by it,
and the demo's estimate is held to its measured run (tests/fixtures/cost/)."""

from __future__ import annotations

import json
import re
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from fasttrack import ROOT
from fasttrack.checks.base import build_run_plan, registered_checks
from fasttrack.executors.shards import layout
from fasttrack.planning.cost import STARTS, measured, plan_cost
from fasttrack.scope import Scope, load_scope, parse_scope
from fasttrack.scope.reference import COST_LINE as REFERENCE

FIXTURES = ROOT / "tests" / "fixtures"
DEMO_RUNS = sorted((FIXTURES / "cost").glob("demo-smoke-run-*.json"))
CHECKS = list(registered_checks().values())
LINES = {STARTS, "kernels", "equivalence", "features", "coverage", "evals", "perf", REFERENCE}


@pytest.fixture(scope="module")
def k3():
    return load_scope("kimi-k3")


def test_plan_shows_every_check_and_the_engine_starts_and_they_add_up() -> None:
    plan = build_run_plan(load_scope("demo-llama").scope, tier="smoke")
    e = plan.estimate
    assert set(e.checks) == LINES
    assert next(iter(e.checks)) == STARTS  # the engine starts first, then the checks by name
    for key in ("wall_hours", "gpu_hours", "node_hours"):
        assert sum(c[key] for c in e.checks.values()) == pytest.approx(e.__dict__[key], abs=1e-3)
    assert sum(c["requests"] for c in e.checks.values()) == e.requests
    assert all(c["wall_hours"] > 0 for c in e.checks.values()), e.checks


def test_a_tier_that_leaves_a_check_out_does_not_pay_for_it() -> None:
    text = (ROOT / "suites/demo-llama/scope.yaml").read_text()
    text = text.replace("    workloads: [decode, sweep]\n    lifetimes_per_side: 1\n", (
        "    workloads: [decode, sweep]\n    lifetimes_per_side: 1\n    checks: [kernels, equivalence]\n"
    ))  # fmt: skip
    scope = parse_scope(text, source="demo")
    assert set(build_run_plan(scope, tier="smoke").estimate.checks) == {STARTS, "kernels", "equivalence", REFERENCE}


def test_evals_are_counted_by_their_tokens(k3) -> None:
    """Doubling an eval's max_tokens doubles its decode tokens; AIME 2025 (30 problems) at the K3 full tier's
    points costs what its answers take to decode (the estimate that once ignored evals)."""
    scope = k3.scope
    plan = build_run_plan(scope, tier="full")
    base = plan_cost(scope, "full", plan.groups, plan.points, CHECKS)["evals"]
    longer = scope.model_copy(
        update={"evals": [e.model_copy(update={"max_tokens": 2 * e.max_tokens}) for e in scope.evals]}
    )
    doubled = plan_cost(longer, "full", plan.groups, plan.points, CHECKS)["evals"]
    assert doubled.decode_tokens == 2 * base.decode_tokens and doubled.wall_s > 1.7 * base.wall_s  # prompts too
    # one group's AIME runs at batch 1: the baseline twice (its own agreement), the candidate once, 30 problems
    # x 4 repeats, each answer half of 32768 tokens, one stream at the scope's single-stream speed
    est = scope.estimates
    aime = next(e for e in scope.evals if e.name == "aime25")
    one_run_s = 30 * aime.repeats * aime.max_tokens * est.eval_output_fraction / est.stream_tokens_per_s
    assert one_run_s > 3600  # hours, not the minutes the old estimate gave a whole shard
    group = next(g for g in plan.groups if g.spec == "none" and g.dcp == 1 and g.tp == 16)
    alone = plan_cost(scope, "full", [group], plan.points, CHECKS)
    assert alone["evals"].wall_s > 3 * one_run_s
    # the shard that runs this group (one shard per group) is given at least that time
    lay = layout(k3, tier="full")
    (shard,) = [s for s in lay.shards if s.groups == (group.id,)]
    assert shard.wall_s > sum(c.wall_s for c in alone.values()) - 1


def test_k3_gpu_hours_are_four_per_node_hour_and_shards_add_up(k3) -> None:
    full = build_run_plan(k3.scope, tier="full")
    assert full.estimate.gpu_hours == pytest.approx(4 * full.estimate.node_hours, rel=1e-3)
    # 40 shards of 36 groups: groups split, and each part starts its own engines and runs the kernel tests:
    # the layout's totals are its shards' sums, more than the unsharded plan's, never less
    lay = layout(k3, tier="full", shards=40)
    assert lay.node_hours == pytest.approx(sum(s.node_hours for s in lay.shards), abs=0.01)
    assert lay.gpu_hours == pytest.approx(4 * lay.node_hours, rel=1e-3)
    assert lay.total_wall_s == pytest.approx(sum(s.wall_s for s in lay.shards))
    assert lay.node_hours > full.estimate.node_hours
    assert sum(s.engine_starts for s in lay.shards) > full.estimate.engine_starts
    one = layout(k3, tier="full", shards=1)
    assert (one.node_hours, one.gpu_hours) == (full.estimate.node_hours, full.estimate.gpu_hours)


def test_shards_balance_by_cost(k3) -> None:
    n = 8
    full = build_run_plan(k3.scope, tier="full")
    loads = [build_run_plan(k3.scope, tier="full", shard=f"{i}/{n}").estimate.gpu_hours for i in range(1, n + 1)]
    biggest = max(
        sum(c.device_s for c in plan_cost(k3.scope, "full", [g], full.points, CHECKS).values()) / 3600
        for g in full.groups
    )
    # longest first onto the least loaded shard: no shard exceeds another by more than one group's cost
    assert max(loads) - min(loads) <= biggest + 1e-6
    # what sharding adds: each shard's kernel tests and its coverage probe of a deployment outside the envelope
    # (one engine start of at most 16 GPUs)
    per_shard = full.estimate.checks["kernels"]["gpu_hours"] + k3.scope.estimates.engine_start_s * 16 / 3600
    assert full.estimate.gpu_hours <= sum(loads) <= full.estimate.gpu_hours + (n - 1) * per_shard


def _start_s(log: Path) -> float:
    """Seconds from an engine log's first timestamped line to the API server's routes (it listens)."""
    stamps = re.findall(r"INFO (\d\d-\d\d \d\d:\d\d:\d\d) \[([\w.]+):\d+\]", log.read_text())
    first = datetime.strptime(stamps[0][0], "%m-%d %H:%M:%S")
    up = next(datetime.strptime(t, "%m-%d %H:%M:%S") for t, src in stamps if src == "launcher.py")
    return (up - first).total_seconds()


def test_the_gpu_demo_start_estimate_is_its_recorded_starts() -> None:
    """The H200 engine logs (tests/fixtures/gpu: starts after the first, until the API server listened) and the
    recorded H200 smoke run's two starts until healthy (the first on a fresh host)."""
    later = [_start_s(FIXTURES / "gpu" / f"h200-{side}-engine.log") for side in ("baseline", "candidate")]
    assert later == [49.0, 77.0]
    run = json.loads((FIXTURES / "cost" / "gpu-smoke-h200.json").read_text())
    healthy = [e["startup_s"] for e in run["engines"] if isinstance(e.get("stop"), dict)]
    assert [round(s) for s in healthy] == [119, 88]
    starts = later + healthy
    est = load_scope("demo-llama-gpu").scope.estimates.engine_start_s
    assert abs(est - sum(starts) / len(starts)) / (sum(starts) / len(starts)) <= 0.25


def test_the_gpu_demo_estimate_is_within_25_percent_of_the_h200_run() -> None:
    """The GPU demo's smoke tier against its recorded H200 run (tests/fixtures/cost/gpu-smoke-h200.json): the
    whole run within 25%. Its lines are not held to a factor of 2: the features' profiler windows took a few
    seconds there and the coverage check's much longer (larger traces; its mixed-step probe ran all three
    attempts), and the perf points all ran their maximum runs (docs/cost.md gives each line)."""
    summary = json.loads((FIXTURES / "cost" / "gpu-smoke-h200.json").read_text())
    assert (summary["scope"], summary["tier"], summary["shard"]) == ("demo-llama-gpu", "smoke", "1/1")
    assert summary["crash"] is None and not summary["interrupted"]
    scope = without_reference(load_scope("demo-llama-gpu").scope)  # the run had no reference variants
    plan = build_run_plan(scope, tier="smoke")
    est = plan_cost(scope, "smoke", plan.groups, plan.points, CHECKS)
    got = measured(summary)
    assert set(est) <= set(got)
    total = sum(c.wall_s for c in est.values())
    assert abs(total - got["total"]) / got["total"] <= 0.25, (total, got["total"])
    assert got["kernels"] == pytest.approx(scope.estimates.kernels_s, rel=0.1)


RUN_SCOPES: dict[str, dict[str, Any]] = {
    # run A: the perf gate took 3..6 run pairs (A B A B) and the smoke tier had no concurrency sweep
    # it had no reference variants (gates.equivalence.reference)
    "demo-smoke-run-a": {"min_runs": 3, "max_runs": 6, "smoke_workloads": ["decode"], "reference": False},
}
"""What differed in the demo scope when each measured run was taken (the estimate is of the plan that ran)."""


def without_reference(scope: Scope) -> Scope:
    """The scope without ``gates.equivalence.reference`` (a run recorded before the reference variants)."""
    eq = scope.gates.equivalence.model_copy(update={"reference": None})
    return scope.model_copy(update={"gates": scope.gates.model_copy(update={"equivalence": eq})})


def scope_then(scope: Scope, then: dict[str, Any]) -> Scope:
    """The demo scope as a measured run had it: the current one with that run's perf runs and smoke workloads
    (copies without validation: 3..6 run pairs are no longer a valid interleaved design), without the reference
    variants where the run had none."""
    perf = scope.gates.perf.model_copy(update={"min_runs": then["min_runs"], "max_runs": then["max_runs"]})
    smoke = scope.tiers["smoke"].model_copy(update={"workloads": then["smoke_workloads"]})
    out = scope.model_copy(
        update={
            "gates": scope.gates.model_copy(update={"perf": perf}),
            "tiers": {**scope.tiers, "smoke": smoke},
        }
    )
    return out if then.get("reference", True) else without_reference(out)


def test_every_measured_run_says_what_its_scope_was() -> None:
    assert {p.stem for p in DEMO_RUNS} == set(RUN_SCOPES)


@pytest.mark.parametrize("run", DEMO_RUNS, ids=[p.stem for p in DEMO_RUNS])
def test_the_demo_estimate_is_within_25_percent_of_its_measured_run(run: Path) -> None:
    """The demo's smoke tier (what scripts/demo.sh runs) against measured runs of it (run summaries, trimmed to what
    the model reads; tests/fixtures/cost/README.md): the whole run within 25%, each line within a factor of 2."""
    summary = json.loads(run.read_text())
    assert (summary["scope"], summary["tier"], summary["shard"]) == ("demo-llama", "smoke", "1/1")
    assert summary["crash"] is None and not summary["interrupted"]
    # every check ran (none cut short), so every line of the estimate was measured
    assert all(c["verdict"] != "not_run" for name, c in summary["checks"].items() if name != "isolation")
    scope = scope_then(load_scope("demo-llama").scope, RUN_SCOPES[run.stem])
    plan = build_run_plan(scope, tier="smoke")
    est = plan_cost(scope, "smoke", plan.groups, plan.points, CHECKS)
    got = measured(summary)
    assert set(est) <= set(got)
    total = sum(c.wall_s for c in est.values())
    assert abs(total - got["total"]) / got["total"] <= 0.25, (total, got["total"])
    assert total == pytest.approx(plan.estimate.wall_hours * 3600, abs=3.6)
    for name, c in est.items():
        assert 0.5 <= c.wall_s / got[name] <= 2, (name, c.wall_s, got[name])


def test_measured_reads_a_run_summary() -> None:
    summary = {
        "engines": [
            {"group": "g", "side": "baseline", "lifetime": 0, "startup_s": 30, "stop": {"duration_s": 2},
             "check_seconds": {"equivalence": 10, "perf": 50}, "up_with": ["candidate"]},
            {"group": "g", "side": "candidate", "lifetime": 0, "startup_s": 40, "stop": {"duration_s": 3},
             "check_seconds": {"equivalence": 12, "perf": 50}, "up_with": ["baseline"]},
        ],
        "timing": {"wall_s": 200, "check_seconds": {"kernels": 20, "equivalence": 1.5, "bogus": float("nan")}},
    }  # fmt: skip
    m = measured(summary)
    # an interleaved pair's shared measurement (perf) once; each side's own checks both
    assert m == {STARTS: 75.0, "equivalence": 23.5, "perf": 50.0, "kernels": 20.0, "total": 200.0}


def test_a_concurrency_sweep_is_priced_per_level() -> None:
    """The demo's sweep (levels 1, 2, 4, 8; 4 x level requests per run) adds each level's runs on both sides."""
    scope = load_scope("demo-llama").scope
    sweep = next(w for w in scope.workloads if w.kind == "concurrency_sweep")
    assert sweep.concurrencies == [1, 2, 4, 8] and sweep.requests_per_run is None
    plan = build_run_plan(scope, tier="smoke")
    with_sweep = plan_cost(scope, "smoke", plan.groups, plan.points, CHECKS)["perf"]
    smoke = scope.tiers["smoke"].model_copy(update={"workloads": ["decode"]})
    without = scope.model_copy(update={"tiers": {**scope.tiers, "smoke": smoke}})
    plain = plan_cost(without, "smoke", plan.groups, plan.points, CHECKS)["perf"]
    runs = (scope.gates.perf.min_runs + scope.gates.perf.max_runs) / 2
    lifetimes = sum(g.lifetimes_per_side for g in plan.groups)
    assert with_sweep.requests - plain.requests == lifetimes * sum(int(2 * runs * 4 * c) for c in (1, 2, 4, 8))
    assert with_sweep.wall_s > plain.wall_s
