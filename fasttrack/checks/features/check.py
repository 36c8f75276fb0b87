"""Features: production serving features keep working on the optimized path.

Each feature the scope lists (``scope.features``) is one sub-test, a registered
:class:`~fasttrack.checks.features.spec.ServingFeature` (:mod:`~fasttrack.checks.features.table`:
its probe, what it needs from the tier, its typed result and its judgement); the candidate is
judged against the baseline and against absolute thresholds
(``gates.features``, and ``gates.equivalence`` where outputs are compared). On an engine group
with synthetic acceptance only the features that declare ``on_synthetic_acceptance`` run
(``speculative_acceptance``): the others compare outputs, which that sampler changes by design.

Path evidence comes from two short profiler windows per engine lifetime (trace
export costs seconds per window and tens of ms per step on small hosts): the
short-context points (a structured-output round of a few tokens at every batch
size, and two sampling requests at the sampling batch) and the full-context points
(each point's prompts, a few tokens). Evidence is split by batch size and recorded
for the coverage check; a sub-test whose points never reached the optimized path on
the candidate fails with "used the standard path", and one with a point that has no
profiled candidate window (no profiler, or no trace) is ``not_run``, never ``pass``.
"""

from __future__ import annotations

from typing import Any

from fasttrack.checks.base import Blocker, EngineCheck, TierView, register
from fasttrack.checks.context import EngineSession, RunContext
from fasttrack.checks.equivalence.reference import VariantCollector
from fasttrack.checks.features.cost import COST
from fasttrack.checks.features.env import FeatureEnv
from fasttrack.checks.features.model import MASK_SAMPLES, SAMPLING_WAVE, Outcome, SideData
from fasttrack.checks.features.spec import GroupPlan, OnGroup, Step, synthetic_features
from fasttrack.checks.features.table import by_name, features
from fasttrack.checks.outcome import fold_verdicts, used_standard_path, write_artifact
from fasttrack.checks.points import nearest_batch
from fasttrack.checks.windows import WindowRecord
from fasttrack.errors import FasttrackError
from fasttrack.evidence import typed_tables
from fasttrack.inputs import PASSAGES, SCHEMAS_DIR, STRUCTURED_PROMPTS, prompt_set_path
from fasttrack.planning.plan import EngineGroup
from fasttrack.results import CheckResult, Gate, Side, Verdict
from fasttrack.scope.gates import FeaturesGate


