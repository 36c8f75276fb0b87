"""Kubernetes manifests for a plan's shards (rendered and validated offline; no cluster runs them here).

* **Single-node shards**: one Indexed Job (``completionMode: Indexed``); pod ``k`` runs the
  ``k``-th of those shards (``JOB_COMPLETION_INDEX`` picks it from ``FASTTRACK_SHARDS``),
  with ``backoffLimitPerIndex: 0`` so one failed shard does not stop the others, and at most
  ``max_parallel`` pods at once (without a Kueue queue).
* **Multi-node shards** (one engine group each): a driver Job per shard (no GPU) that, when its
  turn comes, creates the shard's engines (:mod:`~fasttrack.executors.k8s_engines`: per side a
  LeaderWorkerSet, its leader's Service and, for one NVLink domain, a ComputeDomain; written into
  the shard's ConfigMap), each owned by the driver Job, runs ``fasttrack validate --shard i/n``
  against both leaders, and deletes them (:mod:`~fasttrack.executors.k8s_drive`). The drivers get
  a ServiceAccount whose Role allows exactly that.
* **Queueing**: with the site's ``kubernetes.queue`` every Job and LeaderWorkerSet carries
  ``kueue.x-k8s.io/queue-name`` and Kueue admits them by quota (the drivers themselves, which hold
  no GPU, are not queued); without one, shards run in waves of ``max_parallel``: the k-th
  multi-node driver waits for the exit status of the (k - N)-th.
* **Clean-up**: every Job has ``ttlSecondsAfterFinished``; the engine objects and the shard's
  ConfigMap are owned by its driver Job. The shared volume (the bundles), the job ConfigMap and
  the drivers' account are left for the operator (one label selects them all).
* A shared ReadWriteMany volume (``/bundles``) holds every shard's run folder; each shard
  records its exit status next to its bundle.
* A merge Job waits until every shard recorded an exit status (or the deadline passed),
  then runs ``fasttrack k8s merge``: shard bundles merged, each absent shard named with
  its Job, completion index and exit status.
* **The PR under test**: every shard runs ``validate --repo --base --head`` (``--image-build``:
  the checkout inside the PR head's image), and every pod runs the image pinned by digest.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from fasttrack.errors import FasttrackError
from fasttrack.executors.collect import JOB_FILE
from fasttrack.executors.k8s_engines import PodExecutor, engine_commands, engine_objects, engine_run_dir, engine_url
from fasttrack.executors.k8s_objects import (
    API_PORT,
    BUNDLES,
    ENGINES_DIR,
    EXIT_NOTE,
    EXIT_STATUS,
    JOB_LABEL,
    KEY_DIR,
    MASTER_PORT,
    container,
    job,
    meta,
    pod_env,
    resources,
    volumes,
)
from fasttrack.executors.shards import ShardLayout, ShardRunOptions, ShardSpec, job_name
from fasttrack.executors.site import SiteProfile, image_digest

__all__ = [
    "API_PORT",
    "BUNDLES",
    "MASTER_PORT",
    "JOB_LABEL",
    "EXIT_STATUS",
    "PodExecutor",
    "engine_commands",
    "engine_run_dir",
    "K8sOptions",
    "K8sRender",
    "render",
    "write",
    "describe_absent",
]


@dataclass
class K8sOptions(ShardRunOptions):
    """What ``fasttrack k8s`` renders, beyond the plan and the site. The keys every shard signs its bundle with
    (``validate.sign_keys``) are files of the site's ``kubernetes.sign_key_secret``, as the pods see them (under
    ``/fasttrack-key``)."""

    image: str | None = None

    def __post_init__(self) -> None:
        outside = [str(k) for k in self.validate.sign_keys if k.parent != Path(KEY_DIR)]
        if outside:
            raise FasttrackError(
                f"--sign-key {outside[0]}: on Kubernetes a signing key is a file of the site's "
                f"kubernetes.sign_key_secret, which the pods see under {KEY_DIR}.",
                hint=f"Put the key in that Secret (e.g. under 'key') and pass --sign-key {KEY_DIR}/key.",
            )

    @property
    def sign(self) -> bool:
        return bool(self.validate.sign_keys)


@dataclass
class K8sRender:
    layout: ShardLayout
    documents: list[dict[str, Any]]
    job: dict[str, Any]
    engines: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    """Each multi-node shard's engine objects (also in its ConfigMap), by shard number."""

    def text(self) -> str:
        return yaml.safe_dump_all(self.documents, sort_keys=False, width=1000)

    def texts(self) -> dict[str, str]:
        """One file per object, numbered in apply order (what :func:`write` writes)."""
        return {
            f"{i:02d}-{d['kind'].lower()}-{d['metadata']['name']}.yaml": yaml.safe_dump(d, sort_keys=False, width=1000)
            for i, d in enumerate(self.documents)
        }

    def kinds(self) -> list[str]:
        return [f"{d['kind']}/{d['metadata']['name']}" for d in self.documents]

    def summary(self) -> str:
        single = [s for s in self.layout.shards if s.nodes == 1]
        multi = [s for s in self.layout.shards if s.nodes > 1]
        q = self.job.get("queue")
        how = f"Kueue queue {q}" if q else f"waves of {self.job.get('max_parallel')} shard(s)"
        pinned = "image pinned by digest" if self.job.get("image_digest") else "IMAGE NOT PINNED BY DIGEST"
        return (
            f"{self.layout.scope} {self.layout.tier}: {self.layout.count} shard(s): {len(single)} single-node in one "
            f"Indexed Job, {len(multi)} multi-node with a driver Job each (its LeaderWorkerSets created when its turn "
            f"comes); {how}; {pinned}; {len(self.documents)} objects"
        )


