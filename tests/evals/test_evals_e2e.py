"""End to end: the evals check against real demo engines, on the fixture data.

One baseline engine and two candidate engines (clean, and with the planted
``numerics-batch`` defect, which breaks the optimized path at batch 3) run the
demo scope's evals (AIME25 and MRCR at batch 3) on the fixtures in
``tests/evals/fixtures`` through lm-eval. The baseline's runs are shared by both
comparisons. The demo model is trained on these tasks, so its scores are well above
zero. Expected: the clean candidate passes both gates; the defective one fails the
evals check by its MRCR score at batch 3 (the task-score gate), and the
output-agreement gate of both evals.
"""

from __future__ import annotations

import copy
import dataclasses
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from fasttrack.checks.base import EngineSession, RunContext, Verdict
from fasttrack.checks.evals import EvalsCheck
from fasttrack.plan import build_plan
from fasttrack.scope import load_scope

FIXTURES = Path(__file__).resolve().parent / "fixtures"
DEFECT_ENV = "FASTTRACK_DEMO_DEFECT"

pytestmark = pytest.mark.e2e

TIMINGS: dict[str, float] = {}


def _ctx(run_dir: Path) -> RunContext:
    loaded = load_scope("demo-llama")
    plan = build_plan(loaded.scope, tier="smoke", scope_sha256=loaded.sha256)
    scope = loaded.scope  # the demo scope's own path markers
    run_dir.mkdir(parents=True, exist_ok=True)
    ctx = RunContext(scope=scope, plan=plan, tier="smoke", run_dir=run_dir, log=lambda m: print(m, file=sys.stderr))
    ctx.shared["loaded_scope"] = loaded
    ctx.shared["eval_data"] = {"aime25": str(FIXTURES / "aime25.jsonl"), "mrcr": str(FIXTURES / "mrcr.parquet")}
    return ctx


def _engine(slot: Any, demo_model: Any, ctx: RunContext, side: str, key: str, defect: str | None = None) -> Any:
    group = ctx.plan.groups[0]
    args = [*group.args[side], "--served-model-name", ctx.scope.model.served_name or "demo-llama"]
    t0 = time.perf_counter()
    eng = slot.acquire(
        key, side=side, model=demo_model.path, args=args, env=dict(group.env[side]), process_env={DEFECT_ENV: defect}
    )
    TIMINGS[f"start {key}"] = round(time.perf_counter() - t0, 1)
    return eng


def _collect(chk: EvalsCheck, ctx: RunContext, side: str, engine: Any, label: str) -> None:
    session = EngineSession(side=side, group=ctx.plan.groups[0], lifetime=0, engine=engine)
    assert chk.wants(ctx, session)
    t0 = time.perf_counter()
    chk.collect(ctx, session)
    TIMINGS[f"evals {label}"] = round(time.perf_counter() - t0, 1)


@pytest.fixture(scope="module")
def evals_results(engine_slot: Any, demo_model: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    if getattr(demo_model, "kind", None) != "demo":
        pytest.skip(f"the demo model with its plugin is not available: {getattr(demo_model, 'note', '?')}")
    root = tmp_path_factory.mktemp("evals-e2e")
    clean_ctx = _ctx(root / "clean")
    clean = EvalsCheck()
    assert clean.skip_reason(clean_ctx) is None
    engine = _engine(engine_slot, demo_model, clean_ctx, "baseline", "evals-baseline")
    _collect(clean, clean_ctx, "baseline", engine, "baseline (primary + reference, both evals)")

    defect_ctx = dataclasses.replace(
        clean_ctx, run_dir=root / "defect", evidence=list(clean_ctx.evidence), shared=dict(clean_ctx.shared)
    )
    defect = copy.deepcopy(clean)

    engine = _engine(engine_slot, demo_model, clean_ctx, "candidate", "evals-candidate")
    _collect(clean, clean_ctx, "candidate", engine, "clean candidate")
    engine = _engine(
        engine_slot, demo_model, defect_ctx, "candidate", "evals-candidate-numerics-batch", defect="numerics-batch"
    )
    _collect(defect, defect_ctx, "candidate", engine, "numerics-batch candidate")
    engine_slot.release()
    out = {"clean": (clean.judge(clean_ctx), clean_ctx), "defect": (defect.judge(defect_ctx), defect_ctx)}
    print("\nevals e2e timings (s): " + ", ".join(f"{k}: {v}" for k, v in TIMINGS.items()), file=sys.stderr)
    for k, (res, _) in out.items():
        print(f"evals e2e {k}: {res.verdict.value}: {res.reason}", file=sys.stderr)
    return out


def _comparisons(res: Any) -> dict[tuple[str, str], dict[str, Any]]:
    return {(r["eval"], r["point"]): r for r in res.tables["eval_comparisons"]}


def test_clean_candidate_passes_both_evals(evals_results: dict[str, Any]) -> None:
    res, ctx = evals_results["clean"]
    assert res.verdict is Verdict.PASS, (res.reason, res.failures, res.summary.get("not_run"))
    cmps = _comparisons(res)
    assert {e for e, _ in cmps} == {"aime25", "mrcr"}
    for (_name, point), row in cmps.items():
        assert "-b3-" in point, point
        assert row["pairs"] == 6
        assert row["task_pass"] and row["agreement_pass"]
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
    # raw per-sample artifacts exist
    for rel in res.artifacts:
        assert (ctx.run_dir / rel).is_file(), rel


def test_eval_runs_carry_path_evidence(evals_results: dict[str, Any]) -> None:
    res, ctx = evals_results["clean"]
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


def test_the_trained_model_scores_on_both_evals(evals_results: dict[str, Any]) -> None:
    """Scores well above zero on the stock path: the gate can see a numerics defect by its score."""
    res, _ = evals_results["clean"]
    cmps = _comparisons(res)
    for name, least in (("mrcr", 0.5), ("aime25", 1 / 6)):
        row = next(r for (e, _), r in cmps.items() if e == name)
        assert row["baseline_score"] >= least, row


def test_numerics_defect_at_batch3_fails_the_task_score_gate(evals_results: dict[str, Any]) -> None:
    res, _ = evals_results["defect"]
    assert res.verdict is Verdict.FAIL, res.reason
    row = next(r for (e, _), r in _comparisons(res).items() if e == "mrcr")
    assert "-b3-" in row["point"]
    assert row["task_pass"] is False, row
    assert row["score_ci_low"] < -row["margin"]
    assert row["candidate_score"] < row["baseline_score"] - row["margin"], row
    assert any("mrcr" in f and "task score is worse than the baseline's" in f for f in res.failures), res.failures
    assert any(r["kind"] == "score" for r in res.tables["eval_review"])


def test_numerics_defect_at_batch3_fails_the_agreement_gate(evals_results: dict[str, Any]) -> None:
    res, _ = evals_results["defect"]
    assert res.verdict is Verdict.FAIL, res.reason
    cmps = _comparisons(res)
    for name in ("aime25", "mrcr"):
        row = next(r for (e, _), r in cmps.items() if e == name)
        assert row["agreement_pass"] is False, row
        assert row["agreement"] < row["reference_agreement"]
    assert any("agree with the baseline's less than the baseline agrees with itself" in f for f in res.failures)
    assert any(r["kind"] == "output" for r in res.tables["eval_review"])
