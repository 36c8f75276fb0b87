"""Equivalence check: judging recorded greedy runs (fakes; no engine)."""

from __future__ import annotations

from pathlib import Path

import pytest
from equivalence_testlib import fill as _fill
from equivalence_testlib import record as _record
from equivalence_testlib import top as _top
from helpers_checks import demo_ctx, window

from fasttrack.checks.batching import verify_batch
from fasttrack.checks.equivalence import EquivalenceCheck
from fasttrack.results import Verdict


def test_identical_outputs_pass_at_every_batch_size(tmp_path: Path) -> None:
    ctx = demo_ctx(tmp_path)
    chk = EquivalenceCheck()
    _fill(chk, ctx)
    res = chk.judge(ctx)
    assert res.verdict is Verdict.PASS, res.failures
    assert res.summary["per_batch_verdict"] == {"1": "pass", "2": "pass", "3": "pass", "4": "pass", "8": "pass"}
    assert res.gate is not None and "check_logprobs_close" in res.gate.statistic
    rows = res.tables["equivalence_points"]
    assert {r["batch"] for r in rows} == {1, 2, 3, 4, 8}
    assert all(r["candidate_batch_verified"] for r in rows)


def test_numerics_at_one_batch_size_fail_only_there_and_name_the_point(tmp_path: Path) -> None:
    ctx = demo_ctx(tmp_path)
    chk = EquivalenceCheck()

    def broken(p, rec):
        if p.batch != 3:
            return rec
        # candidate picks a token the baseline never considered from position 2 on
        toks = rec.token_ids[:2] + [999] * 4
        tops = rec.top[:2] + [[(999, -0.3), (998, -2.5), (997, -3.0), (996, -3.5), (995, -4.0)]] * 4
        return rec.model_copy(
            update={"token_ids": toks, "top": tops, "logprobs": [t[0][1] for t in tops], "text": "the the the"}
        )

    _fill(chk, ctx, cand_change=broken)
    res = chk.judge(ctx)
    assert res.verdict is Verdict.FAIL
    assert res.summary["per_batch_verdict"] == {"1": "pass", "2": "pass", "3": "fail", "4": "pass", "8": "pass"}
    assert "batch size(s) 3" in res.reason
    msg = "\n".join(res.failures)
    assert "tp1-dcp1-none-b3-ctx32 (batch 3)" in msg
    assert "first divergence at generated token 2" in msg
    assert "NOT in baseline's top" in msg
    assert "b1-ctx32" not in msg and "b8-ctx32" not in msg


def test_drift_on_matching_prefix_beyond_threshold_fails(tmp_path: Path) -> None:
    ctx = demo_ctx(tmp_path)
    chk = EquivalenceCheck()
    _fill(
        chk,
        ctx,
        cand_change=lambda p, rec: (
            _record(p.id, p.batch, rec.round, rec.prompt_id, rec.token_ids, shift=-0.3) if p.batch == 8 else rec
        ),
    )
    res = chk.judge(ctx)
    assert res.verdict is Verdict.FAIL
    assert res.summary["per_batch_verdict"]["8"] == "fail"
    assert any("max |Δ logprob|" in f and "b8-ctx32" in f for f in res.failures)


def test_near_tie_divergence_within_topk_is_close(tmp_path: Path) -> None:
    ctx = demo_ctx(tmp_path)
    chk = EquivalenceCheck()

    def near_tie(p, rec):
        if p.batch != 2 or rec.round != 0 or rec.prompt_id != "p0":
            return rec
        b = rec.token_ids
        # candidate swaps the top-2 at position 4: both tokens are in each other's top-k
        alt = 107 if b[4] != 107 else 108
        toks = b[:4] + [alt, 100]
        tops = rec.top[:4] + [[(alt, -0.80), (b[4], -0.81), (101, -3.0), (102, -3.5), (103, -4.0)], _top(100)]
        return rec.model_copy(update={"token_ids": toks, "top": tops, "logprobs": [t[0][1] for t in tops]})

    def base_near_tie(chk_runs):
        return chk_runs

    _fill(chk, ctx, cand_change=near_tie)
    # the baseline must list the candidate's token at the divergence too
    gid = ctx.plan.groups[0].id
    brun = chk.runs[(gid, "baseline")]["tp1-dcp1-none-b2-ctx32"]
    rec = brun.records[0]
    alt = 107 if rec.token_ids[4] != 107 else 108
    rec.top[4] = [(rec.token_ids[4], -0.80), (alt, -0.81), (101, -3.0), (102, -3.5), (103, -4.0)]
    rec.logprobs[4] = -0.80
    res = chk.judge(ctx)
    row = next(
        r for r in res.tables["equivalence_requests"] if r["batch"] == 2 and r["prompt_id"] == "p0" and r["round"] == 0
    )
    assert row["close"] and not row["exact_match"] and row["first_divergence"] == 4
    assert res.verdict is Verdict.PASS, res.failures


def test_unverified_batch_composition_fails_the_point(tmp_path: Path) -> None:
    ctx = demo_ctx(tmp_path)
    chk = EquivalenceCheck()
    _fill(
        chk, ctx, cand_window=lambda p: window("candidate", [p.id], decode={1: 20} if p.batch == 4 else {p.batch: 20})
    )
    res = chk.judge(ctx)
    assert res.verdict is Verdict.FAIL
    assert res.summary["per_batch_verdict"]["4"] == "fail"
    assert any(
        "batch composition was not verified" in f and "trace: 0 decode steps at batch 4" in f for f in res.failures
    )


