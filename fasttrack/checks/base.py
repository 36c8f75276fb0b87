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

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ClassVar

from fasttrack.results import (  # noqa: F401  (re-exported for check modules)
    CHECK_ORDER,
    SIDES,
    CheckResult,
    Gate,
    PathEvidence,
    Side,
    Verdict,
    overall_verdict,
)

if TYPE_CHECKING:  # pragma: no cover
    from fasttrack.plan import EngineGroup, Plan
    from fasttrack.scope import Scope


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
