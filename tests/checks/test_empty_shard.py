"""A shard of a plan that holds none of its engine groups (a one-point tier split two ways): its engine checks
are not needed there, so they are recorded as not run and not required, and the merge reads them as idle."""

from __future__ import annotations

from pathlib import Path

from scope_testlib import ONE_POINT, demo_scope_variant

from fasttrack.bundle.merge import _merge_check
from fasttrack.checks.base import build_run_plan
from fasttrack.checks.context import RunContext
from fasttrack.pipeline.engines import RunState
from fasttrack.pipeline.validate import _declare_inactive, select_checks
from fasttrack.results import Verdict
from fasttrack.scope import load_scope


def _declared(tmp_path: Path, shard: str) -> tuple[RunState, list[str]]:
    loaded = load_scope(str(demo_scope_variant(tmp_path / "scope", ONE_POINT)))
    plan = build_run_plan(loaded.scope, tier="smoke", shard=shard)
    ctx = RunContext(scope=loaded.scope, plan=plan, run_dir=tmp_path, loaded=loaded, log=lambda s: None)
    checks, skipped = select_checks(plan, None)
    state = RunState()
    active = _declare_inactive(ctx, checks, skipped, state)
    return state, [c.name for c in active]


def test_a_shard_without_engine_groups_needs_no_engine_check(tmp_path: Path) -> None:
    state, active = _declared(tmp_path / "2", "2/2")
    eq = state.results["equivalence"]
    assert eq.verdict is Verdict.NOT_RUN and not eq.required
    assert "holds none of the plan's engine groups" in eq.reason
    assert "kernels" in active  # the engine-less checks still run in every shard
    # the merge: passed in the shard that ran it, idle in the other
    assert _merge_check("equivalence", [("1/2", None), ("2/2", eq)])[0] is Verdict.NOT_RUN  # shard 1 absent
    passed = eq.model_copy(update={"verdict": Verdict.PASS, "required": True, "reason": "ok"})
    verdict, reason, required = _merge_check("equivalence", [("1/2", passed), ("2/2", eq)])
    assert (verdict, required) == (Verdict.PASS, True) and "not needed in shard(s) 2/2" in reason


def test_the_shard_with_the_engines_runs_them(tmp_path: Path) -> None:
    state, active = _declared(tmp_path / "1", "1/2")
    assert "equivalence" in active and "equivalence" not in state.results
