"""Coverage check: judging path evidence and fallback probes (fakes; no engine)."""

from __future__ import annotations

from pathlib import Path

from helpers_checks import demo_ctx, window

from fasttrack.checks.base import Deployment
from fasttrack.checks.coverage import CoverageCheck, SituationProbe, max_num_seqs
from fasttrack.checks.outcome import used_standard_path
from fasttrack.checks.windows import WindowRecord, in_range_fraction
from fasttrack.engine.deployment import DeploymentOutcome
from fasttrack.results import PathEvidence, Verdict

GID = "tp1-dcp1-none"


def _ev(
    check: str,
    point: str,
    side: str,
    *,
    decode: dict[int, int],
    optimized: dict[int, int] | None = None,
    stock_ops: int = 0,
    unavailable: str | None = None,
) -> PathEvidence:
    optimized = optimized if optimized is not None else (dict(decode) if side == "candidate" else {})
    detail = {
        "decode_batch_sizes": {str(k): v for k, v in decode.items()},
        "optimized_decode_batch_sizes": {str(k): v for k, v in optimized.items() if v},
    }
    if unavailable:
        detail = {"unavailable": unavailable}
    return PathEvidence(
        check=check,
        point=point,
        side=side,
        window=f"{check}-{point}",
        optimized_ops=8 * sum(optimized.values()),
        stock_ops=stock_ops,
        decode_steps=sum(decode.values()),
        optimized_decode_steps=sum(optimized.values()),
        detail=detail,
    )


def _all_points(ctx, *, cand_opt=True, checks=("equivalence", "features")) -> None:
    for p in ctx.plan.points:
        for check in checks:
            if check == "equivalence" and p.full_context:
                continue
            ctx.evidence.append(_ev(check, p.id, "baseline", decode={p.batch: 20}))
            ctx.evidence.append(
                _ev(check, p.id, "candidate", decode={p.batch: 20}, optimized={p.batch: 20} if cand_opt else {})
            )


def _probe(
    situation: str,
    side: str,
    *,
    steps: int = 3,
    optimized: int = 0,
    stock: int = 3,
    lines: list[str] | None = None,
    earlier: list[str] | None = None,
) -> SituationProbe:
    kind = {
        "prefill": "prefill",
        "mixed_prefill_decode": "mixed",
        "batch_above_range": "decode",
        "out_of_envelope_request": "decode",
    }[situation]
    batch = 9 if situation in ("batch_above_range", "out_of_envelope_request") else 2
    extra = [
        {"kind": kind, "batch": batch, "optimized_ops": 8 if i < optimized else 0, "stock_ops": 4 if i < stock else 0}
        for i in range(steps)
    ]
    w = window(side, [], decode={}, extra_steps=extra, fallback_lines=lines or [], name=f"coverage-{situation}")
    w.summary["step_counts"] = {kind: steps}
    return SituationProbe(
        situation=situation,
        side=side,
        group=GID,
        window=w,
        steps=steps,
        optimized_steps=optimized,
        stock_steps=stock,
        fallback_lines_window=lines or [],
        fallback_lines_earlier=earlier or [],
    )


def _probes(chk: CoverageCheck, **cand_kwargs) -> None:
    for s in ("prefill", "mixed_prefill_decode", "batch_above_range", "out_of_envelope_request"):
        chk.probes.append(_probe(s, "baseline", stock=0))
        kw = dict(lines=[f"INFO fasttrack-demo fallback reason={s} batch=2 tokens=40 count=1 suppressed=0"])
        kw.update(cand_kwargs.get(s, {}))
        chk.probes.append(_probe(s, "candidate", **kw))
    # the demo candidate refuses the deployment outside its envelope, as its scope declares
    refusal = "DemoBackendConfigError: decode_backend=latency_specialized does not support this deployment"
    dep = Deployment(name="unsupported_deployment", side="candidate", group=GID, args=("--enable-lora",))
    out = DeploymentOutcome(args=list(dep.args), started=False, exit_code=1, reject_lines=[refusal])
    chk.deployed.append((dep, out, ""))


