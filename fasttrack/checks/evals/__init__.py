"""The evals check (see :mod:`fasttrack.checks.evals.check`)."""

from __future__ import annotations

from fasttrack.checks.evals.check import EvalsCheck
from fasttrack.checks.evals.units import EvalUnit, RunRecord, matching_units

__all__ = ["EvalUnit", "EvalsCheck", "RunRecord", "matching_units"]
