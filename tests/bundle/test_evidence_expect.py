"""What re-judging expects of a bundle is what a run plans: :mod:`fasttrack.evidence.expect` computes the config
points and the perf items from the scope alone (verifying loads no plan, cost model or check), so for every shipped
suite and tier they must be the plan's, named and flagged the same way."""

from __future__ import annotations

import pytest

from fasttrack.checks.base import build_run_plan
from fasttrack.evidence.expect import perf_items, planned_points
from fasttrack.perf.workloads import plan_items
from fasttrack.scope import load_scope
from fasttrack.scope.loading import available_suites

CASES = [
    (s, t) for s in available_suites() if load_scope(s).scope.status == "complete" for t in load_scope(s).scope.tiers
]
"""Every plannable suite (a partial scope is never planned) and each of its tiers."""


@pytest.mark.parametrize(("suite", "tier"), CASES)
def test_planned_points_are_the_plans(suite: str, tier: str) -> None:
    scope = load_scope(suite).scope
    plan = build_run_plan(scope, tier=tier)
    got = planned_points(scope, tier)
    assert [(p.id, p.group, p.batch, p.context, p.full_context) for p in got] == [
        (p.id, p.group, p.batch, p.context, p.full_context) for p in plan.points
    ]
    synthetic = {
        g.id for g in plan.groups if (g.speculative_config or {}).get("rejection_sample_method") == "synthetic"
    }
    assert {p.group for p in got if p.synthetic} == synthetic


@pytest.mark.parametrize(("suite", "tier"), CASES)
def test_perf_items_are_the_perf_checks(suite: str, tier: str) -> None:
    scope = load_scope(suite).scope
    plan = build_run_plan(scope, tier=tier)
    env = scope.envelope
    mml = env.context.max_model_len if env is not None else 0
    workloads = [w for w in scope.workloads if plan.workloads is None or w.name in plan.workloads]
    want = sorted(
        (it.workload, it.point) for g in plan.groups for it in plan_items(plan, g, workloads, max_model_len=mml)
    )
    assert sorted(perf_items(scope, tier, planned_points(scope, tier))) == want
