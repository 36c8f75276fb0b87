"""The serving features the check knows: one :class:`~fasttrack.checks.features.model.FeatureTest` each.

Adding a feature = one entry here (and its name in ``scope.Feature``, the scope's schema).
The order is the order they collect in: sampling first, because the candidate reuses the
prompt and the reference distribution the baseline chose.
"""

from __future__ import annotations

from fasttrack.checks.features import api, full_context, sampling, speculative, structured
from fasttrack.checks.features.spec import FeatureTest

FEATURES: list[FeatureTest] = [
    sampling.FEATURE,
    structured.FEATURE,
    full_context.FEATURE,
    *api.FEATURES,
    speculative.FEATURE,
]

BY_NAME: dict[str, FeatureTest] = {t.name: t for t in FEATURES}


def feature_names() -> list[str]:
    """The names of the registered serving features, in collection order."""
    return [t.name for t in FEATURES]
