"""The plan: a scope's envelope expanded into config points, engine groups and shards.

A **config point** is one cell of the matrix (tp, dcp, speculative config, batch,
context). Points that share engine arguments (tp, dcp, speculative config) form an
**engine group**: one engine launch per side serves all of them. The plan orders
groups so that only one engine is ever up (baseline, then candidate, alternating
per lifetime), shards deterministically, and estimates its cost from the scope's
stated assumptions.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from typing import Any

from pydantic import Field

from fasttrack.errors import PlanError
from fasttrack.limits import MAX_SHARDS, SHARD_SPEC_MAX_CHARS
from fasttrack.modelbase import DocModel
from fasttrack.planning.cost import STARTS, CostedCheck, group_cost, plan_cost
from fasttrack.scope import TIER_ORDER, Estimates, Scope, SpecDecodeSpec, TierName
from fasttrack.scope.reference import variant_lifetimes

SIDES = ("baseline", "candidate")


class ConfigPoint(DocModel):
    id: str
    """Stable identifier, e.g. 'tp16-dcp1-dspark.dl7-b1-ctx8192'."""
    group: str
    """Engine group id."""
    tp: int
    dcp: int
    spec: str
    """Speculative config name ('none' when off)."""
    draft_length: int | None = None
    acceptance_length: float | None = None
    batch: int
    """Decode batch size (concurrent requests)."""
    context: int
    """Prompt length in tokens (full context resolved to max_model_len - output tokens)."""
    full_context: bool = False
    """Whether this point is the scope's 'full' context."""

    def as_dict(self) -> dict[str, Any]:
        return self.model_dump()


class EngineGroup(DocModel):
    id: str
    tp: int
    dcp: int
    spec: str
    draft_length: int | None = None
    gpus: int
    """GPUs one engine of this group uses (tp; 0 on CPU hosts)."""
    nodes: int = 1
    """Nodes (hosts) one engine of this group spans (``hardware.node``; 1 without a node model)."""
    side_nodes: dict[str, int] = Field(default_factory=dict)
    """Nodes of each side's engine, from the tensor-parallel size its arguments end up with (a side whose
    arguments set another size than the group's, e.g. a rehearsal of a multi-node candidate against a
    single-node baseline, spans its own number of nodes)."""
    gpus_per_node: int | None = None
    """GPUs (CPU scopes: ranks) each of those nodes runs; None when the engine fits one host."""
    node_kind: str | None = None
    """What a node is (``hardware.node.name``), e.g. 'GB300 NVL72 compute tray'."""
    speculative_config: dict[str, Any] | None = None
    """vLLM's ``--speculative-config`` for this group (None without speculation)."""
    points: list[str]
    """Config point ids served by this group."""
    args: dict[str, list[str]]
    """Full vLLM server arguments per side (model excluded)."""
    env: dict[str, dict[str, str]]
    """Environment overrides per side."""
    lifetimes_per_side: int
    order: list[str]
    """Launch order of sides, e.g. ['baseline', 'candidate', 'baseline', 'candidate']."""

    @property
    def synthetic_acceptance(self) -> bool:
        """Whether the group runs vLLM's synthetic rejection sampler: draft tokens are accepted at configured
        rates whatever the model says, so its outputs differ from plain decoding by design (a speed measurement
        at a fixed acceptance; checks that compare outputs skip such a group)."""
        return (self.speculative_config or {}).get("rejection_sample_method") == "synthetic"


class PlanEstimate(DocModel):
    engine_starts: int
    requests: int
    """Requests sent across both sides and every lifetime."""
    gpu_hours: float
    """Device-hours (GPU-hours; on CPU scopes, host-hours)."""
    node_hours: float = 0.0
    """Node-hours: hosts held times hours (an engine of 4 nodes for one hour is 4 node-hours)."""
    wall_hours: float
    checks: dict[str, dict[str, float | int]] = Field(default_factory=dict)
    """Per check (and ``engine starts``): wall, GPU and node hours, requests and decode tokens
    (:mod:`fasttrack.planning.cost`)."""
    assumptions: Estimates
    """The assumptions these numbers derive from (scope.estimates)."""


