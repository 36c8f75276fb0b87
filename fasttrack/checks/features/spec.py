"""The shape of a serving feature: its probe, what it needs from the tier, its typed result, its judgement.

A serving feature is one :class:`ServingFeature` subclass, registered with :func:`serving_feature` (the
registry's kind ``feature``; another package's module does the same and declares itself in the ``fasttrack``
entry-point group): its ``name`` (as in ``scope.features``), its probe (``steps``: when it runs on an engine
group, at which config point, and what it collects into its typed ``result_model``), what the probe costs
(``decode_steps``, read by the plan's cost), what it needs from a tier (``blockers``: the features check's
passability rule asks each feature) and how the two sides' results are judged (``judge``; :func:`judge_sides`
applies one rule to both sides' own behaviour).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, TypeVar, cast

from fasttrack import registry
from fasttrack.checks.context import RunContext
from fasttrack.checks.features.env import FeatureEnv
from fasttrack.checks.features.model import FeatureResult, Outcome, SideData
from fasttrack.checks.outcome import fold_verdicts
from fasttrack.checks.points import full_points, group_batches, nearest_batch, short_point
from fasttrack.checks.tier import Blocker, TierView
from fasttrack.checks.windows import WindowRecord
from fasttrack.planning.cost import EngineGroup as GroupShape
from fasttrack.planning.plan import ConfigPoint, EngineGroup
from fasttrack.results import Verdict

R = TypeVar("R", bound=FeatureResult)
F = TypeVar("F", bound="type[ServingFeature[Any]]")


@dataclass
class GroupPlan:
    """What one engine group offers the feature tests: its batch sizes and config points."""

    ctx: RunContext
    group: EngineGroup
    wave: int
    """Preferred choices per sampling request (snapped to a short batch size)."""
    batches: list[int] | None
    """Batch sizes structured output and full context run at (None: every batch size of the plan)."""

    @property
    def short_batches(self) -> list[int]:
        """Batch sizes that have a short-context point in this group."""
        return [b for b in group_batches(self.ctx, self.group) if short_point(self.ctx, self.group, b) is not None]

    @property
    def selected_short_batches(self) -> list[int]:
        """:attr:`short_batches` limited to :attr:`batches`."""
        return [b for b in self.short_batches if self.batches is None or b in self.batches]

    @property
    def full_points(self) -> list[ConfigPoint]:
        """The group's full-context points (limited to :attr:`batches`), by batch."""
        return [p for p in full_points(self.ctx, self.group) if self.batches is None or p.batch in self.batches]

    def at(self, want: int) -> int:
        """The short batch size closest to ``want``."""
        return nearest_batch(self.short_batches, want)

    def point(self, batch: int) -> str | None:
        """The short-context point at ``batch`` (None when the group has none)."""
        p = short_point(self.ctx, self.group, batch)
        return p.id if p is not None else None


@dataclass(frozen=True)
class OnGroup:
    """What a feature's judgement sees of one engine group besides the two sides' results."""

    ctx: RunContext
    gid: str
    """The engine group's id."""
    windows: list[WindowRecord]
    """The candidate's profiler windows on this group."""
    variants: Mapping[str, SideData | str] = field(default_factory=dict)
    """The reference variants' measurements on this group (``gates.equivalence.reference``), or why a variant has
    none; only the features that declare ``uses_reference`` are measured there."""


@dataclass(frozen=True)
class Step:
    """One collection task of a feature on one engine group."""

    point: str | None
    """The config point its requests run at (None: the plan has no point at that batch size)."""
    batch: int
    run: Callable[[FeatureEnv], Awaitable[None]]
    """Sends the requests and stores the measurements in the feature's result (``feature.mine(env)``)."""


