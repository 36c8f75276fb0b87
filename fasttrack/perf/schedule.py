"""Adaptive repetition: when a point may be looked at, and how many looks are planned.

The engine lifetime is the unit of replication, and the pipeline fixes how many
lifetimes each side gets (the tier's ``lifetimes_per_side``, alternating baseline,
candidate, baseline, ...). Within that frame the perf check saves time in two ways:

* **Runs within a lifetime.** On a lifetime where looks are allowed, a point gets
  ``min_runs`` runs, then a look after every further run, up to ``max_runs`` runs
  on that lifetime; it stops as soon as a look decides.
* **Later lifetimes.** A point that is decided is not measured again on later
  lifetimes.

Looks are allowed on a lifetime once both sides (counting that lifetime) have at
least ``min(2, lifetimes_per_side)`` lifetimes, so on the standard tier no decision
is taken before the interval can see lifetime-to-lifetime variance. Earlier
lifetimes run ``min_runs`` runs per point. The number of looks is fixed before the
first one: ``(lifetimes on which looks are allowed) x (max_runs - min_runs + 1)``;
every look uses the Bonferroni-corrected interval at
``1 - (1 - confidence) / planned_looks`` (see :func:`fasttrack.stats.sequential_decision`).

**Interleaved** (``gates.perf.interleave``): the k-th baseline and the k-th candidate
lifetime are up together and each point's runs alternate between them in A B B A
blocks, so looks happen only where a pair is complete (the later of the two
positions), after whole blocks (``min_runs`` run pairs, then every two more), and the
planned looks count those positions and blocks only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

DRIFT_NOTE = (
    "An order with one extra baseline lifetime at the end (baseline, candidate, ..., baseline) makes that last "
    "lifetime a drift check: it measures every point again (min_runs runs, no looks) and its runs are compared "
    "with the earlier baseline lifetimes only, never used by the gate."
)


@dataclass(frozen=True)
class LookSchedule:
    """The look plan of one engine group."""

    order: tuple[str, ...]
    """Launch order of sides (``EngineGroup.order``)."""
    min_runs: int
    max_runs: int
    interleaved: bool = False
    """The k-th lifetimes of the two sides are up together (pairs); looks only where a pair is complete."""
    fixed: bool = False
    """A fixed design (``gates.perf.adaptive: false``): no looks while measuring, so every lifetime measures
    every point with ``min_runs`` runs; the point is judged once, at the end."""

    @classmethod
    def for_group(
        cls, order: Sequence[str], *, min_runs: int, max_runs: int, interleaved: bool = False, fixed: bool = False
    ) -> "LookSchedule":
        if min_runs < 1 or max_runs < min_runs:
            raise ValueError(f"need 1 <= min_runs <= max_runs, got {min_runs}, {max_runs}")
        return cls(order=tuple(order), min_runs=min_runs, max_runs=max_runs, interleaved=interleaved, fixed=fixed)

    @property
    def lifetimes_per_side(self) -> int:
        return min(self.order.count("baseline"), self.order.count("candidate"))

    @property
    def drift_position(self) -> int | None:
        """Position of a trailing extra baseline lifetime (a drift-only lifetime), if the order has one."""
        if (
            self.order
            and self.order[-1] == "baseline"
            and self.order.count("baseline") == self.order.count("candidate") + 1
        ):
            return len(self.order) - 1
        return None

    def is_drift_lifetime(self, side: str, lifetime: int) -> bool:
        pos = self.position(side, lifetime)
        return pos is not None and pos == self.drift_position

    @property
    def min_lifetimes(self) -> int:
        """Lifetimes each side needs before a look: min(2, lifetimes per side)."""
        return max(1, min(2, self.lifetimes_per_side))

    def position(self, side: str, lifetime: int) -> int | None:
        """Index in ``order`` of this side's ``lifetime``-th engine (None when the order has no such engine)."""
        seen = -1
        for i, s in enumerate(self.order):
            if s == side:
                seen += 1
                if seen == lifetime:
                    return i
        return None

    def look_positions(self) -> list[int]:
        """Positions in the order on which looks are allowed (none in a fixed design)."""
        out: list[int] = []
        if self.fixed:
            return out
        for i in range(len(self.order)):
            if i == self.drift_position:
                continue
            done = self.order[: i + 1]
            if self.interleaved and done.count("baseline") != done.count("candidate"):
                continue  # the pair is not complete yet: its runs are taken (and looked at) when it is
            if done.count("baseline") >= self.min_lifetimes and done.count("candidate") >= self.min_lifetimes:
                out.append(i)
        return out

    def pair_looks_allowed(self, lifetime: int) -> bool:
        """Interleaved: whether looks are allowed on the pair of ``lifetime``-th engines of both sides."""
        pos = [self.position(s, lifetime) for s in ("baseline", "candidate")]
        return None not in pos and max(p for p in pos if p is not None) in self.look_positions()

    def looks_allowed(self, side: str, lifetime: int) -> bool:
        pos = self.position(side, lifetime)
        return pos is not None and pos in self.look_positions()

    @property
    def block(self) -> int:
        """Run pairs between looks: 2 interleaved (an A B B A block), else 1 run."""
        return 2 if self.interleaved else 1

    @property
    def looks_per_lifetime(self) -> int:
        return (self.max_runs - self.min_runs) // self.block + 1

    def look_after(self, runs: int) -> bool:
        """Whether a look follows the ``runs``-th run (pair) on a lifetime where looks are allowed."""
        return runs >= self.min_runs and (runs - self.min_runs) % self.block == 0

    @property
    def planned_looks(self) -> int:
        return max(1, len(self.look_positions()) * self.looks_per_lifetime)

    def per_look_confidence(self, confidence: float) -> float:
        return 1.0 - (1.0 - confidence) / self.planned_looks

    def describe(self) -> dict[str, object]:
        return {
            "order": list(self.order),
            "min_runs": self.min_runs,
            "max_runs": self.max_runs,
            "min_lifetimes_before_a_look": self.min_lifetimes,
            "look_positions": self.look_positions(),
            "planned_looks": self.planned_looks,
            "drift_position": self.drift_position,
            "interleaved": self.interleaved,
            "fixed": self.fixed,
        }