def test_clean_evidence_passes_with_coverage_table(tmp_path: Path) -> None:
    ctx = demo_ctx(tmp_path)
    _all_points(ctx)
    chk = CoverageCheck()
    _probes(chk)
    res = chk.judge(ctx)
    assert res.verdict is Verdict.PASS, res.failures
    cov = res.tables["coverage"]
    assert {(r["point"], r["check"]) for r in cov} >= {
        (f"{GID}-b3-ctx32", "equivalence"),
        (f"{GID}-b8-ctxfull", "features"),
    }
    assert all(r["candidate_optimized_fraction"] == 1.0 for r in cov)
    assert {r["situation"] for r in res.tables["fallback"]} == {
        "prefill",
        "mixed_prefill_decode",
        "batch_above_range",
        "out_of_envelope_request",
        "unsupported_deployment",
    }
    assert res.summary["points_not_exercised"] == []


def test_silent_fallback_fails_as_standard_path_for_every_check(tmp_path: Path) -> None:
    ctx = demo_ctx(tmp_path)
    _all_points(ctx, cand_opt=False)
    chk = CoverageCheck()
    _probes(chk)
    res = chk.judge(ctx)
    assert res.verdict is Verdict.FAIL
    assert "equivalence" in res.reason and "features" in res.reason and "used the standard path" in res.reason
    assert res.failures[0].startswith("check ") and "used the standard path" in res.failures[0]
    point_msgs = [f for f in res.failures if f.startswith(f"{GID}-b4-ctx32 [equivalence]")]
    assert point_msgs and "used the standard path" in point_msgs[0] and "0 of 20 in-range decode steps" in point_msgs[0]


def test_partial_coverage_below_threshold_names_the_point(tmp_path: Path) -> None:
    ctx = demo_ctx(tmp_path)
    _all_points(ctx)
    ctx.evidence = [e for e in ctx.evidence if not (e.point == f"{GID}-b2-ctx32" and e.side == "candidate")]
    ctx.evidence.append(_ev("equivalence", f"{GID}-b2-ctx32", "candidate", decode={2: 20}, optimized={2: 10}))
    chk = CoverageCheck()
    _probes(chk)
    res = chk.judge(ctx)
    assert res.verdict is Verdict.FAIL
    assert any(f.startswith(f"{GID}-b2-ctx32 [equivalence]: only 10 of 20 decode steps") for f in res.failures)


def test_out_of_range_decode_steps_do_not_count_against_the_fraction(tmp_path: Path) -> None:
    ctx = demo_ctx(tmp_path)
    ev = _ev("equivalence", f"{GID}-b8-ctx32", "candidate", decode={8: 18, 9: 4}, optimized={8: 18})
    assert in_range_fraction(ev, 1, 8) == (18, 18)
    ctx.evidence.append(ev)
    ctx.evidence.append(_ev("equivalence", f"{GID}-b8-ctx32", "baseline", decode={8: 18, 9: 4}))
    chk = CoverageCheck()
    res = chk.judge(ctx)
    row = next(r for r in res.tables["coverage"] if r["point"] == f"{GID}-b8-ctx32")
    assert row["verdict"] == "pass" and row["candidate_optimized_fraction"] == 1.0, row
    assert f"{GID}-b1-ctx32" in res.summary["points_not_exercised"]
    # the other in-tier points have no decode evidence at all: not_run with the reason, never pass
    assert res.verdict is Verdict.NOT_RUN, (res.verdict, res.reason)
    assert f"{GID}-b1-ctx32" in res.summary["points_without_decode_evidence"]
    assert "no decode evidence at 9 in-tier point(s)" in res.reason


def test_baseline_running_optimized_ops_fails(tmp_path: Path) -> None:
    ctx = demo_ctx(tmp_path)
    _all_points(ctx)
    ctx.evidence.append(_ev("equivalence", f"{GID}-b1-ctx32", "baseline", decode={1: 5}, optimized={1: 5}))
    res = CoverageCheck().judge(ctx)
    assert res.verdict is Verdict.FAIL
    assert any("the baseline ran 40 optimized-path op(s)" in f for f in res.failures)


