"""The check interface: what a check declares about itself, and the checks the registry holds.

A check is one kind of evidence (isolation, kernels, equivalence, features, coverage, evals, perf).
Its class declares everything the rest of fasttrack needs to know about it (:data:`DECLARATIONS`), and
:func:`register` puts it in the registry (:mod:`fasttrack.registry`, kind ``check``), so that adding a
check is one module: a shipped check's module is named in ``fasttrack.checks.BUILTIN_CHECK_MODULES``,
another package's in its ``fasttrack`` entry-point group. Nothing else lists a check's facts:

* ``name``; ``title`` and ``report_view`` (both recorded in the bundle, so the report needs no list
  of checks); whether the bundle verdict depends on it (``required``);
* its order: ``after`` and ``before`` name the checks it follows and precedes (:func:`registered_checks`
  sorts by these, and by registration order for the rest); the bundle records that order for the report;
* ``blocked_by``: checks without whose pass its own result means nothing (it is then ``not_run``);
* ``cost``: what its work costs (a :class:`~fasttrack.planning.cost.CheckCost`; the plan receives it with the check
  order, :func:`build_run_plan`);
* ``gate_model``: its section of the scope's ``gates`` (a :class:`~fasttrack.scope.gates.CheckGate`,
  registered as kind ``gate``, each setting's stricter direction its field metadata), and :meth:`Check.gate`,
  the pass rule it applies;
* ``evidence``: its typed result rows and how ``verify`` re-judges them (registered as kind ``evidence``
  with the check, for the bundle and the report, which never import the checks);
* :meth:`Check.passability`: what it needs from a tier, so ``fasttrack plan`` and ``validate`` find
  a tier that can never pass before any engine starts; :meth:`Check.planned`: what it exercises.

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
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from fasttrack import registry as _registry
from fasttrack.checks.context import EngineSession, RunContext
from fasttrack.checks.tier import Blocker, TierView
from fasttrack.planning.cost import CheckCost
from fasttrack.planning.plan import Plan, build_plan
from fasttrack.results import (  # the results names are re-exported for callers that still import them from here
    SIDES,
    CheckResult,
    Gate,
    PathEvidence,
    Side,
    Verdict,
    overall_verdict,
)
from fasttrack.scope.gates import CheckGate

if TYPE_CHECKING:  # pragma: no cover
    from fasttrack.engine.deployment import DeploymentOutcome
    from fasttrack.planning.plan import EngineGroup
    from fasttrack.scope import Scope

__all__ = [
    "SIDES",
    "Blocker",
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
    "TierView",
    "build_run_plan",
    "register",
    "registered_checks",
]


DECLARATIONS = (
    "name",
    "title",
    "report_view",
    "required",
    "every_tier",
    "after",
    "before",
    "blocked_by",
    "cost",
    "gate_model",
    "evidence",
)
"""What a check's class declares about it (as class attributes or class keywords)."""


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
    after: ClassVar[tuple[str, ...]] = ()
    """Checks this one follows: it collects, judges and is reported after them (the registry's order)."""
    before: ClassVar[tuple[str, ...]] = ()
    """Checks this one precedes (so a new check can take its place without editing the others)."""
    blocked_by: ClassVar[tuple[str, ...]] = ()
    """Checks whose pass this one's result depends on: when one of them did not pass (it failed, or did not run),
    this check is ``not_run``, naming it: never a pass on a premise that failed or was not shown."""
    cost: ClassVar[CheckCost]
    """What its work costs (:class:`~fasttrack.planning.cost.CheckCost`: per engine group and once per plan); every
    check declares one (``fasttrack.planning.cost.NO_COST`` for work that takes no measurable time)."""
    gate_model: ClassVar[type[CheckGate] | None] = None
    """Its section of the scope's ``gates`` (declared ``class XGate(CheckGate, check="x")``), or None."""
    evidence: ClassVar[Any] = None
    """Its typed result rows and their re-judging (a ``fasttrack.evidence.base.CheckEvidence`` naming this
    check), or None: registered as kind ``evidence`` with the check."""

    def __init_subclass__(cls, **declared: Any) -> None:
        """The declarations above, given as class attributes or as class keywords:
        ``class KernelsCheck(EnginelessCheck, name="kernels", title="Kernels", after=("isolation",))``."""
        unknown = sorted(set(declared) - set(DECLARATIONS))
        if unknown:
            raise TypeError(f"{cls.__name__}: not a check declaration: {', '.join(unknown)}")
        super().__init_subclass__()
        for key, value in declared.items():
            setattr(cls, key, value)

    @classmethod
    def passability(cls, tier: TierView) -> list[Blocker]:
        """The required items of this check that ``tier`` can never run (what it needs from the tier)."""
        return []

    @classmethod
    def planned(cls, tier: TierView) -> list[str]:
        """What it exercises in ``tier`` (features, evals, workloads, ...), as ``fasttrack plan`` lists it."""
        return []

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


