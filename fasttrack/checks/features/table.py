"""The serving features the check knows: the registry of :class:`~fasttrack.checks.features.spec.ServingFeature`.

Adding a feature = one class (its probe, what it needs from the tier, its typed result and its
judgement) and its line here; the scope's JSON Schema, the plan, the passability analysis and the
bundle's tables take it from here. The order is the order they collect in: sampling first, because the
candidate reuses the prompt and the reference distribution the baseline chose.
"""

from __future__ import annotations

from fasttrack.checks.features.api import MaxTokens, SeededSampling, StopSequences
from fasttrack.checks.features.full_context import FullContext
from fasttrack.checks.features.outputs import Logprobs, NBest
from fasttrack.checks.features.sampling import TemperatureSampling
from fasttrack.checks.features.spec import ServingFeature
from fasttrack.checks.features.speculative import SpeculativeAcceptance
from fasttrack.checks.features.structured import StructuredOutput

_FEATURES: list[ServingFeature] = [
    TemperatureSampling(),
    StructuredOutput(),
    FullContext(),
    SeededSampling(),
    StopSequences(),
    MaxTokens(),
    NBest(),
    Logprobs(),
    SpeculativeAcceptance(),
]


def features() -> list[ServingFeature]:
    """The registered serving features, in collection order."""
    return list(_FEATURES)


def by_name() -> dict[str, ServingFeature]:
    return {f.name: f for f in _FEATURES}


def feature_names() -> list[str]:
    """The names of the registered serving features, in collection order."""
    return [f.name for f in _FEATURES]


def register_feature(feature: ServingFeature) -> ServingFeature:
    """Add a serving feature (after the others); its name must be new."""
    if not getattr(feature, "name", None) or not isinstance(getattr(feature, "result_model", None), type):
        raise TypeError(f"{type(feature).__qualname__} must set the class attributes 'name' and 'result_model'")
    if feature.name in by_name():
        raise ValueError(f"serving feature {feature.name!r} is registered twice")
    _FEATURES.append(feature)
    return feature


def unregister_feature(name: str) -> None:
    """Remove the serving feature ``name`` (a feature a test registered for its own run)."""
    _FEATURES[:] = [f for f in _FEATURES if f.name != name]
