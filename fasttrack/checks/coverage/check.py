"""Coverage: the tests really exercised the optimized path, and the fallback is visible.

Two kinds of evidence are judged after every engine stopped.

In-scope config points. Every check that sends requests records one
:class:`~fasttrack.checks.base.PathEvidence` row per (check, config point, side)
window in ``ctx.evidence`` (equivalence and features do; this check adds its own
decode probe at every batch size of the plan, so it also stands alone). For each
(point, check) the candidate's decode steps inside the envelope's batch range must
run the optimized path: ``optimized decode steps / decode steps >=
gates.coverage.min_optimized_decode_fraction``. The baseline's windows must contain
no optimized-path op (otherwise the baseline is not the stock path). A check whose
candidate never reached the optimized path in any window fails here with
"used the standard path", whatever its own verdict said. An in-tier point where no
check's candidate window holds a decode step is ``not_run`` with the reason (its path
was never seen), never left out of the verdict.

Out-of-scope situations (``fallback.stock_path_for``), probed on both sides by
this check's ``collect``:

* ``prefill``: a request that only prefills (``max_tokens=1``);
* ``mixed_prefill_decode``: a long prompt arriving while another request decodes,
  so one engine step carries prefill and decode work;
* ``batch_above_range``: ``envelope.batch.max + 1`` requests decoding at once.

On the candidate, the steps of that kind must contain no optimized-path op, must
show the stock markers, and the fallback must be visible: a line matching ``fallback.log_regex`` in
the engine log (during the probe, or earlier in the engine's life for loggers
that rate-limit) or an increase of ``fallback.metric``. Other situations
(``out_of_envelope_request``, ``unsupported_deployment``) need other deployments and
are reported as not probed. When the stock markers match no op in any window of the
candidate, the stock path is not inferred from the absence of optimized ops: the
situations are ``not_run`` with a scope error. The markers are also checked against
the op names the engines reported (:mod:`~fasttrack.checks.coverage.markers`): a stock
marker that matches the candidate's optimized steps, or that never matches where the
scope says the stock path runs, is a scope error (table ``markers``), and the check is
``not_run``.

The result carries a coverage table (config point x check -> path evidence) and a
fallback table (situation x side).
"""

from __future__ import annotations

from typing import Any, ClassVar

from fasttrack.checks.base import Blocker, Deployment, DeploymentCheck, EngineCheck, TierView, register
from fasttrack.checks.context import EngineSession, RunContext
from fasttrack.checks.coverage.judge import judge_deployments, judge_situations, merge_sizes, no_decode_evidence
from fasttrack.checks.coverage.markers import audit_markers
from fasttrack.checks.coverage.probes import (
    PROBE_TOKENS,
    SITUATION_KIND,
    SituationProbe,
    batched,
    gather_texts,
    probe_situation,
    read_probe,
)
from fasttrack.checks.outcome import fold_verdicts, write_artifact
from fasttrack.checks.points import group_batches, short_point
from fasttrack.checks.windows import EvidenceWindow, WindowRecord, in_range_fraction
from fasttrack.engine.deployment import DeploymentOutcome
from fasttrack.inputs import load_prompt_set, prompt_set_path
from fasttrack.plan import EngineGroup
from fasttrack.results import CheckResult, Gate, PathEvidence, Side, Verdict
from fasttrack.scope.gates import CheckGate, CoverageGate

PROBED_SITUATIONS = (
    "prefill",
    "mixed_prefill_decode",
    "batch_above_range",
    "out_of_envelope_request",
    "unsupported_deployment",
)
"""Fallback situations a probe exists for (``collect``, and the ``unsupported_deployment`` start)."""


def _admitted(args: list[str]) -> int | None:
    """The ``--max-num-seqs`` an engine's arguments set (the last one given; None when unset or not a number)."""
    val: str | None = None
    for i, a in enumerate(args):
        if a == "--max-num-seqs" and i + 1 < len(args):
            val = args[i + 1]
        elif a.startswith("--max-num-seqs="):
            val = a.split("=", 1)[1]
    return int(val) if val is not None and val.isdigit() else None


CONTEXT_NOTE = (
    "requests beyond the envelope: a decode batch above its range (a longer context cannot be sent: the "
    "envelope's longest context is the engine's --max-model-len)"
)


