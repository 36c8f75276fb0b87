"""The in-scope half of the coverage check: one cell per (config point, check), judged from the path
evidence of that check's windows at that point (see :mod:`fasttrack.checks.coverage.check`), and the
reason the whole check gives for its verdict."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fasttrack.checks.context import RunContext
from fasttrack.checks.coverage.judge import merge_sizes
from fasttrack.checks.windows import in_range_fraction
from fasttrack.results import PathEvidence, Verdict

DEVICE_COUNTER_MISSING = (
    "the scope declares a device counter (path_markers.device_counters) that the candidate's /metrics "
    "did not export, so which path its kernels took could not be confirmed"
)


@dataclass
class Cells:
    """The cells of one run: their table rows, the verdicts and failures they add to the check's, the
    candidate's evidence by check, and how many windows had no profiler."""

    threshold: float
    rows: list[dict[str, Any]] = field(default_factory=list)
    verdicts: list[Verdict] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    candidate_by_check: dict[str, list[PathEvidence]] = field(default_factory=dict)
    unavailable: int = 0

    def in_plan(self) -> int:
        return sum(1 for r in self.rows if r["in_plan"])

    def passing(self) -> int:
        return sum(1 for r in self.rows if r["in_plan"] and r["verdict"] == "pass")

    def standard_path_checks(self, ctx: RunContext) -> list[str]:
        """The checks whose candidate never reached the optimized path in any window: each fails the check,
        its failure put first."""
        standard = []
        markers = ", ".join(ctx.scope.path_markers.optimized) if ctx.scope.path_markers else ""
        for check, evs in sorted(self.candidate_by_check.items()):
            dec = sum(e.decode_steps for e in evs)
            if evs and dec and sum(e.optimized_decode_steps for e in evs) == 0:
                standard.append(check)
                self.failures.insert(
                    0,
                    f"check {check} used the standard path: none of its candidate's {dec} decode steps in "
                    f"{len({e.window for e in evs})} window(s) ran an optimized-path marker ({markers})",
                )
                self.verdicts.append(Verdict.FAIL)
        return standard


def judge_cells(ctx: RunContext, evidence: list[PathEvidence], plan_points: set[str]) -> Cells:
    """Judge every (point, check) cell of ``evidence``: the candidate's in-range decode steps on the optimized
    path against the gate's threshold, and no optimized-path op on the baseline."""
    env = ctx.scope.envelope
    batch_range = (env.batch.min, env.batch.max) if env else (1, 10**9)
    cells = Cells(threshold=ctx.scope.gates.coverage.min_optimized_decode_fraction)
    by_cell: dict[tuple[str, str], dict[str, list[PathEvidence]]] = {}
    for e in evidence:
        by_cell.setdefault((e.point, e.check), {"baseline": [], "candidate": []})[e.side].append(e)
    for (point, check), sides in sorted(by_cell.items()):
        cells.unavailable += sum(1 for e in sides["candidate"] + sides["baseline"] if "unavailable" in e.detail)
        cand = [e for e in sides["candidate"] if "unavailable" not in e.detail]
        cells.candidate_by_check.setdefault(check, []).extend(cand)
        _judge_cell(ctx, cells, point, check, sides, batch_range, in_plan=point in plan_points)
    return cells


def _judge_cell(
    ctx: RunContext,
    cells: Cells,
    point: str,
    check: str,
    sides: dict[str, list[PathEvidence]],
    batch_range: tuple[int, int],
    *,
    in_plan: bool,
) -> None:
    cand = [e for e in sides["candidate"] if "unavailable" not in e.detail]
    base = [e for e in sides["baseline"] if "unavailable" not in e.detail]
    n_dec = sum(in_range_fraction(e, *batch_range)[0] for e in cand)
    n_opt = sum(in_range_fraction(e, *batch_range)[1] for e in cand)
    base_opt = sum(e.optimized_ops for e in base)
    v, why = _cell_verdict(sides["candidate"], cand, n_dec, n_opt, base_opt, cells.threshold)
    if in_plan and v is not None:
        cells.verdicts.append(v)
    if v is Verdict.FAIL:
        cells.failures.append(
            f"{point} [{check}]: {why}: the candidate ran {n_opt} of {n_dec} in-range decode steps on the "
            f"optimized path (threshold {cells.threshold:g}); optimized-marker ops "
            f"{sum(e.optimized_ops for e in cand)}, stock-marker ops {sum(e.stock_ops for e in cand)}, "
            f"decode steps by batch size {merge_sizes(cand)}; windows {sorted({e.window for e in cand})}"
        )
    declared = bool(ctx.scope.path_markers and ctx.scope.path_markers.device_counters)
    cells.rows.append(
        {
            "point": point,
            "check": check,
            "in_plan": in_plan,
            "verdict": v.value if v is not None else "not_exercised",
            "candidate_decode_steps": n_dec,
            "candidate_optimized_decode_steps": n_opt,
            "candidate_optimized_fraction": n_opt / n_dec if n_dec else None,
            "threshold": cells.threshold,
            "candidate_optimized_ops": sum(e.optimized_ops for e in cand),
            "candidate_stock_ops": sum(e.stock_ops for e in cand),
            "candidate_fallback_events": sum(e.fallback_events for e in cand),
            # the declared device counter, read over every candidate window of the cell (None: none declared
            # or none read); steps it did not confirm are not counted in candidate_optimized_decode_steps
            "candidate_device_counted": (
                all(e.detail.get("device_optimized_steps") is not None for e in cand) if cand and declared else None
            ),
            "candidate_device_unconfirmed_steps": sum(int(e.detail.get("device_unconfirmed_steps") or 0) for e in cand),
            "baseline_decode_steps": sum(e.decode_steps for e in base),
            "baseline_optimized_ops": base_opt,
            "baseline_stock_ops": sum(e.stock_ops for e in base),
            "windows": ",".join(sorted({e.window for e in sides["candidate"] + sides["baseline"]})),
            "detail": why,
        }
    )


