"""The shape of a feature test: when it runs on an engine group, what it collects, how it is judged.

A serving feature is one :class:`FeatureTest`: its name (as in ``scope.features``), when it
runs on an engine group and at which config point (``steps``), and how its measurements
are judged (``judge``). The table of feature tests is :data:`fasttrack.checks.features.table.FEATURES`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from fasttrack.checks.context import RunContext
from fasttrack.checks.features.env import FeatureEnv
from fasttrack.checks.features.model import Outcome, SideData
from fasttrack.checks.points import full_points, group_batches, nearest_batch, short_point
from fasttrack.checks.tier import Blocker, TierView
from fasttrack.plan import ConfigPoint, EngineGroup


@dataclass
class GroupPlan:
    """What one engine group offers the feature tests: its batch sizes and config points."""

    ctx: RunContext
    group: EngineGroup
    wave: int
    """Preferred choices per sampling request (snapped to a short batch size)."""
    batches: list[int] | None
    """Batch sizes structured output and full context run at (None: every batch size of the plan)."""

    @property
    def short_batches(self) -> list[int]:
        """Batch sizes that have a short-context point in this group."""
        return [b for b in group_batches(self.ctx, self.group) if short_point(self.ctx, self.group, b) is not None]

    @property
    def selected_short_batches(self) -> list[int]:
        """:attr:`short_batches` limited to :attr:`batches`."""
        return [b for b in self.short_batches if self.batches is None or b in self.batches]

    @property
    def full_points(self) -> list[ConfigPoint]:
        """The group's full-context points (limited to :attr:`batches`), by batch."""
        return [p for p in full_points(self.ctx, self.group) if self.batches is None or p.batch in self.batches]

    def at(self, want: int) -> int:
        """The short batch size closest to ``want``."""
        return nearest_batch(self.short_batches, want)

    def point(self, batch: int) -> str | None:
        """The short-context point at ``batch`` (None when the group has none)."""
        p = short_point(self.ctx, self.group, batch)
        return p.id if p is not None else None


@dataclass(frozen=True)
class Step:
    """One collection task of a feature on one engine group."""

    point: str | None
    """The config point its requests run at (None: the plan has no point at that batch size)."""
    batch: int
    run: Callable[[FeatureEnv], Awaitable[None]]
    """Sends the requests and stores the measurements in ``env.side.data[<feature>]``."""


Judge = Callable[["RunContext", str, SideData, SideData], Outcome]
"""``judge(ctx, group id, baseline data, candidate data)``: the feature's outcome on one engine group."""


@dataclass(frozen=True)
class FeatureTest:
    """One serving feature: when it runs, what it collects, how it is judged."""

    name: str
    """The feature's name in ``scope.features``."""
    steps: Callable[[GroupPlan], list[Step]]
    """When it runs: its collection steps on an engine group, in order ([] = not on this group)."""
    judge: Judge
    optional: str | None = None
    """When set, a group that measured nothing for it is "not applicable" rather than "not run", and this is
    the reason given when no group of the plan applies (e.g. speculative decoding without speculative configs)."""
    blockers: Callable[[TierView], list[Blocker]] | None = None
    """What it needs from a tier that the tier can never give (its passability rule)."""
