"""The calibrated equivalence rule (``gates.equivalence.reference``): the candidate's distance from the reference
against stock's own builds', on recorded greedy runs (no engine)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from equivalence_testlib import VOCAB, fill, top
from helpers_checks import demo_ctx

from fasttrack.checks.base import build_run_plan
from fasttrack.checks.batching import verify_batch
from fasttrack.checks.context import RunContext
from fasttrack.checks.equivalence import EquivalenceCheck
from fasttrack.checks.equivalence.reference import calibrate
from fasttrack.errors import ScopeError
from fasttrack.results import Verdict
from fasttrack.scope import StockReference, load_scope, parse_scope

EAGER_ONLY = StockReference(variants={"eager": ["--enforce-eager"]})
WITH_EXACT = StockReference(
    variants={"eager": ["--enforce-eager"], "float32": ["--dtype", "float32"]}, exact="float32", multiple=3.0
)


def _out(tokens: list[int], *, shift: float = 0.0, at: int | None = None) -> tuple[list[int], list[dict[int, float]]]:
    """One request's output: top-5 logprobs per position, the chosen token's logprob lowered by ``shift`` (at
    position ``at`` only, or everywhere)."""
    tops = []
    for i, t in enumerate(tokens):
        d = shift if at is None or i == at else 0.0
        tops.append(dict(top(t, lp_best=-0.2 - d)))
    return tokens, tops


TOKENS = [[VOCAB[(j + k) % 10] for k in range(8)] for j in range(4)]


def _engine(shift: float = 0.0, *, diverge_at: int | None = None) -> dict[int, Any]:
    out = {}
    for j, toks in enumerate(TOKENS):
        t = list(toks)
        if diverge_at is not None:
            t[diverge_at:] = [999] * (len(t) - diverge_at)
        out[j] = _out(t, shift=shift, at=1)
    return out


def test_with_an_exact_variant_stock_is_the_farthest_of_baseline_and_eager_from_it() -> None:
    ref = _engine()
    cal = calibrate(
        WITH_EXACT, 5, baseline=_engine(0.1), candidate=_engine(0.5), variants={"float32": ref, "eager": _engine(0.2)}
    )
    assert not cal.missing and cal.requests == 4
    d = next(x for x in cal.distances if x.name == "max_abs_logprob_diff")
    assert (d.stock_by, d.stock, d.candidate) == ("eager", pytest.approx(0.2), pytest.approx(0.5))
    assert d.limit == pytest.approx(3 * 0.2 + 0.01) and d.ok
    assert "max |Δ logprob| candidate 0.5 vs stock eager 0.2 (baseline 0.1) (limit 3 x 0.2 + 0.01 = 0.61)" in cal.text()
    assert cal.text().startswith("from float32, 4 requests: ")
    row = cal.row()
    assert row["reference"] == "float32" and row["stock_builds"] == "baseline, eager"
    assert row["stock_max_abs_logprob_diff_by"] == "eager" and row["limit_max_abs_logprob_diff"] == pytest.approx(0.61)
    # a candidate farther than three times stock's farthest build fails that distance, saying so
    far = calibrate(
        WITH_EXACT, 5, baseline=_engine(0.1), candidate=_engine(0.7), variants={"float32": ref, "eager": _engine(0.2)}
    )
    assert far.problems[0].startswith("max |Δ logprob| candidate 0.7 vs stock eager 0.2 (baseline 0.1) (limit")
    assert "EXCEEDED" in far.problems[0] and "(distances from float32)" in far.problems[0]


def test_without_an_exact_variant_the_baseline_is_the_reference_and_the_variants_are_stock() -> None:
    cal = calibrate(EAGER_ONLY, 5, baseline=_engine(), candidate=_engine(0.25), variants={"eager": _engine(0.1)})
    d = {x.name: x for x in cal.distances}
    assert d["max_abs_logprob_diff"].stock_by == "eager" and d["max_abs_logprob_diff"].ok
    assert cal.row()["reference"] == "baseline" and cal.row()["stock_builds"] == "eager"
    # stock's eager build identical to the baseline: the limit is the tolerance alone
    same = calibrate(EAGER_ONLY, 5, baseline=_engine(), candidate=_engine(0.005), variants={"eager": _engine()})
    m = next(x for x in same.distances if x.name == "max_abs_logprob_diff")
    assert m.stock == 0 and m.limit == pytest.approx(0.01) and m.ok
    worse = calibrate(EAGER_ONLY, 5, baseline=_engine(), candidate=_engine(0.05), variants={"eager": _engine()})
    assert any(p.startswith("max |Δ logprob| candidate 0.05 vs stock eager 0 (limit") for p in worse.problems)


def test_divergence_counts_the_tokens_after_the_outputs_part() -> None:
    """A candidate whose tokens part from the reference at the 3rd of 8 tokens in every request (divergence 0.75)
    fails where stock's build never parts (limit 0.1); one that parts as often as stock's passes."""
    cal = calibrate(EAGER_ONLY, 5, baseline=_engine(), candidate=_engine(diverge_at=2), variants={"eager": _engine()})
    d = next(x for x in cal.distances if x.name == "divergence")
    assert d.candidate == pytest.approx(0.75) and d.stock == 0 and d.ok is False
    ok = calibrate(
        EAGER_ONLY, 5, baseline=_engine(), candidate=_engine(diverge_at=2), variants={"eager": _engine(diverge_at=2)}
    )
    assert next(x for x in ok.distances if x.name == "divergence").ok


def test_a_variant_without_outputs_leaves_the_point_unjudged() -> None:
    cal = calibrate(
        WITH_EXACT, 5, baseline=_engine(), candidate=_engine(), variants={"eager": _engine(), "float32": "it crashed"}
    )
    assert cal.missing == ["reference variant float32: it crashed"] and not cal.distances and not cal.problems
    assert cal.text() == "not judged: reference variant float32: it crashed"
    # requests a stock build did not answer are left out for every engine, so all are judged on the same ones
    partial = _engine()
    del partial[0]
    cal = calibrate(EAGER_ONLY, 5, baseline=_engine(), candidate=_engine(), variants={"eager": partial})
    assert cal.requests == 3


# --------------------------------------------------------------------------------------------- the check


def _ctx(tmp_path: Path, scope: str = "demo-llama", **equivalence: Any) -> RunContext:
    """The demo scope's smoke run context with ``gates.equivalence`` updated (copies, not validated)."""
    ctx = demo_ctx(tmp_path)
    if scope != "demo-llama":
        loaded = load_scope(scope)
        ctx = RunContext(
            scope=loaded.scope, plan=build_run_plan(loaded.scope, tier="smoke"), run_dir=tmp_path, loaded=loaded
        )
    if equivalence:
        s = ctx.scope
        eq = s.gates.equivalence.model_copy(update=equivalence)
        ctx.scope = s.model_copy(update={"gates": s.gates.model_copy(update={"equivalence": eq})})
    return ctx


