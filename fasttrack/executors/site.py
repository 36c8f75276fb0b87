"""The site profile: what a cluster needs that a plan does not say.

A small YAML file, e.g.::

    slurm:
      fasttrack: /shared/venv/bin/fasttrack   # the command that runs fasttrack on the nodes
      setup: ["module load cuda/12.9"]
      env: {HF_HOME: /shared/hf}
      partition: gb300
      account: inference
      sbatch: ["--exclusive"]                 # the shard arrays only
      placement: {mode: segment}              # one NVLink domain per engine (topology/block)
      max_parallel: 8                         # array throttle (%8)
      merge: {partition: cpu, time_min: 30}   # the merge job's own settings
    kubernetes:
      namespace: evals
      image: ghcr.io/myorg/fasttrack-pr@sha256:...
      env: {HF_HOME: /models/hf}
      queue: gpu-evals                        # Kueue LocalQueue (else waves of max_parallel shards)

Each scheduler reads its own section only: nothing of ``slurm:`` (a login host's paths, module loads, sbatch
lines) reaches a pod, and nothing of ``kubernetes:`` reaches a Slurm job. The top-level ``fasttrack``,
``setup``, ``env`` and ``validate_args`` of older profiles are the Slurm jobs' (a section's own value wins).

Unknown keys are errors (a typo must not silently drop a site's setting).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import Field, ValidationError, model_validator

from fasttrack.errors import FasttrackError
from fasttrack.modelbase import DocModel


class SlurmPlacement(DocModel):
    """How an engine's nodes are kept in one NVLink domain (the scope's ``hardware.node`` says when they must be)."""

    mode: Literal["auto", "segment", "switches", "constraint", "none"] = "auto"
    """``segment``: ``#SBATCH --segment=<engine nodes>`` (Slurm's topology/block plugin, 23.11 and later, with one
    block per NVLink domain: every engine's nodes come from one block); ``switches``: ``--switches=1@<wait>``
    (topology/tree with one leaf switch per domain); ``constraint``: ``--constraint=[a|b|...]`` over node features
    naming the domains (every node of the job from one of them); ``none``: no constraint (a cluster of one domain);
    ``auto``: ``segment`` when an engine spans nodes over the multi-node NVLink fabric, else ``none``."""
    switches_wait: str = "4:00:00"
    """How long Slurm may wait for nodes under one switch (``--switches=1@<this>``)."""
    domains: list[str] = []
    """Node features, one per NVLink domain (``constraint``), e.g. ``["nvl72-a", "nvl72-b"]``."""


class SlurmMerge(DocModel):
    """The merge job's own settings: it needs one node and no GPU, so the shards' partition and lines stay out."""

    partition: str | None = None
    """Default: the shards' partition."""
    account: str | None = None
    """Default: the shards' account."""
    qos: str | None = None
    sbatch: list[str] = []
    """Extra ``#SBATCH`` options for the merge job (the shards' ``sbatch`` lines are not applied to it)."""
    time_min: Annotated[int, Field(gt=0)] = 30


class SlurmSite(DocModel):
    fasttrack: str | None = None
    """The command that runs fasttrack on the nodes (default: the top-level ``fasttrack``, else ``fasttrack``)."""
    setup: list[str] | None = None
    """Shell lines before fasttrack in every job (module loads, venv activation)."""
    env: dict[str, str] | None = None
    """Environment for every job (a value for a GPU safety setting is passed on unchanged)."""
    validate_args: list[str] | None = None
    """Extra ``fasttrack validate`` arguments for every shard."""
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    gpus_per_node: Annotated[int | None, Field(ge=0)] = None
    """GPUs to request on each node (default: what the plan's engines use per node; 0: request none)."""
    sbatch: list[str] = []
    """Extra ``#SBATCH`` options for the shard arrays, e.g. ``--exclusive`` (not the merge job: ``merge.sbatch``)."""
    merge: SlurmMerge = SlurmMerge()
    placement: SlurmPlacement = SlurmPlacement()
    max_parallel: Annotated[int | None, Field(ge=1)] = None
    """Shards of one array running at once (``--array=...%N``); default: no limit (``--max-parallel`` overrides)."""
    container_image: str | None = None
    """Pyxis/enroot image: the batch script runs in it (``#SBATCH --container-image``) and so does
    every node task the multi-node launcher starts with ``srun``."""
    container_mounts: list[str] = []
    srun_args: list[str] = []
    """Extra ``srun`` options for the multi-node launcher's node tasks (``FASTTRACK_SRUN_ARGS``)."""
    time_factor: Annotated[float, Field(gt=0)] = 1.5
    """Time limit = the shard's estimated wall time x this factor + ``time_margin_min``."""
    time_margin_min: Annotated[int, Field(ge=0)] = 30
    max_time_min: Annotated[int | None, Field(gt=0)] = None
    """The partition's time limit: shards estimated longer are reported (use more shards)."""

    @model_validator(mode="before")
    @classmethod
    def _older_merge_keys(cls, data: Any) -> Any:
        """``merge_sbatch`` / ``merge_time_min`` of older profiles are ``merge.sbatch`` / ``merge.time_min``."""
        if isinstance(data, dict) and ("merge_sbatch" in data or "merge_time_min" in data):
            data = dict(data)
            merge = dict(data.get("merge") or {})
            if "merge_sbatch" in data:
                merge.setdefault("sbatch", data.pop("merge_sbatch"))
            if "merge_time_min" in data:
                merge.setdefault("time_min", data.pop("merge_time_min"))
            data["merge"] = merge
        return data