@register
class FeaturesCheck(EngineCheck, VariantCollector, name="features", title="Serving features", report_view="features"):
    """Serving features on the optimized path: structured output, sampling, full context, API behaviour."""

    after = ("equivalence",)
    gate_model = FeaturesGate
    cost = COST

    @classmethod
    def planned(cls, tier: TierView) -> list[str]:
        return tier.plan.tier_features(list(tier.scope.features))

    @classmethod
    def passability(cls, tier: TierView) -> list[Blocker]:
        """Every feature needs a short-context point (they run at short contexts) and a registered test; each
        feature adds what it needs of the tier (its ``blockers``)."""
        feats = cls.planned(tier)
        if not feats:
            return []
        out = []
        if not any(not p.full_context for p in tier.plan.points):
            out.append(
                tier.blocker(
                    "every feature",
                    f"the {tier.tier} tier has no short-context point (features run at short contexts)",
                    f"add a numeric context to {tier.hint}.context",
                )
            )
        known = by_name()
        for f in feats:
            feature = known.get(f)
            if feature is None:
                out.append(
                    tier.blocker(
                        f"feature {f}",
                        f"no serving feature of that name is registered (known: {', '.join(known)})",
                        "fix its name in the scope's features",
                    )
                )
            else:
                out.extend(feature.blockers(tier))
        return out

    def __init__(
        self, *, wave: int = SAMPLING_WAVE, mask_samples: int = MASK_SAMPLES, batches: list[int] | None = None
    ) -> None:
        self.wave_pref = wave
        """Preferred choices per sampling request (snapped to a batch size of the plan)."""
        self.mask_samples = mask_samples
        """Samples per top-k / top-p mask test."""
        self.batches = batches
        """Batch sizes structured output and full context run at (None: every batch size of the plan)."""
        self.sides: dict[tuple[str, str], SideData] = {}
        self.variants: dict[tuple[str, str], SideData | str] = {}
        """(group id, reference variant) -> its measurements of the features that use the reference, or why none."""
        self.artifacts: list[str] = []

    def skip_reason(self, ctx: RunContext) -> str | None:
        if not ctx.scope.features:
            return "the scope lists no serving features (scope.features is empty)"
        known = by_name()
        unknown = sorted(set(ctx.scope.features) - set(known))
        if unknown:
            return f"no feature test for {unknown} (known: {', '.join(known)})"
        return None

    def wants(self, ctx: RunContext, group: EngineGroup, side: Side, lifetime: int) -> bool:
        return lifetime == 0

    def gate(self, ctx: RunContext) -> Gate:
        fg = ctx.scope.gates.features
        return Gate(
            statistic=(
                "per feature: JSON-schema conformance rate (Wilson 95%); chi-square goodness-of-fit p-value of "
                "candidate samples against the baseline's next-token distribution; exact behaviour of seeds, "
                "stop, max_tokens, n, logprobs; full-context equivalence"
            ),
            threshold=(
                f"conformance >= {fg.min_json_conformance:g} and >= baseline; p >= {fg.sampling_alpha:g}; "
                "0 mask violations; identical seeded outputs"
            ),
            rule=(
                "every listed feature passes at every config point it ran at, and the candidate ran the optimized path"
            ),
        )

    # ------------------------------------------------------------------------------------------------ collect

    async def collect(self, ctx: RunContext, session: EngineSession) -> None:
        group = session.group
        side = SideData()
        self.sides[(group.id, session.side)] = side
        base = self.sides.get((group.id, "baseline")) if session.side == "candidate" else None
        feats: set[str] = group_features(ctx, group)
        gp = GroupPlan(ctx, group, wave=self.wave_pref, batches=self.batches)
        tasks = self._tasks(gp, feats, side)
        self._record_inputs(ctx, feats)
        async with session.engine.client() as client:
            env = FeatureEnv(ctx, session, side, base, client, mask_samples=self.mask_samples)
            await self._probe(env, gp, feats, tasks)
            await _run_tasks(env, tasks, side)
        self.artifacts.append(
            write_artifact(ctx, self.name, f"{group.id}.{session.side}.json", side.model_dump(mode="json"))
        )

    @staticmethod
    def _tasks(gp: GroupPlan, feats: set[str], side: SideData) -> list[tuple[str, Step]]:
        """Every step of the group's features, in registry order; a step without its point is an error of it."""
        tasks: list[tuple[str, Step]] = []
        for feature in features():
            if feature.name not in feats:
                continue
            for step in feature.steps(gp):
                if step.point is None:
                    side.errors[feature.name] = (
                        f"the plan has no config point at batch {step.batch} in group {gp.group.id}"
                    )
                    continue
                tasks.append((feature.name, step))
                side.points.setdefault(feature.name, step.point)
        return tasks

    async def _probe(self, env: FeatureEnv, gp: GroupPlan, feats: set[str], tasks: list[tuple[str, Step]]) -> None:
        """Path evidence first: short probes in two profiler windows (short-context and full-context points)."""
        short_batches = gp.short_batches
        probe_batches = gp.selected_short_batches or short_batches
        if "structured_output" not in feats and "temperature_sampling" in feats:
            probe_batches = [nearest_batch(short_batches, self.wave_pref)]
        # every short-context point a feature runs at is probed, so each feature has path evidence
        probe_batches = sorted(
            set(probe_batches) | {s.batch for _, s in tasks if s.point is not None and s.point == gp.point(s.batch)}
        )
        sampling_wave = (
            nearest_batch(short_batches, self.wave_pref) if "temperature_sampling" in feats and short_batches else None
        )
        if probe_batches:
            await env.probe_short(probe_batches, wave=sampling_wave, structured="structured_output" in feats)
        fulls = gp.full_points
        if "full_context" in feats and fulls:
            await env.probe_full(fulls)

    def wants_variant(self, ctx: RunContext, group: EngineGroup) -> bool:
        return ctx.scope.gates.equivalence.reference is not None and bool(_reference_features(ctx, group))

    async def collect_variant(self, ctx: RunContext, session: EngineSession, variant: str) -> None:
        """The steps of the features that use the reference (no path probes: a variant needs no path evidence)."""
        group = session.group
        side = SideData()
        self.variants[(group.id, variant)] = side
        gp = GroupPlan(ctx, group, wave=self.wave_pref, batches=self.batches)
        tasks = self._tasks(gp, _reference_features(ctx, group), side)
        async with session.engine.client() as client:
            env = FeatureEnv(ctx, session, side, None, client, mask_samples=self.mask_samples)
            await _run_tasks(env, tasks, side)
        self.artifacts.append(
            write_artifact(ctx, self.name, f"{group.id}.reference-{variant}.json", side.model_dump(mode="json"))
        )

    def variant_missing(self, ctx: RunContext, group: EngineGroup, variant: str, reason: str) -> None:
        """Why the variant has no outputs (a variant that crashed part-way keeps what it measured before)."""
        got = self.variants.get((group.id, variant))
        if not isinstance(got, SideData):
            self.variants[(group.id, variant)] = reason
            return
        for f in _reference_features(ctx, group):
            if f not in got.results:
                got.errors.setdefault(f, reason)

    def _record_inputs(self, ctx: RunContext, feats: set[str]) -> None:
        """The shipped inputs the feature requests are built from, for the bundle's provenance."""
        ctx.provenance.input_file(prompt_set_path(ctx.scope, ctx.base_dir))
        if "structured_output" in feats:
            ctx.provenance.input_file(SCHEMAS_DIR)
            ctx.provenance.input_file(STRUCTURED_PROMPTS)
        if "full_context" in feats:
            ctx.provenance.input_file(PASSAGES)

    # ------------------------------------------------------------------------------------------------ judge

    def judge(self, ctx: RunContext) -> CheckResult:
        feats: list[str] = list(dict.fromkeys(ctx.plan.tier_features(list(ctx.scope.features))))
        groups = sorted({gid for gid, _ in self.sides})
        if not groups:
            return CheckResult.not_run(self.name, "no engine ran the feature requests", required=self.required)
        outcomes, windows = self._outcomes(ctx, groups, feats)
        per_feature, verdicts, failures, tables = _merge(outcomes)
        standard = used_standard_path(windows)
        verdict = fold_verdicts(verdicts)
        if standard:
            verdict = Verdict.FAIL
            failures.insert(0, f"features {standard}")
        return CheckResult(
            check=self.name,
            verdict=verdict,
            reason=_reason(verdict, per_feature, standard),
            required=self.required,
            gate=self.gate(ctx),
            summary={
                "per_feature": per_feature,
                "thresholds": ctx.scope.gates.features.model_dump(),
                "used_standard_path": standard,
            },
            failures=failures,
            tables=typed_tables(self.name, tables),
            artifacts=list(self.artifacts),
        )

    def _outcomes(
        self, ctx: RunContext, groups: list[str], feats: list[str]
    ) -> tuple[list[Outcome], list[WindowRecord]]:
        """Every feature's outcome on every group, and the candidate's windows (a group with a missing side: one
        ``not_run`` outcome for all)."""
        outcomes: list[Outcome] = []
        windows: list[WindowRecord] = []
        for gid in groups:
            base = self.sides.get((gid, "baseline"))
            cand = self.sides.get((gid, "candidate"))
            if base is None or cand is None:
                missing = "baseline" if base is None else "candidate"
                outcomes.append(
                    Outcome(feature="*", verdict=Verdict.NOT_RUN, reason=f"group {gid}: the {missing} side never ran")
                )
                continue
            windows.extend(cand.windows.values())
            for f in feats:
                outcomes.append(self._judge_feature(ctx, gid, f, base, cand))
        return outcomes, windows

    def _judge_feature(self, ctx: RunContext, gid: str, f: str, base: SideData, cand: SideData) -> Outcome:
        feature = by_name()[f]
        group = next((g for g in ctx.plan.groups if g.id == gid), None)
        if group is not None and f not in group_features(ctx, group):
            return Outcome(feature=f, verdict=Verdict.NOT_RUN, reason="n/a")
        b_res, c_res = feature.result(base), feature.result(cand)
        if feature.optional and c_res is None and f not in cand.errors and f not in base.errors:
            return Outcome(feature=f, verdict=Verdict.NOT_RUN, reason="n/a")
        early = _side_errors(gid, f, base, cand)
        if early is not None:
            return early
        if c_res is None or b_res is None:
            return Outcome(
                feature=f,
                verdict=Verdict.NOT_RUN,
                reason=f"{gid}: no measurements on both sides",
                rows=[{"feature": f, "group": gid, "verdict": "not_run"}],
            )
        try:
            on = OnGroup(ctx=ctx, gid=gid, windows=list(cand.windows.values()), variants=self._group_variants(ctx, gid))
            out = feature.judge(on, b_res, c_res)
        except FasttrackError as exc:
            return Outcome(
                feature=f,
                verdict=Verdict.NOT_RUN,
                reason=f"{gid}: the measurements could not be judged: {exc.message}",
                rows=[{"feature": f, "group": gid, "verdict": "not_run", "detail": exc.message}],
            )
        return _on_optimized_path(out, gid, f, c_res.points or [cand.points.get(f)], cand)

    def _group_variants(self, ctx: RunContext, gid: str) -> dict[str, SideData | str]:
        """Each reference variant's measurements on the group, or why it has none."""
        ref = ctx.scope.gates.equivalence.reference
        names = list(ref.variants) if ref is not None else []
        return {n: self.variants.get((gid, n), "its engine measured nothing on this group") for n in names}


