"""``speculative_acceptance`` with synthetic acceptance: the row shows the measured acceptance length next to
the configured one, and a measured length far from it fails (the setting did not reach the engine)."""

from __future__ import annotations

from pathlib import Path

from test_checks_features import P, _check, _side, as_result

from fasttrack.results import Verdict


def _data(accepted: int, *, configured: float | None) -> dict:
    # 100 drafts of 3 tokens: acceptance length 1 + accepted / 100
    return {
        "point": P[1],
        "points": [P[1]],
        "configured_acceptance_length": configured,
        "drafts": 100,
        "draft_tokens": 300,
        "accepted_tokens": accepted,
    }


def _row(res) -> dict:
    return next(r for r in res.tables["features"] if r.get("feature") == "speculative_acceptance")


def test_measured_next_to_configured_and_within_tolerance_passes(tmp_path: Path) -> None:
    base, cand = _side("baseline"), _side("candidate")
    base.results["speculative_acceptance"] = as_result("speculative_acceptance", _data(152, configured=2.5))
    cand.results["speculative_acceptance"] = as_result("speculative_acceptance", _data(148, configured=2.5))
    chk, ctx = _check(tmp_path, base, cand, features=["speculative_acceptance"])
    res = chk.judge(ctx)
    row = _row(res)
    assert row["configured_acceptance_length"] == 2.5
    assert row["baseline_acceptance_length"] == 2.52 and row["candidate_acceptance_length"] == 2.48
    assert res.verdict is Verdict.PASS, res.failures
    assert "configured: 2.5, synthetic" in res.summary["per_feature"]["speculative_acceptance"]["reason"]


def test_a_synthetic_length_that_did_not_reach_the_engine_fails(tmp_path: Path) -> None:
    base, cand = _side("baseline"), _side("candidate")
    # natural acceptance on both sides (the label was kept, the switch never reached vLLM)
    base.results["speculative_acceptance"] = as_result("speculative_acceptance", _data(80, configured=2.5))
    cand.results["speculative_acceptance"] = as_result("speculative_acceptance", _data(80, configured=2.5))
    chk, ctx = _check(tmp_path, base, cand, features=["speculative_acceptance"])
    res = chk.judge(ctx)
    assert res.verdict is Verdict.FAIL
    assert any(
        "synthetic acceptance length 2.5 configured" in f and "did not reach the engine" in f for f in res.failures
    )


def test_synthetic_rates_are_not_compared_between_the_sides(tmp_path: Path) -> None:
    # both sides accept at the configured rates: a candidate whose draws came out lower than the baseline's (below
    # the natural rule's Wilson bound) still passes when both lengths are within tolerance of the configured one
    base, cand = _side("baseline"), _side("candidate")
    base.results["speculative_acceptance"] = as_result("speculative_acceptance", _data(170, configured=2.5))
    cand.results["speculative_acceptance"] = as_result("speculative_acceptance", _data(130, configured=2.5))
    chk, ctx = _check(tmp_path, base, cand, features=["speculative_acceptance"])
    res = chk.judge(ctx)
    assert res.verdict is Verdict.PASS, res.failures
    # the same numbers without synthetic acceptance fail the natural rule
    base.results["speculative_acceptance"] = as_result("speculative_acceptance", _data(170, configured=None))
    cand.results["speculative_acceptance"] = as_result("speculative_acceptance", _data(130, configured=None))
    assert chk.judge(ctx).verdict is Verdict.FAIL


def test_natural_acceptance_has_no_configured_length(tmp_path: Path) -> None:
    base, cand = _side("baseline"), _side("candidate")
    base.results["speculative_acceptance"] = as_result("speculative_acceptance", _data(80, configured=None))
    cand.results["speculative_acceptance"] = as_result("speculative_acceptance", _data(80, configured=None))
    chk, ctx = _check(tmp_path, base, cand, features=["speculative_acceptance"])
    res = chk.judge(ctx)
    assert res.verdict is Verdict.PASS and _row(res)["configured_acceptance_length"] is None


def _standard_ctx(tmp_path: Path):
    from fasttrack.checks.base import build_run_plan
    from fasttrack.checks.context import RunContext
    from fasttrack.scope import load_scope

    loaded = load_scope("demo-llama")
    plan = build_run_plan(loaded.scope, tier="standard")
    ctx = RunContext(scope=loaded.scope, plan=plan, run_dir=tmp_path, loaded=loaded, log=lambda s: None)
    spec = next(g for g in plan.groups if g.synthetic_acceptance)
    none = next(g for g in plan.groups if g.spec == "none")
    return ctx, spec, none


def test_a_synthetic_group_runs_only_the_acceptance_feature_and_no_equivalence(tmp_path: Path) -> None:
    from fasttrack.checks.equivalence import EquivalenceCheck
    from fasttrack.checks.features.check import group_features

    ctx, spec, none = _standard_ctx(tmp_path)
    assert group_features(ctx, spec) == {"speculative_acceptance"}
    assert group_features(ctx, none) == set(ctx.scope.features)  # the demo's none group: every listed feature
    eq = EquivalenceCheck()
    assert not eq.wants(ctx, spec, "baseline", 0) and not eq.wants(ctx, spec, "candidate", 0)
    assert eq.wants(ctx, none, "baseline", 0)


def test_the_other_features_are_not_applicable_on_a_synthetic_group(tmp_path: Path) -> None:
    from helpers_checks import window

    from fasttrack.checks.features import FeaturesCheck, SideData

    ctx, spec, _ = _standard_ctx(tmp_path)
    p1 = next(p.id for p in ctx.plan.points if p.group == spec.id and p.batch == 1 and p.context == 32)
    chk = FeaturesCheck()
    for side, accepted in (("baseline", 152), ("candidate", 148)):
        sd = SideData()
        sd.results["speculative_acceptance"] = as_result(
            "speculative_acceptance", {**_data(accepted, configured=2.5), "point": p1, "points": [p1]}
        )
        # the candidate's probe window: decode steps without drafts ran the fast path, verify steps the stock path
        sd.windows["probe"] = window(side, [p1], decode={1: 10}, optimized={1: 4} if side == "candidate" else {})
        chk.sides[(spec.id, side)] = sd
    res = chk.judge(ctx)
    per = res.summary["per_feature"]
    assert per["speculative_acceptance"]["verdict"] == "pass", res.failures
    assert (
        per["structured_output"]["verdict"] == "not_run"
        and "synthetic acceptance" in per["structured_output"]["reason"]
    )
    # only the acceptance row: nothing was compared for the others
    assert {r["feature"] for r in res.tables["features"]} == {"speculative_acceptance"}
    assert res.verdict is Verdict.NOT_RUN