def _shifted(shift: float, batches: set[int] | None = None, *, name: str | None = None):
    """An edit of a side's records: the chosen token's logprob at position 1 lowered by ``shift`` (at ``batches``)."""

    def edit(*args):
        p, rec = args[-2], args[-1]
        if (batches is not None and p.batch not in batches) or (name is not None and args[0] != name):
            return rec
        tops = [top(t, lp_best=-0.2 - (shift if i == 1 else 0.0)) for i, t in enumerate(rec.token_ids)]
        return rec.model_copy(update={"top": tops, "logprobs": [t[0][1] for t in tops]})

    return edit


def test_drift_within_stocks_own_eager_spread_passes_where_the_absolute_limit_failed(tmp_path: Path) -> None:
    """The GPU demo's situation: the candidate drifts by 0.25, past the old absolute 0.1, but stock's own eager build
    drifts by 0.1 from the baseline; 0.25 <= 3 x 0.1 + 0.01 passes, and the row shows both figures and the limit."""
    ctx = _ctx(tmp_path, max_kl=1.0)
    chk = EquivalenceCheck()
    fill(chk, ctx, cand_change=_shifted(0.25), variant_change=_shifted(0.1))
    res = chk.judge(ctx)
    assert res.verdict is Verdict.PASS, res.failures
    row = res.tables["equivalence_points"][0]
    assert list(row)[:7] == ["group", "point", "batch", "context", "verdict", "calibration", "requests"]
    assert row["max_abs_logprob_diff"] == pytest.approx(0.25)
    assert row["stock_max_abs_logprob_diff_vs_reference"] == pytest.approx(0.1)
    assert row["stock_max_abs_logprob_diff_by"] == "eager" and row["reference"] == "baseline"
    assert row["limit_max_abs_logprob_diff"] == pytest.approx(0.31)
    assert "max |Δ logprob| candidate 0.25 vs stock eager 0.1 (limit 3 x 0.1 + 0.01 = 0.31)" in row["calibration"]
    assert "candidate <= 3 x stock + tolerance" in res.gate.threshold
    assert res.summary["thresholds"]["reference"]["variants"] == {"eager": ["--enforce-eager"]}


