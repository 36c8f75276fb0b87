"""The evals check without engines: dataset errors, point selection, judging recorded runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fasttrack.checks.base import RunContext, Verdict, build_run_plan, overall_verdict, registered_checks
from fasttrack.checks.evals import EvalsCheck, RunRecord, matching_units
from fasttrack.errors import FasttrackError
from fasttrack.evals.compare import SampleOutcome
from fasttrack.evals.runner import GenerationSettings, LmEvalOutput
from fasttrack.scope import EvalSpec, load_scope

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def _ctx(
    tmp_path: Path, *, evals: list[EvalSpec] | None = None, eval_data: dict[str, str] | None = None, tier: str = "smoke"
) -> RunContext:
    loaded = load_scope("demo-llama")
    scope = loaded.scope if evals is None else loaded.scope.model_copy(update={"evals": evals})
    plan = build_run_plan(scope, tier=tier)
    data = {name: Path(path) for name, path in (eval_data or {}).items()}
    return RunContext(scope=scope, plan=plan, run_dir=tmp_path, loaded=loaded, eval_data=data, log=lambda m: None)


def test_registered() -> None:
    assert "evals" in registered_checks()


def test_demo_scope_evals_run_at_batch_3_only(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    for spec in ctx.scope.evals:
        units = matching_units(ctx, spec)
        assert [(u.batch, u.points) for u in units] == [(3, ["tp1-dcp1-none-b3-ctx32", "tp1-dcp1-none-b3-ctxfull"])]


def test_evals_skip_the_synthetic_acceptance_group(tmp_path: Path) -> None:
    # the standard tier adds the n-gram group with synthetic acceptance: its outputs come from drafts accepted at
    # fixed rates, so the evals run on the stock-decode group only
    ctx = _ctx(tmp_path, tier="standard")
    assert any(g.synthetic_acceptance for g in ctx.plan.groups)
    for spec in ctx.scope.evals:
        assert {u.group for u in matching_units(ctx, spec)} == {"tp1-dcp1-none"}


def test_demo_scope_data_resolves(tmp_path: Path) -> None:
    chk = EvalsCheck()
    assert chk.skip_reason(_ctx(tmp_path)) is None
    assert {n: d.n_rows for n, d in chk.state.datasets.items()} == {"aime25": 120, "mrcr": 60}


def test_all_datasets_missing_is_not_run_with_the_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    evals = [EvalSpec(name="aime25", kind="aime25", data="data/nope.jsonl", points={"batch": [3]})]
    ctx = _ctx(tmp_path, evals=evals)
    chk = EvalsCheck()
    reason = chk.skip_reason(ctx)
    assert reason is not None and "dataset 'aime25' not found at" in reason
    assert "suites/demo-llama/data/nope.jsonl" in reason and "the hub is unreachable (HF_HUB_OFFLINE=1)" in reason
    res = chk.judge(ctx)
    assert res.verdict is Verdict.NOT_RUN and "not found" in res.reason
    assert overall_verdict([res]) is Verdict.NOT_RUN  # the bundle cannot pass with it


def test_one_missing_dataset_keeps_the_check_from_passing(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path, eval_data={"mrcr": "/nonexistent/mrcr.parquet"})
    chk = EvalsCheck()
    assert chk.skip_reason(ctx) is None  # aime25 can still run
    res = chk.judge(ctx)
    assert res.verdict is Verdict.NOT_RUN
    assert "dataset 'mrcr' not found at '/nonexistent/mrcr.parquet'" in res.reason


def test_eval_data_for_an_unknown_eval(tmp_path: Path) -> None:
    with pytest.raises(FasttrackError, match=r"names eval\(s\) \['gsm8k'\]"):
        EvalsCheck().skip_reason(_ctx(tmp_path, eval_data={"gsm8k": "x.jsonl"}))


def test_filter_that_matches_no_point(tmp_path: Path) -> None:
    evals = [EvalSpec(name="aime25", kind="aime25", data="data/aime25.jsonl", points={"batch": [5]})]
    reason = EvalsCheck().skip_reason(_ctx(tmp_path, evals=evals))
    assert reason is not None and "no config point of this plan" in reason and "{'batch': [5]}" in reason


def test_filter_on_an_unknown_dimension(tmp_path: Path) -> None:
    evals = [EvalSpec(name="aime25", kind="aime25", data="data/aime25.jsonl", points={"gpu": [1]})]
    with pytest.raises(FasttrackError, match="unknown point dimension"):
        EvalsCheck().skip_reason(_ctx(tmp_path, evals=evals))


def _record(unit: Any, side: str, role: str, outputs: list[str], kind: str = "aime25") -> RunRecord:
    settings = GenerationSettings(max_tokens=32, temperature=0.0, seed=0, num_concurrent=unit.batch)
    out = LmEvalOutput(
        task=kind,
        lm_model="local-completions",
        model_args={},
        settings=settings,
        task_config={},
        task_source="x",
        lm_eval_version="0.4.13",
        wall_s=1.0,
        aggregate={},
        samples=[{"doc_id": i, "output": o, "score": 0.0} for i, o in enumerate(outputs)],
    )
    outcomes = [SampleOutcome(sample_id=str(i), output=o, score=0.0) for i, o in enumerate(outputs)]
    return RunRecord(
        eval="aime25",
        kind=kind,
        point=unit.point,
        points=unit.points,
        group=unit.group,
        batch=unit.batch,
        side=side,
        role=role,
        repeat=0,
        lifetime=0,
        output=out,
        outcomes=outcomes,
        artifact="a",
        engine={},
    )


def _judge_with(tmp_path: Path, candidate_outputs: list[str]) -> Any:
    evals = [EvalSpec(name="aime25", kind="aime25", data="data/aime25.jsonl", points={"batch": [3]}, margin=0.1)]
    ctx = _ctx(tmp_path, evals=evals)
    chk = EvalsCheck()
    assert chk.skip_reason(ctx) is None
    from fasttrack.evals.samples import select_samples

    chk.state.selections["aime25"] = select_samples(chk.state.datasets["aime25"], limit=8)
    unit = chk.state.units["aime25"][0]
    base = [f"output {i} of the stock path, several words long" for i in range(8)]
    chk.state.runs = [
        _record(unit, "baseline", "primary", base),
        _record(unit, "baseline", "reference", base),
        _record(unit, "candidate", "primary", candidate_outputs),
    ]
    return chk.judge(ctx)


def test_judge_passes_identical_outputs(tmp_path: Path) -> None:
    base = [f"output {i} of the stock path, several words long" for i in range(8)]
    res = _judge_with(tmp_path, base)
    assert res.verdict is Verdict.PASS, res.reason
    assert res.gate is not None and "-margin" in res.gate.rule
    (row,) = res.tables["eval_comparisons"]
    assert row["agreement"] == 1.0 and row["passed"] is True and row["newcombe_ci_low"] is not None
    assert len(res.tables["eval_samples"]) == 24
    assert {b["dimension"] for b in res.tables["eval_breakdown"]} == {"problem"}


def test_judge_fails_diverging_outputs(tmp_path: Path) -> None:
    res = _judge_with(tmp_path, [f"zz qq {i} xx" for i in range(8)])
    assert res.verdict is Verdict.FAIL
    assert "agree with the baseline's less" in res.failures[0] and "tp1-dcp1-none-b3-ctx32" in res.failures[0]
    assert len([r for r in res.tables["eval_review"] if r["kind"] == "output"]) == 8


def test_judge_without_the_reference_run_is_not_run(tmp_path: Path) -> None:
    evals = [EvalSpec(name="aime25", kind="aime25", data="data/aime25.jsonl", points={"batch": [3]})]
    ctx = _ctx(tmp_path, evals=evals)
    chk = EvalsCheck()
    chk.skip_reason(ctx)
    unit = chk.state.units["aime25"][0]
    chk.state.runs = [_record(unit, "baseline", "primary", ["a"]), _record(unit, "candidate", "primary", ["a"])]
    res = chk.judge(ctx)
    assert res.verdict is Verdict.NOT_RUN and "baseline reference repeat 0" in res.reason


def test_result_tables_serialise_to_parquet(tmp_path: Path) -> None:
    from fasttrack.bundle.tables import parquet_bytes, read_rows

    for outputs in (
        [f"output {i} of the stock path, several words long" for i in range(8)],
        [f"zz qq {i} xx" for i in range(8)],
    ):
        res = _judge_with(tmp_path, outputs)
        for name, rows in res.tables.items():
            if not rows:
                continue
            data, n, _cols = parquet_bytes(rows)
            assert n == len(rows) and len(read_rows(data)) == len(rows), name


def test_the_evidence_window_reads_the_scopes_device_counters(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The evals' profiler windows take the scope's device counters with its markers, as every other window does
    (on the H200 run they did not: the evals' windows were the only ones whose steps no device count confirmed)."""
    import asyncio

    import fasttrack.engine as engine_mod

    loaded = load_scope("demo-llama-gpu")
    plan = build_run_plan(loaded.scope, tier="smoke")
    ctx = RunContext(scope=loaded.scope, plan=plan, run_dir=tmp_path, loaded=loaded, log=lambda m: None)
    seen: dict[str, Any] = {}

    class Opened(Exception):
        pass

    class FakeWindow:
        def __init__(self, engine: Any, name: str, *, markers: Any = None, fallback_pattern: Any = None) -> None:
            seen.update(markers=markers, fallback=fallback_pattern)

        async def __aenter__(self) -> None:
            raise Opened

        async def __aexit__(self, *exc: Any) -> None:
            return None

    monkeypatch.setattr(engine_mod, "ProfilerWindow", FakeWindow)
    unit = matching_units(ctx, ctx.scope.evals[0])[0]
    with pytest.raises(Opened):
        asyncio.run(EvalsCheck()._profiled(ctx, object(), "evals-aime25-b8", unit, {}))  # type: ignore[arg-type]
    dc = loaded.scope.path_markers.device_counters
    assert seen["markers"].device_optimized == dc.optimized == "fasttrack_demo_device_fast_steps_total"
    assert seen["markers"].device_stock == dc.stock
    assert seen["fallback"] == loaded.scope.fallback.log_regex
