"""Judging the coverage evidence: the out-of-scope situations, and merging decode steps by batch size."""

from __future__ import annotations

import re
from typing import Any

from fasttrack.checks.base import Deployment
from fasttrack.checks.context import RunContext
from fasttrack.checks.coverage.probes import SITUATION_KIND, SituationProbe
from fasttrack.engine.deployment import DeploymentOutcome
from fasttrack.results import PathEvidence, Verdict


def merge_sizes(evs: list[PathEvidence]) -> dict[str, int]:
    out: dict[str, int] = {}
    for e in evs:
        for k, v in (e.detail.get("decode_batch_sizes") or {}).items():
            out[str(k)] = out.get(str(k), 0) + int(v)
    return dict(sorted(out.items(), key=lambda kv: int(kv[0])))


def no_decode_evidence(rows: list[dict[str, Any]], not_exercised: list[str]) -> list[str]:
    """The in-tier points without decode evidence that no row already reports as not run (missing path
    evidence): each becomes ``not_run``. Their "not exercised" rows are marked ``not_run`` with the reason, and a
    point no check recorded evidence for gets a row of its own."""
    out: list[str] = []
    for point in not_exercised:
        mine = [r for r in rows if r["point"] == point]
        if any(r["verdict"] == "not_run" for r in mine):
            continue  # already not run: its evidence is missing (no profiler)
        out.append(point)
        why = "no decode evidence at this in-tier point: no check's candidate window contains a decode step for it" + (
            f" (checks that recorded windows here: {', '.join(sorted({r['check'] for r in mine}))})" if mine else ""
        )
        for r in mine:
            r["verdict"] = "not_run"
            r["detail"] = why
        if not mine:
            rows.append(
                {
                    "point": point,
                    "check": "",
                    "in_plan": True,
                    "verdict": "not_run",
                    "candidate_decode_steps": 0,
                    "candidate_optimized_decode_steps": 0,
                    "candidate_optimized_fraction": None,
                    "threshold": None,
                    "candidate_optimized_ops": 0,
                    "candidate_stock_ops": 0,
                    "candidate_fallback_events": 0,
                    "baseline_decode_steps": 0,
                    "baseline_optimized_ops": 0,
                    "baseline_stock_ops": 0,
                    "windows": "",
                    "detail": "no decode evidence at this in-tier point: no selected check recorded a window here",
                }
            )
    return out


def stock_observable(
    ctx: RunContext, probes: list[SituationProbe], stock_seen: dict[tuple[str, str], bool], group: str, side: str
) -> bool:
    """Whether the stock markers matched any op in any window of this engine (evidence from every check)."""
    seen = any(e.stock_ops for e in ctx.evidence if e.side == side and "unavailable" not in e.detail)
    seen = seen or any(p.stock_steps for p in probes if p.group == group and p.side == side)
    stock_seen[(group, side)] = seen
    return seen


def _fallback_visible(p: SituationProbe) -> bool:
    """A fallback line in the engine log (in the probe's window or earlier) or an increase of the fallback metric."""
    return bool(p.fallback_lines_window or p.fallback_lines_earlier or (p.fallback_metric_delta or 0) > 0)


def _probe_verdict(
    ctx: RunContext, probes: list[SituationProbe], stock_seen: dict[tuple[str, str], bool], p: SituationProbe
) -> tuple[Verdict, list[str], list[str]]:
    """One probe's verdict, its problems and its notes."""
    if p.note and p.window is None:
        return Verdict.NOT_RUN, [], [p.note]
    if p.window is None or not p.window.available:
        return Verdict.NOT_RUN, [], [p.note or "no path evidence for this probe"]
    if p.steps == 0:
        return (
            Verdict.NOT_RUN,
            [],
            [
                f"the probe did not produce a {SITUATION_KIND[p.situation]} step in {p.attempts} "
                f"attempt(s) (steps seen in the last: {p.window.summary.get('step_counts')})"
            ],
        )
    problems: list[str] = []
    notes: list[str] = []
    if p.optimized_steps:
        problems.append(f"{p.optimized_steps} of {p.steps} {p.situation} steps ran optimized-path ops")
    unseen = False
    if p.side == "candidate":
        unseen = _candidate_stock_path(ctx, probes, stock_seen, p, problems, notes)
    return (Verdict.FAIL if problems else Verdict.NOT_RUN if unseen else Verdict.PASS), problems, notes


def _candidate_stock_path(
    ctx: RunContext,
    probes: list[SituationProbe],
    stock_seen: dict[tuple[str, str], bool],
    p: SituationProbe,
    problems: list[str],
    notes: list[str],
) -> bool:
    """On the candidate a situation must show the stock markers and a visible fallback (added to ``problems`` and
    ``notes``). True when the stock path could not be seen at all (its markers matched no op on this engine)."""
    assert p.window is not None
    unseen = False
    if stock_observable(ctx, probes, stock_seen, p.group, p.side):
        if p.stock_steps < p.steps:
            problems.append(f"only {p.stock_steps} of {p.steps} {p.situation} steps show the stock markers")
    else:
        # the stock path is not inferred from the absence of optimized ops: it was not seen
        unseen = True
        pm = ctx.scope.path_markers
        top_ops = p.window.summary.get("top_ops")
        notes.append(
            "scope error: the stock markers matched no op in any window of this engine "
            f"({', '.join(pm.stock) if pm else 'none declared'}), so the stock path could not be seen"
            + (f" (ops seen in the probe: {', '.join(list(top_ops or {})[:8])})" if top_ops else "")
        )
    fb = ctx.scope.fallback
    if fb is not None and fb.visible:
        if not _fallback_visible(p):
            problems.append(
                "the fallback is not visible: no log line matches "
                f"{fb.log_regex!r}" + (f" and {fb.metric} did not increase" if fb.metric else "")
            )
        elif not p.fallback_lines_window and p.fallback_lines_earlier:
            notes.append("the fallback line was logged earlier in this engine's life (rate-limited logger)")
    return unseen


