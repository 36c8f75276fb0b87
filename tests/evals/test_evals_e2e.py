"""End to end: the evals check against real demo engines, on the fixture data.

One baseline engine and two candidate engines (clean, and with the planted
``numerics-batch`` defect, which breaks the optimized path at batch 3) run the
demo scope's evals (AIME25 and MRCR at batch 3) on the fixtures in
``tests/evals/fixtures`` through lm-eval. The baseline's runs are shared by both
comparisons. The demo model is trained on these tasks, so its scores are well above
zero. Expected: the clean candidate passes both gates; the defective one fails the
evals check by its MRCR score at batch 3 (the task-score gate), and the
output-agreement gate of both evals.

The engines are the session's (shared with the other modules): the baseline's runs
are collected while its engine is up (``evals_baseline``), each candidate's when its
turn comes.
"""

from __future__ import annotations

import copy
import dataclasses
import importlib.util
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from demo_engines import demo_engine, engine_phase, missing_prerequisite, require_demo_target

from fasttrack.checks.base import EngineSession, RunContext, Verdict, build_run_plan
from fasttrack.checks.evals import EvalsCheck
from fasttrack.perf.loadgen import run_loop
from fasttrack.scope import load_scope

FIXTURES = Path(__file__).resolve().parent / "fixtures"

pytestmark = pytest.mark.e2e

TIMINGS: dict[str, float] = {}


def _ctx(run_dir: Path) -> RunContext:
    loaded = load_scope("demo-llama")
    plan = build_run_plan(loaded.scope, tier="smoke", scope_sha256=loaded.sha256)
    scope = loaded.scope  # the demo scope's own path markers
    run_dir.mkdir(parents=True, exist_ok=True)
    return RunContext(
        scope=scope,
        plan=plan,
        run_dir=run_dir,
        loaded=loaded,
        eval_data={"aime25": FIXTURES / "aime25.jsonl", "mrcr": FIXTURES / "mrcr.parquet"},
        log=lambda m: print(m, file=sys.stderr),
    )


def _collect(chk: EvalsCheck, ctx: RunContext, side: str, engine: Any, label: str) -> None:
    session = EngineSession(side=side, group=ctx.plan.groups[0], lifetime=0, engine=engine)
    assert chk.wants(ctx, session.group, side, 0)
    t0 = time.perf_counter()
    run_loop(chk.collect(ctx, session))  # as the pipeline does
    TIMINGS[f"evals {label}"] = round(time.perf_counter() - t0, 1)


def _timed_engine(key: str, get: Any) -> Any:
    t0 = time.perf_counter()
    eng = get()
    TIMINGS[f"engine {key}"] = round(time.perf_counter() - t0, 1)
    return eng


def _report(name: str, res: Any) -> None:
    print("\nevals e2e timings (s): " + ", ".join(f"{k}: {v}" for k, v in TIMINGS.items()), file=sys.stderr)
    print(f"evals e2e {name}: {res.verdict.value}: {res.reason}", file=sys.stderr)


@pytest.fixture(scope="session")
@engine_phase("baseline")
def evals_baseline(
    engine_slot: Any, demo_model: Any, demo_target: Any, tmp_path_factory: pytest.TempPathFactory
) -> tuple[EvalsCheck, RunContext]:
    """The baseline's runs (primary, reference, evidence) of both evals, on the session's baseline engine."""
    require_demo_target(demo_model)
    if importlib.util.find_spec("lm_eval") is None:
        missing_prerequisite("the lm-eval extra is not installed (pip install -e '.[cpu]' installs lm-eval[api])")
    ctx = _ctx(tmp_path_factory.mktemp("evals-e2e") / "baseline")
    chk = EvalsCheck()
    assert chk.skip_reason(ctx) is None
    engine = _timed_engine("baseline", lambda: demo_engine(engine_slot, demo_model, demo_target, "baseline"))
    _collect(chk, ctx, "baseline", engine, "baseline (primary + reference, both evals)")
    return chk, ctx


