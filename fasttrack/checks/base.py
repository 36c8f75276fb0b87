"""The one interface every check implements, and the registry of checks.

A check is one kind of evidence (kernels, equivalence, features, coverage, evals,
perf). A check that needs engines works in two phases:

1. ``collect(ctx, session)`` is called once per engine lifetime (one side of one
   engine group, possibly several lifetimes per side). The check sends its
   requests to ``session.engine`` and keeps what it measured (on ``self``).
   A check whose ``paired(ctx)`` is true (perf with ``gates.perf.interleave``)
   is instead handed both sides' ``lifetime``-th engines at once, up together, in
   ``collect_pair(ctx, {"baseline": ..., "candidate": ...})``; otherwise the
   pipeline keeps one engine up at a time.
2. ``judge(ctx)`` is called once after every engine has been stopped. It compares
   the sides and returns one :class:`CheckResult`: typed rows, a gate and a verdict.

A check that needs no engine (kernels) sets ``needs_engine = False`` and implements
``run(ctx)`` instead.

Adding a check = writing one module with a ``@register`` class and adding its
module name to ``fasttrack.checks.CHECK_MODULES``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:  # pragma: no cover
    from fasttrack.plan import EngineGroup, Plan
    from fasttrack.scope import Scope

Side = Literal["baseline", "candidate"]
SIDES: tuple[Side, Side] = ("baseline", "candidate")

#: The canonical order checks are run and reported in.
CHECK_ORDER: tuple[str, ...] = ("kernels", "equivalence", "features", "coverage", "evals", "perf")


class Verdict(str, enum.Enum):
    """Outcome of one check (or of the whole bundle)."""

    PASS = "pass"
    FAIL = "fail"
    NOT_RUN = "not_run"


class Gate(BaseModel):
    """The pass rule of a check, with its statistic and threshold."""

    model_config = ConfigDict(extra="forbid")

    statistic: str
    """What is computed, e.g. 'hierarchical bootstrap 95% lower bound of speedup'."""
    threshold: float | str | None = None
    """The number (or symbolic bound) the statistic is compared against."""
    rule: str
    """The rule in words, e.g. 'lower bound >= 1 - noise_margin (0.95) at every point'."""


class CheckResult(BaseModel):
    """What one check contributes to the bundle."""

    model_config = ConfigDict(extra="forbid")

    check: str
    """Check name (one of CHECK_ORDER, or a plugin's name)."""
    verdict: Verdict
    reason: str
    """One sentence: why it failed / did not run, or what passed."""
    required: bool = True
    """Whether the bundle verdict depends on this check."""
    gate: Gate | None = None
    summary: dict[str, Any] = Field(default_factory=dict)
    """Headline figures (JSON-serialisable)."""
    failures: list[str] = Field(default_factory=list)
    """One message per failed item, naming the config point and the evidence."""
    tables: dict[str, list[dict[str, Any]]] = Field(default_factory=dict)
    """Result rows per table name; each table is written to Parquet in the bundle."""
    artifacts: list[str] = Field(default_factory=list)
    """Raw artifacts, as paths relative to the run directory."""

    @classmethod
    def not_run(cls, check: str, reason: str, *, required: bool = True) -> "CheckResult":
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


@dataclass
class EngineSession:
    """One live engine, handed to ``Check.collect``."""

    side: Side
    group: "EngineGroup"
    lifetime: int
    """0-based index of this engine lifetime for (group, side)."""
    engine: Any
    """The engine handle (fasttrack.engine): base_url, served model name, probes."""


@dataclass
class RunContext:
    """Everything a check may read while it runs."""

    scope: "Scope"
    plan: "Plan"
    tier: str
    run_dir: Path
    rehearsal: bool = False
    selected_checks: tuple[str, ...] = CHECK_ORDER
    log: Callable[[str], None] = print
    evidence: list[PathEvidence] = field(default_factory=list)
    """Path evidence contributed by every check; the coverage check judges it."""
    shared: dict[str, Any] = field(default_factory=dict)
    """Scratch space for data one check hands to another (keyed by check name)."""

    def artifact_dir(self, check: str) -> Path:
        d = self.run_dir / "artifacts" / check
        d.mkdir(parents=True, exist_ok=True)
        return d


class Check:
    """Base class of every check. Subclasses are registered with :func:`register`."""

    name: ClassVar[str]
    title: ClassVar[str] = ""
    required: ClassVar[bool] = True
    needs_engine: ClassVar[bool] = True

    def skip_reason(self, ctx: RunContext) -> str | None:
        """Return why this check cannot run for this scope/tier/host, or None."""
        return None

    def wants(self, ctx: RunContext, session: EngineSession) -> bool:
        """Whether ``collect`` has work to do on this engine lifetime."""
        return True

    def collect(self, ctx: RunContext, session: EngineSession) -> None:
        """Exercise one live engine; keep the measurements on ``self``."""
        raise NotImplementedError

    def paired(self, ctx: RunContext) -> bool:
        """Whether this check measures both sides' engines together (``collect_pair``)."""
        return False

    def wants_pair(self, ctx: RunContext, group: "EngineGroup", lifetime: int) -> bool:
        """Whether ``collect_pair`` has work on the ``lifetime``-th engines of ``group``."""
        return False

    def collect_pair(self, ctx: RunContext, sessions: dict[str, EngineSession]) -> None:
        """Exercise both sides' engines, up together; ``sessions`` by side."""
        raise NotImplementedError

    def judge(self, ctx: RunContext) -> CheckResult:
        """Compare the sides after all engines stopped; return the verdict."""
        raise NotImplementedError

    def run(self, ctx: RunContext) -> CheckResult:
        """For checks with ``needs_engine = False``: do everything here."""
        raise NotImplementedError


_REGISTRY: dict[str, type[Check]] = {}


def register(cls: type[Check]) -> type[Check]:
    """Class decorator: make a check available to the pipeline by its ``name``."""
    name = getattr(cls, "name", None)
    if not name:
        raise TypeError(f"{cls.__qualname__} must set a class attribute 'name'")
    if name in _REGISTRY and _REGISTRY[name] is not cls:
        raise ValueError(f"check {name!r} is registered twice ({_REGISTRY[name].__qualname__}, {cls.__qualname__})")
    _REGISTRY[name] = cls
    return cls


def registry() -> dict[str, type[Check]]:
    """Registered checks, in CHECK_ORDER first, then any others by name."""
    from fasttrack import checks as _checks  # noqa: F401  (imports the check modules)

    _checks.load_all()
    ordered = {n: _REGISTRY[n] for n in CHECK_ORDER if n in _REGISTRY}
    ordered.update({n: c for n, c in sorted(_REGISTRY.items()) if n not in ordered})
    return ordered


def overall_verdict(results: list[CheckResult]) -> Verdict:
    """The bundle's verdict, derived only from the check results.

    ``pass`` needs every required check to pass; any required ``fail`` makes it
    ``fail``; otherwise a required check that did not run makes it ``not_run``
    (the bundle calls that ``incomplete``).
    """
    required = [r for r in results if r.required]
    if not required:
        return Verdict.NOT_RUN
    if any(r.verdict is Verdict.FAIL for r in required):
        return Verdict.FAIL
    if any(r.verdict is Verdict.NOT_RUN for r in required):
        return Verdict.NOT_RUN
    return Verdict.PASS