def test_fallback_situations_must_be_stock_and_visible(tmp_path: Path) -> None:
    ctx = demo_ctx(tmp_path)
    _all_points(ctx)
    chk = CoverageCheck()
    _probes(chk, prefill={"optimized": 2}, mixed_prefill_decode={"lines": []}, batch_above_range={"stock": 1})
    res = chk.judge(ctx)
    assert res.verdict is Verdict.FAIL
    text = "\n".join(res.failures)
    assert f"{GID}:prefill [candidate]: 2 of 3 prefill steps ran optimized-path ops" in text
    assert f"{GID}:mixed_prefill_decode [candidate]: the fallback is not visible" in text
    assert f"{GID}:batch_above_range [candidate]: only 1 of 3 batch_above_range steps show the stock markers" in text


def test_rate_limited_fallback_logged_earlier_counts_as_visible(tmp_path: Path) -> None:
    ctx = demo_ctx(tmp_path)
    _all_points(ctx)
    chk = CoverageCheck()
    _probes(chk, prefill={"lines": [], "earlier": ["fasttrack-demo fallback reason=prefill batch=1 count=3"]})
    res = chk.judge(ctx)
    assert res.verdict is Verdict.PASS, res.failures
    row = next(r for r in res.tables["fallback"] if r["situation"] == "prefill" and r["side"] == "candidate")
    assert "earlier" in row["detail"]


def test_unobservable_stock_markers_are_not_run_never_pass(tmp_path: Path) -> None:
    """The stock markers matched no op on the candidate: its fallback steps cannot be shown to run the stock
    path (it is not inferred from the absence of optimized ops), so the situations are not_run with a scope
    error naming the markers."""
    ctx = demo_ctx(tmp_path)
    _all_points(ctx)
    chk = CoverageCheck()
    no_stock = {"stock": 0}
    _probes(
        chk,
        prefill=no_stock,
        mixed_prefill_decode=no_stock,
        batch_above_range=no_stock,
        out_of_envelope_request=no_stock,
    )
    res = chk.judge(ctx)
    assert res.verdict is Verdict.NOT_RUN, (res.verdict, res.reason)
    probed = [
        r for r in res.tables["fallback"] if r["side"] == "candidate" and r["situation"] != "unsupported_deployment"
    ]
    assert probed and all("stock markers matched no op" in r["detail"] for r in probed)
    assert all(r["verdict"] == "not_run" and "scope error" in r["detail"] for r in probed), probed
    assert "the stock path could not be seen" in probed[0]["detail"]
    assert "scope error" in res.reason and "^fasttrack_demo::stock_step$" in res.reason
    assert res.summary["scope_errors"] and res.tables["markers"][0]["verdict"] == "not_run"


def test_no_profiler_is_not_run_never_pass(tmp_path: Path) -> None:
    ctx = demo_ctx(tmp_path)
    for p in ctx.plan.points:
        for side in ("baseline", "candidate"):
            ctx.evidence.append(_ev("features", p.id, side, decode={}, unavailable="the engine has no profiler"))
    res = CoverageCheck().judge(ctx)
    assert res.verdict is Verdict.NOT_RUN
    assert "without a profiler" in res.reason
    assert CoverageCheck().judge(demo_ctx(tmp_path / "x")).verdict is Verdict.NOT_RUN


def test_used_standard_path_helper() -> None:
    ok = window("candidate", ["p"], decode={2: 10})
    std = window("candidate", ["p"], decode={2: 10}, optimized={})
    assert used_standard_path([ok, std]) is None
    assert "none of the candidate's 10 decode steps" in used_standard_path([std])
    assert used_standard_path([WindowRecord(name="w", side="candidate", points=[], available=False)]) is None


