"""Plan queries the checks share: which config points of an engine group a request belongs to."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from fasttrack.checks.context import RunContext
    from fasttrack.planning.plan import ConfigPoint, EngineGroup


def short_point(ctx: RunContext, group: EngineGroup, batch: int) -> ConfigPoint | None:
    """The group's point at ``batch`` with the smallest non-full context (where short prompts belong)."""
    pts = [p for p in ctx.plan.group_points(group) if p.batch == batch and not p.full_context]
    return min(pts, key=lambda p: p.context) if pts else None


def full_points(ctx: RunContext, group: EngineGroup) -> list[ConfigPoint]:
    """The group's full-context points, by batch."""
    return sorted((p for p in ctx.plan.group_points(group) if p.full_context), key=lambda p: p.batch)


def group_batches(ctx: RunContext, group: EngineGroup) -> list[int]:
    """Distinct batch sizes of the group's points, ascending."""
    return sorted({p.batch for p in ctx.plan.group_points(group)})


def nearest_batch(batches: list[int], want: int) -> int:
    """The batch size of the plan closest to ``want`` (the smaller one on ties)."""
    if not batches:
        raise ValueError("the plan has no batch sizes")
    return min(batches, key=lambda b: (abs(b - want), b))
