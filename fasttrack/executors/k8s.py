"""Kubernetes manifests for a plan's shards (rendered and validated offline; no cluster runs them here).

* **Single-node shards**: one Indexed Job (``completionMode: Indexed``); pod ``k`` runs the
  ``k``-th of those shards (``JOB_COMPLETION_INDEX`` picks it from ``FASTTRACK_SHARDS``),
  with ``backoffLimitPerIndex: 0`` so one failed shard does not stop the others.
* **Multi-node shards** (one engine group each): a LeaderWorkerSet per side (baseline,
  candidate) whose group of ``nodes`` pods serves that side's engine: the leader runs
  the API server (node rank 0), the workers run headless vLLM ranks (rank
  ``LWS_WORKER_INDEX``) with vLLM's multiprocessing backend across pods; a Service per
  leader; and a driver Job that runs ``fasttrack validate --shard i/n`` against both
  leaders (``--baseline-url`` / ``--candidate-url``: attached engines, one lifetime per
  side, both up together).
* A shared ReadWriteMany volume (``/bundles``) holds every shard's run folder; each shard
  pod records its exit status next to its bundle.
* A merge Job waits until every shard recorded an exit status (or the deadline passed),
  then runs ``fasttrack k8s merge``: shard bundles merged, each absent shard named with
  its Job, completion index and exit status.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from fasttrack.engine.cmdline import EngineCommand, Rendezvous, Role, engine_command, host_safety_env, serve_spec
from fasttrack.errors import FasttrackError
from fasttrack.executors.collect import JOB_FILE
from fasttrack.executors.shards import ShardLayout, ShardSpec, job_name
from fasttrack.executors.site import KubernetesSite, SiteProfile, image_env

BUNDLES = "/bundles"
KEY_DIR = "/fasttrack-key"
EXIT_STATUS = "exit-status"
API_PORT = 8000
MASTER_PORT = 29500
LWS_API = "leaderworkerset.x-k8s.io/v1"
JOB_LABEL = "fasttrack.dev/job"


@dataclass
class K8sOptions:
    model: str
    image: str | None = None
    gpus_per_node: int | None = None
    sign: bool = False
    validate_args: list[str] = field(default_factory=list)


@dataclass
class K8sRender:
    layout: ShardLayout
    documents: list[dict[str, Any]]
    job: dict[str, Any]

    def text(self) -> str:
        return yaml.safe_dump_all(self.documents, sort_keys=False, width=1000)

    def kinds(self) -> list[str]:
        return [f"{d['kind']}/{d['metadata']['name']}" for d in self.documents]

    def summary(self) -> str:
        single = [s for s in self.layout.shards if s.nodes == 1]
        multi = [s for s in self.layout.shards if s.nodes > 1]
        return (
            f"{self.layout.scope} {self.layout.tier}: {self.layout.count} shard(s): {len(single)} single-node in one "
            f"Indexed Job, {len(multi)} multi-node as LeaderWorkerSets (baseline + candidate each) with a driver Job; "
            f"{len(self.documents)} objects"
        )


def _meta(name: str, ns: str, base: str, **labels: str) -> dict[str, Any]:
    return {"name": name, "namespace": ns, "labels": {JOB_LABEL: base, **labels}}


def _env(site: SiteProfile, extra: dict[str, str] | None = None, image: str | None = None) -> list[dict[str, str]]:
    """A pod's environment: the site's (with the GPU safety settings: the site's value, else the safe one)."""
    env = {**site.env, **image_env(image or site.kubernetes.image), **(extra or {}), **host_safety_env(site.env)}
    return [{"name": k, "value": v} for k, v in sorted(env.items())]


def _volumes(k: KubernetesSite, claim: str, sign: bool) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
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
                "--sign needs kubernetes.sign_key_secret in the site profile (a Secret with the key in 'key').",
                hint="kubectl create secret generic fasttrack-key --from-file=key=keys/me",
            )
        vols.append({"name": "sign-key", "secret": {"secretName": k.sign_key_secret, "defaultMode": 0o400}})
        mounts.append({"name": "sign-key", "mountPath": KEY_DIR, "readOnly": True})
    return vols, mounts


