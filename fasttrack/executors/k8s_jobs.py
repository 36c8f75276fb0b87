"""Applying rendered Kubernetes manifests with ``kubectl`` and reading their Jobs' state back: the Kubernetes
scheduler (:class:`KubernetesScheduler`, registered as ``kubernetes``, its job record's ``executor``).

The folder :func:`fasttrack.executors.k8s.write` wrote is what it submits (``kubectl apply -f``) and what it reads
the run from (its job ConfigMap holds ``fasttrack-job.json``); the state of each shard is its Job's, as
``kubectl get jobs`` reports it: a single-node shard's completion index of the Indexed Job (completed, failed or
not yet), a multi-node shard's driver Job.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

from fasttrack import registry
from fasttrack.errors import FasttrackError
from fasttrack.executors.collect import JOB_FILE
from fasttrack.executors.k8s import K8sOptions, K8sRender, describe_absent, render, write
from fasttrack.executors.k8s_objects import JOB_LABEL
from fasttrack.executors.scheduler import MergeNotes, Rendered, Scheduler
from fasttrack.executors.shards import ShardLayout, ShardRunOptions
from fasttrack.executors.site import SiteProfile


def _kubectl(*args: str) -> str:
    tool = shutil.which("kubectl")
    if tool is None:
        raise FasttrackError(
            "kubectl is not on PATH: submitting and reading the state of the shards needs a Kubernetes client.",
            hint="`fasttrack k8s render -o DIR` writes the manifests without one (kubectl apply -f DIR applies them).",
        )
    res = subprocess.run([tool, *args], capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise FasttrackError(f"kubectl {' '.join(args[:2])} failed (exit {res.returncode}): {res.stderr.strip()}")
    return res.stdout


def manifest_job(folder: Path) -> dict[str, Any]:
    """The job record the manifests in ``folder`` carry (their job ConfigMap's ``fasttrack-job.json``)."""
    for p in sorted(folder.glob("*-configmap-*.yaml")):
        doc = yaml.safe_load(p.read_text())
        data = (doc or {}).get("data") or {}
        if JOB_FILE in data:
            job: dict[str, Any] = json.loads(data[JOB_FILE])
            return job
    raise FasttrackError(
        f"{folder} holds no rendered fasttrack manifests (no ConfigMap with {JOB_FILE}).",
        hint="Give the folder `fasttrack k8s render -o DIR` wrote.",
    )


def _ranges(spec: str | None) -> set[int]:
    """``"0-2,5"`` (an Indexed Job's completed or failed indexes) as ``{0, 1, 2, 5}``."""
    out: set[int] = set()
    for part in (spec or "").split(","):
        a, _, b = part.strip().partition("-")
        if a.isdigit():
            out |= set(range(int(a), int(b) + 1)) if b.isdigit() else {int(a)}
    return out


def job_state(job: dict[str, Any], index: int | None) -> str:
    """A Job's state (of completion ``index`` of an Indexed Job) from its ``status``."""
    st = job.get("status") or {}
    if index is not None:
        if index in _ranges(st.get("completedIndexes")):
            return "succeeded"
        if index in _ranges(st.get("failedIndexes")):
            return "failed"
    elif st.get("succeeded"):
        return "succeeded"
    elif st.get("failed"):
        return "failed"
    return "running" if st.get("active") else "pending"


def shard_states(record: dict[str, Any], jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each shard of the job record with its Job, completion index and state (``jobs``: ``kubectl get jobs``)."""
    by_name = {j["metadata"]["name"]: j for j in jobs}
    out = []
    for s in record["shards"]:
        where = (record.get("shard_jobs") or {}).get(s["shard"], {})
        name, idx = where.get("job"), where.get("completion_index")
        kjob = by_name.get(name or "")
        state = job_state(kjob, idx) if kjob is not None else "not found"
        out.append({"shard": s["shard"], "nodes": s["nodes"], "job": name, "completion_index": idx, "state": state})
    return out


class KubernetesScheduler:
    """Kubernetes (:class:`~fasttrack.executors.scheduler.Scheduler`): Jobs, LeaderWorkerSets and a merge Job,
    applied with ``kubectl``."""

    name = "kubernetes"

    def render(self, layout: ShardLayout, site: SiteProfile, opts: ShardRunOptions) -> K8sRender:
        if not isinstance(opts, K8sOptions):
            raise TypeError("the Kubernetes scheduler renders K8sOptions")
        return render(layout, site, opts)

    def write(self, rendered: Rendered, out: Path) -> list[Path]:
        if not isinstance(rendered, K8sRender):
            raise TypeError("the Kubernetes scheduler writes what it rendered")
        return write(rendered, out)

    def submit(self, where: Path) -> dict[str, Any]:
        """``kubectl apply -f`` the manifests folder; the objects kubectl named."""
        record = manifest_job(where)
        out = _kubectl("apply", "-f", str(where))
        return {"name": record["name"], "namespace": record["namespace"], "applied": out.split("\n")[:-1]}

    def status(self, where: Path) -> dict[str, Any]:
        """Each shard's Job state (``kubectl get jobs`` of the run's label in its namespace)."""
        record = manifest_job(where)
        got = json.loads(
            _kubectl("get", "jobs", "-n", record["namespace"], "-l", f"{JOB_LABEL}={record['name']}", "-o", "json")
        )
        jobs = got.get("items") or []
        merge = next((j for j in jobs if j["metadata"]["name"] == f"{record['name']}-merge"), None)
        return {
            "scope": record["scope"],
            "tier": record["tier"],
            "namespace": record["namespace"],
            "shards": shard_states(record, jobs),
            "merge": {"job": f"{record['name']}-merge", "state": job_state(merge, None) if merge else "not found"},
        }

    def describe_absent(self, job: dict[str, Any], job_dir: Path) -> MergeNotes:
        return MergeNotes(describe_absent(job, job_dir))


KUBERNETES: Scheduler = registry.register("scheduler", KubernetesScheduler.name, KubernetesScheduler())
