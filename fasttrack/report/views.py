"""View models: what the report templates show, built from one bundle (see :mod:`.load`).

Every string here may come from an untrusted bundle; templates escape it (jinja2
autoescape). Only chart fields hold :class:`markupsafe.Markup`, produced by
:mod:`fasttrack.report.svg`, which escapes every text it is given.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from markupsafe import Markup

from fasttrack.results import NOT_PR_EVIDENCE


@dataclass
class Tri:
    """One verification property: ok (True), failed (False) or not checked (None)."""

    name: str
    label: str
    ok: bool | None
    detail: str

    @property
    def state(self) -> str:
        return "ok" if self.ok else ("na" if self.ok is None else "bad")


@dataclass
class SignerView:
    keyid: str
    status: str
    signer: str


@dataclass
class VerifyView:
    """The verification state shown at the top of the report."""

    verified: bool
    headline: str
    signature: Tri
    hashes: Tri
    pr_head: Tri
    items: list[Tri]
    signers: list[SignerView]
    """Signatures made by a trusted key (valid), or claiming a trusted key's id (invalid)."""
    trusted_keys: int
    other_signatures: int = 0
    """Signatures by no trusted key (counted, never quoted: their key ids are not signed)."""

    @property
    def status(self) -> str:
        return "verified" if self.verified else "unverified"


@dataclass
class TableView:
    """One check table as shown (a bounded prefix of its rows, cells formatted)."""

    check: str
    name: str
    path: str
    columns: list[str]
    rows: list[list[str]]
    total_rows: int
    href: str | None = None
    error: str | None = None
    note: str = ""
    """How the table was read when not through a row model (the legacy path), else empty."""

    @property
    def shown(self) -> int:
        return len(self.rows)


@dataclass
class GateRow:
    check: str
    verdict: str
    required: bool
    statistic: str
    threshold: str
    rule: str
    reason: str


@dataclass
class CheckView:
    name: str
    title: str
    verdict: str
    required: bool
    reason: str
    gate: GateRow
    summary: list[tuple[str, str]]
    failures: list[str]
    failures_total: int
    tables: list[TableView]
    artifacts: list["ArtifactView"]


@dataclass
class HeatCell:
    state: str
    """pass, fail, not_run, measured or none."""
    label: str
    title: str


@dataclass
class HeatmapView:
    points: list[str]
    checks: list[str]
    cells: dict[str, dict[str, HeatCell]]
    point_info: dict[str, str]


@dataclass
class PerfRow:
    point: str
    metric: str
    batch: int | None
    context: int | None
    context_label: str
    group: str
    baseline: float | None
    candidate: float | None
    speedup: float | None
    ci_low: float | None
    ci_high: float | None
    mde: float | None
    verdict: str | None
    runs: int | None = None
    direction: str | None = None
    """``lower_is_better`` / ``higher_is_better`` when the table says so."""
    client_timed: bool = False
    """The metric is timed by the client as the stream arrived (TTFT, TPOT, ITL), not by the engine."""
    burst_delivered: int = 0
    """Burst-delivered requests in this point's runs (both sides)."""

    @property
    def slower_within_margin(self) -> bool:
        """Passed, with the whole interval below 1: measured slower, within the margin (never a plain pass)."""
        return self.verdict == "pass" and self.ci_high is not None and self.ci_high < 1.0

    @property
    def outcome(self) -> str | None:
        """The verdict as shown: ``measured slower, within margin`` for such a pass, else the verdict."""
        if self.verdict is None:
            return None
        return "measured slower, within margin" if self.slower_within_margin else self.verdict

    @property
    def gated(self) -> bool:
        """Rows with a verdict are the gated metric's; the others are reported, not gated."""
        return self.verdict is not None

    @property
    def burst_distorted(self) -> bool:
        """A non-gated, client-timed figure whose runs show burst delivery: its speedup measures the
        delivery of the stream, not the decode, so it is not shown as a speedup."""
        return not self.gated and self.client_timed and self.burst_delivered > 0


@dataclass
class PerfCharts:
    """The two charts of one engine group (config points sharing TP, DCP and speculative config)."""

    group: str
    batch: Markup | None
    context: Markup | None


@dataclass
class PerfMetricView:
    metric: str
    lower_is_better: bool
    rows: list[PerfRow]
    charts: list[PerfCharts]


@dataclass
class TailRow:
    """One row of the latency-tails table: a percentile of one metric at one point, each side with its interval."""

    point: str
    label: str
    baseline: str
    candidate: str
    speedup: str
    slo: str = ""


@dataclass
class PerfView:
    status: str
    """shown, not_run or no_table."""
    reason: str
    table: str = ""
    threshold: float | None = None
    metrics: list[PerfMetricView] = field(default_factory=list)
    curves: list[Any] = field(default_factory=list)
    """Interactivity-throughput charts (``fasttrack.report.curves.CurveChart``)."""
    tails: list[TailRow] = field(default_factory=list)
    tails_total: int = 0
    """Rows of the bundle's tails table (the view may show fewer)."""

    @property
    def all_rows(self) -> list[PerfRow]:
        return [r for m in self.metrics for r in m.rows]


@dataclass
class EvalChart:
    title: str
    table: str
    chart: Markup | None
    rows: list[dict[str, Any]]


@dataclass
class EvalView:
    status: str
    reason: str
    bins: list[EvalChart] = field(default_factory=list)
    items: list[EvalChart] = field(default_factory=list)
    discordant: TableView | None = None
    discordant_count: int = 0
    tables: list[TableView] = field(default_factory=list)
    """Comparison tables without a bin or item column (e.g. one row per eval and point)."""