@register
class CoverageCheck(EngineCheck, DeploymentCheck):
    """Path coverage: optimized path at every in-scope point, visible stock fallback outside."""

    name: ClassVar[str] = "coverage"
    title: ClassVar[str] = "Path coverage"
    report_view: ClassVar[str] = "coverage"
    after: ClassVar[tuple[str, ...]] = ("equivalence", "features")
    """It judges the path evidence their windows recorded (and collects after them on each engine)."""
    gate_model: ClassVar[type[CheckGate]] = CoverageGate

    @classmethod
    def passability(cls, tier: TierView) -> list[Blocker]:
        """``path_markers``; every situation of ``fallback.stock_path_for`` needs a probe: a batch above the range
        an engine that admits ``batch.max + 1`` sequences, ``unsupported_deployment`` a deployment to start."""
        scope = tier.scope
        out = []
        if scope.path_markers is None:
            out.append(tier.blocker("path markers", "the scope declares no path_markers", "declare path_markers"))
        fb, env = scope.fallback, scope.envelope
        for s in fb.stock_path_for if fb else []:
            if s not in PROBED_SITUATIONS:
                out.append(tier.blocker(f"fallback {s}", "no probe exists for it", "remove it or add a probe"))
                continue
            if s in ("batch_above_range", "out_of_envelope_request") and env is not None:
                caps = {_admitted(g.args["candidate"]) for g in tier.plan.groups}
                low = sorted(c for c in caps if c is not None and c <= env.batch.max)
                if low:
                    out.append(
                        tier.blocker(
                            f"fallback {s}",
                            f"the candidate engine admits at most {low[0]} sequences (--max-num-seqs), so a batch of "
                            f"{env.batch.max + 1} (above the envelope's {env.batch.max}) cannot form",
                            f"raise --max-num-seqs above {env.batch.max} in the scope's engine arguments",
                        )
                    )
            if s == "unsupported_deployment" and fb is not None and not fb.unsupported_deployment_args:
                out.append(
                    tier.blocker(
                        "fallback unsupported_deployment",
                        "the scope names no deployment outside the envelope to start the candidate with",
                        "set fallback.unsupported_deployment_args (e.g. a tensor-parallel size the envelope excludes)",
                    )
                )
        return out

    def __init__(self) -> None:
        self.probes: list[SituationProbe] = []
        self.windows: list[WindowRecord] = []
        self.stock_seen: dict[tuple[str, str], bool] = {}
        self.artifacts: list[str] = []
        self.lifetimes: set[tuple[str, str]] = set()
        self.deployed: list[tuple[Deployment, DeploymentOutcome | None, str]] = []
        """The ``unsupported_deployment`` starts: (deployment, outcome or None, note)."""

    def skip_reason(self, ctx: RunContext) -> str | None:
        if ctx.scope.path_markers is None:
            return "the scope declares no path_markers, so no path evidence can be judged"
        return None

    def wants(self, ctx: RunContext, group: EngineGroup, side: Side, lifetime: int) -> bool:
        return lifetime == 0

    def deployments(self, ctx: RunContext) -> list[Deployment]:
        """``unsupported_deployment``: the candidate once with ``fallback.unsupported_deployment_args``
        appended to the candidate arguments of the first engine group without speculative decoding (the first
        group when every group has it)."""
        fb = ctx.scope.fallback
        if fb is None or "unsupported_deployment" not in fb.stock_path_for or not ctx.plan.groups:
            return []
        if not fb.unsupported_deployment_args:
            return []
        g = next((g for g in ctx.plan.groups if g.speculative_config is None), ctx.plan.groups[0])
        args = (*g.args["candidate"], *fb.unsupported_deployment_args)
        return [Deployment(name="unsupported_deployment", side="candidate", group=g.id, args=args)]

    def record_deployment(self, ctx: RunContext, dep: Deployment, outcome: DeploymentOutcome | None, note: str) -> None:
        self.deployed.append((dep, outcome, note))
        if outcome is not None:
            self.artifacts.append(
                write_artifact(ctx, self.name, f"{dep.group}.{dep.name}.json", outcome.model_dump(mode="json"))
            )

    def gate(self, ctx: RunContext) -> Gate:
        thr = ctx.scope.gates.coverage.min_optimized_decode_fraction
        return Gate(
            statistic=(
                "per (config point, check): fraction of the candidate's in-range decode steps that ran an "
                "optimized-path marker"
            ),
            threshold=thr,
            rule=(
                f"fraction >= {thr:g} at every in-scope point (a point without decode evidence is not run); no "
                "optimized op on the baseline; every out-of-scope situation on the candidate runs no optimized op, "
                "shows the stock markers and a visible fallback (log line or metric); no check used only the "
                "standard path; the stock markers match only the stock path (otherwise a scope error)"
            ),
        )

    async def collect(self, ctx: RunContext, session: EngineSession) -> None:
        group = session.group
        self.lifetimes.add((group.id, session.side))
        prompt_file = prompt_set_path(ctx.scope, ctx.base_dir)
        prompts = load_prompt_set(prompt_file)
        ctx.provenance.input_file(prompt_file)
        eng = session.engine
        fb = ctx.scope.fallback
        situations = list(fb.stock_path_for) if fb else []
        batches = [b for b in group_batches(ctx, group) if short_point(ctx, group, b) is not None]
        async with eng.client() as client:
            # 1. in-range decode probe at every batch size, one window, evidence split by batch size. Its requests
            #    start with prefill steps, and one prefill-only request is added, so it is also the prefill probe.
            points: dict[str, int | None] = {}
            for b in batches:
                sp = short_point(ctx, group, b)
                if sp is not None:  # every batch of ``batches`` has one
                    points[sp.id] = b
            start = eng.log_offset()
            async with EvidenceWindow(
                ctx, eng, check=self.name, name=f"coverage-decode-{group.id}", points=points, side=session.side
            ) as win:
                for b in batches:
                    await batched(client, [prompts[(b + j) % len(prompts)].prompt for j in range(b)], PROBE_TOKENS)
                if "prefill" in situations:
                    await gather_texts(client, [prompts[0].prompt], 1)
            if win.record:
                self.windows.append(win.record)
                if "prefill" in situations:
                    probe = SituationProbe(situation="prefill", side=session.side, group=group.id)
                    self.probes.append(read_probe(ctx, eng, probe, win.record, start, None))
            # 2. the other out-of-scope situations, one window each (so each fallback line is attributable)
            for s in situations:
                if s == "prefill":
                    continue
                if s == "unsupported_deployment":
                    continue  # an engine of its own, started after the plan's (deployments())
                if s not in SITUATION_KIND:
                    self.probes.append(
                        SituationProbe(
                            situation=s,
                            side=session.side,
                            group=group.id,
                            note="not probed: it needs a different deployment or request",
                        )
                    )
                    continue
                probe = await probe_situation(ctx, session, client, s, prompts)
                if s == "out_of_envelope_request":
                    probe.note = "; ".join(x for x in (probe.note, CONTEXT_NOTE) if x)
                self.probes.append(probe)
        self.artifacts.append(
            write_artifact(
                ctx,
                self.name,
                f"{group.id}.{session.side}.json",
                {
                    "windows": [w.model_dump(mode="json") for w in self.windows if w.side == session.side],
                    "probes": [
                        p.model_dump(mode="json") for p in self.probes if p.side == session.side and p.group == group.id
                    ],
                },
            )
        )

    def _profiled_windows(self) -> list[WindowRecord]:
        """This check's own windows (decode probes and situation probes, both sides)."""
        return self.windows + [p.window for p in self.probes if p.window is not None]

    def judge(self, ctx: RunContext) -> CheckResult:
        thr = ctx.scope.gates.coverage.min_optimized_decode_fraction
        env = ctx.scope.envelope
        lo, hi = (env.batch.min, env.batch.max) if env else (1, 10**9)
        gate = self.gate(ctx)
        evidence = [e for e in ctx.evidence]
        if not evidence and not self.probes:
            return CheckResult.not_run(
                self.name, "no check recorded path evidence (no engine ran)", required=self.required
            )
        plan_points = {p.id for p in ctx.plan.points}
        failures: list[str] = []
        verdicts: list[Verdict] = []
        rows: list[dict[str, Any]] = []
        cells: dict[tuple[str, str], dict[str, list[PathEvidence]]] = {}
        for e in evidence:
            cells.setdefault((e.point, e.check), {"baseline": [], "candidate": []})[e.side].append(e)
        per_check_cand: dict[str, list[PathEvidence]] = {}
        unavailable = 0
        for (point, check), sides in sorted(cells.items()):
            cand = [e for e in sides["candidate"] if "unavailable" not in e.detail]
            base = [e for e in sides["baseline"] if "unavailable" not in e.detail]
            unavailable += sum(1 for e in sides["candidate"] + sides["baseline"] if "unavailable" in e.detail)
            per_check_cand.setdefault(check, []).extend(cand)
            n_dec = sum(in_range_fraction(e, lo, hi)[0] for e in cand)
            n_opt = sum(in_range_fraction(e, lo, hi)[1] for e in cand)
            base_opt = sum(e.optimized_ops for e in base)
            frac = n_opt / n_dec if n_dec else None
            problems = []
            if not cand:
                v = Verdict.NOT_RUN
                why = "no candidate path evidence" + (
                    ": " + sides["candidate"][0].detail["unavailable"] if sides["candidate"] else ""
                )
            elif n_dec and any(e.side == "candidate" and e.detail.get("device_counter_missing") for e in cand):
                v = Verdict.NOT_RUN
                why = (
                    "the scope declares a device counter (path_markers.device_counters) that the candidate's /metrics "
                    "did not export, so which path its kernels took could not be confirmed"
                )
            elif n_dec == 0:
                v = None  # this check did not exercise the point's decode path (e.g. its round formed a smaller batch)
                why = "not exercised: the candidate's windows of this check contain no decode step for this point"
            else:
                if frac is not None and frac < thr:
                    problems.append(
                        "used the standard path"
                        if n_opt == 0
                        else f"only {n_opt} of {n_dec} decode steps on the optimized path"
                    )
                if base_opt:
                    problems.append(f"the baseline ran {base_opt} optimized-path op(s)")
                v = Verdict.FAIL if problems else Verdict.PASS
                why = "; ".join(problems)
            if point in plan_points and v is not None:
                verdicts.append(v)
            if v is Verdict.FAIL:
                c_ops = sum(e.optimized_ops for e in cand)
                s_ops = sum(e.stock_ops for e in cand)
                sizes = merge_sizes(cand)
                failures.append(
                    f"{point} [{check}]: {why}: the candidate ran {n_opt} of {n_dec} in-range decode steps on the "
                    f"optimized path (threshold {thr:g}); optimized-marker ops {c_ops}, stock-marker ops {s_ops}, "
                    f"decode steps by batch size {sizes}; windows {sorted({e.window for e in cand})}"
                )
            rows.append(
                {
                    "point": point,
                    "check": check,
                    "in_plan": point in plan_points,
                    "verdict": v.value if v is not None else "not_exercised",
                    "candidate_decode_steps": n_dec,
                    "candidate_optimized_decode_steps": n_opt,
                    "candidate_optimized_fraction": frac,
                    "threshold": thr,
                    "candidate_optimized_ops": sum(e.optimized_ops for e in cand),
                    "candidate_stock_ops": sum(e.stock_ops for e in cand),
                    "candidate_fallback_events": sum(e.fallback_events for e in cand),
                    # the declared device counter, read over every candidate window of the cell (None: none declared
                    # or none read); steps it did not confirm are not counted in candidate_optimized_decode_steps
                    "candidate_device_counted": (
                        all(e.detail.get("device_optimized_steps") is not None for e in cand)
                        if cand and ctx.scope.path_markers and ctx.scope.path_markers.device_counters
                        else None
                    ),
                    "candidate_device_unconfirmed_steps": sum(
                        int(e.detail.get("device_unconfirmed_steps") or 0) for e in cand
                    ),
                    "baseline_decode_steps": sum(e.decode_steps for e in base),
                    "baseline_optimized_ops": base_opt,
                    "baseline_stock_ops": sum(e.stock_ops for e in base),
                    "windows": ",".join(sorted({e.window for e in sides["candidate"] + sides["baseline"]})),
                    "detail": why,
                }
            )
        # checks that never reached the optimized path
        standard_checks = []
        for check, evs in sorted(per_check_cand.items()):
            dec = sum(e.decode_steps for e in evs)
            if evs and dec and sum(e.optimized_decode_steps for e in evs) == 0:
                standard_checks.append(check)
                failures.insert(
                    0,
                    f"check {check} used the standard path: none of its candidate's {dec} decode steps in "
                    f"{len({e.window for e in evs})} window(s) ran an optimized-path marker "
                    f"({', '.join(ctx.scope.path_markers.optimized) if ctx.scope.path_markers else ''})",
                )
                verdicts.append(Verdict.FAIL)
        exercised = {r["point"] for r in rows if r["verdict"] in ("pass", "fail")}
        not_exercised = sorted(plan_points - exercised)
        # an in-tier point without decode evidence is not_run, never dropped: no check showed its path
        unseen = no_decode_evidence(rows, not_exercised)
        verdicts.extend(Verdict.NOT_RUN for _ in unseen)
        # the markers themselves, checked against the op names the engines reported
        marker_rows, scope_errors = audit_markers(ctx.scope, self._profiled_windows())
        if scope_errors:
            verdicts.append(Verdict.NOT_RUN)
            failures[:0] = scope_errors
        # out-of-scope situations
        fb_rows, fb_verdicts, fb_fail = judge_situations(ctx, self.probes, self.stock_seen)
        dep_rows, dep_verdicts, dep_fail = judge_deployments(ctx, self.deployed)
        fb_rows, fb_verdicts, fb_fail = fb_rows + dep_rows, fb_verdicts + dep_verdicts, fb_fail + dep_fail
        verdicts.extend(fb_verdicts)
        failures.extend(fb_fail)
        verdict = fold_verdicts(verdicts)
        n_in = sum(1 for r in rows if r["in_plan"])
        n_pass = sum(1 for r in rows if r["in_plan"] and r["verdict"] == "pass")
        if verdict is Verdict.PASS:
            reason = (
                f"optimized path at all {n_pass} exercised (point, check) pairs, visible stock fallback in "
                f"{sum(v is Verdict.PASS for v in fb_verdicts)} out-of-scope situation(s)"
            )
        elif verdict is Verdict.FAIL:
            if standard_checks:
                reason = f"check(s) {', '.join(standard_checks)} used the standard path"
            else:
                reason = f"{len(failures)} coverage problem(s): " + failures[0].split(":")[0]
        elif scope_errors:
            reason = f"{len(scope_errors)} scope error(s) in path_markers: {scope_errors[0]}"
        elif unseen:
            reason = (
                f"no decode evidence at {len(unseen)} in-tier point(s): {', '.join(unseen[:4])}"
                + (f" and {len(unseen) - 4} more" if len(unseen) > 4 else "")
                + f"; {n_pass} of {n_in} (point, check) pairs verified"
            )
        else:
            missing = [
                f"{r['point']} [{r['check']}]: {r['detail']}"
                for r in rows
                if r["in_plan"] and r["verdict"] == "not_run"
            ]
            missing += [
                f"{r['situation']} on the {r['side']}: {r['detail']}"
                for r in fb_rows
                if r["verdict"] == "not_run" and r["side"] == "candidate"
            ]
            reason = (
                (
                    "path evidence is missing"
                    + (f" ({unavailable} window(s) without a profiler)" if unavailable else "")
                    if unavailable or not missing
                    else "not everything could be judged"
                )
                + f"; {n_pass} of {n_in} (point, check) pairs verified"
                + (f"; not judged: {'; '.join(missing[:3])}" if missing else "")
            )
        return CheckResult(
            check=self.name,
            verdict=verdict,
            reason=reason,
            required=self.required,
            gate=gate,
            summary={
                "threshold": thr,
                "pairs": n_in,
                "pairs_passing": n_pass,
                "checks_on_standard_path": standard_checks,
                "points_not_exercised": not_exercised,
                "points_without_decode_evidence": unseen,
                "scope_errors": scope_errors,
                "windows_without_profiler": unavailable,
                "stock_markers_observable": {f"{g}/{s}": v for (g, s), v in sorted(self.stock_seen.items())},
            },
            failures=failures,
            tables={"coverage": rows, "fallback": fb_rows, "markers": marker_rows},
            artifacts=list(self.artifacts),
        )
