"""The kernels check's evidence: numerics cases, determinism, timing perturbation, sanitizers and speed of light,
as the kernel suites' pytest plugin records them (nested values as JSON text).

Re-judging from each row's own counts: a case passes exactly when it has no mismatch (elements outside
``atol + rtol*|expected|``, NaN or infinity mismatches, which must add up to its ``mismatches``) and no error; a
determinism row when its runs are bitwise equal or within the ULP budget without a NaN difference; a
perturbation row when no trial failed and the baseline had no stale NaN; a sanitizer row that ran when it
reported no error. The bound folds those rows, and every kernel suite of the judging scope needs a row.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from fasttrack import registry
from fasttrack.evidence.base import Checker, CheckEvidence, Rejudged, Row, RowVerdict, TableSpec, fold, headroom
from fasttrack.evidence.expect import RejudgeContext

CHECK = "kernels"
UNBOUNDED_CASES = 50_000
"""Kernel cases one suite may record: pytest parametrizes them, so the scope does not count them."""


class KernelRow(Row):
    """What every kernel row starts with: the suite, the test and the case."""

    KEY: ClassVar[tuple[str, ...]] = ("suite", "test", "output")

    suite: str
    test: str | None = None
    kernel: str | None = None
    candidate: str | None = None
    shape: str | None = None
    dtype: str | None = None
    output: str | None = None
    device: str | None = None


class KernelCaseRow(KernelRow):
    """One output of one numerics case against the float64 reference."""

    dist: str | None = None
    out_dtype: str | None = None
    seed: int | None = None
    atol_scale: float | None = None
    verdict: RowVerdict
    numel: int | None = None
    finite: int | None = None
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    max_ulp: int | None = None
    mismatches: int
    """Elements outside the tolerance plus NaN and infinity mismatches."""
    out_of_bound: int | None = None
    nan_mismatch: int | None = None
    inf_mismatch: int | None = None
    expected_nonfinite: int | None = None
    atol: float | None = None
    rtol: float | None = None
    tol_source: str | None = None
    first_bad: str | None = None
    error: str | None = None


class KernelDeterminismRow(KernelRow):
    """Repeated runs of one output compared bitwise."""

    runs: int | None = None
    bitwise_equal: bool
    differing_runs: int
    max_differing_elements: int | None = None
    max_ulp: int
    nan_differs: bool
    budget_ulp: int
    verdict: RowVerdict


class KernelPerturbationRow(KernelRow):
    """Timing perturbation with NaN-poisoned buffers: a failed trial means a race."""

    kind: str | None = None
    defects: str | None = None
    trials: int | None = None
    baseline_stale_nan: int
    failed_trials: int
    stale_nan_trials: int | None = None
    verdict: RowVerdict
    race_detected: bool | None = None
    budget_ulp: int | None = None
    max_sleep_cycles: int | None = None
    trial_records: str | None = None


class KernelSanitizerRow(Row):
    """One compute-sanitizer tool run over a suite."""

    KEY: ClassVar[tuple[str, ...]] = ("suite", "tool")

    suite: str
    tool: str
    command: str | None = None
    exit_code: int | None = None
    wall_s: float | None = None
    tests_passed: int | None = None
    errors: int | None = None
    summaries: int | None = None
    status: str
    """``ran`` or ``not_run``."""
    verdict: RowVerdict
    reason: str | None = None
    cases_checked: int | None = None
    cases_failed: int | None = None
    tests: str | None = None
    hazards: int | None = None
    race_errors: int | None = None
    race_warnings: int | None = None


class KernelSpeedRow(KernelRow):
    """Achieved bandwidth and FLOP/s of one kernel against the measured device peaks."""

    time_us: float | None = None
    time_us_samples: str | None = None
    timing: str | None = None
    bytes: int | None = None
    flops: int | None = None
    achieved_gbs: float | None = None
    achieved_tflops: float | None = None
    peak_bandwidth_gbs: float | None = None
    peak_bf16_tflops: float | None = None
    pct_peak_bandwidth: float | None = None
    pct_peak_flops: float | None = None
    bound: str | None = None
    pct_speed_of_light: float | None = None
    floor_us: float | None = None


def case_verdict(r: KernelCaseRow) -> tuple[str, str]:
    parts = [r.out_of_bound, r.nan_mismatch, r.inf_mismatch]
    if r.error:
        return "fail", f"error: {r.error[:120]}"
    if None not in parts and sum(p or 0 for p in parts) != r.mismatches:
        return "fail", f"mismatches {r.mismatches} is not out_of_bound + nan_mismatch + inf_mismatch = {sum(parts)}"  # type: ignore[arg-type]
    return ("pass", "no mismatch") if r.mismatches == 0 else ("fail", f"{r.mismatches} mismatch(es)")


def determinism_verdict(r: KernelDeterminismRow) -> tuple[str, str]:
    ok = (r.differing_runs == 0 and r.bitwise_equal) or (not r.nan_differs and r.max_ulp <= r.budget_ulp)
    return (
        "pass" if ok else "fail"
    ), f"{r.differing_runs} differing run(s), max ULP {r.max_ulp} (budget {r.budget_ulp})"


def perturbation_verdict(r: KernelPerturbationRow) -> tuple[str, str]:
    ok = r.failed_trials == 0 and not r.baseline_stale_nan
    return ("pass" if ok else "fail"), f"{r.failed_trials} failed trial(s), {r.baseline_stale_nan} stale NaN"


def sanitizer_verdict(r: KernelSanitizerRow) -> tuple[str, str]:
    if r.status != "ran":
        return "not_run", f"status {r.status}"
    return ("pass" if r.errors == 0 else "fail"), f"{r.errors} error(s)"


RULES = {
    "cases": case_verdict,
    "determinism": determinism_verdict,
    "perturbation": perturbation_verdict,
    "sanitizer": sanitizer_verdict,
}


def rejudge(tables: Mapping[str, Sequence[Row]], gate: Any, ctx: RejudgeContext) -> Rejudged:
    c = Checker(CHECK)
    verdicts: list[str] = []
    suites: set[str] = set()
    for table, rule in RULES.items():
        for i, r in enumerate(tables.get(table, ())):
            v, why = rule(r)  # type: ignore[operator]
            c.verdict(table, i, r, getattr(r, "verdict", None), v, why)
            if table != "sanitizer" or v != "not_run":
                verdicts.append(v)
            if table != "sanitizer":
                suites.add(getattr(r, "suite", ""))
    missing = [k.name for k in ctx.scope.kernels if k.name not in suites]
    if missing:
        c.gap("cases", f"no row for {len(missing)} kernel suite(s) of the scope: {', '.join(missing)}")
        verdicts.append("not_run")
    return c.done(fold(verdicts), [f"{len(verdicts)} kernel row(s) re-judged from their own counts"])


def _cases(ctx: RejudgeContext) -> int:
    return headroom(max(1, len(ctx.scope.kernels)) * UNBOUNDED_CASES, factor=1)


EVIDENCE = registry.register(
    "evidence",
    CHECK,
    CheckEvidence(
        check=CHECK,
        tables=(
            TableSpec("cases", KernelCaseRow, _cases, keep=tuple(KernelCaseRow.model_fields)),
            TableSpec(
                "determinism",
                KernelDeterminismRow,
                _cases,
                required=False,
                keep=tuple(KernelDeterminismRow.model_fields),
            ),
            TableSpec(
                "perturbation",
                KernelPerturbationRow,
                _cases,
                required=False,
                keep=tuple(KernelPerturbationRow.model_fields),
            ),
            TableSpec(
                "sanitizer",
                KernelSanitizerRow,
                lambda ctx: headroom(len(ctx.scope.kernels) * 8),
                required=False,
                keep=tuple(KernelSanitizerRow.model_fields),
            ),
            TableSpec("speed_of_light", KernelSpeedRow, _cases, required=False),
        ),
        rejudge=rejudge,
        needs_points=False,
    ),
)
