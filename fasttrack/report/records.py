"""One dashboard row per bundle: what the index, the review queue and comparisons need."""

from __future__ import annotations

import statistics

from pydantic import Field

from fasttrack import attrs
from fasttrack.modelbase import DocModel
from fasttrack.report.views import ReportData


class PerfPoint(DocModel):
    """One perf row of a bundle (speedup > 1: candidate better)."""

    point: str
    """Config point id."""
    metric: str
    """Metric name."""
    speedup: float
    """Observed speedup."""
    ci_low: float | None = None
    """Lower end of the speedup's interval."""
    ci_high: float | None = None
    """Upper end of the speedup's interval."""
    verdict: str | None = None
    """The row's verdict, when it has one."""


class BundleRecord(DocModel):
    """A bundle as the dashboard lists it (derived from its verified report data)."""

    id: str
    """The index's key: sha256 of the bundle's content as found (tarball bytes, or its files)."""
    bundle_id: str = ""
    """The bundle's ID (derived from its content, as the report and the PR comment show it)."""
    path: str
    """Where the bundle was found, relative to the bundles directory."""
    is_tar: bool
    """Whether the bundle is a ``.tar.gz`` (else a directory)."""
    verified: bool
    """Whether every verification item held."""
    verification: str
    """The verification headline."""
    signature_ok: bool | None
    """Whether a trusted signature verified."""
    hashes_ok: bool | None
    """Whether every file matched its attested hash (and no file was missing or extra)."""
    signers: list[str] = Field(default_factory=list)
    """Key ids of trusted keys whose signatures verified."""
    readable: bool
    """Whether the manifest could be read."""
    verdict: str
    """Bundle verdict: pass, fail, incomplete, rehearsal (or unknown when unreadable)."""
    headline: str = ""
    """What the bundle may be called (:mod:`fasttrack.bundle.headline`): ``PASS`` or what is missing."""
    headline_state: str = "warn"
    """``pass``, ``fail`` or ``warn``, for the badge's colour."""
    model: str = ""
    """Validated model (from the scope)."""
    tier: str = ""
    """Tier that ran."""
    scope_title: str = ""
    """The scope's title."""
    repository: str = ""
    """PR repository."""
    pr_number: int | None = None
    """PR number."""
    head_sha: str = ""
    """The tested head commit."""
    isolation: str = "not_run"
    """Isolation verdict."""
    rehearsal: bool = False
    """Whether the run was a rehearsal on mismatched hardware."""
    hardware: str = ""
    """Hardware in words."""
    created: str = ""
    """When the bundle was written."""
    checks: dict[str, str] = Field(default_factory=dict)
    """Check name -> verdict."""
    coverage_covered: int | None = None
    """Config points whose path evidence passes."""
    coverage_total: int | None = None
    """Config points with (or lacking) path evidence."""
    coverage_gaps: int = 0
    """Coverage gaps listed in the report."""
    perf: list[PerfPoint] = Field(default_factory=list)
    """Perf rows (for deltas and agreement)."""
    report: str
    """Site-relative URL of the bundle's report."""
    members: list[str] = Field(default_factory=list)
    member_sha256: dict[str, str] = Field(default_factory=dict)
    """The sha256 each member had when the bundle was verified: ``dashboard serve`` sends a member only while its
    bytes still hash to it."""
    """Attested files that may be linked (empty when the files did not verify)."""

    @property
    def failed_checks(self) -> list[str]:
        return [n for n, v in self.checks.items() if v == "fail"]

    @property
    def speedups(self) -> list[float]:
        return [p.speedup for p in self.perf]

    @property
    def perf_min(self) -> float | None:
        return min(self.speedups) if self.perf else None

    @property
    def perf_median(self) -> float | None:
        return statistics.median(self.speedups) if self.perf else None

    @property
    def perf_max(self) -> float | None:
        return max(self.speedups) if self.perf else None

    @property
    def perf_failed(self) -> int:
        return sum(1 for p in self.perf if p.verdict == "fail")

    @property
    def short(self) -> str:
        """The bundle ID as the pages show it (the first 16 hex digits)."""
        return (self.bundle_id or self.id)[:16]

    @property
    def group_key(self) -> tuple[str, str]:
        """Bundles of the same PR head and model are compared with each other."""
        return (self.head_sha, self.model)


def record_from(
    data: ReportData, *, bundle_id: str, rel_path: str, is_tar: bool, report: str, members: list[str]
) -> BundleRecord:
    v = data.verification
    rows = data.perf.all_rows if data.perf is not None else []
    perf = [PerfPoint(**attrs(r, *PerfPoint.model_fields)) for r in rows if r.speedup is not None]
    return BundleRecord(
        **attrs(data, "bundle_id", "readable", "model", "tier", "scope_title", "rehearsal", "hardware", "created"),
        id=bundle_id,
        path=rel_path,
        is_tar=is_tar,
        verified=v.verified,
        verification=v.headline,
        signature_ok=v.signature.ok,
        hashes_ok=v.hashes.ok,
        signers=sorted({s.keyid for s in v.signers if s.status == "valid"}),
        verdict=data.verdict if data.readable else "unknown",
        headline=data.headline.text if data.headline else "",
        headline_state=data.headline.state if data.headline else "warn",
        repository=data.pr.repository if data.pr else "",
        pr_number=int(data.pr.number) if data.pr and data.pr.number else None,
        head_sha=data.pr.head_sha if data.pr else "",
        isolation=data.pr.isolation if data.pr else "not_run",
        checks=dict(data.check_verdicts),
        coverage_covered=data.coverage.covered if data.coverage else None,
        coverage_total=data.coverage.total if data.coverage else None,
        coverage_gaps=len(data.coverage.gaps) if data.coverage else 0,
        perf=perf,
        report=report,
        members=members,
        member_sha256={m: data.member_digests[m] for m in members if m in data.member_digests},
    )