def test_a_round_that_was_not_batched_fails_the_point(tmp_path: Path) -> None:
    from fasttrack.checks.batching import verify_batch

    ctx = demo_ctx(tmp_path)
    chk = EquivalenceCheck()
    _fill(chk, ctx)
    gid = ctx.plan.groups[0].id
    for side in ("baseline", "candidate"):
        run = chk.runs[(gid, side)]["tp1-dcp1-none-b8-ctx32"]
        run.round_checks = [verify_batch(8, running_samples=[0, 7, 7, 1] if side == "candidate" else [8, 8])]
    res = chk.judge(ctx)
    assert res.summary["per_batch_verdict"]["8"] == "fail"
    assert any(
        "b8-ctx32 (batch 8)" in f and "round 0: vllm:num_requests_running peaked at 7" in f for f in res.failures
    )


def test_candidate_on_standard_path_never_passes(tmp_path: Path) -> None:
    ctx = demo_ctx(tmp_path)
    chk = EquivalenceCheck()
    _fill(chk, ctx, cand_window=lambda p: window("candidate", [p.id], decode={p.batch: 20}, optimized={}))
    res = chk.judge(ctx)
    assert res.verdict is Verdict.FAIL
    assert "used the standard path" in res.reason
    assert res.failures[0].startswith("equivalence used the standard path")


def test_missing_side_is_not_run(tmp_path: Path) -> None:
    ctx = demo_ctx(tmp_path)
    chk = EquivalenceCheck()
    assert chk.judge(ctx).verdict is Verdict.NOT_RUN
    _fill(chk, ctx)
    del chk.runs[(ctx.plan.groups[0].id, "candidate")]
    assert chk.judge(ctx).verdict is Verdict.NOT_RUN


def test_request_errors_fail_with_the_server_message(tmp_path: Path) -> None:
    ctx = demo_ctx(tmp_path)
    chk = EquivalenceCheck()
    _fill(
        chk,
        ctx,
        cand_change=lambda p, rec: (
            rec.model_copy(
                update={"error": "engine request failed (HTTP 500): boom", "token_ids": [], "top": [], "logprobs": []}
            )
            if p.batch == 1 and rec.round == 0
            else rec
        ),
    )
    res = chk.judge(ctx)
    assert res.verdict is Verdict.FAIL
    assert any("candidate request for p0 failed" in f and "boom" in f for f in res.failures)


@pytest.mark.parametrize(
    "sizes,target,ok",
    [
        ({8: 21, 5: 1, 7: 1}, 8, True),
        ({3: 21, 1: 1, 2: 2}, 3, True),
        ({1: 20}, 4, False),
        ({4: 3, 8: 10}, 4, False),
        ({2: 10, 1: 12}, 2, False),
    ],
)
def test_verify_batch_from_decode_steps(sizes, target, ok) -> None:
    assert verify_batch(target, decode_batch_sizes=sizes).verified is ok


def test_verify_batch_from_metrics_samples() -> None:
    assert verify_batch(4, running_samples=[0, 2, 4, 4, 1]).verified
    bc = verify_batch(4, running_samples=[0, 1, 1])
    assert not bc.verified and bc.source == "metrics"
    assert verify_batch(4).source == "none"


def test_no_profiled_candidate_window_is_not_run_never_pass(tmp_path: Path) -> None:
    """Identical outputs, but the candidate had no profiler at one point: whether it ran the optimized path there
    was not observed, so that point (and the check) is not_run with the reason."""
    ctx = demo_ctx(tmp_path)
    chk = EquivalenceCheck()
    _fill(
        chk,
        ctx,
        cand_window=lambda p: (
            window("candidate", [p.id], decode={}, available=False)
            if p.batch == 3
            else window("candidate", [p.id], decode={p.batch: 20})
        ),
    )
    res = chk.judge(ctx)
    assert res.verdict is Verdict.NOT_RUN, (res.verdict, res.reason)
    assert res.summary["per_batch_verdict"]["3"] == "not_run" and res.summary["per_batch_verdict"]["4"] == "pass"
    row = next(r for r in res.tables["equivalence_points"] if r["batch"] == 3)
    assert row["verdict"] == "not_run" and "no profiled window of the candidate" in row["missing_evidence"]
    assert "no profiler" in row["missing_evidence"]
    assert "b3-ctx32 (batch 3): not judged: no profiled window" in res.reason


def test_no_round_checks_is_not_run_never_pass(tmp_path: Path) -> None:
    """A point whose measured rounds carry no batch check: the batch composition of its requests was not
    verified, so the point is not_run with the reason (the probe's trace alone does not cover the rounds)."""
    ctx = demo_ctx(tmp_path)
    chk = EquivalenceCheck()
    _fill(chk, ctx)
    gid = ctx.plan.groups[0].id
    chk.runs[(gid, "baseline")]["tp1-dcp1-none-b2-ctx32"].round_checks = []
    res = chk.judge(ctx)
    assert res.verdict is Verdict.NOT_RUN, (res.verdict, res.reason)
    assert res.summary["per_batch_verdict"]["2"] == "not_run"
    row = next(r for r in res.tables["equivalence_points"] if r["batch"] == 2)
    assert "the baseline's rounds have no batch check" in row["missing_evidence"]
    assert any("b2-ctx32 (batch 2): not judged: the baseline's rounds have no batch check" in f for f in res.failures)
