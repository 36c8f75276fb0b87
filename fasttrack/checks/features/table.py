"""The serving features the check knows: the registry's kind ``feature``.

Each shipped feature's module registers its class with
:func:`~fasttrack.checks.features.spec.serving_feature`; :data:`BUILTIN_FEATURE_MODULES` are imported, in this
order, before the kind is first read, and another package's features follow them (the ``fasttrack`` entry-point
group). The scope's JSON Schema, the plan and its cost, the passability analysis and the bundle's tables read
them from here. The order is the order they collect in: sampling first, because the candidate reuses the
prompt and the reference distribution the baseline chose.
"""

from __future__ import annotations

from typing import Any

from fasttrack import registry
from fasttrack.checks.features.spec import ServingFeature

BUILTIN_FEATURE_MODULES = tuple(
    f"fasttrack.checks.features.{m}"
    for m in ("sampling", "structured", "full_context", "api", "outputs", "speculative")
)
"""The modules of the shipped features, in collection order (``api``: seeded sampling, stop sequences, max tokens;
``outputs``: n best, logprobs)."""
registry.BUILTIN_MODULES["feature"] = BUILTIN_FEATURE_MODULES


def features() -> list[ServingFeature[Any]]:
    """The registered serving features, in collection order."""
    return list(registry.entries("feature").values())


def by_name() -> dict[str, ServingFeature[Any]]:
    return dict(registry.entries("feature"))


def feature_names() -> list[str]:
    """The names of the registered serving features, in collection order."""
    return registry.names("feature")


def feature(name: str) -> ServingFeature[Any]:
    """The registered serving feature ``name``; an unknown name is an error listing the registered ones."""
    got: ServingFeature[Any] = registry.get("feature", name)
    return got