class Plan(DocModel):
    scope: str
    scope_sha256: str | None = None
    tier: str
    shard: str
    """'i/n' (1-based) or '1/1'."""
    points: list[ConfigPoint]
    groups: list[EngineGroup]
    estimate: PlanEstimate
    checks: list[str] | None = None
    """Checks the tier selects (None = all registered)."""
    check_order: list[str] | None = None
    """Every registered check, in the order they run and are reported (the check registry's order, given to
    :func:`build_plan` with the checks' costs; the bundle records it for the report). None: a plan written before
    plans recorded it."""
    workloads: list[str] | None = None
    features: list[str] | None = None
    """Serving features the tier checks (None = every feature of the scope)."""
    evals: list[str] | None = None
    """Evals the tier runs (None = all)."""
    fingerprint: str = ""
    """sha256 of the unsharded plan (scope hash + tier): equal for every shard of one plan."""

    def point(self, pid: str) -> ConfigPoint:
        for p in self.points:
            if p.id == pid:
                return p
        raise KeyError(pid)

    def group_points(self, group: EngineGroup) -> list[ConfigPoint]:
        ids = set(group.points)
        return [p for p in self.points if p.id in ids]

    def runs_check(self, name: str) -> bool:
        """Whether the tier selects the check ``name``."""
        return self.checks is None or name in self.checks

    def tier_features(self, scope_features: list[str]) -> list[str]:
        """The scope's features this tier checks."""
        return [f for f in scope_features if self.features is None or f in self.features]

    def tier_evals(self, scope_evals: list[str]) -> list[str]:
        """The scope's evals (names) this tier runs."""
        return [e for e in scope_evals if self.evals is None or e in self.evals]

    def engine_arg_lists(self) -> dict[str, list[str]]:
        """Every engine's server arguments, keyed ``group/side`` (for the check against vLLM's parser)."""
        return {f"{g.id}/{side}": list(g.args[side]) for g in self.groups for side in SIDES}


def parse_shard(spec: str | None) -> tuple[int, int]:
    """'i/n' with 1 <= i <= n <= MAX_SHARDS -> (i, n); ASCII digits only, no spaces inside."""
    if spec is None:
        return 1, 1
    m = re.fullmatch(r"([0-9]+)/([0-9]+)", spec.strip()) if len(spec) <= 200 else None
    if not m:
        raise PlanError(
            f"shard {spec[:40]!r} is not of the form i/n.",
            hint="Use e.g. --shard 1/3: two ASCII numbers and a slash, no spaces (shards are numbered from 1).",
        )
    if len(spec.strip()) > SHARD_SPEC_MAX_CHARS:
        raise PlanError(
            f"shard {spec[:40]!r} has numbers far past the limit of {MAX_SHARDS} shards.",
            hint="A plan has at most one shard per config point; use fewer shards.",
        )
    i, n = int(m.group(1)), int(m.group(2))
    if n > MAX_SHARDS:
        raise PlanError(
            f"shard {spec!r} asks for {n} shards, more than the limit of {MAX_SHARDS}.",
            hint="A plan has at most one shard per config point; use fewer shards.",
        )
    if n < 1 or not 1 <= i <= n:
        raise PlanError(
            f"shard {spec!r} is out of range: i must satisfy 1 <= i <= n.",
            hint=f"Shards are numbered 1..n; for n={max(n, 1)} use 1/{max(n, 1)} to {max(n, 1)}/{max(n, 1)}.",
        )
    return i, n


def _ctx_label(c: int) -> str:
    return f"{c // 1024}k" if c % 1024 == 0 and c >= 1024 else str(c)


def _format_args(template: list[str], values: dict[str, Any]) -> list[str]:
    out = []
    for a in template:
        s = a
        for k, v in values.items():
            s = s.replace("{" + k + "}", str(v))
        out.append(s)
    return out


def effective_tp(args: list[str], default: int) -> int:
    """The tensor-parallel size an argument list ends up with (the last ``--tensor-parallel-size``/``-tp``)."""
    tp = default
    for i, a in enumerate(args):
        val: str | None = None
        if a in ("--tensor-parallel-size", "-tp") and i + 1 < len(args):
            val = args[i + 1]
        elif a.startswith("--tensor-parallel-size="):
            val = a.split("=", 1)[1]
        if val is not None and val.isdigit():
            tp = int(val)
    return tp


#: How a speculative config becomes arguments when the scope's ``point_args`` does not say.
DEFAULT_SPECULATIVE_ARGS = ["--speculative-config", "{speculative_config}"]


def _side_args(
    scope: Scope, side: str, tp: int, dcp: int, sp: SpecDecodeSpec, draft: int | None, max_len: int
) -> list[str]:
    eng = scope.engine
    args = list(eng.common_args)
    pa = eng.point_args
    spec_cfg = json.dumps(sp.engine_config(draft), separators=(", ", ": ")) if draft is not None else ""
    vals = {
        "tp": tp,
        "dcp": dcp,
        "method": sp.method,
        "draft_length": draft,
        "max_model_len": max_len,
        "speculative_config": spec_cfg,
    }
    if "tensor_parallel" in pa:
        args += _format_args(pa["tensor_parallel"], vals)
    if "decode_context_parallel" in pa and dcp > 1:
        args += _format_args(pa["decode_context_parallel"], vals)
    if sp.method != "none":
        args += _format_args(pa.get("speculative", DEFAULT_SPECULATIVE_ARGS), vals)
    if "max_model_len" in pa:
        args += _format_args(pa["max_model_len"], vals)
    args += getattr(eng, side).args
    return args


