"""The perf check (see :mod:`fasttrack.checks.perf.check`) and its measurement loops."""

from __future__ import annotations

from fasttrack.checks.perf.check import PerfCheck
from fasttrack.checks.perf.measure import gpus_from_args, measure_drift, measure_item, measure_pair, take_look

__all__ = ["PerfCheck", "gpus_from_args", "measure_drift", "measure_item", "measure_pair", "take_look"]
