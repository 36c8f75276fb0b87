"""Typed evidence: every check's result rows as declared models, and the rules that re-judge them.

One module per built-in check (:data:`BUILTIN`) declares its tables' row models and its re-judging rule and
registers them as the registry kind ``evidence`` under the check's name; a check from another package declares
its :class:`~fasttrack.evidence.base.CheckEvidence` on its check class, which registers it the same way.
Writing, verifying, merging and rendering a bundle read a check's evidence only through
:func:`evidence_of` (the registry), never from the checks themselves, so none of them loads a check.

Layer 1: these modules import pydantic, the scope models and the registry only.
"""

from __future__ import annotations

from fasttrack import registry
from fasttrack.evidence.base import CheckEvidence

BUILTIN: tuple[str, ...] = tuple(
    f"fasttrack.evidence.{m}" for m in ("isolation", "kernels", "equivalence", "features", "coverage", "evals", "perf")
)
"""The built-in checks' evidence modules (imported before the kind ``evidence`` is first read)."""

registry.BUILTIN_MODULES["evidence"] = BUILTIN


def evidence_of(check: str) -> CheckEvidence | None:
    """The evidence declared for ``check``, or None when no installed package declares any."""
    found = registry.entries("evidence").get(check)
    return found if isinstance(found, CheckEvidence) else None


def declared() -> dict[str, CheckEvidence]:
    """Every check's evidence, by check name (built-ins first)."""
    return {k: v for k, v in registry.entries("evidence").items() if isinstance(v, CheckEvidence)}
