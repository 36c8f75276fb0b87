"""The isolation check's evidence: every path the PR's diff changed, with its class.

The diff passes only when no path lies in a shared component and every path outside the owned ones is
allowed by the scope (``isolation.allowed_paths``). Re-judging reclassifies every recorded path by the
judging scope's globs (shared components first, then owned paths, then allowed paths) and holds the
recorded class against it; the bound is that rule over the recomputed classes. The check runs in every tier
and is required exactly when the bundle records a PR link (without one the bundle is not PR evidence).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Literal

from pydantic import Field

from fasttrack import registry
from fasttrack.evidence.base import Checker, CheckEvidence, Rejudged, Row, TableSpec
from fasttrack.evidence.expect import RejudgeContext
from fasttrack.scope.globs import classify

CHECK = "isolation"
MAX_CHANGED_PATHS = 100_000
"""Changed paths one diff may list (a vLLM release diff touches a few thousand)."""


class ChangedPathRow(Row):
    """One changed path of the diff base..head and its class."""

    KEY: ClassVar[tuple[str, ...]] = ("path",)

    path: str
    status: str | None = None
    old_path: str | None = None
    class_: Literal["owned", "shared", "elsewhere"] = Field(alias="class")
    component: str | None = None
    allowed: bool
    matched: str | None = None


def rejudge(tables: Mapping[str, Sequence[Row]], gate: Any, ctx: RejudgeContext) -> Rejudged:
    c = Checker(CHECK)
    spec = ctx.scope.isolation
    bad = []
    for i, r in enumerate(tables.get("changed", ())):
        assert isinstance(r, ChangedPathRow)
        cls, comp, glob = (r.class_, r.component, r.matched) if spec is None else classify(r.path, spec)
        allowed = cls == "elsewhere" and glob is not None
        if (r.class_, r.allowed) != (cls, allowed) or (cls == "shared" and r.component != comp):
            c.row(
                "changed",
                i,
                r,
                f"recorded {r.class_}{' (allowed)' if r.allowed else ''}, the scope's globs give "
                f"{cls}{' (allowed)' if allowed else ''}{f' in {comp}' if comp else ''}",
            )
        if cls == "shared" or (cls == "elsewhere" and not allowed):
            bad.append(r.path)
    note = "every changed path reclassified by the scope's isolation globs" if spec else "no isolation section"
    return c.done("fail" if bad else "pass", [note])


EVIDENCE = registry.register(
    "evidence",
    CHECK,
    CheckEvidence(
        check=CHECK,
        tables=(
            TableSpec(
                "changed", ChangedPathRow, lambda ctx: MAX_CHANGED_PATHS, keep=tuple(ChangedPathRow.model_fields)
            ),
        ),
        rejudge=rejudge,
        needs_points=False,
        every_tier=True,
        required_when=lambda ctx: ctx.pr_link,
    ),
)
