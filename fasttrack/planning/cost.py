"""What a plan costs: wall seconds, GPU-seconds and node-seconds per check, from the work each check does.

Each check declares its cost function (``Check.cost``, a :class:`CheckCost`), and the plan receives the checks
with their order (:func:`fasttrack.planning.plan.build_plan`): this module holds the units, the engine's speed model and
the sums, and no check's work. A check counts its work on an engine the way it sends it, from the scope and the
tier: the decode steps of its requests (rounds or waves of the point's batch size, each as long as the requests'
output), the prompt tokens it prefills, the profiler windows it opens, and its fixed overheads. Time follows
from the scope's ``estimates``, the engine's speed on its hardware:

* a decode step at batch ``b`` takes ``b / min(b x stream_tokens_per_s, decode_tokens_per_s)`` seconds (one
  request alone decodes at ``stream_tokens_per_s``; a full engine at ``decode_tokens_per_s``);
* a prompt token takes ``1 / prefill_tokens_per_s``; a profiler window ``profile_window_s`` (start, stop, trace
  export); an lm-eval run ``eval_run_s`` before its requests; an engine start ``engine_start_s`` and a stop
  ``engine_stop_s``; the engine-less kernel tests ``kernels_s`` per shard.

The checks' work constants (each serving feature's decode steps, the perf runs an adaptive schedule takes) were
measured on the demo target's smoke run (``tests/fixtures/cost/``: run summaries, whose engines record their
start seconds and each check's seconds, read by :func:`measured`) and the demo scope's estimates come from such
a run; GPU scopes state their own (Kimi K3: its published single-stream and batch-64 throughputs; the H200
engine logs of ``tests/fixtures/gpu`` give the GPU demo target's start times). ``fasttrack plan`` shows the
result per check; shards balance by it (docs/cost.md).

Device-seconds: an engine holds ``gpus`` devices (one per CPU engine) while it is up; both sides' while perf
interleaves them. Node-seconds: the nodes those engines span. Engine-less work holds one node.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from fasttrack.scope.reference import COST_LINE as REFERENCE
from fasttrack.scope.reference import variant_work

if TYPE_CHECKING:  # pragma: no cover
    from fasttrack.scope import Estimates, Scope, TierName, TierSpec


class ConfigPoint(Protocol):
    """What the model reads of a plan's config point (:class:`fasttrack.planning.plan.ConfigPoint`)."""

    @property
    def id(self) -> str: ...
    @property
    def batch(self) -> int: ...
    @property
    def context(self) -> int: ...
    @property
    def full_context(self) -> bool: ...


class EngineGroup(Protocol):
    """What the model reads of a plan's engine group (:class:`fasttrack.planning.plan.EngineGroup`)."""

    @property
    def points(self) -> list[str]: ...
    @property
    def gpus(self) -> int: ...
    @property
    def nodes(self) -> int: ...
    @property
    def gpus_per_node(self) -> int | None: ...
    @property
    def lifetimes_per_side(self) -> int: ...
    @property
    def speculative_config(self) -> dict[str, Any] | None: ...
    @property
    def synthetic_acceptance(self) -> bool: ...


STARTS = "engine starts"
"""The cost line of engine starts and stops (not a check)."""
PROBE_STEPS = 8
"""Decode steps of a path-evidence probe (the checks that profile one count it)."""


@dataclass
class Cost:
    """The cost of one line (a check, engine starts) of a plan."""

    wall_s: float = 0.0
    device_s: float = 0.0
    node_s: float = 0.0
    requests: int = 0
    decode_tokens: int = 0

    def add(self, wall_s: float, *, devices: int, nodes: int, requests: int = 0, tokens: int = 0) -> None:
        self.wall_s += wall_s
        self.device_s += wall_s * devices
        self.node_s += wall_s * nodes
        self.requests += requests
        self.decode_tokens += tokens

    def __iadd__(self, other: "Cost") -> "Cost":
        self.wall_s += other.wall_s
        self.device_s += other.device_s
        self.node_s += other.node_s
        self.requests += other.requests
        self.decode_tokens += other.decode_tokens
        return self

    def as_dict(self) -> dict[str, float | int]:
        return {
            "wall_hours": round(self.wall_s / 3600, 4),
            "gpu_hours": round(self.device_s / 3600, 4),
            "node_hours": round(self.node_s / 3600, 4),
            "requests": self.requests,
            "decode_tokens": self.decode_tokens,
        }


