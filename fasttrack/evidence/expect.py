"""What the judging scope expects of a bundle: its tier's checks, config points and work, and the most rows
each table could hold.

A bundle is judged by a scope: the trusted scope (``verify --trusted-scope``), else the one the bundle
recorded. :class:`RejudgeContext` is built from that scope and the tier the bundle ran, never from the
bundle's check entries: which checks must exist and which are required, which config points each check
must have judged, and how many rows each table may hold all come from here.

The config points are the plan's (:func:`fasttrack.planning.plan.build_plan` names them the same way; a test holds the
two together for every shipped suite and tier), computed from the scope alone so that verifying needs no
plan, cost model or check code.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from fasttrack.scope import Scope, TierSpec
from fasttrack.scope.common import TIER_ORDER


@dataclass(frozen=True)
class PlannedPoint:
    """One config point of the judging scope's plan."""

    id: str
    group: str
    batch: int
    context: int
    full_context: bool
    synthetic: bool
    """Whether its engine group runs vLLM's synthetic rejection sampler (outputs differ by design)."""


def _ctx_label(c: int) -> str:
    return f"{c // 1024}k" if c % 1024 == 0 and c >= 1024 else str(c)


def planned_points(scope: Scope, tier: str) -> list[PlannedPoint]:
    """The config points of ``tier``, named as the plan names them (group ``tp{tp}-dcp{dcp}-{spec}``, point
    ``{group}-b{batch}-ctx{context}``); empty for a scope without an envelope."""
    env = scope.envelope
    if env is None or tier not in scope.tiers:
        return []
    matrix = scope.tier_matrix(tier)
    out_tokens = scope.gates.equivalence.max_tokens
    max_len = env.context.max_model_len
    points = []
    for tp in matrix.tensor_parallel:
        for dcp in matrix.decode_context_parallel:
            for label in matrix.speculative:
                name, _, dl = label.partition(":")
                sp = env.spec_by_name(name)
                if sp is None:
                    continue
                draft = int(dl) if dl else None
                gid = f"tp{tp}-dcp{dcp}-{name if draft is None else f'{name}.dl{draft}'}"
                config = sp.engine_config(draft) if draft is not None else None
                synthetic = (config or {}).get("rejection_sample_method") == "synthetic"
                for b in matrix.batch:
                    for c in matrix.context:
                        full = c == "full"
                        ctx = max_len - out_tokens if full else int(c)
                        pid = f"{gid}-b{b}-ctx{'full' if full else _ctx_label(ctx)}"
                        points.append(PlannedPoint(pid, gid, b, ctx, full, synthetic))
    return points


def perf_items(scope: Scope, tier: str, points: Sequence[PlannedPoint]) -> list[tuple[str, str]]:
    """The (workload, point) items the perf check measures at ``points``, as it keys them: every point for
    ``pure_decode``; the smallest batch's points for ``context_sweep``; each batch's shortest context for
    ``mixed`` and ``prompts``; ``{group}-c{level}`` for ``concurrency_sweep``; ``{group}-trace`` for
    ``trace_replay`` (the rule of :func:`fasttrack.perf.workloads.plan_items`)."""
    spec = scope.tiers.get(tier) if tier in scope.tiers else None
    chosen = spec.workloads if spec is not None else None
    by_group: dict[str, list[PlannedPoint]] = {}
    for p in points:
        by_group.setdefault(p.group, []).append(p)
    items: list[tuple[str, str]] = []
    for gid, gpts in by_group.items():
        pts = sorted(gpts, key=lambda p: (p.batch, p.full_context, p.context))
        batches = sorted({p.batch for p in pts})

        def short(b: int, pts: list[PlannedPoint] = pts) -> PlannedPoint:
            cand = [p for p in pts if p.batch == b and not p.full_context] or [p for p in pts if p.batch == b]
            return min(cand, key=lambda p: p.context)

        for w in scope.workloads:
            if chosen is not None and w.name not in chosen:
                continue
            if w.kind == "pure_decode":
                items += [(w.name, p.id) for p in pts]
            elif w.kind == "context_sweep":
                items += [(w.name, p.id) for p in pts if p.batch == batches[0]]
            elif w.kind in ("mixed", "prompts"):
                items += [(w.name, short(b).id) for b in batches]
            elif w.kind == "concurrency_sweep":
                items += [(w.name, f"{gid}-c{level}") for level in w.concurrencies or []]
            elif w.kind == "trace_replay":
                items.append((w.name, f"{gid}-trace"))
    return items