def build_plan(
    scope: Scope,
    *,
    tier: str = "smoke",
    shard: str | None = None,
    scope_sha256: str | None = None,
    checks: Sequence[CostedCheck],
) -> Plan:
    """Expand the scope's envelope for ``tier`` and keep the points of ``shard``. ``checks``: every registered check,
    in check order, with what its work costs (``fasttrack.checks.base.build_run_plan`` gives them): the plan
    records their order and its estimate (which balances the shards) counts their work."""
    checks = list(checks)
    if tier not in TIER_ORDER:
        raise PlanError(f"unknown tier {tier!r}.", hint=f"Tiers: {', '.join(TIER_ORDER)} (smoke < standard < full).")
    _check_complete(scope)
    i, n = parse_shard(shard)
    t = scope.tiers[tier]
    groups, points = _expand(scope, tier)
    # Order: fewest GPUs first, then by id — a stable order that keeps similar launches adjacent.
    groups.sort(key=lambda g: (g.gpus, g.dcp, g.spec, g.draft_length or 0, g.id))
    fp = hashlib.sha256(
        json.dumps(
            {"scope": scope_sha256 or scope.name, "tier": tier, "points": [p.id for p in points]}, sort_keys=True
        ).encode()
    ).hexdigest()
    groups, points = _shard(groups, points, i, n, scope, tier, checks)
    return Plan(
        scope=scope.name,
        scope_sha256=scope_sha256,
        tier=tier,
        shard=f"{i}/{n}",
        points=points,
        groups=groups,
        estimate=estimate(groups, points, scope, tier, checks),
        checks=t.checks,
        check_order=[c.name for c in checks],
        workloads=t.workloads,
        features=list(t.features) if t.features is not None else None,
        evals=t.evals,
        fingerprint=fp,
    )


def _check_complete(scope: Scope) -> None:
    """A scope with an envelope and hardware, or a :class:`PlanError` that says what is missing."""
    if scope.envelope is None or scope.hardware is None:
        missing = "\n  ".join(scope.missing_report()) or "envelope/hardware"
        raise PlanError(
            f"scope {scope.name!r} is incomplete; it cannot be planned until these are known:\n  {missing}",
            hint=f"Fill in the missing fields in suites/{scope.name}/scope.yaml and set status: complete.",
        )


def _expand(scope: Scope, tier: TierName) -> tuple[list[EngineGroup], list[ConfigPoint]]:
    """The tier's matrix as engine groups (one per tp, dcp and speculative config) and their points, unsorted."""
    env = scope.envelope
    assert env is not None
    matrix = scope.tier_matrix(tier)
    points: list[ConfigPoint] = []
    groups: list[EngineGroup] = []
    for tp in matrix.tensor_parallel:
        for dcp in matrix.decode_context_parallel:
            for spec_label in matrix.speculative:
                name, _, dl = spec_label.partition(":")
                sp = env.spec_by_name(name)
                assert sp is not None
                draft = int(dl) if dl else None
                spec_id = name if draft is None else f"{name}.dl{draft}"
                gid = f"tp{tp}-dcp{dcp}-{spec_id}"
                gpoints = _group_points(scope, tier, gid, tp, dcp, sp, draft)
                groups.append(_engine_group(scope, tier, gid, tp, dcp, sp, draft, gpoints))
                points.extend(gpoints)
    return groups, points


def _group_points(
    scope: Scope, tier: str, gid: str, tp: int, dcp: int, sp: SpecDecodeSpec, draft: int | None
) -> list[ConfigPoint]:
    """The config points of one engine group: every batch and context of the tier's matrix."""
    assert scope.envelope is not None
    matrix = scope.tier_matrix(tier)
    out_tokens = scope.gates.equivalence.max_tokens
    max_len = scope.envelope.context.max_model_len
    gpoints = []
    for b in matrix.batch:
        for c in matrix.context:
            full = c == "full"
            ctx = max_len - out_tokens if full else int(c)
            pid = f"{gid}-b{b}-ctx{'full' if full else _ctx_label(ctx)}"
            gpoints.append(
                ConfigPoint(
                    id=pid,
                    group=gid,
                    tp=tp,
                    dcp=dcp,
                    spec=sp.name,
                    draft_length=draft,
                    acceptance_length=sp.synthetic_acceptance_length if draft else None,
                    batch=b,
                    context=ctx,
                    full_context=full,
                )
            )
    return gpoints


