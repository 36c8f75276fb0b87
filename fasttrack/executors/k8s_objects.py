"""The pieces every rendered Kubernetes object shares: names, labels, the pods' environment, volumes and Jobs."""

from __future__ import annotations

from typing import Any

from fasttrack.engine.cmdline import host_safety_env
from fasttrack.errors import FasttrackError
from fasttrack.executors.site import KubernetesSite, image_env

BUNDLES = "/bundles"
KEY_DIR = "/fasttrack-key"
ENGINES_DIR = "/fasttrack-engines"
EXIT_STATUS = "exit-status"
EXIT_NOTE = "exit-note"
API_PORT = 8000
MASTER_PORT = 29500
LWS_API = "leaderworkerset.x-k8s.io/v1"
JOB_LABEL = "fasttrack.dev/job"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
OWNER_UID = "$(JOB_UID)"
"""The driver Job's uid in a rendered engine object's owner reference; the driver puts its own there (its pod
reads it from the label the Job controller sets, ``batch.kubernetes.io/controller-uid``)."""


def meta(
    name: str, k: KubernetesSite, base: str, *, queue: bool = False, labels: dict[str, str] | None = None
) -> dict[str, Any]:
    """An object's metadata: its name, namespace and labels (the job's, ``labels``; Kueue's queue where the object
    is a workload Kueue admits and the site names a queue)."""
    out = {JOB_LABEL: base, **(labels or {})}
    if queue and k.queue:
        out[QUEUE_LABEL] = k.queue
    return {"name": name, "namespace": k.namespace, "labels": out}


def owner_ref(job: str) -> dict[str, Any]:
    """An owner reference to the driver Job ``job`` (its uid filled in by the driver when it creates the object)."""
    return {"apiVersion": "batch/v1", "kind": "Job", "name": job, "uid": OWNER_UID, "blockOwnerDeletion": False}


def pod_env(k: KubernetesSite, extra: dict[str, str] | None = None, image: str | None = None) -> list[dict[str, str]]:
    """A pod's environment: the site's Kubernetes ``env`` (with the GPU safety settings: its value, else the safe
    one) and the image it runs in."""
    env = {**k.env, **image_env(image or k.image), **(extra or {}), **host_safety_env(k.env)}
    return [{"name": n, "value": v} for n, v in sorted(env.items())]


def volumes(k: KubernetesSite, claim: str, sign: bool) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    vols: list[dict[str, Any]] = [
        {"name": "bundles", "persistentVolumeClaim": {"claimName": claim}},
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": k.shm_size}},
        *k.volumes,
    ]
    mounts: list[dict[str, Any]] = [
        {"name": "bundles", "mountPath": BUNDLES},
        {"name": "dshm", "mountPath": "/dev/shm"},
        *k.volume_mounts,
    ]
    if sign:
        if not k.sign_key_secret:
            raise FasttrackError(
                "--sign-key needs kubernetes.sign_key_secret in the site profile (a Secret holding the key, which the "
                f"pods see under {KEY_DIR}).",
                hint="kubectl create secret generic fasttrack-key --from-file=key=keys/me; then "
                f"--sign-key {KEY_DIR}/key",
            )
        vols.append({"name": "sign-key", "secret": {"secretName": k.sign_key_secret, "defaultMode": 0o400}})
        mounts.append({"name": "sign-key", "mountPath": KEY_DIR, "readOnly": True})
    return vols, mounts


def pod_spec(
    k: KubernetesSite,
    containers: list[dict[str, Any]],
    vols: list[dict[str, Any]],
    *,
    restart: str | None,
    service_account: str | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": containers, "volumes": vols, "terminationGracePeriodSeconds": 60}
    if restart:
        spec["restartPolicy"] = restart
    if k.node_selector:
        spec["nodeSelector"] = dict(k.node_selector)
    if k.tolerations:
        spec["tolerations"] = [dict(t) for t in k.tolerations]
    account = service_account or k.service_account
    if account:
        spec["serviceAccountName"] = account
    return spec


def resources(k: KubernetesSite, gpus: int) -> dict[str, Any]:
    return {"limits": {k.gpu_resource: gpus}} if gpus else {}


def container(
    name: str, image: str, k: KubernetesSite, command: list[str], env: list[dict[str, Any]], mounts: list[Any]
) -> dict[str, Any]:
    return {
        "name": name,
        "image": image,
        "imagePullPolicy": k.image_pull_policy,
        "command": command,
        "env": env,
        "volumeMounts": mounts,
    }


def job(
    name: str,
    base: str,
    role: str,
    k: KubernetesSite,
    box: dict[str, Any],
    vols: list[Any],
    *,
    queue: bool = False,
    service_account: str | None = None,
    labels: dict[str, str] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """A Job of one pod template (``role`` labels it), deleted ``ttl_seconds_after_finished`` after it ends (and with
    it what it owns); ``queue``: Kueue admits it (the site's queue)."""
    extra = {"fasttrack.dev/role": role, **(labels or {})}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta(name, k, base, queue=queue, labels=extra),
        "spec": {
            **spec,
            "ttlSecondsAfterFinished": k.ttl_seconds_after_finished,
            "template": {
                "metadata": {"labels": {JOB_LABEL: base, **extra}},
                "spec": pod_spec(k, [box], vols, restart="Never", service_account=service_account),
            },
        },
    }