@dataclass
class Model:
    """The time of engine work on the scope's hardware (its ``estimates``)."""

    est: "Estimates"

    @property
    def stream(self) -> float:
        return self.est.stream_tokens_per_s or self.est.decode_tokens_per_s / 16

    def step_s(self, batch: int) -> float:
        """One decode step at ``batch``."""
        b = max(batch, 1)
        return b / min(b * self.stream, self.est.decode_tokens_per_s)

    def decode(self, requests: int, batch: int, tokens: int) -> float:
        """``requests`` of ``tokens`` output each, in waves of ``batch``."""
        return math.ceil(requests / max(batch, 1)) * tokens * self.step_s(batch)

    def prefill(self, tokens: float) -> float:
        return tokens / self.est.prefill_tokens_per_s


@dataclass
class Work:
    """What a check's cost function sees: the scope, the tier, the engine's speed, and the plan's cost lines.

    :meth:`add` adds to the check's own line; :meth:`add_start` to the engine starts' line (an engine a check
    starts outside the plan's groups)."""

    scope: "Scope"
    tier: "TierSpec"
    model: Model
    check: str
    """The check whose work this is (its cost line)."""
    costs: dict[str, Cost]
    devices: int = 1
    """Devices the engine holds (GPUs; one per CPU engine); on plan-level work, those of the work's node."""
    nodes: int = 1
    """Nodes the engine spans (1 for plan-level work)."""

    @property
    def est(self) -> "Estimates":
        return self.model.est

    def add(self, wall_s: float, *, devices: int | None = None, nodes: int | None = None, **counts: int) -> None:
        """Add ``wall_s`` of the check's work (holding the engine's devices and nodes unless told otherwise);
        ``counts``: ``requests``, ``tokens``."""
        self.costs.setdefault(self.check, Cost()).add(
            wall_s,
            devices=self.devices if devices is None else devices,
            nodes=self.nodes if nodes is None else nodes,
            **counts,
        )

    def add_start(self, wall_s: float, *, devices: int, nodes: int) -> None:
        """Add an engine start the check asks for beyond the plan's groups (to the engine starts' line)."""
        self.costs.setdefault(STARTS, Cost()).add(wall_s, devices=devices, nodes=nodes)


@dataclass(frozen=True)
class GroupWork:
    """One engine group as a check's cost function sees it (with :class:`Work`)."""

    group: EngineGroup
    points: list[ConfigPoint]
    """The group's config points in this plan (or shard)."""


@dataclass(frozen=True)
class CheckCost:
    """What a check's work costs, as the check declares it (``Check.cost``): ``per_group`` adds its work on one
    engine group's lifetimes (both sides); ``per_plan`` its work once per plan or shard (engine-less work, an
    engine it starts outside the groups). A check with neither costs nothing (e.g. reading a git diff)."""

    per_group: Callable[[Work, GroupWork], None] | None = None
    per_plan: Callable[[Work, Sequence[EngineGroup]], None] | None = None


NO_COST = CheckCost()
"""The cost of a check whose work takes no measurable time."""


class CostedCheck(Protocol):
    """What the plan reads of a check (a registered check class has these): its name, cost and tier rule."""

    @property
    def name(self) -> str: ...
    @property
    def cost(self) -> CheckCost: ...
    @property
    def every_tier(self) -> bool: ...


