"""Submitting a rendered job folder with ``sbatch`` and reading its state back: the Slurm scheduler
(:class:`SlurmScheduler`, registered as ``slurm``).

State comes from ``scontrol show job`` (every task the controller still remembers,
finished ones included until ``MinJobAge``) and ``squeue``, and from the shard bundles
in the job folder; never from ``sacct`` (many clusters, and the test cluster, run
without accounting storage).
"""

from __future__ import annotations

import datetime as _dt
import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fasttrack import registry
from fasttrack.errors import FasttrackError
from fasttrack.executors.collect import MERGE_SUMMARY, MERGED_DIR, load_job, save_job, shard_bundle
from fasttrack.executors.scheduler import Describe, MergeNotes, Rendered, Scheduler
from fasttrack.executors.shards import ShardLayout, ShardRunOptions
from fasttrack.executors.site import SiteProfile
from fasttrack.executors.slurm import LOGS_DIR, SlurmOptions, SlurmRender, render, write

_KV = re.compile(r"(?:^|\s)([A-Za-z][\w/:]*)=(\S*)")


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise FasttrackError(
            f"{name} is not on PATH: this needs a Slurm client (run it on a login node of the cluster).",
            hint="`fasttrack slurm render` (or --dry-run) writes the scripts without Slurm.",
        )
    return path


def sbatch(script: Path, *, dependency: str | None = None) -> str:
    """Submit ``script``; return its job id."""
    argv = [_tool("sbatch"), "--parsable"]
    if dependency:
        argv.append(f"--dependency={dependency}")
    argv.append(str(script))
    res = subprocess.run(argv, capture_output=True, text=True, cwd=script.parent, check=False)
    if res.returncode != 0:
        raise FasttrackError(f"sbatch {script.name} failed (exit {res.returncode}): {res.stderr.strip()}")
    return res.stdout.strip().split(";")[0]


def submit(job_dir: Path) -> dict[str, Any]:
    """Submit every array, then the merge job with ``afterany`` on all of them; record the ids."""
    job = load_job(job_dir)
    if job.get("submitted"):
        ids = job["submitted"]
        raise FasttrackError(
            f"{job_dir} was already submitted (arrays {', '.join(ids['arrays'].values())}, merge {ids['merge']}).",
            hint="Render into a new folder, or resubmit one shard: sbatch --array=I <array script> (see "
            "docs/scale-out.md).",
        )
    done: list[str] = []
    try:
        arrays = {}
        for a in job["arrays"]:
            jid = sbatch(job_dir / a["script"])
            done.append(jid)
            arrays[a["script"]] = jid
        merge = sbatch(job_dir / job["merge"]["script"], dependency="afterany:" + ":".join(done))
    except FasttrackError:
        if done:
            subprocess.run([_tool("scancel"), *done], capture_output=True, check=False)
        raise
    job["submitted"] = {
        "at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "arrays": arrays,
        "merge": merge,
    }
    save_job(job_dir, job)
    return job["submitted"]


def scontrol_records(job_id: str) -> list[dict[str, str]]:
    """``scontrol -o show job ID``: one dict per job record (an array: one per task, pending tasks grouped)."""
    res = subprocess.run([_tool("scontrol"), "-o", "show", "job", job_id], capture_output=True, text=True, check=False)
    if res.returncode != 0:
        return []
    return [dict(_KV.findall(line)) for line in res.stdout.splitlines() if line.strip()]


def _task_ids(spec: str) -> list[int]:
    """``3`` / ``1-4,7`` / ``[1-4%2]`` as task ids."""
    out: list[int] = []
    for part in spec.strip("[]").split("%")[0].split(","):
        a, _, b = part.partition("-")
        if a.isdigit():
            out += list(range(int(a), int(b) + 1)) if b.isdigit() else [int(a)]
    return out


@dataclass
class TaskState:
    shard: int
    job_id: str
    """``ARRAYJOB_TASK``."""
    state: str
    reason: str | None
    exit_code: str | None
    log: str
    nodes: str | None

    def as_dict(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "state": self.state,
            "reason": self.reason,
            "exit_code": self.exit_code,
            "log": self.log,
            "nodes": self.nodes,
        }


def _log_path(job: dict[str, Any], array: dict[str, Any], array_id: str, task: int) -> str:
    return str(Path(job["job_dir"]) / LOGS_DIR / f"{array['job_name']}-{array_id}_{task}.out")