def register(cls: C) -> C:
    """Class decorator: register a check (kind ``check``, keyed by its ``name``) with its gate model (kind
    ``gate``, which defining it did) and its evidence (kind ``evidence``), checking its declarations."""
    name = getattr(cls, "name", None)  # a class attribute the subclass must set (ClassVar without a default)
    if not name or not getattr(cls, "title", None):
        raise TypeError(f"{cls.__qualname__} must set the class attributes 'name' and 'title'")
    if not isinstance(getattr(cls, "cost", None), CheckCost):
        raise TypeError(
            f"{cls.__qualname__} must declare 'cost' (a fasttrack.planning.cost.CheckCost: what its work costs, which "
            "the plan counts; fasttrack.planning.cost.NO_COST when it takes no measurable time)"
        )
    gm = cls.gate_model
    if gm is not None and gm.check_name != name:
        raise TypeError(
            f"{cls.__qualname__}.gate_model {gm.__qualname__} is the gate of {gm.check_name or 'no check'!r}; "
            f'declare it as class {gm.__name__}(CheckGate, check="{name}")'
        )
    ev = cls.evidence
    if ev is not None and getattr(ev, "check", None) != name:
        raise TypeError(f"{cls.__qualname__}.evidence names the check {getattr(ev, 'check', None)!r}, not {name!r}")
    _registry.register("check", name, cls)
    if gm is not None:
        _registry.register("gate", name, gm)
    if ev is not None:
        _registry.register("evidence", name, ev)
    return cls


def registered_checks() -> dict[str, type[Check]]:
    """Registered checks, in check order: each after the checks its ``after`` names, otherwise in registration
    order (the shipped checks in the order of ``fasttrack.checks.BUILTIN_CHECK_MODULES``, then other packages')."""
    found: dict[str, type[Check]] = _registry.entries("check")
    return {n: found[n] for n in check_order(found)}


def build_run_plan(
    scope: Scope, *, tier: str = "smoke", shard: str | None = None, scope_sha256: str | None = None
) -> Plan:
    """:func:`fasttrack.planning.plan.build_plan` with every registered check: their order and what their work costs."""
    return build_plan(
        scope, tier=tier, shard=shard, scope_sha256=scope_sha256, checks=list(registered_checks().values())
    )


def check_order(checks: Mapping[str, type[Check]]) -> list[str]:
    """The names of ``checks`` sorted so that each comes after those its ``after`` names and before those its
    ``before`` names (ties: their order in ``checks``). A name these or ``blocked_by`` do not know, or a cycle, is a
    declaration error."""
    index = {n: i for i, n in enumerate(checks)}
    for n, cls in checks.items():
        unknown = [d for d in (*cls.after, *cls.before, *cls.blocked_by) if d not in checks]
        if unknown:
            raise TypeError(f"check {n!r} names unregistered check(s) {unknown} in 'after', 'before' or 'blocked_by'")
    waiting = {n: set(cls.after) for n, cls in checks.items()}
    for n, cls in checks.items():
        for later in cls.before:
            waiting[later].add(n)
    out: list[str] = []
    while waiting:
        ready = sorted((n for n, deps in waiting.items() if not deps), key=index.__getitem__)
        if not ready:
            raise TypeError(f"the checks' 'after' and 'before' declarations form a cycle among {sorted(waiting)}")
        out.append(ready[0])
        del waiting[ready[0]]
        for deps in waiting.values():
            deps.discard(ready[0])
    return out
