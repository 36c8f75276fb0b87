"""The site profile: what a cluster needs that a plan does not say.

A small YAML file, e.g.::

    fasttrack: fasttrack                 # the command that runs fasttrack on the nodes
    setup: ["source /shared/venv/bin/activate"]
    env: {HF_HOME: /shared/hf}
    slurm:
      partition: gb300
      account: inference
      gpus_per_node: 4
      sbatch: ["--exclusive", "--constraint=nvl72"]
      container_image: nvcr.io#myorg/fasttrack-eval:0.1.0
      container_mounts: ["/shared:/shared"]
    kubernetes:
      namespace: evals
      image: ghcr.io/myorg/fasttrack-eval:0.1.0
      storage_class: shared-rwx

Unknown keys are errors (a typo must not silently drop a site's setting).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from fasttrack.errors import FasttrackError


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)


class SlurmSite(_Model):
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    gpus_per_node: Annotated[int | None, Field(ge=0)] = None
    """GPUs to request on each node (default: what the plan's engines use per node; 0: request none)."""
    sbatch: list[str] = []
    """Extra ``#SBATCH`` options for every job, e.g. ``--exclusive`` or ``--constraint=nvl72``."""
    merge_sbatch: list[str] = []
    """Extra ``#SBATCH`` options for the merge job only (it needs no GPU)."""
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
    merge_time_min: Annotated[int, Field(gt=0)] = 30


class KubernetesSite(_Model):
    namespace: str = "default"
    image: str = "fasttrack-eval:latest"
    """The evaluation image (examples/image/Containerfile)."""
    image_pull_policy: str = "IfNotPresent"
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
    sign_key_secret: str | None = None
    """A Secret holding the signing key (file ``key``), mounted read-only in the merge Job."""
    active_deadline_factor: Annotated[float, Field(gt=0)] = 1.5
    """A shard pod's deadline = the shard's estimated wall time x this factor + one hour."""
    volumes: list[dict[str, Any]] = []
    """Extra pod volumes (e.g. the model weights' cache), as Kubernetes writes them."""
    volume_mounts: list[dict[str, Any]] = []
    """Where those volumes go in every container."""
    shm_size: str = "64Gi"


class SiteProfile(_Model):
    fasttrack: str = "fasttrack"
    """The command that runs fasttrack on the nodes (e.g. ``/shared/venv/bin/fasttrack``)."""
    setup: list[str] = []
    """Shell lines run before fasttrack in every job (module loads, venv activation)."""
    env: dict[str, str] = {}
    """Environment for every job."""
    validate_args: list[str] = []
    """Extra ``fasttrack validate`` arguments for every shard (e.g. ``--allow-hardware-mismatch``)."""
    slurm: SlurmSite = SlurmSite()
    kubernetes: KubernetesSite = KubernetesSite()


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


def image_env(image: str | None) -> dict[str, str]:
    """What a job run in ``image`` tells fasttrack about it: the reference, and the digest when the
    reference pins one (``name@sha256:...``), which the bundle's provenance records."""
    if not image:
        return {}
    env = {"FASTTRACK_IMAGE_REF": image}
    _, at, digest = image.rpartition("@")
    if at and digest.startswith("sha256:"):
        env["FASTTRACK_IMAGE_DIGEST"] = digest
    return env