def shard_jobs(job: dict[str, Any]) -> dict[int, tuple[dict[str, Any], str]]:
    """Each shard's array (its entry in the job file) and the Slurm job that ran it last (resubmissions
    included)."""
    sub = job.get("submitted") or {}
    out: dict[int, tuple[dict[str, Any], str]] = {}
    rounds = [sub.get("arrays") or {}] + [r.get("arrays") or {} for r in sub.get("resubmits", [])]
    for i, ids in enumerate(rounds):
        only = None if i == 0 else set(sub["resubmits"][i - 1]["shards"])
        for a in job["arrays"]:
            jid = ids.get(a["script"])
            if jid:
                for shard in a["shards"]:
                    if only is None or shard in only:
                        out[shard] = (a, jid)
    return out


def resubmit(job_dir: Path, shards: list[int]) -> dict[str, Any]:
    """Run ``shards`` again (``sbatch --array=<them>`` of their arrays' scripts) and the merge job after them."""
    job = load_job(job_dir)
    if not job.get("submitted"):
        raise FasttrackError(f"{job_dir} was never submitted; use `fasttrack slurm submit`.")
    known = {i for a in job["arrays"] for i in a["shards"]}
    bad = sorted(set(shards) - known)
    if bad or not shards:
        raise FasttrackError(f"no shard {bad or shards} in {job_dir} (shards 1-{len(known)}).")
    ids: dict[str, str] = {}
    for a in job["arrays"]:
        mine = [i for i in a["shards"] if i in shards]
        if mine:
            argv = [_tool("sbatch"), "--parsable", f"--array={','.join(map(str, mine))}", a["script"]]
            res = subprocess.run(argv, capture_output=True, text=True, cwd=job_dir, check=False)
            if res.returncode != 0:
                raise FasttrackError(f"sbatch {a['script']} failed (exit {res.returncode}): {res.stderr.strip()}")
            ids[a["script"]] = res.stdout.strip().split(";")[0]
    merge = sbatch(job_dir / job["merge"]["script"], dependency="afterany:" + ":".join(ids.values()))
    record = {
        "at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "shards": sorted(shards),
        "arrays": ids,
        "merge": merge,
    }
    job["submitted"].setdefault("resubmits", []).append(record)
    save_job(job_dir, job)
    return record


def task_states(job: dict[str, Any]) -> dict[int, TaskState]:
    """What the controller says about each shard's array task (shards it forgot are left out)."""
    latest = shard_jobs(job)
    out: dict[int, TaskState] = {}
    for a, jid in {(latest[i][0]["script"], latest[i][1]): latest[i] for i in latest}.values():
        for rec in scontrol_records(jid):
            for task in _task_ids(rec.get("ArrayTaskId", "")):
                if task not in latest or latest[task][1] != jid:
                    continue
                std = rec.get("StdOut", "")
                single = rec.get("ArrayTaskId") == str(task)
                log = std if single and std and "%" not in std else _log_path(job, a, jid, task)
                out[task] = TaskState(
                    shard=task,
                    job_id=f"{jid}_{task}",
                    state=rec.get("JobState", "UNKNOWN"),
                    reason=None if rec.get("Reason") in (None, "None") else rec.get("Reason"),
                    exit_code=rec.get("ExitCode"),
                    log=log,
                    nodes=None if rec.get("NodeList") in (None, "(null)") else rec.get("NodeList"),
                )
    return out