def _validate_argv(site: SiteProfile, opts: K8sOptions, layout: ShardLayout) -> list[str]:
    """Every shard's ``validate`` command line but its shard and run folder (the pod's script adds them)."""
    return opts.validate_argv(site.kubernetes.validate_args, tier=layout.tier, force=True)


def _shard_script(site: SiteProfile, validate: str, count: int, pick: str) -> str:
    """Shell for a single-node shard pod: pick the shard, run validate (SIGTERM passed on), record the exit status."""
    return "\n".join(
        [
            "set -u",
            *site.kubernetes.setup,
            pick,
            f'OUT="{BUNDLES}/shards/shard-$SHARD-of-{count}"',
            'mkdir -p "$OUT"',
            f'{validate} --shard "$SHARD/{count}" --out "$OUT" $EXTRA_ARGS &',
            "child=$!",
            "# pod deletion sends SIGTERM: fasttrack stops its engines and writes a partial bundle",
            "trap 'kill -TERM \"$child\" 2>/dev/null' TERM INT",
            'while :; do wait "$child"; rc=$?; kill -0 "$child" 2>/dev/null || break; done',
            f'echo "$rc" > "$OUT/{EXIT_STATUS}"',
            'exit "$rc"',
        ]
    )


def _deadline(site: SiteProfile, s: ShardSpec) -> int:
    return int(s.wall_s * site.kubernetes.active_deadline_factor) + 3600


def _per_node(site: SiteProfile, opts: K8sOptions, default: int) -> int:
    gpus = opts.gpus_per_node if opts.gpus_per_node is not None else site.kubernetes.gpus_per_node
    return default if gpus is None else gpus


