"""The check interface and the registry of checks.

A check is one kind of evidence (isolation, kernels, equivalence, features, coverage, evals, perf).
It declares, as class attributes, its ``name``, its ``title`` and ``report_view`` (both
recorded in the bundle, so the report needs no list of checks) and whether the bundle
verdict depends on it (``required``); :meth:`Check.gate` is the pass rule it applies.

* :class:`EnginelessCheck` (isolation, kernels) does everything in ``run(ctx)``.
* :class:`EngineCheck` works in two phases. ``await collect(ctx, session)`` is called by
  the pipeline once per engine lifetime it ``wants`` (one side of one engine group); the
  check sends its requests to ``session.engine`` and keeps what it measured on ``self``.
  ``judge(ctx)`` is called once after every engine has been stopped; it compares the
  sides and returns one :class:`~fasttrack.results.CheckResult`.
* :class:`PairedCheck` is the opt-in capability of an engine check that measures both
  sides' ``lifetime``-th engines up together (perf with ``gates.perf.interleave``):
  the pipeline hands it both in ``await collect_pair(ctx, sessions)``.
* :class:`DeploymentCheck` is the opt-in capability of an engine check that needs an engine
  started outside the envelope (coverage's ``unsupported_deployment``): after the plan's
  engines, the pipeline starts each :class:`Deployment` it asks for once (a refusal to start
  is an outcome, not an error) and hands it the outcome in ``record_deployment``.

Adding a check = one module with a ``@register`` class, plus its module name in
``fasttrack.checks.CHECK_MODULES``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from fasttrack.checks.context import EngineSession, RunContext
from fasttrack.results import (  # the results names are re-exported for callers that still import them from here
    CHECK_ORDER,
    SIDES,
    CheckResult,
    Gate,
    PathEvidence,
    Side,
    Verdict,
    check_sort_key,
    overall_verdict,
)

if TYPE_CHECKING:  # pragma: no cover
    from fasttrack.engine.deployment import DeploymentOutcome
    from fasttrack.plan import EngineGroup

__all__ = [
    "CHECK_ORDER",
    "SIDES",
    "Check",
    "CheckResult",
    "Deployment",
    "DeploymentCheck",
    "Gate",
    "PathEvidence",
    "Verdict",
    "overall_verdict",
    "EngineCheck",
    "EngineSession",
    "EnginelessCheck",
    "PairedCheck",
    "RunContext",
    "register",
    "registry",
]


class Check(ABC):
    """What every check declares. Subclass :class:`EnginelessCheck` or :class:`EngineCheck`."""

    name: ClassVar[str]
    """Check name: its key in the bundle and on ``--checks``."""
    title: ClassVar[str]
    """Heading of the check in the report (recorded in the bundle)."""
    report_view: ClassVar[str] = "generic"
    """How the report renders the check's tables (recorded in the bundle): ``generic`` or the name of a view."""
    required: ClassVar[bool] = True
    """Whether the bundle verdict depends on this check."""
    needs_engine: ClassVar[bool]
    every_tier: ClassVar[bool] = False
    """Whether the check runs in every tier, whatever the tier's ``checks`` list says (isolation)."""

    @classmethod
    def required_in(cls, ctx: RunContext) -> bool:
        """Whether the bundle verdict depends on this check in this run (default: ``required``)."""
        return cls.required

    def skip_reason(self, ctx: RunContext) -> str | None:
        """Why this check cannot run for this scope, tier and host (it is then ``not_run``), or None."""
        return None

    @abstractmethod
    def gate(self, ctx: RunContext) -> Gate:
        """The pass rule this check applies in this run: statistic, threshold and rule in words."""

    @classmethod
    def agrees(cls, recorded_summary: Mapping[str, Any], new: CheckResult) -> tuple[bool, str] | None:
        """A check-specific rule for ``fasttrack reproduce``: whether a rerun agrees with the recorded summary
        (with why), or None to use the generic rule (same verdict, rows within the recorded intervals)."""
        return None


class EnginelessCheck(Check):
    """A check that needs no engine: ``run`` does everything."""

    needs_engine: ClassVar[bool] = False

    @abstractmethod
    def run(self, ctx: RunContext) -> CheckResult:
        """Run the check and return its result."""


class EngineCheck(Check):
    """A check that exercises live engines (``collect``) and judges after they stopped (``judge``)."""

    needs_engine: ClassVar[bool] = True

    def wants(self, ctx: RunContext, group: EngineGroup, side: Side, lifetime: int) -> bool:
        """Whether ``collect`` has work on the ``lifetime``-th engine of ``side`` in ``group``."""
        return True

    @abstractmethod
    async def collect(self, ctx: RunContext, session: EngineSession) -> None:
        """Exercise one live engine; keep the measurements on ``self``."""

    @abstractmethod
    def judge(self, ctx: RunContext) -> CheckResult:
        """Compare the sides after every engine stopped; return the verdict."""


class PairedCheck(EngineCheck):
    """An engine check that can measure both sides' engines up together (opt-in, per run)."""

    @abstractmethod
    def paired(self, ctx: RunContext) -> bool:
        """Whether this run measures pairs (then ``collect_pair`` gets both sides' k-th engines)."""

    @abstractmethod
    def wants_pair(self, ctx: RunContext, group: EngineGroup, lifetime: int) -> bool:
        """Whether ``collect_pair`` has work on the ``lifetime``-th engines of ``group``."""

    @abstractmethod
    async def collect_pair(self, ctx: RunContext, sessions: Mapping[Side, EngineSession]) -> None:
        """Exercise both sides' engines, up together; ``sessions`` by side."""


@dataclass(frozen=True)
class Deployment:
    """An engine start outside the envelope that a check asks the pipeline for."""

    name: str
    """What it probes, e.g. 'unsupported_deployment' (used in log names)."""
    side: Side
    group: str
    """The engine group whose arguments it starts from."""
    args: tuple[str, ...]
    """The full server arguments (the group's side arguments plus what puts it outside the envelope)."""


class DeploymentCheck(ABC):
    """Capability of an engine check that needs engines started outside the envelope (see the module docstring)."""

    @abstractmethod
    def deployments(self, ctx: RunContext) -> list[Deployment]:
        """The engines to start once each after the plan's engines ([]: none)."""

    @abstractmethod
    def record_deployment(self, ctx: RunContext, dep: Deployment, outcome: DeploymentOutcome | None, note: str) -> None:
        """What the start did (``outcome`` None: it was not attempted; ``note`` says why)."""


C = TypeVar("C", bound=type[Check])

_REGISTRY: dict[str, type[Check]] = {}


def register(cls: C) -> C:
    """Class decorator: make a check available to the pipeline by its ``name``."""
    name = getattr(cls, "name", None)  # a class attribute the subclass must set (ClassVar without a default)
    if not name or not getattr(cls, "title", None):
        raise TypeError(f"{cls.__qualname__} must set the class attributes 'name' and 'title'")
    if name in _REGISTRY and _REGISTRY[name] is not cls:
        raise ValueError(f"check {name!r} is registered twice ({_REGISTRY[name].__qualname__}, {cls.__qualname__})")
    _REGISTRY[name] = cls
    return cls


def registry() -> dict[str, type[Check]]:
    """Registered checks, in the canonical check order (``fasttrack.results.check_sort_key``)."""
    from fasttrack import checks as _checks

    _checks.load_all()
    return {n: _REGISTRY[n] for n in sorted(_REGISTRY, key=check_sort_key)}