async def _run_tasks(env: FeatureEnv, tasks: list[tuple[str, Step]], side: SideData) -> None:
    """Run the features' steps in order; a step's error is that feature's (an engine crash ends the collection)."""
    for feature, step in tasks:
        try:
            await step.run(env)
        except FasttrackError as exc:
            from fasttrack.engine import EngineCrashed

            if isinstance(exc, EngineCrashed):
                raise
            side.errors[feature] = f"{type(exc).__name__}: {exc.message}"


def _reference_features(ctx: RunContext, group: EngineGroup) -> set[str]:
    """The group's features whose judgement the reference variants calibrate."""
    known = by_name()
    return {f for f in group_features(ctx, group) if f in known and known[f].uses_reference}


def _side_errors(gid: str, f: str, base: SideData, cand: SideData) -> Outcome | None:
    """A side that could not run the feature: the baseline's error leaves it not run, the candidate's fails it."""
    if f in base.errors:
        return Outcome(
            feature=f,
            verdict=Verdict.NOT_RUN,
            reason=f"{gid}: the baseline could not run it: {base.errors[f]}",
            rows=[{"feature": f, "group": gid, "verdict": "not_run", "detail": base.errors[f]}],
        )
    if f in cand.errors:
        where = cand.points.get(f) or gid
        return Outcome(
            feature=f,
            verdict=Verdict.FAIL,
            reason=f"{f}: the candidate failed where the baseline succeeded",
            rows=[{"feature": f, "group": gid, "verdict": "fail", "detail": cand.errors[f]}],
            failures=[f"{where}: {f} failed on the candidate (the baseline ran it): {cand.errors[f]}"],
        )
    return None


