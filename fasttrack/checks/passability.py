"""Passability: what a tier requires that it can never run.

A bundle passes only when every required check passes; a required item the tier cannot
run at all (a feature without the config point it needs, an eval whose points are not in
the tier, a fallback situation without a probe, a workload without its data, a kernel
suite that needs a GPU on a CPU scope) makes the run ``incomplete`` however good the
change is. :func:`analyze` finds those items from the scope and the plan alone, before
any engine starts: ``fasttrack plan`` lists them and ``fasttrack validate`` refuses such
a tier unless told to run it anyway.

The rules are the checks' own: each registered check the tier runs declares what it needs
from the tier (:meth:`fasttrack.checks.base.Check.passability`; the features check asks each
serving feature). :func:`tier_checks` is the same registry read for the plan: every check, in
order, with whether the tier runs it and what it exercises there.
"""

from __future__ import annotations

from pathlib import Path

from fasttrack.checks.base import build_run_plan, registered_checks
from fasttrack.checks.tier import Blocker, TierView
from fasttrack.engine.argcheck import ArgCheck, check_arg_lists
from fasttrack.modelbase import StrictModel
from fasttrack.planning.plan import Plan
from fasttrack.scope import TIER_ORDER, Scope

__all__ = ["Blocker", "Passability", "PlannedCheck", "analyze", "analyze_tiers", "engine_arg_check", "tier_checks"]


class Passability(StrictModel):
    """The analysis of one tier (and shard) of a scope."""

    scope: str
    tier: str
    blockers: list[Blocker]

    @property
    def ok(self) -> bool:
        return not self.blockers

    def lines(self) -> list[str]:
        return [b.line() for b in self.blockers]


def analyze(scope: Scope, plan: Plan, *, base_dir: Path | None = None) -> Passability:
    """Every required item of ``plan``'s tier that can never run: the blockers of each registered check the tier
    runs, in check order.

    ``base_dir``: the scope file's folder (relative data paths are resolved against it); without it, data files are
    not looked for."""
    out: list[Blocker] = []
    for name, cls in registered_checks().items():
        if plan.runs_check(name):
            out.extend(cls.passability(TierView(scope=scope, plan=plan, base_dir=base_dir, check=name)))
    return Passability(scope=scope.name, tier=plan.tier, blockers=out)


def analyze_tiers(scope: Scope, *, base_dir: Path | None = None) -> dict[str, Passability]:
    """:func:`analyze` for every tier of a complete scope (unsharded)."""
    return {t: analyze(scope, build_run_plan(scope, tier=t), base_dir=base_dir) for t in TIER_ORDER}


class PlannedCheck(StrictModel):
    """One registered check as the plan of a tier lists it."""

    name: str
    title: str
    runs: bool
    """Whether the tier runs it (its ``checks`` list; isolation runs in every tier)."""
    required: bool
    after: list[str]
    before: list[str]
    blocked_by: list[str]
    gate: str | None
    """Its section of the scope's ``gates`` (None: it has none)."""
    exercises: list[str]
    """What it exercises in this tier (features, evals, workloads, kernel suites)."""


def tier_checks(scope: Scope, plan: Plan, *, base_dir: Path | None = None) -> list[PlannedCheck]:
    """Every registered check in check order, with whether ``plan``'s tier runs it and what it exercises there."""
    out = []
    for name, cls in registered_checks().items():
        view = TierView(scope=scope, plan=plan, base_dir=base_dir, check=name)
        out.append(
            PlannedCheck(
                name=name,
                title=cls.title,
                runs=plan.runs_check(name) or cls.every_tier,
                required=cls.required,
                after=list(cls.after),
                before=list(cls.before),
                blocked_by=list(cls.blocked_by),
                gate=f"gates.{name}" if cls.gate_model is not None else None,
                exercises=cls.planned(view),
            )
        )
    return out


def engine_arg_check(plan: Plan, *, python: str | None = None, use_cache: bool = True) -> ArgCheck:
    """Every engine's arguments of ``plan`` checked against the installed vLLM's own parser."""
    return check_arg_lists(plan.engine_arg_lists(), python=python, use_cache=use_cache)
