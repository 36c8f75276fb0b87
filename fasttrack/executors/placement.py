"""Placement in one NVLink domain: what a scheduler is asked so that an engine's nodes share one.

The scope's node model (``hardware.node``) says when it matters: an engine that spans nodes over
the multi-node NVLink fabric (``fabric: mnnvl``, e.g. TP16 on four GB300 trays of one NVL72
rack) runs only when every node is in one NVLink domain (one IMEX domain, one fabric clique).

* **Slurm**: one ``#SBATCH`` option per array whose engines span nodes, chosen by the site's
  ``slurm.placement.mode``: ``--segment=N`` (the topology/block plugin with one block per
  domain: the N nodes come from one block), ``--switches=1@WAIT`` (topology/tree with one leaf
  switch per domain), ``--constraint=[a|b|...]`` (node features naming the domains: every node
  from one of them), or none. ``auto`` is ``segment`` when the scope asks for one domain.
* **Kubernetes**: a ``ComputeDomain`` of the NVIDIA DRA driver per multi-node engine (its
  IMEX channel reaches every pod through a resource claim on the LeaderWorkerSet's pods), and
  a required pod affinity on the node label naming the domain (``nvidia.com/gpu.clique``), so
  every pod of the engine lands in one clique.
"""

from __future__ import annotations

from typing import Any

from fasttrack.errors import FasttrackError
from fasttrack.executors.shards import ShardLayout
from fasttrack.executors.site import KubernetesSite, SlurmPlacement

COMPUTE_DOMAIN_API = "resource.nvidia.com/v1beta1"
"""The ComputeDomain API of the NVIDIA DRA driver for GPUs (tests/executors/schemas/README.md: the vendored CRD)."""
CHANNEL_CLAIM = "imex-channel"
"""The name of the pods' resource claim on the ComputeDomain's IMEX channel."""


def slurm_mode(layout: ShardLayout, nodes: int, placement: SlurmPlacement) -> str:
    """The placement mode for an array of ``nodes``-node shards (``none`` for single-node shards)."""
    if nodes <= 1:
        return "none"
    if placement.mode == "auto":
        return "segment" if layout.one_domain else "none"
    return placement.mode


def slurm_lines(layout: ShardLayout, nodes: int, placement: SlurmPlacement) -> list[str]:
    """The ``#SBATCH`` lines (with a comment saying why) that keep an array's engine nodes in one NVLink domain."""
    mode = slurm_mode(layout, nodes, placement)
    if mode == "none":
        if nodes > 1 and layout.one_domain:
            return ["# placement: none (slurm.placement.mode); the engines need one NVLink domain"]
        return []
    why = (
        f"# placement: the engine's {nodes} nodes in one NVLink domain"
        + (f" ({layout.nvlink_domain} GPUs)" if layout.nvlink_domain else "")
        + f", slurm.placement.mode {mode}"
    )
    if mode == "segment":
        return [why, f"#SBATCH --segment={nodes}"]
    if mode == "switches":
        return [why, f"#SBATCH --switches=1@{placement.switches_wait}"]
    if not placement.domains:
        raise FasttrackError(
            "slurm.placement.mode constraint needs slurm.placement.domains: the node features naming the NVLink "
            "domains.",
            hint='e.g. placement: {mode: constraint, domains: ["nvl72-a", "nvl72-b"]}',
        )
    return [why, f"#SBATCH --constraint=[{'|'.join(placement.domains)}]"]


def wants_compute_domain(layout: ShardLayout, nodes: int, k: KubernetesSite) -> bool:
    """Whether a ``nodes``-node engine gets a ComputeDomain (the site's ``kubernetes.compute_domain``)."""
    if nodes <= 1 or k.compute_domain == "never":
        return False
    return k.compute_domain == "always" or layout.one_domain


def compute_domain(name: str, meta: dict[str, Any], nodes: int) -> dict[str, Any]:
    """A ComputeDomain for one engine of ``nodes`` nodes; its channel's ResourceClaimTemplate is ``<name>-channel``
    (the DRA driver creates it)."""
    return {
        "apiVersion": COMPUTE_DOMAIN_API,
        "kind": "ComputeDomain",
        "metadata": {**meta, "name": name},
        "spec": {"numNodes": nodes, "channel": {"resourceClaimTemplate": {"name": f"{name}-channel"}}},
    }


def claim_pod(spec: dict[str, Any], domain: str, k: KubernetesSite, selector: dict[str, str]) -> None:
    """Put a LeaderWorkerSet pod's ``spec`` in the ComputeDomain ``domain``: the resource claim on its IMEX channel
    (every container takes it) and a required affinity to the pods of ``selector`` on the NVLink domain's node label."""
    spec["resourceClaims"] = [{"name": CHANNEL_CLAIM, "resourceClaimTemplateName": f"{domain}-channel"}]
    for c in spec["containers"]:
        c.setdefault("resources", {})["claims"] = [{"name": CHANNEL_CLAIM}]
    spec["affinity"] = {
        "podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": dict(selector)}, "topologyKey": k.nvlink_topology_key}
            ]
        }
    }