def judge_situations(
    ctx: RunContext, probes: list[SituationProbe], stock_seen: dict[tuple[str, str], bool]
) -> tuple[list[dict[str, Any]], list[Verdict], list[str]]:
    """Rows, verdicts and failures of the out-of-scope situations (the candidate's count; the baseline's only
    when it fails, i.e. ran an optimized op)."""
    fb = ctx.scope.fallback
    rows, verdicts, failures = [], [], []
    for p in probes:
        v, problems, notes = _probe_verdict(ctx, probes, stock_seen, p)
        if p.side == "candidate" or v is Verdict.FAIL:
            verdicts.append(v)
        if v is Verdict.FAIL:
            lines = (p.fallback_lines_window or p.fallback_lines_earlier)[:1]
            failures.append(
                f"{p.group}:{p.situation} [{p.side}]: "
                + "; ".join(problems)
                + f" (steps {p.window.summary.get('step_counts') if p.window else {}}"
                + (f"; fallback line {lines[0][-160:]!r}" if lines else "")
                + ")"
            )
        rows.append(
            {
                "group": p.group,
                "situation": p.situation,
                "side": p.side,
                "verdict": v.value,
                "steps": p.steps,
                "optimized_steps": p.optimized_steps,
                "stock_steps": p.stock_steps,
                "fallback_visible": _fallback_visible(p),
                "fallback_line": _clip(
                    (p.fallback_lines_window or p.fallback_lines_earlier or [""])[0], fb.log_regex if fb else None
                ),
                "fallback_metric_delta": p.fallback_metric_delta,
                "detail": "; ".join(problems + notes),
            }
        )
    return rows, verdicts, failures


def judge_deployments(
    ctx: RunContext, deployed: list[tuple[Deployment, DeploymentOutcome | None, str]]
) -> tuple[list[dict[str, Any]], list[Verdict], list[str]]:
    """The ``unsupported_deployment`` row: the candidate started outside its envelope did what the scope
    declares (``reject_at_startup``: it refused to start, with the ``reject_regex`` line where one is
    declared; ``fallback``: it served, with a visible fallback line)."""
    fb = ctx.scope.fallback
    if fb is None or "unsupported_deployment" not in fb.stock_path_for:
        return [], [], []
    expect = fb.unsupported_deployment
    entries: list[tuple[Deployment | None, DeploymentOutcome | None, str]] = list(deployed)
    if not entries and not fb.unsupported_deployment_args:
        # like the situations probed on running engines, a probe that ran is judged; this one cannot run at all
        entries = [(None, None, "not probed: the scope names no fallback.unsupported_deployment_args")]
    rows, verdicts, failures = [], [], []
    for dep, out, note in entries:
        problems: list[str] = []
        notes: list[str] = [note] if note else []
        if out is None:
            v = Verdict.NOT_RUN
        elif expect == "reject_at_startup":
            if out.started:
                problems.append(
                    f"the candidate started and served {out.served} request(s) outside its envelope instead of "
                    "refusing the deployment"
                )
            elif fb.reject_regex and not out.reject_lines:
                last = out.log_tail.strip().splitlines()[-1:] or [""]
                problems.append(
                    f"the start failed (exit {out.exit_code}) without the declared refusal ({fb.reject_regex!r}); "
                    f"last log line: {last[0][-LINE_CHARS:]!r}"
                )
            v = Verdict.FAIL if problems else Verdict.PASS
        else:  # fallback: it serves on the stock path, visibly
            if not out.started:
                problems.append(f"the candidate refused to start (exit {out.exit_code}); the scope says it falls back")
            elif not out.served:
                problems.append(f"the candidate came up but answered no request ({out.error})")
            elif fb.visible and not out.fallback_lines:
                problems.append(f"the fallback is not visible: no log line matches {fb.log_regex!r}")
            notes.append("the path is read from the fallback line (no profiler window on this engine)")
            v = Verdict.FAIL if problems else Verdict.PASS
        verdicts.append(v)
        if v is Verdict.FAIL:
            failures.append(f"{dep.group if dep else '-'}:unsupported_deployment [candidate]: " + "; ".join(problems))
        rows.append(
            {
                "group": dep.group if dep else "",
                "situation": "unsupported_deployment",
                "side": "candidate",
                "verdict": v.value,
                "expected": expect,
                "started": out.started if out else None,
                "exit_code": out.exit_code if out else None,
                "args": " ".join(dep.args[-4:]) if dep else "",
                "fallback_visible": bool(out and (out.fallback_lines or out.reject_lines)),
                "fallback_line": (
                    _clip(out.reject_lines[0], fb.reject_regex)
                    if out and out.reject_lines
                    else _clip(out.fallback_lines[0], fb.log_regex)
                    if out and out.fallback_lines
                    else ""
                ),
                "detail": "; ".join(problems + notes),
            }
        )
    return rows, verdicts, failures


LINE_CHARS = 200
"""How much of a log line a coverage row keeps."""


def _clip(line: str, pattern: str | None) -> str:
    """At most :data:`LINE_CHARS` characters of ``line``, from a little before the part ``pattern``
    matched (a refusal is often one long line: an exception message with the whole configuration)."""
    if len(line) <= LINE_CHARS:
        return line
    m = re.search(pattern, line) if pattern else None
    start = max(0, m.start() - 40) if m else len(line) - LINE_CHARS
    return line[start : start + LINE_CHARS]