def _runs(t: "TierSpec", check: CostedCheck) -> bool:
    return check.every_tier or t.checks is None or check.name in t.checks


def group_cost(
    scope: "Scope",
    tier: "TierName",
    group: EngineGroup,
    points: Iterable[ConfigPoint],
    checks: Iterable[CostedCheck],
) -> dict[str, Cost]:
    """The cost of one engine group's lifetimes, per check the tier runs and for its engine starts."""
    t = scope.tiers[tier]
    ids = set(group.points)
    share = GroupWork(group, [p for p in points if p.id in ids])
    costs: dict[str, Cost] = {}
    devices, nodes = max(group.gpus, 1), max(group.nodes, 1)
    est = scope.estimates
    starts = 2 * group.lifetimes_per_side
    costs.setdefault(STARTS, Cost()).add(
        starts * (est.engine_start_s + est.engine_stop_s), devices=devices, nodes=nodes
    )
    model = Model(est)
    for chk in checks:
        if chk.cost.per_group is not None and _runs(t, chk):
            chk.cost.per_group(Work(scope, t, model, chk.name, costs, devices=devices, nodes=nodes), share)
    # the equivalence gate's reference variants: engines of the baseline side the run adds per group
    if (variants := variant_work(scope, t, group, share.points, model)) is not None:
        costs.setdefault(REFERENCE, Cost()).add(**variants, devices=devices, nodes=nodes)
    return costs


def plan_cost(
    scope: "Scope",
    tier: "TierName",
    groups: Sequence[EngineGroup],
    points: Sequence[ConfigPoint],
    checks: Iterable[CostedCheck],
) -> dict[str, Cost]:
    """Every line of a plan (or of one shard's part of it): its groups' checks and starts, and each check's work
    once per plan (e.g. the kernel tests, which every shard runs)."""
    t = scope.tiers[tier]
    checks = list(checks)
    total: dict[str, Cost] = {}
    for g in groups:
        for name, c in group_cost(scope, tier, g, points, checks).items():
            total.setdefault(name, Cost())
            total[name] += c
    model = Model(scope.estimates)
    for chk in checks:
        if chk.cost.per_plan is not None and _runs(t, chk):
            chk.cost.per_plan(Work(scope, t, model, chk.name, total), groups)
    return total


def measured(summary: dict[str, Any]) -> dict[str, float]:
    """The seconds a run spent on each line, from its run summary (``run-summary.json``, a bundle's log): each
    engine's start, stop and per-check seconds (an interleaved pair's measurement once: both engines record it),
    the engine-less checks and the judgements (``timing.check_seconds``). ``total`` is the run's wall clock."""
    out: dict[str, float] = {}

    def add(name: str, secs: Any) -> None:
        if isinstance(secs, (int, float)) and math.isfinite(secs) and secs >= 0:
            out[name] = out.get(name, 0.0) + float(secs)

    pairs: set[tuple[Any, ...]] = set()
    for e in summary.get("engines") or []:
        if not isinstance(e, dict):
            continue
        if e.get("variant"):  # a reference variant's whole lifetime is its own line
            stop = e.get("stop")
            for secs in (e.get("startup_s"), stop.get("duration_s") if isinstance(stop, dict) else None,
                         *(e.get("check_seconds") or {}).values()):  # fmt: skip
                add(REFERENCE, secs)
            continue
        add(STARTS, e.get("startup_s"))
        stop = e.get("stop")
        if isinstance(stop, dict):
            add(STARTS, stop.get("duration_s"))
        for check, secs in (e.get("check_seconds") or {}).items():
            if e.get("up_with"):
                key = (check, e.get("group"), e.get("lifetime"), secs)
                if key in pairs:
                    continue
                pairs.add(key)
            add(str(check), secs)
    timing = summary.get("timing") or {}
    for check, secs in (timing.get("check_seconds") or {}).items():
        add(str(check), secs)
    add("total", timing.get("wall_s"))
    return out