def _candidate_result(evals_baseline: tuple[EvalsCheck, RunContext], engine: Any, name: str) -> tuple[Any, RunContext]:
    """A copy of the baseline's collection, the candidate ``engine``'s runs added, judged."""
    base_chk, base_ctx = evals_baseline
    assert engine.side == "candidate"
    run_dir = base_ctx.run_dir.parent / name
    shutil.copytree(base_ctx.run_dir, run_dir)  # the baseline's artifacts, as in one run folder
    ctx = dataclasses.replace(
        base_ctx, run_dir=run_dir, evidence=list(base_ctx.evidence), eval_data=dict(base_ctx.eval_data)
    )
    chk = copy.deepcopy(base_chk)
    _collect(chk, ctx, "candidate", engine, f"{name} candidate")
    res = chk.judge(ctx)
    _report(name, res)
    return res, ctx


@pytest.fixture(scope="session")
@engine_phase("candidate")
def evals_clean(
    evals_baseline: tuple[EvalsCheck, RunContext], engine_slot: Any, demo_model: Any, demo_target: Any
) -> tuple[Any, RunContext]:
    engine = _timed_engine("candidate", lambda: demo_engine(engine_slot, demo_model, demo_target, "candidate"))
    return _candidate_result(evals_baseline, engine, "clean")


@pytest.fixture(scope="session")
@engine_phase("numerics-batch")
def evals_numerics_batch(
    evals_baseline: tuple[EvalsCheck, RunContext], engine_slot: Any, demo_model: Any, demo_target: Any
) -> tuple[Any, RunContext]:
    engine = _timed_engine(
        "candidate-numerics-batch",
        lambda: demo_engine(engine_slot, demo_model, demo_target, "candidate", "numerics-batch"),
    )
    return _candidate_result(evals_baseline, engine, "numerics-batch")


def test_baseline_runs_answer_every_sample_at_batch_3(evals_baseline: tuple[EvalsCheck, RunContext]) -> None:
    """The baseline's side (collected while the session's baseline engine is up): both evals ran
    every sample, primary and reference, and the evidence windows decoded at batch 3 on the stock path."""
    chk, ctx = evals_baseline
    assert not chk.state.errors, chk.state.errors
    runs = sorted((r.eval, r.side, r.role) for r in chk.state.runs)
    assert runs == sorted(
        (e, "baseline", role) for e in ("aime25", "mrcr") for role in ("primary", "reference", "evidence")
    )
    for r in chk.state.runs:
        assert r.batch == 3 and (r.role == "evidence" or len(r.outcomes) == 6), (r.eval, r.role, len(r.outcomes))
    ev = [e for e in ctx.evidence if e.check == "evals"]
    assert {"evals-aime25-b3", "evals-mrcr-b3"} <= {e.window for e in ev}
    for e in ev:
        assert e.side == "baseline" and e.decode_steps > 0 and e.optimized_ops == 0, e
        assert e.detail["decode_batch_sizes"].get("3", 0) > 0, e.detail


def _comparisons(res: Any) -> dict[tuple[str, str], dict[str, Any]]:
    return {(r["eval"], r["point"]): r for r in res.tables["eval_comparisons"]}


def test_clean_candidate_passes_both_evals(evals_clean: tuple[Any, RunContext]) -> None:
    res, ctx = evals_clean
    assert res.verdict is Verdict.PASS, (res.reason, res.failures, res.summary.get("not_run"))
    cmps = _comparisons(res)
    assert {e for e, _ in cmps} == {"aime25", "mrcr"}
    for (_name, point), row in cmps.items():
        assert "-b3-" in point, point
        assert row["pairs"] == 6
        assert row["task_pass"] and row["agreement_pass"]
        # the gate's power at these 6 samples is stated beside it (the trained model scores well above 0)
        assert 0.1 < row["min_detectable_drop"] <= 1.0 and row["min_detectable_drop_power"] == 0.8, row
    assert "detects a score drop of" in res.reason and "at 80% power on 6 samples" in res.reason
    # every sample was run on both sides (and the baseline's reference run), with outputs recorded
    samples = res.tables["eval_samples"]
    for name in ("aime25", "mrcr"):
        rows = [s for s in samples if s["eval"] == name and s["role"] != "evidence"]
        assert len(rows) == 3 * 6
        assert all(isinstance(s["output"], str) for s in rows)
    # MRCR is reported per context bin and needle count, AIME per problem
    dims = {(b["eval"], b["dimension"]) for b in res.tables["eval_breakdown"]}
    assert {("mrcr", "bin"), ("mrcr", "n_needles"), ("aime25", "problem")} <= dims
    needles = {b["group"] for b in res.tables["eval_breakdown"] if b["dimension"] == "n_needles"}
    assert needles == {"2", "4", "8"}
    # seeds and generation settings recorded; lm-eval ran at the point's batch size
    runs = res.tables["eval_runs"]
    assert sorted((r["eval"], r["side"], r["role"]) for r in runs) == sorted(
        (e, s, role)
        for e in ("aime25", "mrcr")
        for s, role in (
            ("baseline", "primary"),
            ("baseline", "reference"),
            ("baseline", "evidence"),
            ("candidate", "primary"),
            ("candidate", "evidence"),
        )
    )
    for run in runs:
        assert run["num_concurrent"] == 3 and run["seed"] == 0 and run["max_tokens"] == 32
        # graded runs are not profiled; the evidence runs carry the profiler window
        assert (run["profile_window"] is not None) == (run["role"] == "evidence"), run
        # and decode past the answer (a batch's requests then overlap in decode steps)
        assert run["ignore_eos"] is (run["role"] == "evidence"), run
    # raw per-sample artifacts exist
    for rel in res.artifacts:
        assert (ctx.run_dir / rel).is_file(), rel


