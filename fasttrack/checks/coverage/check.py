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

from typing import ClassVar

from fasttrack.checks.base import Blocker, Deployment, DeploymentCheck, EngineCheck, TierView, register
from fasttrack.checks.context import EngineSession, RunContext
from fasttrack.checks.coverage.cells import Outcome, coverage_reason, judge_cells
from fasttrack.checks.coverage.cost import COST
from fasttrack.checks.coverage.judge import judge_deployments, judge_situations, no_decode_evidence
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
from fasttrack.checks.windows import EvidenceWindow, WindowRecord
from fasttrack.engine.deployment import DeploymentOutcome
from fasttrack.engine.flags import arg_values
from fasttrack.evidence import typed_tables
from fasttrack.inputs import load_prompt_set, prompt_set_path
from fasttrack.planning.cost import CheckCost
from fasttrack.planning.plan import EngineGroup
from fasttrack.results import CheckResult, Gate, Side, Verdict
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
    given = arg_values(args, "--max-num-seqs")
    return int(given[-1]) if given and given[-1].isdigit() else None


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
    cost: ClassVar[CheckCost] = COST

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
        evidence = list(ctx.evidence)
        if not evidence and not self.probes:
            return CheckResult.not_run(
                self.name, "no check recorded path evidence (no engine ran)", required=self.required
            )
        plan_points = {p.id for p in ctx.plan.points}
        cells = judge_cells(ctx, evidence, plan_points)
        standard_checks = cells.standard_path_checks(ctx)
        exercised = {r["point"] for r in cells.rows if r["verdict"] in ("pass", "fail")}
        not_exercised = sorted(plan_points - exercised)
        # an in-tier point without decode evidence is not_run, never dropped: no check showed its path
        unseen = no_decode_evidence(cells.rows, not_exercised)
        cells.verdicts.extend(Verdict.NOT_RUN for _ in unseen)
        # the markers themselves, checked against the op names the engines reported
        marker_rows, scope_errors = audit_markers(ctx.scope, self._profiled_windows())
        if scope_errors:
            cells.verdicts.append(Verdict.NOT_RUN)
            cells.failures[:0] = scope_errors
        # out-of-scope situations
        fb_rows, fb_verdicts, fb_fail = judge_situations(ctx, self.probes, self.stock_seen)
        dep_rows, dep_verdicts, dep_fail = judge_deployments(ctx, self.deployed)
        fb_rows, fb_verdicts = fb_rows + dep_rows, fb_verdicts + dep_verdicts
        cells.verdicts.extend(fb_verdicts)
        cells.failures.extend(fb_fail + dep_fail)
        outcome = Outcome(
            verdict=fold_verdicts(cells.verdicts),
            standard_checks=standard_checks,
            scope_errors=scope_errors,
            unseen=unseen,
            situation_rows=fb_rows,
            situation_verdicts=fb_verdicts,
        )
        return CheckResult(
            check=self.name,
            verdict=outcome.verdict,
            reason=coverage_reason(cells, outcome),
            required=self.required,
            gate=self.gate(ctx),
            summary={
                "threshold": cells.threshold,
                "pairs": cells.in_plan(),
                "pairs_passing": cells.passing(),
                "checks_on_standard_path": standard_checks,
                "points_not_exercised": not_exercised,
                "points_without_decode_evidence": unseen,
                "scope_errors": scope_errors,
                "windows_without_profiler": cells.unavailable,
                "stock_markers_observable": {f"{g}/{s}": v for (g, s), v in sorted(self.stock_seen.items())},
            },
            failures=cells.failures,
            tables=typed_tables(self.name, {"coverage": cells.rows, "fallback": fb_rows, "markers": marker_rows}),
            artifacts=list(self.artifacts),
        )