def _on_optimized_path(out: Outcome, gid: str, f: str, pts: list[str | None], cand: SideData) -> Outcome:
    """A sub-test whose candidate window never reached the optimized path proves nothing (it fails); one whose
    points have no profiled window is not a pass."""
    ws = [w for w in cand.windows.values() if any(p in pts for p in w.points)]
    std = used_standard_path(ws)
    if std and out.verdict is not Verdict.NOT_RUN:
        out.verdict = Verdict.FAIL
        out.failures.insert(0, f"{f} at {', '.join(p for p in pts if p)}: {std}")
        out.reason = f"{f}: {std}"
    elif out.verdict is Verdict.PASS:
        missing = unprofiled(pts, cand)
        if missing:
            # "the candidate ran the optimized path" could not be observed: never a pass
            out.verdict = Verdict.NOT_RUN
            out.reason = f"{gid}: {missing}"
            for r in out.rows:
                if r.get("verdict") == "pass":
                    r["verdict"] = "not_run"
            out.rows.append({"feature": f, "group": gid, "verdict": "not_run", "detail": missing})
    return out


def _merge(
    outcomes: list[Outcome],
) -> tuple[dict[str, dict[str, str]], list[Verdict], list[str], dict[str, list[dict[str, Any]]]]:
    """Per feature over the groups: its verdict and reason, and every row, failure and extra table. A feature that
    applies to no group that ran (speculative decoding without speculative configs) is not run, saying why."""
    merged: dict[str, list[Outcome]] = {}
    for o in outcomes:
        merged.setdefault(o.feature, []).append(o)
    per_feature: dict[str, dict[str, str]] = {}
    verdicts: list[Verdict] = []
    failures: list[str] = []
    rows: list[dict[str, Any]] = []
    tables: dict[str, list[dict[str, Any]]] = {}
    known = by_name()
    for f, outs in merged.items():
        applicable = [o for o in outs if o.reason != "n/a"]
        if not applicable:
            optional = known[f].optional if f in known else None
            reason = optional or (
                "not applicable to any engine group that ran (groups with synthetic acceptance run only "
                f"{', '.join(synthetic_features())})"
            )
            applicable = [Outcome(feature=f, verdict=Verdict.NOT_RUN, reason=reason)]
        v = fold_verdicts(o.verdict for o in applicable)
        verdicts.append(v)
        per_feature[f] = {"verdict": v.value, "reason": "; ".join(o.reason for o in applicable)}
        for o in applicable:
            failures.extend(o.failures)
            rows.extend(o.rows)
            for k, t in o.extra_tables.items():
                tables.setdefault(k, []).extend(t)
    tables["features"] = rows
    return per_feature, verdicts, failures, tables


