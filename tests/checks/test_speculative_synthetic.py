"""``speculative_acceptance`` with synthetic acceptance: the row shows the measured acceptance length next to
the configured one, and a measured length far from it fails (the setting did not reach the engine)."""

from __future__ import annotations

from pathlib import Path

from test_checks_features import P, _check, _side

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
    base.data["speculative_acceptance"] = _data(152, configured=2.5)
    cand.data["speculative_acceptance"] = _data(148, configured=2.5)
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
    base.data["speculative_acceptance"] = _data(80, configured=2.5)
    cand.data["speculative_acceptance"] = _data(80, configured=2.5)
    chk, ctx = _check(tmp_path, base, cand, features=["speculative_acceptance"])
    res = chk.judge(ctx)
    assert res.verdict is Verdict.FAIL
    assert any(
        "synthetic acceptance length 2.5 configured" in f and "did not reach the engine" in f for f in res.failures
    )


def test_natural_acceptance_has_no_configured_length(tmp_path: Path) -> None:
    base, cand = _side("baseline"), _side("candidate")
    base.data["speculative_acceptance"] = _data(80, configured=None)
    cand.data["speculative_acceptance"] = _data(80, configured=None)
    chk, ctx = _check(tmp_path, base, cand, features=["speculative_acceptance"])
    res = chk.judge(ctx)
    assert res.verdict is Verdict.PASS and _row(res)["configured_acceptance_length"] is None
