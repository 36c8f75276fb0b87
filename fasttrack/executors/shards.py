"""A plan's shards as a scheduler sees them: nodes, GPUs per node and time of each.

fasttrack shards a plan deterministically (``--shard i/n``, :func:`fasttrack.planning.plan.build_plan`, by the
registered checks' costs); this module asks the plan for every shard and summarises what one shard's
allocation needs: the most nodes any of its engines spans (engines run one after another, so the
allocation is sized for the largest), the GPUs per node those engines use, and the wall
time the plan's estimate gives it (:mod:`fasttrack.planning.cost`; the layout's totals are the shards' sums, each shard
running the engine-less checks itself). Shards of one shape (nodes, GPUs per node) form one
job array; ``"groups"`` as the shard count gives one shard per engine group, so every
shard's allocation fits its engine exactly.
"""

from __future__ import annotations

import re
from dataclasses import KW_ONLY, dataclass, field, replace
from typing import Any

from fasttrack.checks.base import build_run_plan
from fasttrack.errors import FasttrackError
from fasttrack.pipeline.options import ValidateOptions
from fasttrack.scope import LoadedScope


@dataclass
class ShardRunOptions:
    """What every scheduler renders for a plan's shards, beyond the plan and the site (``fasttrack slurm`` and
    ``fasttrack k8s`` add their own)."""

    validate: ValidateOptions
    """What every shard's ``fasttrack validate`` runs with (the scheduler adds the shard, its run folder and its
    engines): the scope as the nodes name it (a suite name, or an absolute path to a scope.yaml), the tier, the
    keys that sign each bundle (as the nodes see them), the PR (``--repo --base --head``)."""
    _: KW_ONLY
    gpus_per_node: int | None = None
    validate_args: list[str] = field(default_factory=list)
    """More ``fasttrack validate`` arguments for every shard, after the site's."""
    max_parallel: int | None = None
    """Shards running at once (default: the site's limit for the scheduler; Slurm: else no limit)."""

    @property
    def model(self) -> str:
        return self.validate.model

    def validate_argv(self, site_args: list[str], **shard: Any) -> list[str]:
        """``validate`` and its arguments for a shard: these options with ``shard``'s (e.g. ``shard``, ``out``,
        ``force``) in their place, then the site's arguments, then the options' own."""
        return ["validate", *replace(self.validate, **shard).to_argv(), *site_args, *self.validate_args]

    def pr_record(self) -> dict[str, str | None] | None:
        """The PR as the job record names it (None without a head)."""
        v = self.validate
        if not v.head:
            return None
        return {"repo": str(v.repo) if v.repo is not None else None, "base": v.base, "head": v.head}


@dataclass(frozen=True)
class ShardSpec:
    """One shard of the plan and the allocation it needs."""

    index: int
    count: int
    groups: tuple[str, ...]
    """Engine groups (ids) the shard runs; empty: only engine-less checks (e.g. kernels)."""
    points: int
    nodes: int
    """Nodes of the largest engine in the shard (1 when it has no multi-node engine)."""
    gpus_per_node: int
    """GPUs each node's engine ranks use (0 on CPU scopes)."""
    engine_starts: int
    wall_s: float
    """The plan's estimate of the shard's wall time (seconds)."""
    node_hours: float = 0.0
    gpu_hours: float = 0.0
    """The shard plan's estimate (:mod:`fasttrack.planning.cost`): every shard pays its own engine-less checks."""

    @property
    def label(self) -> str:
        return f"{self.index}/{self.count}"

    @property
    def dirname(self) -> str:
        """The shard's run folder under the job folder's ``shards/``."""
        return f"shard-{self.index}-of-{self.count}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "shard": self.label,
            "dir": f"shards/{self.dirname}",
            "groups": list(self.groups),
            "points": self.points,
            "nodes": self.nodes,
            "gpus_per_node": self.gpus_per_node,
            "engine_starts": self.engine_starts,
            "estimated_wall_s": round(self.wall_s, 1),
            "estimated_node_hours": self.node_hours,
            "estimated_gpu_hours": self.gpu_hours,
        }


@dataclass
class ArraySpec:
    """Shards of one shape: one Slurm job array (one Kubernetes Indexed Job when ``nodes == 1``)."""

    nodes: int
    gpus_per_node: int
    shards: list[ShardSpec] = field(default_factory=list)

    @property
    def key(self) -> str:
        """``2n4g``: 2 nodes of 4 GPUs; ``1n`` on a CPU scope."""
        return f"{self.nodes}n" + (f"{self.gpus_per_node}g" if self.gpus_per_node else "")

    @property
    def indices(self) -> list[int]:
        return [s.index for s in self.shards]

    @property
    def max_wall_s(self) -> float:
        return max((s.wall_s for s in self.shards), default=0.0)