def _indexed_job(
    layout: ShardLayout, shards: list[ShardSpec], site: SiteProfile, opts: K8sOptions, base: str, claim: str, n: int
) -> dict[str, Any]:
    k = site.kubernetes
    vols, mounts = volumes(k, claim, opts.sign)
    pick = 'set -- $FASTTRACK_SHARDS; shift "$JOB_COMPLETION_INDEX"; SHARD="$1"; EXTRA_ARGS=""'
    validate = k.fasttrack + " " + shlex.join(_validate_argv(site, opts, layout))
    script = _shard_script(site, validate, layout.count, pick)
    env = pod_env(k, {"FASTTRACK_SHARDS": " ".join(str(s.index) for s in shards)}, opts.image)
    box = container("fasttrack", opts.image or k.image, k, ["/bin/bash", "-c", script], env, mounts)
    box["resources"] = resources(k, _per_node(site, opts, max(s.gpus_per_node for s in shards)))
    waves = -(-len(shards) // n)
    return job(
        f"{base}-shards",
        base,
        "shards",
        k,
        box,
        vols,
        queue=True,
        completionMode="Indexed",
        completions=len(shards),
        parallelism=len(shards) if k.queue else min(n, len(shards)),
        backoffLimitPerIndex=0,
        activeDeadlineSeconds=max(_deadline(site, s) for s in shards) * (1 if k.queue else waves),
    )


@dataclass
class _Waves:
    """The multi-node drivers' turns: slot ``k mod n``; each waits for the shard ahead of it in its slot."""

    n: int
    ahead: dict[int, ShardSpec] = field(default_factory=dict)
    waits: dict[int, int] = field(default_factory=dict)
    """Shard -> the most seconds it may wait for its turn (the deadlines of the shards ahead of it)."""

    @classmethod
    def of(cls, site: SiteProfile, multi: list[ShardSpec], n: int) -> "_Waves":
        w = cls(n)
        for k, s in enumerate(multi):
            if k >= n:
                prev = multi[k - n]
                w.ahead[s.index] = prev
                w.waits[s.index] = w.waits.get(prev.index, 0) + _deadline(site, prev)
        return w


def _driver(
    layout: ShardLayout, shard: ShardSpec, site: SiteProfile, opts: K8sOptions, base: str, claim: str, waves: _Waves
) -> list[dict[str, Any]]:
    """A multi-node shard's ConfigMap (its engine objects) and driver Job."""
    k = site.kubernetes
    name = f"{base}-s{shard.index}-driver"
    cm_name = f"{base}-s{shard.index}-engines"
    vols, mounts = volumes(k, claim, opts.sign)
    vols.append({"name": "engines", "configMap": {"name": cm_name}})
    mounts.append({"name": "engines", "mountPath": ENGINES_DIR, "readOnly": True})
    urls = {side: engine_url(base, shard, side, k) for side in ("baseline", "candidate")}
    out = f"{BUNDLES}/shards/{shard.dirname}"
    here = replace(
        opts.validate, shard=shard.label, out=Path(out), baseline_url=urls["baseline"], candidate_url=urls["candidate"]
    )
    validate = [k.fasttrack, *_validate_argv(site, opts, layout)]
    validate += here.to_argv(only=("shard", "out", "baseline_url", "candidate_url"))
    drive = [k.fasttrack, "k8s", "drive", "--engines", f"{ENGINES_DIR}/engines.yaml", "--out", out]
    drive += ["--configmap", cm_name, "--namespace", k.namespace, "--health-timeout-s", str(_deadline(site, shard))]
    drive += [a for side, url in urls.items() for a in (f"--{side}-url", url)]
    ahead = waves.ahead.get(shard.index)
    if ahead is not None and not k.queue:
        drive += ["--after", f"{BUNDLES}/shards/{ahead.dirname}/{EXIT_STATUS}"]
        drive += ["--after-max-s", str(waves.waits[shard.index])]
    script = "\n".join(["set -u", *k.setup, "exec " + shlex.join([*drive, "--", *validate])])
    env: list[dict[str, Any]] = [*pod_env(k, image=opts.image)]
    env += [
        {"name": "JOB_NAME", "value": name},
        {
            "name": "JOB_UID",
            "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['batch.kubernetes.io/controller-uid']"}},
        },
    ]
    box = container("fasttrack", opts.image or k.image, k, ["/bin/bash", "-c", script], env, mounts)
    wait = (waves.waits.get(shard.index, 0) if not k.queue else k.queue_wait_s) + 2 * _deadline(site, shard)
    drv = job(
        name,
        base,
        "driver",
        k,
        box,
        vols,
        service_account=f"{base}-driver",
        labels={"fasttrack.dev/shard": str(shard.index)},
        backoffLimit=0,
        activeDeadlineSeconds=wait,
    )
    return [drv]