@dataclass
class CoverageView:
    status: str
    reason: str
    table: TableView | None = None
    gaps: list[str] = field(default_factory=list)
    covered: int | None = None
    total: int | None = None


@dataclass
class ClaimView:
    id: str
    text: str
    status: str
    """supported, refuted, inconclusive or not_measured (:func:`fasttrack.results.claim_verdict`)."""
    detail: str
    claimed: str = ""
    """The claimed figure, formatted ("" when the row has none)."""
    measured: str = ""
    """The measured figure."""
    interval: str = ""
    """The interval the claim was judged by, ``[low, high]``."""
    bound: str = ""
    """What the interval was compared with: the claimed figure less the claim's tolerance."""
    tolerance: str = ""
    """The claim's tolerance (``claims[].tolerance``)."""
    per_gpu: str = ""
    """A claim across unequal GPU counts: "not like-for-like" with both per-GPU figures ("" otherwise)."""


@dataclass
class ArtifactView:
    name: str
    href: str | None
    why_not: str
    size: int | None
    sha256: str


@dataclass
class EngineView:
    side: str
    group: str
    mode: str
    args: str
    env: str
    url: str


@dataclass
class PRView:
    repository: str
    number: str
    base_sha: str
    head_sha: str
    diff_sha256: str
    isolation: str
    isolation_reason: str
    link: str
    """Whether the bundle is evidence for this PR: ``proven``, ``unproven`` or ``mismatch`` (see
    :func:`fasttrack.bundle.consistency.pr_link_state`)."""
    link_detail: str = ""


@dataclass
class PointSpeedup:
    point: str
    speedup: float
    low: float | None
    high: float | None
    verdict: str | None

    @property
    def interval(self) -> str:
        return f"[{self.low:.3f}, {self.high:.3f}]" if self.low is not None and self.high is not None else ""


@dataclass
class SpeedupSummary:
    """What the first screen says about speed."""

    status: str
    """``shown``, or ``not_run`` / ``no_table`` with ``reason``."""
    reason: str = ""
    metric: str = ""
    gated: bool = False
    """Whether the metric is the gated one (each point has a verdict)."""
    points: int = 0
    geomean: float | None = None
    geo_low: float | None = None
    geo_high: float | None = None
    worst: PointSpeedup | None = None
    failed: int = 0
    """Points that fail their gate."""
    threshold: float | None = None
    """The gate: a point fails when its interval's lower end is below this."""
    plot: Markup | None = None

    @property
    def geo_interval(self) -> str:
        if self.geo_low is None or self.geo_high is None:
            return ""
        return f"[{self.geo_low:.3f}, {self.geo_high:.3f}]"


@dataclass
class Condition:
    label: str
    ok: bool
    detail: str


@dataclass
class HeadlineView:
    """The headline as the report shows it."""

    text: str
    state: str
    icon: str
    verdict: str
    passed: bool
    missing: list[str]
    reasons: list[str]
    conditions: list[Condition] = field(default_factory=list)


@dataclass
class ReportData:
    """Everything one report page shows."""

    bundle_name: str
    bundle_hash: str
    """The content hash the dashboard's cache keys the bundle by (a tarball's bytes, or a directory's files)."""
    verification: VerifyView
    readable: bool
    bundle_id: str = ""
    """The bundle's ID (:func:`fasttrack.bundle.scan.bundle_id`, derived from its content): the one ID every
    page shows; "" when no file could be read."""
    unreadable_reason: str = ""
    verdict: str = "unknown"
    model: str = ""
    tier: str = ""
    scope_title: str = ""
    scope_description: str = ""
    scope_sha256: str = ""
    shard: str = ""
    created: str = ""
    pr: PRView | None = None
    not_pr_evidence: str = NOT_PR_EVIDENCE
    """What the report says when the bundle records no PR link."""
    hardware: str = ""
    rehearsal: bool = False
    rehearsal_reason: str = ""
    gates: list[GateRow] = field(default_factory=list)
    checks: list[CheckView] = field(default_factory=list)
    heatmap: HeatmapView | None = None
    perf: PerfView | None = None
    evals: EvalView | None = None
    coverage: CoverageView | None = None
    claims: list[ClaimView] = field(default_factory=list)
    claims_note: str = ""
    environment: list[tuple[str, str]] = field(default_factory=list)
    engines: list[EngineView] = field(default_factory=list)
    artifacts: list[ArtifactView] = field(default_factory=list)
    artifacts_note: str = ""
    check_verdicts: dict[str, str] = field(default_factory=dict)
    headline: HeadlineView | None = None
    """What the bundle may be called (PASS only when verified, bound to the PR head, not a rehearsal and complete
    for its tier), and why: the first thing the page shows."""
    caveats: list[str] = field(default_factory=list)
    """What the tier that ran cannot show, one sentence each (:func:`fasttrack.report.summary.tier_caveats`)."""
    speedup: SpeedupSummary | None = None
    """The first screen's speedup summary and plot (:mod:`fasttrack.report.speedup`)."""
    linkable: list[str] = field(default_factory=list)
    member_digests: dict[str, str] = field(default_factory=dict)
    """The attested sha256 of every linkable file (verified equal to the file's when the report was built)."""
    """Attested member names the link policy allows (raw names, for publishing copies)."""

    def check(self, name: str) -> CheckView | None:
        for c in self.checks:
            if c.name == name:
                return c
        return None
