"""What a check needs from a tier: the vocabulary of the passability rules checks declare.

A check's ``passability(tier)`` (see :class:`~fasttrack.checks.base.Check`) looks at the scope and
the plan of one tier through a :class:`TierView` and returns a :class:`Blocker` for each required
item the tier can never run; :func:`fasttrack.checks.passability.analyze` asks every registered check the
tier runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from fasttrack.modelbase import StrictModel
from fasttrack.planning.plan import Plan
from fasttrack.scope import Scope


class Blocker(StrictModel):
    """One required item the tier can never run."""

    check: str
    item: str
    """What is required, e.g. 'feature full_context' or 'eval mrcr'."""
    reason: str
    fix: str

    def line(self) -> str:
        return f"{self.check}: {self.item}: {self.reason} (fix: {self.fix})"


@dataclass(frozen=True)
class TierView:
    """One tier of a scope, as one check's passability rule sees it."""

    scope: Scope
    plan: Plan
    """The tier's unsharded plan."""
    base_dir: Path | None
    """The scope file's folder (relative data paths resolve against it); None: data files are not looked for."""
    check: str
    """The check whose rule this is (its blockers carry its name)."""

    @property
    def tier(self) -> str:
        return self.plan.tier

    @property
    def hint(self) -> str:
        """The tier's section of the scope, for the fixes: ``tiers.<tier>``."""
        return f"tiers.{self.plan.tier}"

    def exists(self, rel: str) -> bool:
        """Whether the data file ``rel`` (relative to the scope's folder) exists (True when not looked for)."""
        if self.base_dir is None:
            return True
        p = Path(rel)
        return (p if p.is_absolute() else self.base_dir / p).exists()

    def blocker(self, item: str, reason: str, fix: str) -> Blocker:
        return Blocker(check=self.check, item=item, reason=reason, fix=fix)