def test_a_numerics_defect_at_one_batch_fails_there_only_by_a_wide_margin(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    chk = EquivalenceCheck()
    fill(chk, ctx, cand_change=_shifted(0.8, {3}), variant_change=_shifted(1e-4))
    res = chk.judge(ctx)
    assert res.verdict is Verdict.FAIL
    assert res.summary["per_batch_verdict"] == {"1": "pass", "2": "pass", "3": "fail", "4": "pass", "8": "pass"}
    (msg,) = [f for f in res.failures if "b3-ctx32" in f]
    assert "max |Δ logprob| candidate 0.8 vs stock eager 0.0001" in msg and "EXCEEDED" in msg
    row = next(r for r in res.tables["equivalence_points"] if r["batch"] == 3)
    assert row["candidate_max_abs_logprob_diff_vs_reference"] > 10 * row["limit_max_abs_logprob_diff"]


def test_the_close_rule_and_the_kl_cap_stay_hard_gates(tmp_path: Path) -> None:
    """Stock's eager build as far from the baseline as the candidate does not excuse breaking vLLM's close rule
    (a token outside the other's top-k) or the KL cap."""
    ctx = _ctx(tmp_path)
    chk = EquivalenceCheck()

    def wild(*args):
        p, rec = args[-2], args[-1]
        if p.batch != 2:
            return rec
        tops = rec.top[:2] + [[(999, -0.3), (998, -2.5), (997, -3.0), (996, -3.5), (995, -4.0)]] * 4
        return rec.model_copy(update={"token_ids": rec.token_ids[:2] + [999] * 4, "top": tops})

    fill(chk, ctx, cand_change=wild, variant_change=wild)
    res = chk.judge(ctx)
    assert res.summary["per_batch_verdict"]["2"] == "fail"
    assert any("b2-ctx32" in f and "check_logprobs_close" in f for f in res.failures)
    chk = EquivalenceCheck()
    fill(chk, ctx, cand_change=_shifted(2.0, {4}), variant_change=_shifted(2.0, {4}))
    res = chk.judge(ctx)
    assert res.summary["per_batch_verdict"]["4"] == "fail"
    assert any("b4-ctx32" in f and "KL" in f and "> 0.01" in f for f in res.failures)


def test_a_variant_that_did_not_run_leaves_its_points_not_run_naming_it(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    chk = EquivalenceCheck()
    fill(chk, ctx)
    gid = ctx.plan.groups[0].id
    del chk.variant_runs[(gid, "eager")]
    chk.variant_errors[(gid, "eager")] = "its engine failed (EngineStartError: out of memory; log: logs/x.log)"
    res = chk.judge(ctx)
    assert res.verdict is Verdict.NOT_RUN
    assert "reference variant eager: its engine failed (EngineStartError: out of memory" in res.reason
    assert {r["verdict"] for r in res.tables["equivalence_points"]} == {"not_run"}


def test_a_variant_whose_rounds_were_not_one_batch_cannot_calibrate_that_point(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    chk = EquivalenceCheck()
    fill(chk, ctx)
    gid = ctx.plan.groups[0].id
    chk.variant_runs[(gid, "eager")]["tp1-dcp1-none-b4-ctx32"].round_checks = [verify_batch(4, running_samples=[2, 3])]
    res = chk.judge(ctx)
    assert res.summary["per_batch_verdict"] == {"1": "pass", "2": "pass", "3": "pass", "4": "not_run", "8": "pass"}
    row = next(r for r in res.tables["equivalence_points"] if r["batch"] == 4)
    assert (
        "reference variant eager: its rounds were not verified to decode as one batch of 4" in row["missing_evidence"]
    )


def test_an_exact_float32_variant_is_the_reference_on_the_gpu_demo(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path, "demo-llama-gpu")
    ref = ctx.scope.gates.equivalence.reference
    assert ref is not None and ref.exact == "float32" and ref.multiple == 3.0
    chk = EquivalenceCheck()
    # bfloat16 builds: the baseline 0.2 and eager 0.15 from float32's answer; the candidate 0.4 (within 3 x 0.2)
    fill(
        chk,
        ctx,
        cand_change=_shifted(0.4),
        variant_change=lambda name, p, rec: _shifted(0.15)(name, p, rec) if name == "eager" else rec,
    )
    gid = ctx.plan.groups[0].id
    for run in chk.runs[(gid, "baseline")].values():
        run.records = [_shifted(0.2)(None, rec) for rec in run.records]
    res = chk.judge(ctx)
    assert res.verdict is Verdict.PASS, res.failures
    rows = res.tables["equivalence_points"]
    assert {r["reference"] for r in rows} == {"float32"} and {r["stock_builds"] for r in rows} == {"baseline, eager"}
    assert all(r["stock_max_abs_logprob_diff_by"] == "baseline" for r in rows)
    assert all(r["candidate_max_abs_logprob_diff_vs_reference"] == pytest.approx(0.4) for r in rows)
    assert all(r["limit_max_abs_logprob_diff"] == pytest.approx(0.61) for r in rows)


def test_a_scope_without_reference_keeps_its_absolute_limit(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path, reference=None, max_abs_logprob_diff=0.05, max_kl=1.0)
    chk = EquivalenceCheck()
    fill(chk, ctx, cand_change=_shifted(0.06, {8}))
    res = chk.judge(ctx)
    assert res.summary["per_batch_verdict"]["8"] == "fail" and res.summary["per_batch_verdict"]["1"] == "pass"
    assert any("max |Δ logprob| on matching prefixes 0.0600 > 0.05" in f for f in res.failures)
    assert "calibration" not in res.tables["equivalence_points"][0]
    assert "max |Δ logprob| <= 0.05" in res.gate.threshold


# --------------------------------------------------------------------------------------------- the scope


def _scope_with(equivalence: str) -> str:
    text = (Path(__file__).parents[2] / "suites" / "demo-llama" / "scope.yaml").read_text()
    start = text.index("  equivalence:\n")
    end = text.index("  features: {")
    return text[:start] + equivalence + text[end:]


@pytest.mark.parametrize(
    "section, words",
    [
        (
            "  equivalence: {max_abs_logprob_diff: 0.1, reference: {variants: {eager: [--enforce-eager]}}}\n",
            ["gates.equivalence", "remove max_abs_logprob_diff"],
        ),
        (
            "  equivalence: {reference: {variants: {eager: [--enforce-eager]}, exact: float32}}\n",
            ["gates.equivalence.reference", "exact names 'float32'"],
        ),
        ("  equivalence: {reference: {variants: {Eager/x: [--enforce-eager]}}}\n", ["variants", "lower-case"]),
        ("  equivalence: {reference: {variants: {eager: []}}}\n", ["variants", "needs the vLLM arguments"]),
        ("  equivalence: {reference: {variants: {}}}\n", ["gates.equivalence.reference.variants"]),
        ("  equivalence: {reference: {variants: {eager: [x]}, multiple: .nan}}\n", ["reference.multiple"]),
        ("  equivalence: {reference: {variants: {eager: [x]}, multiple: 0.5}}\n", ["reference.multiple"]),
        (
            "  equivalence: {reference: {variants: {eager: [x]}, tolerance: {divergence: 2}}}\n",
            ["reference.tolerance.divergence"],
        ),
    ],
)
def test_a_bad_reference_is_a_scope_error_naming_the_field(section: str, words: list[str]) -> None:
    with pytest.raises(ScopeError) as e:
        parse_scope(_scope_with(section), source="scope.yaml")
    for w in words:
        assert w in e.value.message, e.value.message


def test_the_demo_scopes_use_the_calibrated_rule() -> None:
    cpu = load_scope("demo-llama").scope.gates.equivalence
    gpu = load_scope("demo-llama-gpu").scope.gates.equivalence
    assert cpu.reference is not None and cpu.reference.exact is None and list(cpu.reference.variants) == ["eager"]
    assert gpu.reference is not None and gpu.reference.exact == "float32"
    assert gpu.reference.variants["eager"] == ["--enforce-eager"]
    assert gpu.reference.variants["float32"][:2] == ["--dtype", "float32"]