def _last_line(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - 4096))
            lines = [ln.strip() for ln in f.read().decode(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return None
    return lines[-1][:240] if lines else None


def describe_absent(job: dict[str, Any], states: dict[int, TaskState]) -> Describe:
    """A ``describe_absent`` for :func:`fasttrack.executors.collect.merge_job` from Slurm's view."""

    def describe(shard: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        index = int(shard["shard"].split("/")[0])
        st = states.get(index)
        if st is None:
            array, jid = shard_jobs(job).get(index, (None, None))
            if not jid or array is None:
                return "wrote no bundle; the job folder records no Slurm submission for it", {}
            log = _log_path(job, array, jid, index)
            last = _last_line(log)
            return (
                f"wrote no bundle; Slurm job {jid}_{index} is no longer known to the controller; log {log}"
                + (f" (last line: {last})" if last else ""),
                {"job_id": f"{jid}_{index}", "state": None, "log": log},
            )
        last = _last_line(st.log)
        note = f"wrote no bundle; Slurm job {st.job_id} ended {st.state}"
        if st.exit_code and st.exit_code != "0:0":
            note += f" (exit code {st.exit_code})"
        if st.reason:
            note += f", reason {st.reason}"
        note += f"; log {st.log}" + (f" (last line: {last})" if last else "")
        return note, st.as_dict()

    return describe


def task_details(states: dict[int, TaskState]) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """What the controller says about a shard's task (for the merge summary)."""

    def details(shard: dict[str, Any]) -> dict[str, Any]:
        st = states.get(int(shard["shard"].split("/")[0]))
        return st.as_dict() if st else {}

    return details


def task_note(info: dict[str, Any]) -> str | None:
    """For a shard with a bundle: its job, when the scheduler stopped it (cancelled, timed out, preempted,
    a node failed) or fasttrack did not end normally (an exit other than 0, or 1 for a verdict short of pass)."""
    state = info.get("state")
    code = info.get("exit_code")
    if not state or state == "COMPLETED" or (state == "FAILED" and code == "1:0"):
        return None
    return (
        f"Slurm job {info['job_id']} ended {state}"
        + (f" (exit code {code})" if code and code != "0:0" else "")
        + f"; log {info['log']}"
    )


def status(job_dir: Path) -> dict[str, Any]:
    """Each shard's Slurm state and bundle, the merge job's state and the merged bundle."""
    from fasttrack.executors.collect import check_bundle

    job = load_job(job_dir)
    states = task_states(job) if job.get("submitted") else {}
    shards = []
    for s in job["shards"]:
        index = int(s["shard"].split("/")[0])
        bundle = shard_bundle(job_dir, s)
        verdict = check_bundle(bundle)[0] if bundle.is_file() else None
        st = states.get(index)
        shards.append(
            {
                "shard": s["shard"],
                "nodes": s["nodes"],
                **(st.as_dict() if st else {"job_id": None, "state": None, "log": None}),
                "bundle": str(bundle) if bundle.is_file() else None,
                "bundle_verdict": verdict,
            }
        )
    merge_state = None
    sub = job.get("submitted") or {}
    merge_id = ((sub.get("resubmits") or [{}])[-1].get("merge") or sub.get("merge")) if sub else None
    if merge_id:
        recs = scontrol_records(merge_id)
        merge_state = recs[0].get("JobState") if recs else None
    summary_path = job_dir / MERGED_DIR / MERGE_SUMMARY
    merged = None
    if summary_path.is_file():
        import json

        merged = json.loads(summary_path.read_text())
    return {
        "job_dir": str(job_dir),
        "scope": job["scope"],
        "tier": job["tier"],
        "submitted": sub or None,
        "shards": shards,
        "merge": {"job_id": merge_id, "state": merge_state},
        "merged": {"bundle": merged.get("merged"), "verdict": merged.get("verdict"), "error": merged.get("error")}
        if merged
        else None,
    }


class SlurmScheduler:
    """Slurm (:class:`~fasttrack.executors.scheduler.Scheduler`): job arrays and a merge job, submitted with
    ``sbatch``, their state from ``scontrol``/``squeue``."""

    name = "slurm"

    def render(self, layout: ShardLayout, site: SiteProfile, opts: ShardRunOptions) -> SlurmRender:
        if not isinstance(opts, SlurmOptions):
            raise TypeError("the Slurm scheduler renders SlurmOptions")
        return render(layout, site, opts)

    def write(self, rendered: Rendered, out: Path) -> list[Path]:
        if not isinstance(rendered, SlurmRender):
            raise TypeError("the Slurm scheduler writes what it rendered")
        return write(rendered, out)

    def submit(self, where: Path) -> dict[str, Any]:
        return submit(where)

    def status(self, where: Path) -> dict[str, Any]:
        return status(where)

    def describe_absent(self, job: dict[str, Any], job_dir: Path) -> MergeNotes:
        states = task_states(job) if job.get("submitted") else {}
        return MergeNotes(describe_absent(job, states), details=task_details(states), present_note=task_note)


SLURM: Scheduler = registry.register("scheduler", SlurmScheduler.name, SlurmScheduler())