def test_max_num_seqs_parsing() -> None:
    assert max_num_seqs(["--max-num-seqs", "16"]) == 16
    assert max_num_seqs(["--max-num-seqs=4"]) == 4
    assert max_num_seqs(["--seed", "0"]) is None


def test_window_evidence_is_split_by_batch_size() -> None:
    from fasttrack.checks.windows import _point_evidence
    from fasttrack.engine import MarkerSet, StepRecord, WindowEvidence

    def step(kind: str, batch: int, opt: int) -> StepRecord:
        return StepRecord(
            kind=kind,
            annotation="x",
            batch=batch,
            ops=10,
            optimized_ops=opt,
            stock_ops=0 if opt else 4,
            duration_us=100.0,
        )

    steps = (
        [step("prefill", 0, 0)] + [step("decode", 3, 3)] * 5 + [step("decode", 8, 3)] * 7 + [step("decode", 9, 0)] * 2
    )
    ev = WindowEvidence(
        name="w",
        side="candidate",
        prefix="p",
        duration_s=1.0,
        markers=MarkerSet(optimized=["a"], stock=["b"]),
        steps=steps,
        decode_steps=14,
        optimized_decode_steps=12,
        decode_batch_sizes={3: 5, 8: 7, 9: 2},
        optimized_decode_batch_sizes={3: 5, 8: 7},
    )
    pe3 = _point_evidence(ev, check="coverage", point="b3", batches=(1, 3))
    assert (pe3.decode_steps, pe3.optimized_decode_steps, pe3.optimized_ops) == (5, 5, 15)
    pe8 = _point_evidence(ev, check="coverage", point="b8", batches=(4, 8))
    assert (pe8.decode_steps, pe8.optimized_decode_steps) == (7, 7)
    pe9 = _point_evidence(ev, check="coverage", point="b9", batches=(9, 9))
    assert (pe9.decode_steps, pe9.optimized_decode_steps, pe9.stock_ops) == (2, 0, 8)
    whole = _point_evidence(ev, check="coverage", point="all", batches=None)
    assert whole.decode_steps == 14 and in_range_fraction(whole, 1, 8) == (12, 12)


def test_situation_probe_retries_with_a_longer_decode_until_the_step_forms(tmp_path: Path, monkeypatch) -> None:
    """A loaded host can finish the decoding request before the long prompt arrives: no mixed step.
    The probe opens a new window with a longer decode instead of judging the empty one."""
    import asyncio
    import types

    from fasttrack.checks.coverage import probes as coverage

    ctx = demo_ctx(tmp_path)
    decode_lengths: list[int] = []
    windows_opened: list[str] = []
    formed_on = {"attempt": 2}

    async def fake_mixed(client, prompts, decode_tokens=coverage.MIXED_DECODE_TOKENS) -> None:
        decode_lengths.append(decode_tokens)

    class FakeWindow:
        def __init__(self, ctx, eng, *, check, name, points, side, **kw) -> None:
            self.name, self.side, self.record = name, side, None

        async def __aenter__(self):
            windows_opened.append(self.name)
            return self

        async def __aexit__(self, *exc) -> None:
            steps = [{"kind": "prefill", "batch": 1, "optimized_ops": 0, "stock_ops": 1}]
            steps += [{"kind": "decode", "batch": 1, "optimized_ops": 1, "stock_ops": 0}] * 3
            if len(windows_opened) >= formed_on["attempt"]:
                steps.append({"kind": "mixed", "batch": 2, "optimized_ops": 0, "stock_ops": 1})
            self.record = WindowRecord(
                name=self.name,
                side=self.side,
                points=[],
                available=True,
                steps=steps,
                summary={"fallback_lines": ["stock path: mixed batch"]},
            )

    monkeypatch.setattr(coverage, "mixed", fake_mixed)
    monkeypatch.setattr(coverage, "EvidenceWindow", FakeWindow)
    eng = types.SimpleNamespace(log_offset=lambda: 0, log_path=None, read_log=lambda *a: "")
    session = types.SimpleNamespace(engine=eng, group=ctx.plan.groups[0], side="candidate")
    ctx.scope = ctx.scope.model_copy(update={"fallback": ctx.scope.fallback.model_copy(update={"metric": None})})

    probe = asyncio.run(coverage.probe_situation(ctx, session, None, "mixed_prefill_decode", []))
    assert probe.steps == 1 and probe.stock_steps == 1 and probe.attempts == 2
    assert decode_lengths == [coverage.MIXED_DECODE_TOKENS, 2 * coverage.MIXED_DECODE_TOKENS]
    assert windows_opened[1].endswith("-attempt2") and "attempt 2" in probe.note

    # never formed: the probe gives up after PROBE_ATTEMPTS windows and is judged on the last (no step)
    windows_opened.clear(), decode_lengths.clear()
    formed_on["attempt"] = 99
    probe = asyncio.run(coverage.probe_situation(ctx, session, None, "mixed_prefill_decode", []))
    assert probe.steps == 0 and probe.attempts == coverage.PROBE_ATTEMPTS
    assert len(windows_opened) == coverage.PROBE_ATTEMPTS