def _rbac(k: Any, base: str) -> list[dict[str, Any]]:
    """The drivers' ServiceAccount and the Role that lets them create, own and delete their engines."""
    account = f"{base}-driver"
    crud = ["create", "get", "delete"]
    rules = [
        {"apiGroups": ["leaderworkerset.x-k8s.io"], "resources": ["leaderworkersets"], "verbs": crud},
        {"apiGroups": ["resource.nvidia.com"], "resources": ["computedomains"], "verbs": crud},
        {"apiGroups": [""], "resources": ["services"], "verbs": crud},
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "patch"]},
    ]
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta(account, k, base)},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": meta(account, k, base),
            "rules": rules,
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": meta(account, k, base),
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": k.namespace}],
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": account},
        },
    ]


def _merge_job(
    layout: ShardLayout, site: SiteProfile, opts: K8sOptions, base: str, claim: str, wait_s: int
) -> dict[str, Any]:
    k = site.kubernetes
    vols, mounts = volumes(k, claim, opts.sign)
    vols.append({"name": "job", "configMap": {"name": f"{base}-job"}})
    mounts.append({"name": "job", "mountPath": "/fasttrack-job", "readOnly": True})
    n = layout.count
    merge = f"{k.fasttrack} k8s merge {BUNDLES}"
    merge += "".join(" " + shlex.quote(a) for a in opts.validate.to_argv(only=("sign_keys",)))
    script = "\n".join(
        [
            "set -u",
            *k.setup,
            f"cp /fasttrack-job/{JOB_FILE} {BUNDLES}/{JOB_FILE}",
            f"deadline=$(( $(date +%s) + {wait_s} ))",
            "# wait until every shard recorded its exit status (or the deadline: then the rest count as absent)",
            'while [ "$(date +%s)" -lt "$deadline" ]; do',
            "  ended=0",
            f"  for i in $(seq 1 {n}); do",
            f"    [ -f {BUNDLES}/shards/shard-$i-of-{n}/{EXIT_STATUS} ] && ended=$((ended+1))",
            "  done",
            f'  [ "$ended" -ge {n} ] && break',
            "  sleep 30",
            "done",
            f"exec {merge}",
        ]
    )
    box = container(
        "merge", opts.image or k.image, k, ["/bin/bash", "-c", script], pod_env(k, image=opts.image), mounts
    )
    return job(f"{base}-merge", base, "merge", k, box, vols, queue=True, backoffLimit=0)


def _job_doc(layout: ShardLayout, site: SiteProfile, opts: K8sOptions, base: str, n: int) -> dict[str, Any]:
    """``fasttrack-job.json`` (the merge's description of the run; ``shard_jobs`` filled in by :func:`render`)."""
    k = site.kubernetes
    image = opts.image or k.image
    return {
        "executor": "kubernetes",
        "model": opts.model,
        **layout.as_dict(),
        "job_dir": BUNDLES,
        "namespace": k.namespace,
        "name": base,
        "image": image,
        "image_digest": image_digest(image),
        "pr": opts.pr_record(),
        "queue": k.queue,
        "max_parallel": None if k.queue else n,
        "shard_jobs": {},
    }


def _pvc(k: Any, base: str, claim: str) -> dict[str, Any]:
    pvc: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": meta(claim, k, base),
        "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": k.storage_size}}},
    }
    if k.storage_class:
        pvc["spec"]["storageClassName"] = k.storage_class
    return pvc


def _multi_node_shards(layout: ShardLayout) -> list[ShardSpec]:
    multi = [s for s in layout.shards if s.nodes > 1]
    for s in multi:
        if len(s.groups) != 1:
            raise FasttrackError(
                f"shard {s.label} runs {len(s.groups)} multi-node engine groups; on Kubernetes each multi-node "
                "shard serves one group from its LeaderWorkerSets.",
                hint="Render with --shards groups (one shard per engine group).",
            )
    return multi