def _reason(verdict: Verdict, per_feature: dict[str, dict[str, str]], standard: str | None) -> str:
    if standard:
        return f"the candidate {standard}; the feature results say nothing about the optimized path"
    if verdict is Verdict.PASS:
        return f"all {len(per_feature)} features behave on the candidate as on the baseline"
    if verdict is Verdict.FAIL:
        bad = [f for f, d in per_feature.items() if d["verdict"] == "fail"]
        return f"feature(s) failing on the candidate: {', '.join(bad)}"
    nr = [f"{f} ({d['reason']})" for f, d in per_feature.items() if d["verdict"] == "not_run"]
    return "not every feature could be judged: " + "; ".join(nr)


def group_features(ctx: RunContext, group: EngineGroup) -> set[str]:
    """The tier's features (``tiers.<tier>.features``) that run on ``group``."""
    feats = set(ctx.plan.tier_features(list(ctx.scope.features)))
    return feats & set(synthetic_features()) if group.synthetic_acceptance else feats


def unprofiled(points: list[str | None], cand: SideData) -> str | None:
    """Why the feature's "the candidate ran the optimized path" condition was not observed (None when every point
    it ran at has a profiled candidate window)."""
    bare = [
        p for p in dict.fromkeys(points) if p and not any(w.available and p in w.points for w in cand.windows.values())
    ]
    if not bare:
        return None
    reasons = sorted(
        {
            w.unavailable_reason
            for w in cand.windows.values()
            if not w.available and w.unavailable_reason and set(bare) & set(w.points)
        }
    )
    why = "; ".join(reasons) or "no profiler window covered these points"
    return (
        f"no profiled window of the candidate at {', '.join(bare)} ({why}), so whether it ran the "
        "optimized path is unknown"
    )