def test_in_tier_point_without_decode_evidence_is_not_run_never_pass(tmp_path: Path) -> None:
    """Every check's candidate windows at b3 ctx32 contain no decode step (its rounds formed smaller batches):
    the point's path was never seen, so it is not_run with the reason instead of being dropped as not exercised."""
    ctx = demo_ctx(tmp_path)
    _all_points(ctx)
    gap = f"{GID}-b3-ctx32"
    ctx.evidence = [e for e in ctx.evidence if not (e.point == gap and e.side == "candidate")]
    for check in ("equivalence", "features"):
        ctx.evidence.append(_ev(check, gap, "candidate", decode={}))
    chk = CoverageCheck()
    _probes(chk)
    res = chk.judge(ctx)
    assert res.verdict is Verdict.NOT_RUN, (res.verdict, res.reason)
    assert res.summary["points_without_decode_evidence"] == [gap]
    assert f"no decode evidence at 1 in-tier point(s): {gap}" in res.reason
    rows = [r for r in res.tables["coverage"] if r["point"] == gap]
    assert len(rows) == 2 and all(r["verdict"] == "not_run" for r in rows), rows
    assert "no check's candidate window contains a decode step" in rows[0]["detail"]
    # a point no selected check recorded a window for gets a row of its own
    ctx.evidence = [e for e in ctx.evidence if e.point != gap]
    res = chk.judge(ctx)
    assert res.verdict is Verdict.NOT_RUN and res.summary["points_without_decode_evidence"] == [gap]
    (row,) = [r for r in res.tables["coverage"] if r["point"] == gap]
    assert row["verdict"] == "not_run" and "no selected check recorded a window" in row["detail"]


def _stock_windows(chk: CoverageCheck, *, base_stock: dict[str, int], cand_mixed: int = 0) -> None:
    """The coverage decode windows of both sides, with the op names the engines reported."""
    b = window("baseline", [f"{GID}-b2-ctx32"], decode={2: 6}, name="coverage-decode-baseline")
    b.summary.update(stock_op_counts=base_stock, top_ops={"aten::mm": 120, "vllm::unified_attention": 40})
    c = window(
        "candidate",
        [f"{GID}-b2-ctx32"],
        decode={2: 6},
        name="coverage-decode-candidate",
        extra_steps=[{"kind": "prefill", "batch": 0, "optimized_ops": 0, "stock_ops": 1}],
    )
    for s in c.steps[:cand_mixed]:
        s["stock_ops"] = 1
    c.summary.update(
        stock_op_counts={"fasttrack_demo::stock_step": 1 + cand_mixed},
        optimized_op_counts={"fasttrack_demo::fused_decode_mlp": 6},
        top_ops={"fasttrack_demo::fused_decode_mlp": 6, "aten::mm": 30},
    )
    chk.windows += [b, c]


