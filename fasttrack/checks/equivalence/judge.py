"""Judging one equivalence point: request pairs, thresholds, batch composition, path; failure evidence."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fasttrack import attrs
from fasttrack.checks.equivalence.records import Explanation, PointRun, compare, fmt, prompt_sha, rounds_check
from fasttrack.checks.equivalence.reference import Calibration, Outputs, calibrate_by_gate
from fasttrack.checks.outcome import clip
from fasttrack.results import Verdict
from fasttrack.scope import EquivalenceGate
from fasttrack.stats import GreedyComparison, summarize_greedy
from fasttrack.stats.logprobs import GreedySummary

Explanations = dict[tuple[str, str, int, str], Explanation]
"""(group id, point id, round, prompt id) -> the decoded text around the first divergence."""


def judge_point(
    gate: EquivalenceGate,
    gid: str,
    brun: PointRun,
    crun: PointRun,
    explanations: Explanations,
    explain_limit: int,
    *,
    variants: Mapping[str, PointRun | str] | None = None,
) -> tuple[Verdict, dict[str, Any], list[dict[str, Any]], list[str]]:
    """One point: the comparison of every request pair, the thresholds (or, with ``gate.reference``, the calibrated
    rule against the reference ``variants``: each one's run at the point, or why it has none), batch composition and
    the path."""
    pid, b = crun.point, crun.batch
    failures: list[str] = []
    comps, req_rows, errors, mismatched_prompts = _compare_requests(gate, gid, brun, crun)
    bcheck_b, bcheck_c = rounds_check(brun), rounds_check(crun)
    summary = summarize_greedy(comps) if comps else None
    problems: list[str] = []
    verdict = Verdict.PASS
    if mismatched_prompts:
        problems.append(
            f"{mismatched_prompts} prompt(s) were different token ids on the two sides (different tokenizers?)"
        )
    if errors:
        problems.extend(errors[:3])
    cal = _calibration(gate, brun, crun, variants or {}) if summary is not None else None
    if summary is None:
        verdict = Verdict.NOT_RUN if not errors else Verdict.FAIL
    else:
        problems.extend(_threshold_problems(gate, summary, close=not (cal is not None and cal.judges_close)))
    if cal is not None:
        problems.extend(cal.problems)
    for who, bc in (("baseline", bcheck_b), ("candidate", bcheck_c)):
        if bc is not None and not bc.verified:
            problems.append(f"the {who}'s batch composition was not verified: {bc.detail}")
    missing = missing_evidence(brun, crun) + (cal.missing if cal is not None else [])
    if crun.window and crun.window.available:
        n_at, opt_at = crun.window.steps_at(b)
        if n_at and opt_at == 0:
            problems.append(
                f"used the standard path: none of the candidate's {n_at} decode steps at batch {b} ran an "
                "optimized-path marker"
            )
    if problems:
        verdict = Verdict.FAIL
    elif missing and verdict is Verdict.PASS:
        # a required condition that could not be observed is never a pass
        verdict = Verdict.NOT_RUN
    if verdict is Verdict.FAIL:
        msg = f"{pid} (batch {b}): " + "; ".join(problems)
        evidence = evidence_lines(gid, pid, brun, crun, comps, gate.top_k, explanations, explain_limit)
        failures.append(msg + ("\n" + "\n".join(evidence) if evidence else ""))
    elif verdict is Verdict.NOT_RUN and missing:
        failures.append(f"{pid} (batch {b}): not judged: " + "; ".join(missing))
    row = _point_row(gid, brun, crun, verdict, summary, cal)
    row.update(problems="; ".join(problems), missing_evidence="; ".join(missing))
    if cal is not None:
        row.update(cal.row())
    return verdict, row, req_rows, failures


def _point_row(
    gid: str, brun: PointRun, crun: PointRun, verdict: Verdict, summary: GreedySummary | None, cal: Calibration | None
) -> dict[str, Any]:
    """The point's row of ``equivalence_points`` (its problems and the calibrated figures are added after)."""
    bcheck_b, bcheck_c = rounds_check(brun), rounds_check(crun)
    row: dict[str, Any] = {"group": gid, "point": crun.point, "batch": crun.batch, "context": crun.context}
    row["verdict"] = verdict.value
    if cal is not None:
        row["calibration"] = cal.text()
    row.update(
        {
            "requests": len(brun.records),
            "n_exact": summary.n_exact if summary else 0,
            "n_close": summary.n_close if summary else 0,
            **attrs(summary, "close_fraction", "max_abs_logprob_diff", "mean_abs_logprob_diff", "kl_mean", "kl_max"),
            "baseline_batch_verified": bcheck_b.verified if bcheck_b else None,
            "baseline_batch_evidence": bcheck_b.detail if bcheck_b else None,
            "candidate_batch_verified": bcheck_c.verified if bcheck_c else None,
            "candidate_batch_evidence": bcheck_c.detail if bcheck_c else None,
            "candidate_decode_steps": crun.window.decode_steps if crun.window else None,
            "candidate_optimized_decode_steps": crun.window.optimized_decode_steps if crun.window else None,
            "candidate_path_evidence": crun.window.available if crun.window else False,
        }
    )
    return row


def _calibration(
    gate: EquivalenceGate, brun: PointRun, crun: PointRun, variants: Mapping[str, PointRun | str]
) -> Calibration | None:
    """The calibrated judgement of the point (None for a scope without ``reference``)."""
    if gate.reference is None:
        return None
    return calibrate_by_gate(
        gate,
        baseline=run_outputs(brun),
        candidate=run_outputs(crun),
        variants={name: _variant_outputs(v, crun.batch) for name, v in variants.items()},
    )


def _variant_outputs(run: PointRun | str, batch: int) -> Outputs | str:
    """A reference variant's outputs at the point, or why they cannot calibrate it (no run, or rounds that were
    not verified to decode as one batch: stock's spread at this batch size is then unknown)."""
    if isinstance(run, str):
        return run
    bc = rounds_check(run)
    if bc is None:
        return f"its rounds carry no batch check, so whether they decoded as one batch of {batch} was not observed"
    if not bc.verified:
        return f"its rounds were not verified to decode as one batch of {batch} ({bc.detail})"
    return run_outputs(run)


def run_outputs(run: PointRun) -> Outputs:
    """One engine's answered requests at a point, by (round, prompt id)."""
    return {(r.round, r.prompt_id): (r.token_ids, r.top_maps()) for r in run.records if not r.error}


def _compare_requests(
    gate: EquivalenceGate, gid: str, brun: PointRun, crun: PointRun
) -> tuple[list[GreedyComparison], list[dict[str, Any]], list[str], int]:
    """Every request pair of the point compared (table ``equivalence_requests``), the errors (a failed request,
    requests out of order) and how many prompts differed in token ids between the sides."""
    pid, b = crun.point, crun.batch
    comps: list[GreedyComparison] = []
    req_rows: list[dict[str, Any]] = []
    errors: list[str] = []
    mismatched_prompts = 0
    for br, cr in zip(brun.records, crun.records, strict=False):
        if br.prompt_id != cr.prompt_id or br.round != cr.round:
            errors.append(f"request order differs between sides ({br.prompt_id} vs {cr.prompt_id})")
            continue
        if br.prompt_ids != cr.prompt_ids:
            mismatched_prompts += 1
        if br.error or cr.error:
            who = "baseline" if br.error else "candidate"
            errors.append(f"{who} request for {br.prompt_id} failed: {br.error or cr.error}")
            continue
        comp = compare(br, cr, gate.top_k)
        comps.append(comp)
        req_rows.append(
            {
                "group": gid,
                "point": pid,
                "batch": b,
                "round": br.round,
                "prompt_id": br.prompt_id,
                "prompt_tokens": len(br.prompt_ids),
                "prompt_sha": prompt_sha(br.prompt_ids),
                "exact_match": comp.exact_match,
                "first_divergence": comp.first_divergence,
                "close": comp.close,
                "close_reason": comp.close_reason,
                "n_prefix_compared": comp.n_prefix_compared,
                "max_abs_logprob_diff": comp.max_abs_logprob_diff,
                "mean_abs_logprob_diff": comp.mean_abs_logprob_diff,
                "kl_mean": comp.kl_mean,
                "kl_max": comp.kl_max,
                "baseline_tokens": len(br.token_ids),
                "candidate_tokens": len(cr.token_ids),
                "baseline_text": br.text,
                "candidate_text": cr.text,
            }
        )
    return comps, req_rows, errors, mismatched_prompts


def _threshold_problems(gate: EquivalenceGate, summary: GreedySummary, *, close: bool = True) -> list[str]:
    """What the point's comparisons (candidate vs baseline) break of the gate: the close rule (unless ``close`` is
    false: the calibration judges it against the exact reference), the logprob drift, the KL (the rule of
    :meth:`GreedySummary.breaks`, shared with the features' full-context points, which word it their own way)."""
    drift_limit = gate.max_abs_logprob_diff if gate.reference is None else None
    broken_close, drift, kl = summary.breaks(
        min_close_fraction=gate.min_close_fraction, max_abs_logprob_diff=drift_limit, max_kl=gate.max_kl
    )
    problems = []
    if broken_close and close:
        problems.append(
            f"{summary.n_requests - summary.n_close} of {summary.n_requests} requests break vLLM's "
            f"check_logprobs_close rule (close fraction {summary.close_fraction:.2f} < {gate.min_close_fraction:g})"
        )
    if drift:
        problems.append(
            f"max |Δ logprob| on matching prefixes {summary.max_abs_logprob_diff:.4f} > {gate.max_abs_logprob_diff:g}"
        )
    if kl:
        problems.append(f"mean top-{gate.top_k} KL {summary.kl_mean:.4f} > {gate.max_kl:g}")
    return problems


def missing_evidence(brun: PointRun, crun: PointRun) -> list[str]:
    """The point's required conditions that could not be observed (each makes the point ``not_run``, never
    ``pass``): a side whose rounds carry no batch check, and a candidate without a profiled window at the point
    (whether it ran the optimized path is then unknown)."""
    out: list[str] = []
    for who, run in (("baseline", brun), ("candidate", crun)):
        if run.records and not run.round_checks:
            out.append(
                f"the {who}'s rounds have no batch check, so whether its requests decoded as one batch of "
                f"{run.batch} was not observed"
            )
    w = crun.window
    if w is None or not w.available:
        why = (w.unavailable_reason if w is not None else None) or "no profiler window covered this point"
        out.append(f"no profiled window of the candidate at this point ({why}), so the optimized path is unproven")
    return out


def evidence_lines(
    gid: str,
    pid: str,
    brun: PointRun,
    crun: PointRun,
    comps: list[GreedyComparison],
    top_k: int,
    explanations: Explanations,
    explain_limit: int,
) -> list[str]:
    """The failure message's evidence: the first divergences as text (when decoded), or the largest drift."""
    lines: list[str] = []
    pairs = [(br, cr) for br, cr in zip(brun.records, crun.records, strict=False) if not (br.error or cr.error)]
    shown = 0
    for (br, cr), comp in zip(pairs, comps, strict=False):
        if comp.exact_match or shown >= explain_limit:
            continue
        shown += 1
        p = comp.first_divergence
        ex = explanations.get((gid, pid, br.round, br.prompt_id))
        head = (
            f"  prompt {br.prompt_id} ({len(br.prompt_ids)} tokens, ends {clip(br.prompt_text[-50:], 52)}): "
            f"first divergence at generated token {p}; {comp.close_reason}"
        )
        if comp.max_abs_logprob_diff is not None:
            head += f"; max |Δ logprob| before it {comp.max_abs_logprob_diff:.4f}"
        lines.append(head)
        if p is not None and p < len(br.token_ids) and p < len(cr.token_ids):
            blp = br.logprobs[p] if p < len(br.logprobs) else None
            clp = cr.logprobs[p] if p < len(cr.logprobs) else None
            if ex is not None:
                lines.append(
                    f"    ...{clip(ex.before, 50)} | baseline {clip(ex.baseline_next, 40)} "
                    f"(token {clip(ex.baseline_token, 16)}, logprob {fmt(blp)}) | "
                    f"candidate {clip(ex.candidate_next, 40)} "
                    f"(token {clip(ex.candidate_token, 16)}, logprob {fmt(clp)})"
                )
                lines.append(
                    "    baseline top-%d: %s; candidate top-%d: %s"
                    % (
                        top_k,
                        ", ".join(f"{s!r} {lp:.3f}" for s, lp in ex.baseline_top),
                        top_k,
                        ", ".join(f"{s!r} {lp:.3f}" for s, lp in ex.candidate_top),
                    )
                )
            else:
                lines.append(
                    f"    baseline token id {br.token_ids[p]} (logprob {fmt(blp)}) vs candidate token id "
                    f"{cr.token_ids[p]} (logprob {fmt(clp)}); baseline text {clip(br.text, 60)}, "
                    f"candidate text {clip(cr.text, 60)}"
                )
    if not lines:
        worst = max(comps, key=lambda c: c.max_abs_logprob_diff or 0.0, default=None)
        if worst is not None and worst.max_abs_logprob_diff is not None:
            i = comps.index(worst)
            br = pairs[i][0]
            lines.append(
                f"  largest drift: prompt {br.prompt_id}, max |Δ logprob| {worst.max_abs_logprob_diff:.4f}, "
                f"KL mean {fmt(worst.kl_mean)} over {worst.n_prefix_compared} identical tokens"
            )
    return lines