@dataclass(frozen=True)
class RejudgeContext:
    """The judging scope, the tier the bundle ran, and what that tier's plan expects."""

    scope: Scope
    tier: str
    source: str
    """The judging scope in words: 'the trusted scope PATH' or "the bundle's own recorded scope"."""
    points: tuple[PlannedPoint, ...]
    """The points this bundle must have judged: the tier's plan (a shard bundle: those of its shard that the plan
    has too)."""
    plan_points: frozenset[str] = frozenset()
    """Every point of the tier's plan, whatever the shard."""
    pr_link: bool = False
    """Whether the bundle records a PR link (the isolation check is then required)."""
    shard: str = "1/1"
    extra_gates: dict[str, Any] = field(default_factory=dict)
    """Gate sections of checks this process does not know, as the scope writes them."""

    @property
    def tier_spec(self) -> TierSpec:
        return self.scope.tiers[self.tier]  # type: ignore[index]

    def runs_check(self, name: str) -> bool:
        """Whether the tier selects the check ``name`` (its ``checks`` list; none: every check)."""
        chosen = self.tier_spec.checks
        return chosen is None or name in chosen

    def gate(self, check: str) -> Any:
        """The check's gate section of the judging scope (None for a check without one)."""
        return getattr(self.scope.gates, check, None)

    def tier_features(self) -> list[str]:
        chosen = self.tier_spec.features
        return [f for f in self.scope.features if chosen is None or f in chosen]

    def tier_evals(self) -> list[str]:
        chosen = self.tier_spec.evals
        return [e.name for e in self.scope.evals if chosen is None or e.name in chosen]

    def perf_items(self) -> list[tuple[str, str]]:
        return perf_items(self.scope, self.tier, self.points)

    # ------------------------------------------------------------------ row bounds: what the plan could produce

    @property
    def n_points(self) -> int:
        return max(1, len(self.points))

    @property
    def n_groups(self) -> int:
        return max(1, len({p.group for p in self.points}))

    @property
    def max_batch(self) -> int:
        return max((p.batch for p in self.points), default=1)

    @property
    def lifetimes(self) -> int:
        return self.tier_spec.lifetimes_per_side

    @property
    def max_runs(self) -> int:
        perf = self.gate("perf")
        return int(getattr(perf, "max_runs", 8) or 8)

    def n_perf_items(self) -> int:
        return max(1, len(self.perf_items()))

    def requests_per_run(self) -> int:
        """The most requests one perf run sends (a workload's own count, else waves of the largest batch)."""
        most = [w.requests_per_run for w in self.scope.workloads if w.requests_per_run]
        levels = [c for w in self.scope.workloads for c in (w.concurrencies or [])]
        return max([*most, 8 * max([self.max_batch, *levels])])

    def eval_samples(self, name: str) -> int:
        """The most samples one run of eval ``name`` can have: its limit, the tier's, the scope's estimate of
        its dataset, else :data:`~fasttrack.limits.EVAL_SAMPLES_UNSTATED`."""
        from fasttrack.limits import EVAL_SAMPLES_UNSTATED

        spec = next((e for e in self.scope.evals if e.name == name), None)
        caps = [c for c in (spec.limit if spec else None, self.tier_spec.eval_limit) if c]
        if caps:
            return min(caps)
        est = self.scope.estimates.eval_samples
        return est.get(name) or est.get("*") or EVAL_SAMPLES_UNSTATED

    def eval_sample_rows(self) -> int:
        """Rows of per-sample results the tier's evals can produce: samples x repeats x roles x sides x points."""
        total = 0
        for e in self.scope.evals:
            if e.name in self.tier_evals():
                total += self.eval_samples(e.name) * e.repeats * 3 * 2 * self.n_points
        return total


def build_context(
    scope: Scope,
    tier: str,
    *,
    source: str,
    recorded_points: Sequence[str] | None = None,
    shard: str = "1/1",
    pr_link: bool = False,
    extra_gates: dict[str, Any] | None = None,
) -> RejudgeContext:
    """The context of judging a bundle that ran ``tier`` (its shard's points: ``recorded_points``)."""
    if tier not in TIER_ORDER or tier not in scope.tiers:
        raise ValueError(f"the judging scope has no tier {tier!r}")
    planned = planned_points(scope, tier)
    ids = frozenset(p.id for p in planned)
    if shard != "1/1" and recorded_points is not None:
        mine = set(recorded_points)
        planned = [p for p in planned if p.id in mine]
    return RejudgeContext(
        scope=scope,
        tier=tier,
        source=source,
        points=tuple(planned),
        plan_points=ids,
        pr_link=pr_link,
        shard=shard,
        extra_gates=dict(extra_gates or {}),
    )


def recorded_point_ids(plan: Any) -> list[str]:
    """The point ids a bundle's recorded plan lists (anything else is skipped)."""
    pts = plan.get("points") if isinstance(plan, dict) else None
    if not isinstance(pts, list):
        return []
    return [p["id"] for p in pts if isinstance(p, dict) and isinstance(p.get("id"), str)]


def describe(ctx: RejudgeContext) -> str:
    """One line: the judging scope and what its tier expects."""
    return (
        f"{ctx.source}, tier {ctx.tier}: {len(ctx.points)} config point(s)"
        + (f" of shard {ctx.shard}" if ctx.shard != "1/1" else "")
        + f", checks {json.dumps(ctx.tier_spec.checks) if ctx.tier_spec.checks is not None else 'all'}"
    )
