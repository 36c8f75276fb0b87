"""The coverage check (see :mod:`fasttrack.checks.coverage.check`)."""

from __future__ import annotations

from fasttrack.checks.coverage.check import CoverageCheck
from fasttrack.checks.coverage.probes import SituationProbe, max_num_seqs

__all__ = ["CoverageCheck", "SituationProbe", "max_num_seqs"]
