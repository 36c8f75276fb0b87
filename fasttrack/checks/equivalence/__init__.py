"""The equivalence check (see :mod:`fasttrack.checks.equivalence.check`)."""

from __future__ import annotations

from fasttrack.checks.equivalence.check import EquivalenceCheck
from fasttrack.checks.equivalence.records import GreedyRecord, PointRun

__all__ = ["EquivalenceCheck", "GreedyRecord", "PointRun"]