def test_stock_marker_matching_the_candidates_optimized_steps_is_a_scope_error(tmp_path: Path) -> None:
    ctx = demo_ctx(tmp_path)
    _all_points(ctx)
    clean = CoverageCheck()
    _probes(clean)
    _stock_windows(clean, base_stock={})
    assert clean.judge(ctx).verdict is Verdict.PASS  # the demo's markers: a candidate-only fallback marker
    chk = CoverageCheck()
    _probes(chk)
    _stock_windows(chk, base_stock={}, cand_mixed=2)
    res = chk.judge(ctx)
    assert res.verdict is Verdict.NOT_RUN, (res.verdict, res.reason)
    assert res.reason.startswith("1 scope error(s) in path_markers: scope error: the stock markers")
    assert "match ops in 2 of the candidate's 6 steps that ran the optimized path" in res.reason
    assert "fasttrack_demo::stock_step" in res.summary["scope_errors"][0] and res.failures[0].startswith("scope error")
    (row,) = res.tables["markers"]
    assert row["verdict"] == "not_run" and row["candidate_optimized_steps_with_stock_ops"] == 2


def test_stock_marker_never_matching_on_the_baseline_is_a_scope_error(tmp_path: Path) -> None:
    from fasttrack.scope import load_scope

    pm = load_scope("demo-llama").scope.path_markers
    assert pm is not None and pm.stock_on_baseline is False
    ctx = demo_ctx(tmp_path, path_markers=pm.model_copy(update={"stock_on_baseline": True}))
    _all_points(ctx)
    ok = CoverageCheck()
    _probes(ok)
    _stock_windows(ok, base_stock={"fasttrack_demo::stock_step": 3})
    res = ok.judge(ctx)
    assert res.verdict is Verdict.PASS, res.reason
    assert res.tables["markers"][0]["baseline_ops"] == "fasttrack_demo::stock_step"
    chk = CoverageCheck()
    _probes(chk)
    _stock_windows(chk, base_stock={})
    res = chk.judge(ctx)
    assert res.verdict is Verdict.NOT_RUN, (res.verdict, res.reason)
    err = "scope error: stock marker '^fasttrack_demo::stock_step$' matched no op on the baseline"
    assert err in res.reason and "ops seen there: aten::mm, vllm::unified_attention" in res.reason
    (row,) = res.tables["markers"]
    assert row["verdict"] == "not_run" and err in row["detail"] and row["expected_on"] == "baseline"


def test_a_long_refusal_line_keeps_the_part_that_matched() -> None:
    """A refusal raised while vLLM builds its configuration is one long line (the message and the whole
    configuration): the row keeps the part the scope's regex matched, not the line's tail."""
    from fasttrack.checks.coverage.judge import LINE_CHARS, _clip

    line = "Value error, " + "x" * 300 + " the backend does not support this deployment: LoRA " + "y" * 500
    kept = _clip(line, "does not support this deployment")
    assert "does not support this deployment" in kept and len(kept) == LINE_CHARS
    assert _clip("short line", "nothing") == "short line"
    assert _clip(line, None) == line[-LINE_CHARS:]


def test_a_declared_device_counter_the_candidate_did_not_export_is_not_run_never_pass(tmp_path: Path) -> None:
    """The kernels' names alone cannot tell a kernel that fell back inside: where the scope declares a device
    counter and the candidate's /metrics lacks it, the point is not run, whatever the trace says."""
    ctx = demo_ctx(tmp_path)
    _all_points(ctx)
    point = f"{GID}-b4-ctx32"
    for e in ctx.evidence:
        if e.point == point and e.side == "candidate" and e.check == "equivalence":
            e.detail["device_counter_missing"] = True
    chk = CoverageCheck()
    _probes(chk)
    res = chk.judge(ctx)
    assert res.verdict is not Verdict.PASS
    (row,) = [r for r in res.tables["coverage"] if r["point"] == point and r["check"] == "equivalence"]
    assert row["verdict"] == "not_run" and "device counter" in row["detail"]
    assert all(r["verdict"] == "pass" for r in res.tables["coverage"] if r["point"] != point and r["in_plan"])