class KubernetesSite(DocModel):
    namespace: str = "default"
    image: str = "fasttrack-eval:latest"
    """The evaluation image (``fasttrack image`` builds one from the PR head); pin it by digest."""
    image_pull_policy: str = "IfNotPresent"
    fasttrack: str = "fasttrack"
    """The command that runs fasttrack in the image."""
    setup: list[str] = []
    """Shell lines before fasttrack in every pod."""
    env: dict[str, str] = {}
    """Environment for every pod (a value for a GPU safety setting is passed on unchanged)."""
    validate_args: list[str] = []
    """Extra ``fasttrack validate`` arguments for every shard."""
    storage_class: str | None = None
    """Storage class of the shared volume for the shard bundles (ReadWriteMany)."""
    storage_size: str = "50Gi"
    existing_claim: str | None = None
    """Use this PersistentVolumeClaim instead of creating one."""
    gpu_resource: str = "nvidia.com/gpu"
    gpus_per_node: Annotated[int | None, Field(ge=0)] = None
    node_selector: dict[str, str] = {}
    tolerations: list[dict[str, str]] = []
    service_account: str | None = None
    """The single-node shards' and the merge Job's service account (the drivers get one of their own)."""
    sign_key_secret: str | None = None
    """A Secret holding the signing key (file ``key``), mounted read-only where bundles are signed."""
    active_deadline_factor: Annotated[float, Field(gt=0)] = 1.5
    """A shard pod's deadline = the shard's estimated wall time x this factor + one hour."""
    volumes: list[dict[str, Any]] = []
    """Extra pod volumes (e.g. the model weights' cache), as Kubernetes writes them."""
    volume_mounts: list[dict[str, Any]] = []
    """Where those volumes go in every container."""
    shm_size: str = "64Gi"
    queue: str | None = None
    """Kueue LocalQueue: every Job and LeaderWorkerSet carries ``kueue.x-k8s.io/queue-name`` and Kueue admits them
    by quota. Without one, shards run in waves of ``max_parallel``."""
    max_parallel: Annotated[int, Field(ge=1)] = 4
    """Shards running at once without a queue (``--max-parallel`` overrides)."""
    queue_wait_s: Annotated[int, Field(ge=0)] = 86_400
    """With a queue: how long a driver may wait for its engines to be admitted, on top of its own deadline."""
    ttl_seconds_after_finished: Annotated[int, Field(ge=0)] = 86_400
    """Every Job is deleted this long after it finished, and the engines it owns with it."""
    compute_domain: Literal["auto", "always", "never"] = "auto"
    """NVIDIA DRA ComputeDomain per multi-node engine (IMEX channels, one NVLink domain): ``auto`` when an engine
    spans nodes over the multi-node NVLink fabric (``hardware.node.fabric: mnnvl``)."""
    nvlink_topology_key: str = "nvidia.com/gpu.clique"
    """Node label naming a node's NVLink domain: every pod of one engine is scheduled where it has one value."""


class SiteProfile(DocModel):
    fasttrack: str = "fasttrack"
    """The Slurm jobs' fasttrack command (older profiles; ``slurm.fasttrack`` wins)."""
    setup: list[str] = []
    """The Slurm jobs' setup lines (older profiles; ``slurm.setup`` wins)."""
    env: dict[str, str] = {}
    """The Slurm jobs' environment (older profiles; ``slurm.env`` wins)."""
    validate_args: list[str] = []
    """The Slurm shards' extra validate arguments (older profiles; ``slurm.validate_args`` wins)."""
    slurm: SlurmSite = SlurmSite()
    kubernetes: KubernetesSite = KubernetesSite()

    @property
    def slurm_fasttrack(self) -> str:
        return self.slurm.fasttrack or self.fasttrack

    @property
    def slurm_setup(self) -> list[str]:
        return list(self.slurm.setup if self.slurm.setup is not None else self.setup)

    @property
    def slurm_env(self) -> dict[str, str]:
        return dict(self.slurm.env if self.slurm.env is not None else self.env)

    @property
    def slurm_validate_args(self) -> list[str]:
        return list(self.slurm.validate_args if self.slurm.validate_args is not None else self.validate_args)


def load_site(path: str | Path | None) -> SiteProfile:
    """The site profile at ``path`` (None: the defaults)."""
    if path is None:
        return SiteProfile()
    p = Path(path)
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8")) or {}
    except OSError as exc:
        raise FasttrackError(f"cannot read the site profile {str(p)!r}: {exc}.") from None
    except yaml.YAMLError as exc:
        raise FasttrackError(f"the site profile {str(p)!r} is not valid YAML: {exc}.") from None
    try:
        return SiteProfile.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(x) for x in e['loc'])}: {e['msg']}" for e in exc.errors())
        raise FasttrackError(
            f"the site profile {str(p)!r} is not valid: {problems}.",
            hint="See docs/scale-out.md (site profile) for the fields.",
        ) from None


def image_digest(image: str | None) -> str | None:
    """The ``sha256:...`` digest a reference pins (``name@sha256:...``), else None."""
    if not image:
        return None
    _, at, digest = image.rpartition("@")
    return digest if at and digest.startswith("sha256:") and len(digest) == 71 else None


def image_env(image: str | None) -> dict[str, str]:
    """What a job run in ``image`` tells fasttrack about it: the reference, and the digest when the
    reference pins one (``name@sha256:...``), which the bundle's provenance records."""
    if not image:
        return {}
    env = {"FASTTRACK_IMAGE_REF": image}
    digest = image_digest(image)
    if digest:
        env["FASTTRACK_IMAGE_DIGEST"] = digest
    return env
