"""The features check (see :mod:`fasttrack.checks.features.check`) and its registry of serving features."""

from __future__ import annotations

from fasttrack.checks.features.check import FeaturesCheck
from fasttrack.checks.features.model import FeatureResult, Outcome, SideData
from fasttrack.checks.features.outputs import logprob_problems
from fasttrack.checks.features.spec import (
    OnGroup,
    ServingFeature,
    SideJudgement,
    Step,
    judge_sides,
    register_feature,
    serving_feature,
)
from fasttrack.checks.features.structured import validate_json
from fasttrack.checks.features.table import by_name, feature, feature_names, features

__all__ = [
    "FeatureResult",
    "FeaturesCheck",
    "OnGroup",
    "Outcome",
    "ServingFeature",
    "SideData",
    "SideJudgement",
    "Step",
    "by_name",
    "feature_names",
    "feature",
    "features",
    "judge_sides",
    "logprob_problems",
    "register_feature",
    "serving_feature",
    "validate_json",
]
