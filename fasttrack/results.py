"""The neutral results layer: verdicts, gates, check results, path evidence, check order.

Everything that produces evidence (``checks/``, ``engine/``) and everything that
consumes it (``bundle/``, ``report/``) speaks these types. This module imports nothing
from fasttrack, so verifying or rendering a bundle never loads the checks, the engine
code, httpx or scipy.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import Field

from fasttrack.modelbase import StrictModel

Side = Literal["baseline", "candidate"]
"""``baseline`` is the stock path, ``candidate`` the optimized path."""
SIDES: tuple[Side, Side] = ("baseline", "candidate")

LEGACY_CHECK_ORDER: tuple[str, ...] = ("isolation", "kernels", "equivalence", "features", "coverage", "evals", "perf")
"""The report order of bundles that do not record their check order (written before the check registry's order
went into the plan, ``plan.check_order``); a run's checks and their order come from the check registry."""

BundleVerdict = Literal["pass", "fail", "incomplete", "rehearsal"]
"""A bundle's verdict: the overall check verdict, with ``not_run`` called ``incomplete``.

``rehearsal`` is what a run on hardware the scope does not declare gets when every
required check passed: it is never ``pass``, so nothing that asks for ``pass`` (the exit
code of ``validate``, ``verify --require-pass``, the PR body's "passing" state) accepts it.
A rehearsal whose checks failed or did not all run is ``fail`` or ``incomplete`` as usual.
"""

ISOLATION = "isolation"
"""The check that ties a bundle to a pull request: the diff base..head and the vLLM build the engines served."""

NOT_PR_EVIDENCE = (
    "no PR link: the run was given no --repo/--base/--head, so this bundle is not evidence for any pull request"
)
"""What a bundle without a PR link says about itself (isolation row, report, comment, ``verify``)."""

HeadBinding = Literal["proven", "mismatch", "unproven"]
"""Whether the engines served the PR head: every engine reported that commit (``proven``), one reported
another commit (``mismatch``), or some commit could not be read or no engine ran (``unproven``)."""


def head_binding(head: str, builds: Iterable[tuple[str, str | None]]) -> tuple[HeadBinding, str]:
    """Whether every engine's vLLM build is the commit ``head``; ``builds`` is (engine label, commit or None).

    A commit matches when it equals ``head`` (case-insensitive) or one is a prefix of the other with at
    least 7 hex digits on the shorter side (vLLM's ``__commit_id__`` may be abbreviated)."""
    want = head.strip().lower()
    items = list(builds)
    if not items:
        return "unproven", "no engine ran, so no served vLLM build was observed"

    def same(c: str) -> bool:
        c = c.strip().lower()
        short, long_ = sorted((c, want), key=len)
        return len(short) >= 7 and long_.startswith(short)

    wrong = [(label, c) for label, c in items if c and not same(c)]
    if wrong:
        names = "; ".join(f"{label} served vLLM commit {c}" for label, c in wrong)
        return "mismatch", f"the PR head is {want} but {names}"
    unknown = [label for label, c in items if not c]
    if unknown:
        return "unproven", (
            f"the vLLM commit of {len(unknown)} of {len(items)} engine(s) could not be read ({', '.join(unknown[:4])}"
            + (", ..." if len(unknown) > 4 else "")
            + "): the build reports no commit and does not run from a git checkout"
        )
    return "proven", f"all {len(items)} engine(s) served vLLM commit {want}"


def ordered_checks(names: Iterable[str], order: Sequence[str] | None = None) -> list[str]:
    """Distinct check names in report order: as ``order`` lists them (a run's check order, as the bundle records
    it; :data:`LEGACY_CHECK_ORDER` when None), then the others by name."""
    rank = {n: i for i, n in enumerate(LEGACY_CHECK_ORDER if order is None else order)}
    return sorted(set(names), key=lambda n: (rank.get(n, len(rank)), n if n not in rank else ""))


def recorded_check_order(plan: object) -> list[str] | None:
    """The check order a bundle's plan records (``plan.check_order``), or None (older bundles, other plans)."""
    order = plan.get("check_order") if isinstance(plan, dict) else None
    if isinstance(order, list) and all(isinstance(n, str) for n in order):
        return list(order)
    return None


class Verdict(str, enum.Enum):
    """Outcome of one check (or of the whole run)."""

    PASS = "pass"
    FAIL = "fail"
    NOT_RUN = "not_run"


class Gate(StrictModel):
    """The pass rule of a check, with its statistic and threshold."""

    statistic: str
    """What is computed, e.g. 'hierarchical bootstrap 95% lower bound of speedup'."""
    threshold: float | str | None = None
    """The number (or symbolic bound) the statistic is compared against."""
    rule: str
    """The rule in words, e.g. 'lower bound >= 1 - noise_margin (0.95) at every point'."""