class ServingFeature(ABC, Generic[R]):
    """One serving feature: its probe, what it needs from a tier, its typed result and how it is judged."""

    name: ClassVar[str]
    """The feature's name in ``scope.features``."""
    result_model: ClassVar[type[FeatureResult]]
    """What one side measures of it on one engine group (a :class:`FeatureResult` subclass)."""
    decode_steps: ClassVar[int]
    """The decode steps (at batch 1) one side's probes take on one engine group: the plan's cost of the feature.
    The shipped features' were measured on the demo run (the features check's seconds per side over the demo's
    step time, split by the features' request counts)."""
    on_synthetic_acceptance: ClassVar[bool] = False
    """Whether it is judged on an engine group with synthetic acceptance too. Most features compare outputs or
    output distributions, which the synthetic rejection sampler changes by design: they run on the other groups
    only."""
    uses_reference: ClassVar[bool] = False
    """Whether its steps also run on the scope's reference variants (``gates.equivalence.reference``), whose
    outputs calibrate its judgement (the features that compare greedy outputs)."""
    optional: ClassVar[str | None] = None
    """When set, a group that measured nothing for it is "not applicable" rather than "not run", and this is
    the reason given when no group of the plan applies (e.g. speculative decoding without speculative configs)."""

    def decode_steps_on(self, group: GroupShape) -> int:
        """The decode steps its probes take on ``group`` (0 where it does not run): ``decode_steps`` by default."""
        return self.decode_steps

    @abstractmethod
    def steps(self, gp: GroupPlan) -> list[Step]:
        """Its probe: the collection steps on an engine group, in order ([] = not on this group)."""

    def blockers(self, tier: TierView) -> list[Blocker]:
        """What it needs from a tier that ``tier`` can never give (the features check's passability asks)."""
        return []

    @abstractmethod
    def judge(self, on: OnGroup, base: R, cand: R) -> Outcome:
        """The feature's outcome on one engine group from the baseline's and the candidate's results."""

    def result(self, side: SideData) -> R | None:
        """This feature's result in ``side`` (None when it measured nothing)."""
        got = side.results.get(self.name)
        return cast(R, got) if isinstance(got, self.result_model) else None

    def variant_results(self, on: OnGroup) -> dict[str, R | str]:
        """This feature's result on each reference variant of the group (``on.variants``), or why it has none."""
        out: dict[str, R | str] = {}
        for name, side in on.variants.items():
            if isinstance(side, str):
                out[name] = side
            elif self.name in side.errors:
                out[name] = f"its {self.name} requests failed: {side.errors[self.name]}"
            else:
                res = self.result(side)
                out[name] = res if res is not None else f"it measured no {self.name}"
        return out

    def mine(self, env: FeatureEnv) -> R:
        """This side's result of this feature on this group, created empty on first use (steps add to it)."""
        got = self.result(env.side)
        if got is None:
            got = cast(R, self.result_model())
            env.side.results[self.name] = got
        return got

    def baseline(self, env: FeatureEnv) -> R | None:
        """The baseline's result of this group, when ``env`` is the candidate's (it reuses the baseline's choices)."""
        return self.result(env.base) if env.base is not None else None


@dataclass
class SideJudgement:
    """One row of one side's own behaviour under a feature's rule."""

    ok: bool
    fields: dict[str, Any]
    """The row's figures (after feature, group, side, point and verdict)."""
    failure: str | None = None
    """What went wrong, naming the point and the evidence (reported when it is the candidate's)."""


@dataclass
class Judged:
    """Rows, failures and candidate verdicts of a feature on one engine group, as they are gathered."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    verdicts: list[Verdict] = field(default_factory=list)

    def outcome(self, feature: str, reason: str, *, verdict: Verdict | None = None) -> Outcome:
        return Outcome(
            feature=feature,
            verdict=fold_verdicts(self.verdicts) if verdict is None else verdict,
            reason=reason,
            rows=self.rows,
            failures=self.failures,
        )


def judge_sides(
    feature: str, gid: str, base: R, cand: R, rule: Callable[[R], list[SideJudgement]], *, point: Callable[[R], str]
) -> Judged:
    """Apply one rule to each side's own results: both sides get rows, the candidate's verdicts and failures decide
    (the baseline's rows show whether the stock path behaves so too). ``point`` says where a side's requests ran."""
    out = Judged()
    for who, res in (("baseline", base), ("candidate", cand)):
        for j in rule(res):
            v = Verdict.PASS if j.ok else Verdict.FAIL
            out.rows.append({"feature": feature, "group": gid, "side": who, "point": point(res), "verdict": v.value})
            out.rows[-1].update(j.fields)
            if who == "candidate":
                out.verdicts.append(v)
                if not j.ok and j.failure:
                    out.failures.append(j.failure)
    return out


def register_feature(feature: ServingFeature[Any]) -> ServingFeature[Any]:
    """Register a serving feature (kind ``feature``, after those registered before it); its name must be new."""
    cls = type(feature)
    if not getattr(feature, "name", None) or not isinstance(getattr(feature, "result_model", None), type):
        raise TypeError(f"{cls.__qualname__} must set the class attributes 'name' and 'result_model'")
    steps = getattr(feature, "decode_steps", None)
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 0:
        raise TypeError(
            f"{cls.__qualname__} must declare 'decode_steps': the decode steps (at batch 1) one side's probes take on "
            "an engine group, which the plan's cost counts"
        )
    return registry.register("feature", feature.name, feature)


def serving_feature(cls: F) -> F:
    """Class decorator: register one instance of the serving feature ``cls`` (see :func:`register_feature`)."""
    register_feature(cls())
    return cls


def synthetic_features() -> list[str]:
    """The registered features judged on an engine group with synthetic acceptance (``on_synthetic_acceptance``)."""
    return [name for name, f in registry.entries("feature").items() if f.on_synthetic_acceptance]