def _cell_verdict(
    windows: list[PathEvidence], cand: list[PathEvidence], n_dec: int, n_opt: int, base_opt: int, thr: float
) -> tuple[Verdict | None, str]:
    """One cell's verdict and why (None: this check did not exercise the point's decode path, e.g. its
    round formed a smaller batch). ``windows``: all the candidate's, ``cand``: those with a profiler."""
    if not cand:
        return Verdict.NOT_RUN, "no candidate path evidence" + (
            ": " + windows[0].detail["unavailable"] if windows else ""
        )
    if n_dec and any(e.side == "candidate" and e.detail.get("device_counter_missing") for e in cand):
        return Verdict.NOT_RUN, DEVICE_COUNTER_MISSING
    if n_dec == 0:
        return None, "not exercised: the candidate's windows of this check contain no decode step for this point"
    problems = []
    if n_opt / n_dec < thr:
        problems.append(
            "used the standard path" if n_opt == 0 else f"only {n_opt} of {n_dec} decode steps on the optimized path"
        )
    if base_opt:
        problems.append(f"the baseline ran {base_opt} optimized-path op(s)")
    return (Verdict.FAIL if problems else Verdict.PASS), "; ".join(problems)


@dataclass(frozen=True)
class Outcome:
    """What the coverage check's reason is made of, beside the cells."""

    verdict: Verdict
    standard_checks: list[str]
    scope_errors: list[str]
    unseen: list[str]
    """In-tier points without decode evidence."""
    situation_rows: list[dict[str, Any]]
    situation_verdicts: list[Verdict]


def coverage_reason(cells: Cells, out: Outcome) -> str:
    """The coverage check's reason for its verdict."""
    n_in, n_pass = cells.in_plan(), cells.passing()
    if out.verdict is Verdict.PASS:
        return (
            f"optimized path at all {n_pass} exercised (point, check) pairs, visible stock fallback in "
            f"{sum(v is Verdict.PASS for v in out.situation_verdicts)} out-of-scope situation(s)"
        )
    if out.verdict is Verdict.FAIL:
        if out.standard_checks:
            return f"check(s) {', '.join(out.standard_checks)} used the standard path"
        return f"{len(cells.failures)} coverage problem(s): " + cells.failures[0].split(":")[0]
    if out.scope_errors:
        return f"{len(out.scope_errors)} scope error(s) in path_markers: {out.scope_errors[0]}"
    if out.unseen:
        return (
            f"no decode evidence at {len(out.unseen)} in-tier point(s): {', '.join(out.unseen[:4])}"
            + (f" and {len(out.unseen) - 4} more" if len(out.unseen) > 4 else "")
            + f"; {n_pass} of {n_in} (point, check) pairs verified"
        )
    missing = [
        f"{r['point']} [{r['check']}]: {r['detail']}" for r in cells.rows if r["in_plan"] and r["verdict"] == "not_run"
    ]
    missing += [
        f"{r['situation']} on the {r['side']}: {r['detail']}"
        for r in out.situation_rows
        if r["verdict"] == "not_run" and r["side"] == "candidate"
    ]
    unavailable = cells.unavailable
    return (
        (
            "path evidence is missing" + (f" ({unavailable} window(s) without a profiler)" if unavailable else "")
            if unavailable or not missing
            else "not everything could be judged"
        )
        + f"; {n_pass} of {n_in} (point, check) pairs verified"
        + (f"; not judged: {'; '.join(missing[:3])}" if missing else "")
    )