class CheckResult(StrictModel):
    """What one check contributes to the bundle."""

    check: str
    """Check name (as the check registers it)."""
    title: str | None = None
    """Heading of the check in the report, as the check declares it."""
    view: str | None = None
    """How the report renders the check's tables, as the check declares it (``generic`` or a named view)."""
    verdict: Verdict
    """pass, fail, or not_run."""
    reason: str
    """One sentence: why it failed / did not run, or what passed."""
    required: bool = True
    """Whether the bundle verdict depends on this check."""
    gate: Gate | None = None
    """The pass rule applied (None when the check did not run)."""
    summary: dict[str, Any] = Field(default_factory=dict)
    """Headline figures (JSON-serialisable)."""
    failures: list[str] = Field(default_factory=list)
    """One message per failed item, naming the config point and the evidence."""
    tables: dict[str, list[dict[str, Any]]] = Field(default_factory=dict)
    """Result rows per table name; each table is written to Parquet in the bundle."""
    artifacts: list[str] = Field(default_factory=list)
    """Raw artifacts, as paths relative to the run directory."""

    @classmethod
    def not_run(cls, check: str, reason: str, *, required: bool = True) -> CheckResult:
        """A result for a check that did not run, with the reason."""
        return cls(check=check, verdict=Verdict.NOT_RUN, reason=reason, required=required)


@dataclass
class PathEvidence:
    """Which path ran while one check exercised one config point on one side."""

    check: str
    point: str
    side: Side
    window: str
    """Name of the profiler window (or metrics interval) this evidence comes from."""
    optimized_ops: int
    stock_ops: int
    decode_steps: int
    optimized_decode_steps: int
    fallback_events: int = 0
    detail: dict[str, Any] = field(default_factory=dict)


def overall_verdict(results: Iterable[CheckResult]) -> Verdict:
    """The run's verdict, derived only from the check results.

    ``pass`` needs every required check to pass; any required ``fail`` makes it
    ``fail``; otherwise a required check that did not run makes it ``not_run``
    (the bundle calls that ``incomplete``). No required check at all is ``not_run``.
    """
    required = [r for r in results if r.required]
    if not required:
        return Verdict.NOT_RUN
    if any(r.verdict is Verdict.FAIL for r in required):
        return Verdict.FAIL
    if any(r.verdict is Verdict.NOT_RUN for r in required):
        return Verdict.NOT_RUN
    return Verdict.PASS


def bundle_verdict(verdict: Verdict, *, rehearsal: bool = False) -> BundleVerdict:
    """Map a check verdict to the bundle's vocabulary (``not_run`` -> ``incomplete``).

    A passing rehearsal (``rehearsal=True``) is ``rehearsal``, never ``pass``.
    """
    if verdict is Verdict.NOT_RUN:
        return "incomplete"
    if verdict is Verdict.PASS:
        return "rehearsal" if rehearsal else "pass"
    return "fail"


def effective_verdict(recorded: str, rehearsal: bool) -> str:
    """The verdict a consumer acts on: a recorded ``pass`` of a rehearsal reads ``rehearsal``.

    Bundles written before the ``rehearsal`` verdict existed recorded ``pass`` for a passing
    rehearsal (with the manifest's ``rehearsal`` flag set); they still load, and every view
    shows them as the rehearsal they were.
    """
    return "rehearsal" if rehearsal and recorded == "pass" else recorded


ClaimVerdict = Literal["supported", "refuted", "inconclusive"]
"""What a measured interval says about a claimed figure (a claim no run measured is ``not_measured``)."""

DEFAULT_CLAIM_TOLERANCE = 0.05
"""A claim's tolerance when its scope gives none (``claims[].tolerance``): 5% below the claimed figure."""


def claim_verdict(
    claimed: float, low: float, high: float, *, tolerance: float, higher_is_better: bool = True
) -> tuple[ClaimVerdict, float]:
    """Judge a claimed figure by a measured interval ``[low, high]``: (verdict, bound).

    A claim says the change achieves its figure, give or take its tolerance. Higher is better (every speedup,
    every throughput): ``bound = claimed x (1 - tolerance)``; **supported** iff the whole interval lies at or
    above the bound (``low >= bound``), **refuted** iff it lies below (``high < bound``), **inconclusive**
    when it straddles the bound. Lower is better, mirrored: ``bound = claimed x (1 + tolerance)``; supported
    iff ``high <= bound``, refuted iff ``low > bound``. The perf check records claims by this rule, and the
    report re-judges a recorded claim by it from the claimed figure and the recorded interval.
    """
    if low > high:
        low, high = high, low
    if higher_is_better:
        bound = claimed * (1.0 - tolerance)
        if low >= bound:
            return "supported", bound
        if high < bound:
            return "refuted", bound
        return "inconclusive", bound
    bound = claimed * (1.0 + tolerance)
    if high <= bound:
        return "supported", bound
    if low > bound:
        return "refuted", bound
    return "inconclusive", bound