def _engine_group(
    scope: Scope,
    tier: TierName,
    gid: str,
    tp: int,
    dcp: int,
    sp: SpecDecodeSpec,
    draft: int | None,
    gpoints: list[ConfigPoint],
) -> EngineGroup:
    """One engine launch per side: both sides' arguments, GPUs and nodes, and the order of their lifetimes."""
    hw = scope.hardware
    assert hw is not None and scope.envelope is not None
    max_len = scope.envelope.context.max_model_len
    lifetimes = scope.tiers[tier].lifetimes_per_side
    order = [s for _ in range(lifetimes) for s in SIDES]
    side_args = {s: _side_args(scope, s, tp, dcp, sp, draft, max_len) for s in SIDES}
    side_tp = {s: effective_tp(side_args[s], tp) for s in SIDES}
    side_nodes = {s: hw.nodes_for(side_tp[s]) for s in SIDES}
    nodes = max(side_nodes.values())
    big = max(side_tp.values())
    return EngineGroup(
        id=gid,
        tp=tp,
        dcp=dcp,
        spec=sp.name,
        draft_length=draft,
        gpus=big if hw.device == "gpu" else 0,
        nodes=nodes,
        side_nodes=side_nodes,
        gpus_per_node=big // nodes if nodes > 1 else None,
        node_kind=hw.node.name if hw.node is not None and nodes > 1 else None,
        speculative_config=sp.engine_config(draft) if draft is not None else None,
        points=[p.id for p in gpoints],
        args=side_args,
        env={s: {**scope.engine.env, **getattr(scope.engine, s).env} for s in SIDES},
        lifetimes_per_side=lifetimes,
        order=order,
    )


def _group_cost(
    g: EngineGroup, points: list[ConfigPoint], scope: Scope, tier: TierName, checks: Sequence[CostedCheck]
) -> float:
    """Device-seconds of one group (GPU-seconds; host-seconds on CPU scopes): every check's work on its engines."""
    return sum(c.device_s for c in group_cost(scope, tier, g, points, checks).values())


def _shard(
    groups: list[EngineGroup],
    points: list[ConfigPoint],
    i: int,
    n: int,
    scope: Scope,
    tier: TierName,
    checks: Sequence[CostedCheck],
) -> tuple[list[EngineGroup], list[ConfigPoint]]:
    """Deterministic sharding: whole engine groups where possible (split only when there
    are fewer groups than shards), assigned longest-first to the least-loaded shard."""
    if n == 1:
        return groups, points
    units: list[EngineGroup] = list(groups)
    while len(units) < n:
        big = max(units, key=lambda g: (len(g.points), g.id))
        if len(big.points) < 2:
            break
        k = units.index(big)
        half = len(big.points) // 2
        a = big.model_copy(update={"points": big.points[:half]})
        b = big.model_copy(update={"points": big.points[half:]})
        units[k : k + 1] = [a, b]
    loads = [0.0] * n
    assign: list[list[EngineGroup]] = [[] for _ in range(n)]
    cost = {id(u): _group_cost(u, points, scope, tier, checks) for u in units}
    for u in sorted(units, key=lambda g: (-cost[id(g)], g.id, g.points[0] if g.points else "")):
        k = min(range(n), key=lambda s: (loads[s], s))
        assign[k].append(u)
        loads[k] += cost[id(u)]
    mine = assign[i - 1]
    order = {g.id: idx for idx, g in enumerate(groups)}
    mine.sort(key=lambda g: (order[g.id], g.points[0] if g.points else ""))
    keep = {pid for g in mine for pid in g.points}
    return mine, [p for p in points if p.id in keep]


def estimate(
    groups: list[EngineGroup],
    points: list[ConfigPoint],
    scope: Scope,
    tier: TierName,
    checks: Sequence[CostedCheck],
) -> PlanEstimate:
    """The plan's cost (:mod:`fasttrack.planning.cost`): every check's work and the engine starts, in the scope's
    ``estimates``; the engine-less checks once (one shard)."""
    costs = plan_cost(scope, tier, groups, points, checks)
    t = scope.tiers[tier]
    starts = sum(2 * g.lifetimes_per_side + variant_lifetimes(scope, t, g) for g in groups)
    return PlanEstimate(
        engine_starts=starts,
        requests=sum(c.requests for c in costs.values()),
        gpu_hours=round(sum(c.device_s for c in costs.values()) / 3600, 3),
        node_hours=round(sum(c.node_s for c in costs.values()) / 3600, 3),
        wall_hours=round(sum(c.wall_s for c in costs.values()) / 3600, 3),
        checks={name: costs[name].as_dict() for name in sorted(costs, key=lambda k: (k != STARTS, k))},
        assumptions=scope.estimates,
    )