def _pod_spec(
    k: KubernetesSite, containers: list[dict[str, Any]], vols: list[dict[str, Any]], *, restart: str | None
) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": containers, "volumes": vols, "terminationGracePeriodSeconds": 60}
    if restart:
        spec["restartPolicy"] = restart
    if k.node_selector:
        spec["nodeSelector"] = dict(k.node_selector)
    if k.tolerations:
        spec["tolerations"] = [dict(t) for t in k.tolerations]
    if k.service_account:
        spec["serviceAccountName"] = k.service_account
    return spec


def _resources(k: KubernetesSite, gpus: int) -> dict[str, Any]:
    return {"limits": {k.gpu_resource: gpus}} if gpus else {}


def _container(
    name: str, image: str, k: KubernetesSite, command: list[str], env: list[dict[str, str]], mounts: list[Any]
) -> dict[str, Any]:
    return {
        "name": name,
        "image": image,
        "imagePullPolicy": k.image_pull_policy,
        "command": command,
        "env": env,
        "volumeMounts": mounts,
    }


def _job(
    name: str, base: str, role: str, k: KubernetesSite, container: dict[str, Any], vols: list[Any], **spec: Any
) -> dict[str, Any]:
    """A Job of one pod template (``role`` labels it), its ``spec`` fields before the template."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _meta(name, k.namespace, base, **{"fasttrack.dev/role": role}),
        "spec": {
            **spec,
            "template": {
                "metadata": {"labels": {JOB_LABEL: base, "fasttrack.dev/role": role}},
                "spec": _pod_spec(k, [container], vols, restart="Never"),
            },
        },
    }


def _validate_line(site: SiteProfile, opts: K8sOptions, layout: ShardLayout, extra: list[str]) -> str:
    argv = ["validate", "--model", opts.model, "--tier", layout.tier, "--force"]
    if opts.sign:
        argv += ["--sign-key", f"{KEY_DIR}/key"]
    argv += [*site.validate_args, *opts.validate_args, *extra]
    return site.fasttrack + " " + " ".join(shlex.quote(a) for a in argv)


def _shard_script(site: SiteProfile, validate: str, count: int, pick: str) -> str:
    """Shell for a shard pod: pick the shard, run validate (SIGTERM passed on), record the exit status."""
    return "\n".join(
        [
            "set -u",
            *site.setup,
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


def _deadline(k: KubernetesSite, s: ShardSpec) -> int:
    return int(s.wall_s * k.active_deadline_factor) + 3600


def _indexed_job(
    layout: ShardLayout, shards: list[ShardSpec], site: SiteProfile, opts: K8sOptions, base: str, claim: str
) -> dict[str, Any]:
    k = site.kubernetes
    vols, mounts = _volumes(k, claim, opts.sign)
    gpus = opts.gpus_per_node if opts.gpus_per_node is not None else k.gpus_per_node
    per_node = max(s.gpus_per_node for s in shards) if gpus is None else gpus
    pick = 'set -- $FASTTRACK_SHARDS; shift "$JOB_COMPLETION_INDEX"; SHARD="$1"; EXTRA_ARGS=""'
    script = _shard_script(site, _validate_line(site, opts, layout, []), layout.count, pick)
    env = _env(site, {"FASTTRACK_SHARDS": " ".join(str(s.index) for s in shards)}, opts.image)
    container = _container("fasttrack", opts.image or k.image, k, ["/bin/bash", "-c", script], env, mounts)
    container["resources"] = _resources(k, per_node)
    return _job(
        f"{base}-shards",
        base,
        "shards",
        k,
        container,
        vols,
        completionMode="Indexed",
        completions=len(shards),
        parallelism=len(shards),
        backoffLimitPerIndex=0,
        activeDeadlineSeconds=max(_deadline(k, s) for s in shards),
    )


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
    """The run folder of a multi-node shard's engines on the shared volume: their profiler traces go under its
    ``profiles/``, outside the shard's own run folder (which the driver's ``validate --force`` replaces)."""
    return f"{BUNDLES}/engines/{shard.dirname}"


def engine_commands(
    scope: Any, group: Any, side: str, shard: ShardSpec, site: SiteProfile, image: str | None
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
    host_env = {**site.env, **image_env(image or site.kubernetes.image)}
    lead, follow = (
        engine_command(
            spec, executor=PodExecutor(), python="python", host_env=host_env, api_port=API_PORT, rank=r, rendezvous=meet
        )
        for r in (0, 1)
    )
    return lead, follow


def _multi_node(
    layout: ShardLayout,
    shard: ShardSpec,
    site: SiteProfile,
    opts: K8sOptions,
    base: str,
    claim: str,
    groups: dict[str, Any],
    scope: Any,
) -> list[dict[str, Any]]:
    if len(shard.groups) != 1:
        raise FasttrackError(
            f"shard {shard.label} runs {len(shard.groups)} multi-node engine groups; on Kubernetes each multi-node "
            "shard serves one group from its LeaderWorkerSets.",
            hint="Render with --shards groups (one shard per engine group).",
        )
    k = site.kubernetes
    group = groups[shard.groups[0]]
    image = opts.image or k.image
    vols, mounts = _volumes(k, claim, opts.sign)
    gpus = opts.gpus_per_node if opts.gpus_per_node is not None else k.gpus_per_node
    per_node = shard.gpus_per_node if gpus is None else gpus
    out: list[dict[str, Any]] = []
    urls = {}
    for side in ("baseline", "candidate"):
        name = f"{base}-s{shard.index}-{side[:4]}"
        lead, follow = engine_commands(scope, group, side, shard, site, image)

        def container(cname: str, cmd: EngineCommand, probe: bool) -> dict[str, Any]:
            env = [{"name": n, "value": v} for n, v in sorted(cmd.env.items())]
            c = _container(cname, image, k, cmd.argv, env, mounts)
            c["resources"] = _resources(k, per_node)
            if probe:
                c["ports"] = [{"containerPort": API_PORT, "name": "api"}]
                c["readinessProbe"] = {"httpGet": {"path": "/health", "port": API_PORT}, "periodSeconds": 10}
            return c

        labels = {"fasttrack.dev/shard": str(shard.index), "fasttrack.dev/side": side}
        out.append(
            {
                "apiVersion": LWS_API,
                "kind": "LeaderWorkerSet",
                "metadata": _meta(name, k.namespace, base, **labels),
                "spec": {
                    "replicas": 1,
                    "startupPolicy": "LeaderCreated",
                    "leaderWorkerTemplate": {
                        "size": shard.nodes,
                        "restartPolicy": "RecreateGroupOnPodRestart",
                        "leaderTemplate": {
                            "metadata": {"labels": {JOB_LABEL: base, **labels, "fasttrack.dev/role": "leader"}},
                            "spec": _pod_spec(k, [container("vllm-leader", lead, True)], vols, restart=None),
                        },
                        "workerTemplate": {
                            "metadata": {"labels": {JOB_LABEL: base, **labels, "fasttrack.dev/role": "worker"}},
                            "spec": _pod_spec(k, [container("vllm-worker", follow, False)], vols, restart=None),
                        },
                    },
                },
            }
        )
        out.append(
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": _meta(f"{name}-api", k.namespace, base, **labels),
                "spec": {
                    "selector": {
                        "leaderworkerset.sigs.k8s.io/name": name,
                        "leaderworkerset.sigs.k8s.io/worker-index": "0",
                    },
                    "ports": [{"name": "api", "port": API_PORT, "targetPort": API_PORT}],
                },
            }
        )
        urls[side] = f"http://{name}-api.{k.namespace}.svc:{API_PORT}"
    wait = (
        "python - <<'PY'\nimport time, urllib.request\n"
        f"for url in {sorted(urls.values())!r}:\n"
        "    while True:\n"
        "        try:\n"
        "            urllib.request.urlopen(url + '/health', timeout=5); break\n"
        "        except Exception:\n"
        "            time.sleep(10)\n"
        "PY"
    )
    pick = (
        f"SHARD={shard.index}; "
        f'EXTRA_ARGS="--baseline-url {urls["baseline"]} --candidate-url {urls["candidate"]}"\n{wait}'
    )
    script = _shard_script(site, _validate_line(site, opts, layout, []), layout.count, pick)
    driver = _container("fasttrack", image, k, ["/bin/bash", "-c", script], _env(site, image=opts.image), mounts)
    name = f"{base}-s{shard.index}-driver"
    out.append(_job(name, base, "driver", k, driver, vols, backoffLimit=0, activeDeadlineSeconds=_deadline(k, shard)))
    return out


def _merge_job(layout: ShardLayout, site: SiteProfile, opts: K8sOptions, base: str, claim: str) -> dict[str, Any]:
    k = site.kubernetes
    vols, mounts = _volumes(k, claim, opts.sign)
    vols.append({"name": "job", "configMap": {"name": f"{base}-job"}})
    mounts.append({"name": "job", "mountPath": "/fasttrack-job", "readOnly": True})
    wait_s = max((_deadline(k, s) for s in layout.shards), default=3600) + 1800
    n = layout.count
    merge = f"{site.fasttrack} k8s merge {BUNDLES}" + (f" --sign-key {KEY_DIR}/key" if opts.sign else "")
    script = "\n".join(
        [
            "set -u",
            *site.setup,
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
    command = ["/bin/bash", "-c", script]
    container = _container("merge", opts.image or k.image, k, command, _env(site, image=opts.image), mounts)
    return _job(f"{base}-merge", base, "merge", k, container, vols, backoffLimit=0)


def render(layout: ShardLayout, site: SiteProfile, opts: K8sOptions) -> K8sRender:
    """Every manifest for ``layout`` (see the module docstring)."""
    from fasttrack.plan import build_plan
    from fasttrack.scope import load_scope

    k = site.kubernetes
    base = job_name("ft", layout.scope, layout.tier)[:40].strip("-")
    loaded = load_scope(layout.scope_path)
    full = build_plan(loaded.scope, tier=layout.tier, scope_sha256=loaded.sha256)
    groups = {g.id: g for g in full.groups}
    claim = k.existing_claim or f"{base}-bundles"
    job = {
        "executor": "kubernetes",
        "model": opts.model,
        **layout.as_dict(),
        "job_dir": BUNDLES,
        "namespace": k.namespace,
        "name": base,
        "shard_jobs": {},
    }
    docs: list[dict[str, Any]] = []
    if not k.existing_claim:
        pvc: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": _meta(claim, k.namespace, base),
            "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": k.storage_size}}},
        }
        if k.storage_class:
            pvc["spec"]["storageClassName"] = k.storage_class
        docs.append(pvc)
    single = [s for s in layout.shards if s.nodes == 1]
    multi = [s for s in layout.shards if s.nodes > 1]
    if single:
        docs.append(_indexed_job(layout, single, site, opts, base, claim))
        for idx, s in enumerate(single):
            job["shard_jobs"][s.label] = {"job": f"{base}-shards", "completion_index": idx}
    for s in multi:
        docs += _multi_node(layout, s, site, opts, base, claim, groups, loaded.scope)
        job["shard_jobs"][s.label] = {"job": f"{base}-s{s.index}-driver", "completion_index": None}
    docs.insert(
        0 if k.existing_claim else 1,
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": _meta(f"{base}-job", k.namespace, base),
            "data": {JOB_FILE: json.dumps(job, indent=2)},
        },
    )
    docs.append(_merge_job(layout, site, opts, base, claim))
    return K8sRender(layout, docs, job)


def write(rendered: K8sRender, out: Path) -> list[Path]:
    """One file per object, numbered in apply order."""
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, d in enumerate(rendered.documents):
        p = out / f"{i:02d}-{d['kind'].lower()}-{d['metadata']['name']}.yaml"
        p.write_text(yaml.safe_dump(d, sort_keys=False, width=1000))
        paths.append(p)
    return paths


def describe_absent(job: dict[str, Any], job_dir: Path) -> Callable[[dict[str, Any]], tuple[str, dict[str, Any]]]:
    """What the job folder says about a shard without a bundle (its recorded exit status, or none)."""

    def describe(shard: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        where = (job.get("shard_jobs") or {}).get(shard["shard"], {})
        kjob, idx = where.get("job", "?"), where.get("completion_index")
        who = f"Kubernetes Job {job.get('namespace', 'default')}/{kjob}" + (
            f" completion index {idx}" if idx is not None else ""
        )
        status_file = job_dir / shard["dir"] / EXIT_STATUS
        logs = f"kubectl logs -n {job.get('namespace', 'default')} job/{kjob}"
        try:
            rc = status_file.read_text().strip()
        except OSError:
            note = (
                f"wrote no bundle and no exit status: its pod ({who}) was killed after its grace period, evicted, "
                f"ran out of time or never ran; logs: {logs}"
            )
            return note, {"job": kjob, "completion_index": idx, "exit_status": None}
        return (
            f"wrote no bundle; its pod ({who}) exited with status {rc}; logs: {logs}",
            {"job": kjob, "completion_index": idx, "exit_status": rc},
        )

    return describe
