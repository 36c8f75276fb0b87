"""The PR link a bundle records, and the isolation row a bundle gets when its run produced none.

:class:`PRLink` is the manifest's ``pr`` field: the pull request (or commit range) that was
tested, the diff's hash and the isolation word. Whether a bundle proves that link is the
consistency rule :func:`fasttrack.bundle.consistency.pr_link_state`. :func:`missing_isolation`
is the row :func:`fasttrack.bundle.manifest.build_manifest` records when no isolation result was
produced: without a PR link it only says the bundle is not PR evidence (not required); with one,
the link is unchecked, so the row is required and ``not_run``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from fasttrack.bundle.canonical import SHA256_PATTERN
from fasttrack.modelbase import DocModel
from fasttrack.results import ISOLATION, NOT_PR_EVIDENCE, CheckResult

#: A git commit SHA, abbreviated (7 hex digits) up to SHA-256 object format (64).
GIT_SHA_PATTERN = r"^[0-9a-f]{7,64}$"


class PRLink(DocModel):
    """The pull request (or commit range) that was tested."""

    repository: str | None = None
    """``owner/name`` or a URL of the repository."""
    number: int | None = Field(default=None, ge=1)
    """The pull request number."""
    base_sha: str | None = Field(default=None, pattern=GIT_SHA_PATTERN)
    """The base commit the change is measured against."""
    head_sha: str = Field(pattern=GIT_SHA_PATTERN)
    """The exact head commit that was tested."""
    diff_sha256: str | None = Field(default=None, pattern=SHA256_PATTERN)
    """sha256 of ``git diff base..head`` (binary-safe, full index)."""
    isolation: Literal["pass", "fail", "review", "not_run"] = "not_run"
    """Verdict of the isolation check: the diff touches only owned paths (``pass``), touches
    off-limits paths (``fail``), touches paths a maintainer must look at (``review``), or
    was not checked (``not_run``)."""
    isolation_reason: str = ""
    """Why isolation passed, failed or did not run."""


def missing_isolation(pr: PRLink | None) -> CheckResult:
    """The isolation row of a bundle whose run produced no isolation result."""
    if pr is None:
        return CheckResult.not_run(ISOLATION, NOT_PR_EVIDENCE, required=False)
    return CheckResult.not_run(ISOLATION, "the bundle records a PR link but no isolation result")