def test_eval_runs_carry_path_evidence(evals_clean: tuple[Any, RunContext]) -> None:
    res, ctx = evals_clean
    ev = [e for e in ctx.evidence if e.check == "evals"]
    sides = {(e.side, e.window) for e in ev}
    assert {
        ("baseline", "evals-aime25-b3"),
        ("candidate", "evals-aime25-b3"),
        ("baseline", "evals-mrcr-b3"),
        ("candidate", "evals-mrcr-b3"),
    } <= sides
    for e in ev:
        assert e.decode_steps > 0, e
        assert e.detail["decode_batch_sizes"].get("3", 0) > 0, e.detail
        if e.side == "candidate":
            assert e.optimized_decode_steps > 0, e
            assert e.detail["optimized_decode_batch_sizes"].get("3", 0) > 0, e.detail
        else:
            assert e.optimized_ops == 0, e


def test_the_trained_model_scores_on_both_evals(evals_clean: tuple[Any, RunContext]) -> None:
    """Scores well above zero on the stock path: the gate can see a numerics defect by its score."""
    res, _ = evals_clean
    cmps = _comparisons(res)
    for name, least in (("mrcr", 0.5), ("aime25", 0.5)):
        row = next(r for (e, _), r in cmps.items() if e == name)
        assert row["baseline_score"] >= least, row


def test_numerics_defect_at_batch3_fails_the_task_score_gate(evals_numerics_batch: tuple[Any, RunContext]) -> None:
    res, _ = evals_numerics_batch
    assert res.verdict is Verdict.FAIL, res.reason
    row = next(r for (e, _), r in _comparisons(res).items() if e == "mrcr")
    assert "-b3-" in row["point"]
    assert row["task_pass"] is False, row
    assert row["score_ci_low"] < -row["margin"]
    assert row["candidate_score"] < row["baseline_score"] - row["margin"], row
    assert any("mrcr" in f and "task score is worse than the baseline's" in f for f in res.failures), res.failures
    assert any(r["kind"] == "score" for r in res.tables["eval_review"])


def test_numerics_defect_at_batch3_fails_the_agreement_gate(evals_numerics_batch: tuple[Any, RunContext]) -> None:
    """MRCR's 20-odd-token answers diverge from the baseline's. (The trained model's AIME answers are
    one to three tokens and an end token; the defect corrupts decode steps from the second batch-3
    step on, so they mostly survive it: AIME's agreement is not expected to fail.)"""
    res, _ = evals_numerics_batch
    assert res.verdict is Verdict.FAIL, res.reason
    cmps = _comparisons(res)
    for name in ("mrcr",):
        row = next(r for (e, _), r in cmps.items() if e == name)
        assert row["agreement_pass"] is False, row
        assert row["agreement"] < row["reference_agreement"]
    assert any("agree with the baseline's less than the baseline agrees with itself" in f for f in res.failures)
    assert any(r["kind"] == "output" for r in res.tables["eval_review"])