@dataclass
class ShardLayout:
    """Every shard of one plan (scope, tier, shard count) and the arrays they form."""

    scope: str
    scope_path: str
    scope_sha256: str
    tier: str
    count: int
    fingerprint: str
    gpu: bool
    node_kind: str | None
    shards: list[ShardSpec]
    total_wall_s: float
    node_hours: float
    gpu_hours: float
    fabric: str | None = None
    """What joins an engine's nodes (the scope's ``hardware.node.fabric``): ``mnnvl`` asks for one NVLink domain."""
    nvlink_domain: int | None = None
    """GPUs in one NVLink domain (``hardware.node.nvlink_domain``)."""

    @property
    def one_domain(self) -> bool:
        """Whether an engine spanning nodes must lie in one NVLink domain (the multi-node NVLink fabric)."""
        return self.fabric == "mnnvl"

    @property
    def arrays(self) -> list[ArraySpec]:
        """One array per (nodes, GPUs per node), fewest nodes first."""
        by: dict[tuple[int, int], ArraySpec] = {}
        for s in self.shards:
            by.setdefault((s.nodes, s.gpus_per_node), ArraySpec(s.nodes, s.gpus_per_node)).shards.append(s)
        return [by[k] for k in sorted(by)]

    def shard(self, index: int) -> ShardSpec:
        return self.shards[index - 1]

    def as_dict(self) -> dict[str, Any]:
        return {
            "scope": self.scope,
            "scope_path": self.scope_path,
            "scope_sha256": self.scope_sha256,
            "tier": self.tier,
            "shard_count": self.count,
            "plan_fingerprint": self.fingerprint,
            "gpu": self.gpu,
            "node_kind": self.node_kind,
            "fabric": self.fabric,
            "nvlink_domain": self.nvlink_domain,
            "estimate": {
                "wall_hours_sum": round(self.total_wall_s / 3600, 3),
                "node_hours": self.node_hours,
                "gpu_hours": self.gpu_hours,
            },
            "shards": [s.as_dict() for s in self.shards],
        }


def parse_shard_count(spec: str | int | None, groups: int) -> int:
    """``"groups"`` (or None): one shard per engine group; else a positive integer."""
    if spec is None or spec == "groups":
        return max(groups, 1)
    try:
        n = int(spec)
    except (TypeError, ValueError):
        n = 0
    if n < 1:
        raise FasttrackError(
            f"--shards {spec!r} is neither a positive number nor 'groups'.",
            hint="e.g. --shards groups (one shard per engine group) or --shards 8.",
        )
    return n


def layout(loaded: LoadedScope, *, tier: str, shards: str | int | None = None) -> ShardLayout:
    """Build the plan of every shard and summarise each shard's allocation."""
    scope = loaded.scope
    full = build_run_plan(scope, tier=tier, scope_sha256=loaded.sha256)
    n = parse_shard_count(shards, len(full.groups))
    gpu = scope.hardware is not None and scope.hardware.device == "gpu"
    smallest = min(full.groups, key=lambda g: (g.nodes, g.gpus), default=None)
    specs: list[ShardSpec] = []
    for i in range(1, n + 1):
        plan = full if n == 1 else build_run_plan(scope, tier=tier, shard=f"{i}/{n}", scope_sha256=loaded.sha256)
        groups = plan.groups or ([smallest] if smallest is not None else [])
        nodes = max((g.nodes for g in groups), default=1)
        per_node = max(((g.gpus_per_node or 0) if g.nodes > 1 else g.gpus for g in groups), default=0)
        specs.append(
            ShardSpec(
                index=i,
                count=n,
                groups=tuple(g.id for g in plan.groups),
                points=len(plan.points),
                nodes=max(nodes, 1),
                gpus_per_node=per_node if gpu else 0,
                engine_starts=plan.estimate.engine_starts,
                wall_s=plan.estimate.wall_hours * 3600,
                node_hours=plan.estimate.node_hours,
                gpu_hours=plan.estimate.gpu_hours,
            )
        )
    kinds = {g.node_kind for g in full.groups if g.node_kind}
    node = scope.hardware.node if scope.hardware is not None else None
    return ShardLayout(
        scope=scope.name,
        scope_path=str(loaded.path),
        scope_sha256=loaded.sha256,
        tier=full.tier,
        count=n,
        fingerprint=full.fingerprint,
        gpu=gpu,
        node_kind=sorted(kinds)[0] if kinds else None,
        shards=specs,
        # the shards' sums: each shard runs the engine-less checks (kernels) itself
        total_wall_s=sum(s.wall_s for s in specs),
        node_hours=round(sum(s.node_hours for s in specs), 3),
        gpu_hours=round(sum(s.gpu_hours for s in specs), 3),
        fabric=node.fabric if node is not None else None,
        nvlink_domain=node.nvlink_domain if node is not None else None,
    )


def job_name(*parts: str) -> str:
    """A scheduler-safe name (lowercase letters, digits and dashes; at most 63 characters)."""
    s = re.sub(r"[^a-z0-9-]+", "-", "-".join(parts).lower()).strip("-")
    return re.sub(r"-{2,}", "-", s)[:63].strip("-") or "fasttrack"