def render(layout: ShardLayout, site: SiteProfile, opts: K8sOptions) -> K8sRender:
    """Every manifest for ``layout`` (see the module docstring)."""
    from fasttrack.checks.base import build_run_plan
    from fasttrack.scope import load_scope

    k = site.kubernetes
    base = job_name("ft", layout.scope, layout.tier)[:40].strip("-")
    loaded = load_scope(layout.scope_path)
    groups = {g.id: g for g in build_run_plan(loaded.scope, tier=layout.tier, scope_sha256=loaded.sha256).groups}
    claim = k.existing_claim or f"{base}-bundles"
    n = opts.max_parallel or k.max_parallel
    single = [s for s in layout.shards if s.nodes == 1]
    multi = _multi_node_shards(layout)
    job_doc = _job_doc(layout, site, opts, base, n)
    docs: list[dict[str, Any]] = [] if k.existing_claim else [_pvc(k, base, claim)]
    engines: dict[int, list[dict[str, Any]]] = {}
    drivers: list[dict[str, Any]] = []
    waves = _Waves.of(site, multi, n)
    for s in multi:
        drv_name = f"{base}-s{s.index}-driver"
        vols, mounts = volumes(k, claim, False)
        objs = engine_objects(
            layout, s, groups[s.groups[0]], loaded.scope, k, base=base, driver=drv_name, image=opts.image or k.image,
            per_node=_per_node(site, opts, s.gpus_per_node), vols=vols, mounts=mounts,
        )  # fmt: skip
        engines[s.index] = objs
        docs.append(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": meta(f"{base}-s{s.index}-engines", k, base, labels={"fasttrack.dev/shard": str(s.index)}),
                "data": {"engines.yaml": yaml.safe_dump_all(objs, sort_keys=False, width=1000)},
            }
        )
        drivers += _driver(layout, s, site, opts, base, claim, waves)
        job_doc["shard_jobs"][s.label] = {"job": drv_name, "completion_index": None}
    docs += _rbac(k, base) if multi else []
    if single:
        docs.append(_indexed_job(layout, single, site, opts, base, claim, n))
        for idx, s in enumerate(single):
            job_doc["shard_jobs"][s.label] = {"job": f"{base}-shards", "completion_index": idx}
    docs += drivers
    job_cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta(f"{base}-job", k, base)}
    docs.insert(0 if k.existing_claim else 1, {**job_cm, "data": {JOB_FILE: json.dumps(job_doc, indent=2)}})
    longest = max([waves.waits.get(s.index, 0) + 2 * _deadline(site, s) for s in multi] + [0])
    if single:
        longest = max(longest, max(_deadline(site, s) for s in single) * -(-len(single) // n))
    docs.append(_merge_job(layout, site, opts, base, claim, longest + (k.queue_wait_s if k.queue else 0) + 1800))
    return K8sRender(layout, docs, job_doc, engines)


def write(rendered: K8sRender, out: Path) -> list[Path]:
    """One file per object, numbered in apply order."""
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, text in rendered.texts().items():
        (out / name).write_text(text)
        paths.append(out / name)
    return paths


def describe_absent(job_doc: dict[str, Any], job_dir: Path) -> Callable[[dict[str, Any]], tuple[str, dict[str, Any]]]:
    """What the job folder says about a shard without a bundle (its recorded exit status and note, or none)."""

    def describe(shard: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        where = (job_doc.get("shard_jobs") or {}).get(shard["shard"], {})
        kjob, idx = where.get("job", "?"), where.get("completion_index")
        ns = job_doc.get("namespace", "default")
        who = f"Kubernetes Job {ns}/{kjob}" + (f" completion index {idx}" if idx is not None else "")
        logs = f"kubectl logs -n {ns} job/{kjob}"
        try:
            rc = (job_dir / shard["dir"] / EXIT_STATUS).read_text().strip()[:20]
        except OSError:
            note = (
                f"wrote no bundle and no exit status: its pod ({who}) was killed after its grace period, evicted, "
                f"ran out of time or never ran; logs: {logs}"
            )
            return note, {"job": kjob, "completion_index": idx, "exit_status": None}
        try:
            why = (job_dir / shard["dir"] / EXIT_NOTE).read_text().strip()[:500]
        except OSError:
            why = ""
        return (
            f"wrote no bundle; its pod ({who}) exited with status {rc}"
            + (f" ({why})" if why else "")
            + f"; logs: {logs}",
            {"job": kjob, "completion_index": idx, "exit_status": rc},
        )

    return describe


def engines_of(rendered: K8sRender) -> list[dict[str, Any]]:
    """Every shard's engine objects (what the drivers create), for validation and inspection."""
    return [d for objs in rendered.engines.values() for d in objs]
