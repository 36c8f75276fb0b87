"""The features check (see :mod:`fasttrack.checks.features.check`) and its table of feature tests."""

from __future__ import annotations

from fasttrack.checks.features.api import logprob_problems
from fasttrack.checks.features.check import FeaturesCheck
from fasttrack.checks.features.model import Outcome, SideData
from fasttrack.checks.features.spec import FeatureTest
from fasttrack.checks.features.structured import validate_json
from fasttrack.checks.features.table import FEATURES

__all__ = ["FEATURES", "FeatureTest", "FeaturesCheck", "Outcome", "SideData", "logprob_problems", "validate_json"]
