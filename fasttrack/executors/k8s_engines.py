"""The engines of one multi-node shard on Kubernetes: per side a LeaderWorkerSet, a Service for its leader and,
where the engine needs one NVLink domain, a ComputeDomain.

Every engine pod runs the command line local and Slurm engines get (:mod:`fasttrack.engine.cmdline`, through
:class:`PodExecutor`): ``python -m fasttrack.engine.node_main leader|follower`` with the scope's arguments, the
path-evidence settings, the multi-node flags and the GPU safety settings; the node script writes the node's
hardware report on the shared volume before vLLM starts. The objects are not applied with the rest: the shard's
driver Job creates them when its turn comes (:mod:`fasttrack.executors.k8s_drive`), each owned by the driver Job
(an owner reference the driver completes with its uid), so deleting the Job, or its TTL, deletes them; the driver
deletes them itself when the shard ends.
"""

from __future__ import annotations

from typing import Any

from fasttrack.engine.cmdline import EngineCommand, Rendezvous, Role, engine_command, serve_spec
from fasttrack.executors.k8s_objects import (
    API_PORT,
    BUNDLES,
    JOB_LABEL,
    LWS_API,
    MASTER_PORT,
    container,
    meta,
    owner_ref,
    pod_spec,
    resources,
)
from fasttrack.executors.placement import claim_pod, compute_domain, wants_compute_domain
from fasttrack.executors.shards import ShardLayout, ShardSpec
from fasttrack.executors.site import KubernetesSite, image_env


class PodExecutor:
    """A LeaderWorkerSet pod (:class:`~fasttrack.engine.cmdline.Executor`): the image's fasttrack runs the node
    (``python -m fasttrack.engine.node_main leader|follower``, which picks the image's vLLM entry point); the
    leader pod is node 0, a worker pod node ``$(LWS_WORKER_INDEX)``; the ranks meet at
    ``$(LWS_LEADER_ADDRESS)``. Kubernetes expands both in the command."""

    name = "pod"
    bind_host = "0.0.0.0"

    def entry(self, python: str, role: Role) -> list[str]:
        return [python, "-m", "fasttrack.engine.node_main", role]

    def rank(self, rank: int) -> str:
        return "0" if rank == 0 else "$(LWS_WORKER_INDEX)"

    def node_env(self, env: dict[str, str], *, python: str, rank: int | None, nnodes: int) -> dict[str, str]:
        return env


def engine_run_dir(shard: ShardSpec) -> str:
    """The run folder of a multi-node shard's engines on the shared volume: their profiler traces and node
    reports go under it, outside the shard's own run folder (which the driver's ``validate --force`` replaces)."""
    return f"{BUNDLES}/engines/{shard.dirname}"


def engine_commands(
    scope: Any, group: Any, side: str, shard: ShardSpec, k: KubernetesSite, image: str | None
) -> tuple[EngineCommand, EngineCommand]:
    """The leader's and the workers' command line and environment for one side of a multi-node shard."""
    spec = serve_spec(
        scope,
        group,
        side,
        model=scope.model.id,
        run_dir=engine_run_dir(shard),
        name=f"{group.id}.{side}.0",
        per_request_metrics=True,  # the image's vLLM (0.26 and 0.32 both have them), not the renderer's
    )
    meet = Rendezvous(shard.nodes, "$(LWS_LEADER_ADDRESS)", MASTER_PORT)
    host_env = {**k.env, **image_env(image or k.image)}
    lead, follow = (
        engine_command(
            spec, executor=PodExecutor(), python="python", host_env=host_env, api_port=API_PORT, rank=r, rendezvous=meet
        )
        for r in (0, 1)
    )
    return lead, follow


def engine_name(base: str, shard: ShardSpec, side: str) -> str:
    return f"{base}-s{shard.index}-{side[:4]}"


def engine_url(base: str, shard: ShardSpec, side: str, k: KubernetesSite) -> str:
    return f"http://{engine_name(base, shard, side)}-api.{k.namespace}.svc:{API_PORT}"


def _engine_pod(
    k: KubernetesSite, image: str, cmd: EngineCommand, name: str, per_node: int, mounts: list[Any], probe: bool
) -> dict[str, Any]:
    env = [{"name": n, "value": v} for n, v in sorted(cmd.env.items())]
    c = container(name, image, k, cmd.argv, env, mounts)
    c["resources"] = resources(k, per_node)
    if probe:
        c["ports"] = [{"containerPort": API_PORT, "name": "api"}]
        c["readinessProbe"] = {"httpGet": {"path": "/health", "port": API_PORT}, "periodSeconds": 10}
    return c


def engine_objects(
    layout: ShardLayout,
    shard: ShardSpec,
    group: Any,
    scope: Any,
    k: KubernetesSite,
    *,
    base: str,
    driver: str,
    image: str,
    per_node: int,
    vols: list[Any],
    mounts: list[Any],
) -> list[dict[str, Any]]:
    """Both sides' engine objects of a multi-node shard, in creation order (ComputeDomains first), each owned by
    the driver Job ``driver``."""
    out: list[dict[str, Any]] = []
    domain = wants_compute_domain(layout, shard.nodes, k)
    for side in ("baseline", "candidate"):
        name = engine_name(base, shard, side)
        lead, follow = engine_commands(scope, group, side, shard, k, image)
        labels = {"fasttrack.dev/shard": str(shard.index), "fasttrack.dev/side": side}
        owned = {"ownerReferences": [owner_ref(driver)]}
        templates = {}
        for role, cmd, probe in (("leader", lead, True), ("worker", follow, False)):
            box = _engine_pod(k, image, cmd, f"vllm-{role}", per_node, mounts, probe)
            spec = pod_spec(k, [box], vols, restart=None)
            if domain:
                claim_pod(spec, f"{name}-cd", k, {JOB_LABEL: base, **labels})
            templates[role] = {
                "metadata": {"labels": {JOB_LABEL: base, **labels, "fasttrack.dev/role": role}},
                "spec": spec,
            }
        if domain:
            out.append(compute_domain(f"{name}-cd", {**meta(name, k, base, labels=labels), **owned}, shard.nodes))
        out.append(
            {
                "apiVersion": LWS_API,
                "kind": "LeaderWorkerSet",
                "metadata": {**meta(name, k, base, queue=True, labels=labels), **owned},
                "spec": {
                    "replicas": 1,
                    "startupPolicy": "LeaderCreated",
                    "leaderWorkerTemplate": {
                        "size": shard.nodes,
                        "restartPolicy": "RecreateGroupOnPodRestart",
                        "leaderTemplate": templates["leader"],
                        "workerTemplate": templates["worker"],
                    },
                },
            }
        )
        out.append(
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {**meta(f"{name}-api", k, base, labels=labels), **owned},
                "spec": {
                    "selector": {
                        "leaderworkerset.sigs.k8s.io/name": name,
                        "leaderworkerset.sigs.k8s.io/worker-index": "0",
                    },
                    "ports": [{"name": "api", "port": API_PORT, "targetPort": API_PORT}],
                },
            }
        )
    return out
