"""`fasttrack k8s render` for kimi-k3's full tier, validated offline: built-in kinds against the Kubernetes
OpenAPI schema (kubernetes-validate), LeaderWorkerSets and ComputeDomains against their vendored CRDs
(schemas/README.md), strictly: a field the schema does not declare is an error, as `kubectl apply
--validate=strict` makes it. No cluster runs these manifests here."""

from __future__ import annotations

import copy
import gzip
import hashlib
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from fasttrack.checks.base import build_run_plan
from fasttrack.executors import k8s
from fasttrack.executors.shards import layout
from fasttrack.executors.site import load_site
from fasttrack.pipeline.options import ValidateOptions
from fasttrack.scope import load_scope

kubernetes_validate = pytest.importorskip("kubernetes_validate", reason="kubernetes-validate (test extra)")

K8S_VERSION = "1.37.0"
SCHEMAS = Path(__file__).parent / "schemas"
CRDS = {
    ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet"): (
        "leaderworkerset.x-k8s.io_leaderworkersets.v0.10.0.yaml.gz",
        "c5dcad8ed943e495490241f00b9a1b45d51203b6d484020db3636d5bf553568e",
    ),
    ("resource.nvidia.com/v1beta1", "ComputeDomain"): (
        "resource.nvidia.com_computedomains.v25.12.0.yaml.gz",
        "9345244a663bd1b05551dee3e3749e0fc8a4aca4ff46e48308f7b5053c90d265",
    ),
}
DIGEST = "sha256:" + "cd" * 32
IMAGE = f"registry.example/fasttrack-pr:abc@{DIGEST}"
PR = ValidateOptions("kimi-k3", repo=Path("/opt/vllm-src"), base="b" * 40, head="a" * 40)


def strict(schema: Any) -> Any:
    """The schema with unknown fields refused wherever it declares an object's fields (the API server prunes them
    silently; `kubectl apply --validate=strict` refuses them)."""
    if isinstance(schema, dict):
        out = {k: strict(v) for k, v in schema.items()}
        if (
            "properties" in out
            and "additionalProperties" not in out
            and not out.get("x-kubernetes-preserve-unknown-fields")
        ):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [strict(v) for v in schema]
    return schema


@pytest.fixture(scope="module")
def crd_schemas() -> dict[tuple[str, str], dict[str, Any]]:
    out = {}
    for (api, kind), (name, digest) in CRDS.items():
        raw = gzip.decompress((SCHEMAS / name).read_bytes())
        assert hashlib.sha256(raw).hexdigest() == digest, f"the vendored {name} is not the one schemas/README.md names"
        crd = yaml.safe_load(raw)
        version = api.split("/")[1]
        (v,) = [v for v in crd["spec"]["versions"] if v["name"] == version]
        assert crd["spec"]["names"]["kind"] == kind
        out[(api, kind)] = strict(v["schema"]["openAPIV3Schema"])
    return out


@pytest.fixture(scope="module")
def rendered() -> k8s.K8sRender:
    loaded = load_scope("kimi-k3")
    lay = layout(loaded, tier="full")
    return k8s.render(lay, load_site(None), k8s.K8sOptions(PR, image=IMAGE))


def _validate(doc: dict[str, Any], crds: dict[tuple[str, str], dict[str, Any]]) -> None:
    key = (doc["apiVersion"], doc["kind"])
    if key in crds:
        jsonschema.Draft4Validator(crds[key]).validate(doc)
    else:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def _every_object(r: k8s.K8sRender) -> list[dict[str, Any]]:
    """What is applied and what the drivers create (read back from their ConfigMaps)."""
    created = []
    for d in r.documents:
        if d["kind"] == "ConfigMap" and "engines.yaml" in d["data"]:
            created += [x for x in yaml.safe_load_all(d["data"]["engines.yaml"]) if x]
    return r.documents + created


def test_every_object_passes_strict_offline_schema_validation(rendered: k8s.K8sRender, crd_schemas) -> None:
    objects = _every_object(rendered)
    kinds = {d["kind"] for d in objects}
    assert {"PersistentVolumeClaim", "ConfigMap", "Job", "LeaderWorkerSet", "Service", "ComputeDomain"} <= kinds
    assert {"ServiceAccount", "Role", "RoleBinding"} <= kinds
    for doc in objects:
        _validate(doc, crd_schemas)


def test_validation_catches_broken_objects(rendered: k8s.K8sRender, crd_schemas) -> None:
    """The validators reject what a cluster would: a string size, an unknown field, a ComputeDomain without its
    channel, an unknown Job field."""
    objects = _every_object(rendered)
    lws = copy.deepcopy(next(d for d in objects if d["kind"] == "LeaderWorkerSet"))
    lws["spec"]["leaderWorkerTemplate"]["size"] = "four"
    with pytest.raises(jsonschema.ValidationError):
        _validate(lws, crd_schemas)
    lws = copy.deepcopy(next(d for d in objects if d["kind"] == "LeaderWorkerSet"))
    lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["resourceClaim"] = []
    with pytest.raises(jsonschema.ValidationError, match="resourceClaim"):
        _validate(lws, crd_schemas)
    cd = copy.deepcopy(next(d for d in objects if d["kind"] == "ComputeDomain"))
    del cd["spec"]["channel"]
    with pytest.raises(jsonschema.ValidationError, match="channel"):
        _validate(cd, crd_schemas)
    job = copy.deepcopy(next(d for d in objects if d["kind"] == "Job"))
    job["spec"]["completionsMode"] = "Indexed"
    with pytest.raises(kubernetes_validate.ValidationError):
        _validate(job, crd_schemas)


def test_node_counts_match_the_plan(rendered: k8s.K8sRender) -> None:
    loaded = load_scope("kimi-k3")
    full = build_run_plan(loaded.scope, tier="full", scope_sha256=loaded.sha256)
    n = len(full.groups)
    lws = [d for d in k8s.engines_of(rendered) if d["kind"] == "LeaderWorkerSet"]
    # every K3 engine spans several GB300 trays: one shard per group, two LeaderWorkerSets (one per side) each
    assert len(lws) == 2 * n
    for d in lws:
        shard = int(d["metadata"]["labels"]["fasttrack.dev/shard"])
        plan = build_run_plan(loaded.scope, tier="full", shard=f"{shard}/{n}", scope_sha256=loaded.sha256)
        (group,) = plan.groups
        tmpl = d["spec"]["leaderWorkerTemplate"]
        assert tmpl["size"] == group.nodes
        for role in ("leaderTemplate", "workerTemplate"):
            (c,) = tmpl[role]["spec"]["containers"]
            assert c["image"] == IMAGE
            assert c["resources"]["limits"]["nvidia.com/gpu"] == group.gpus_per_node
            assert c["command"][c["command"].index("--nnodes") + 1] == str(group.nodes)
            side = d["metadata"]["labels"]["fasttrack.dev/side"]
            assert all(a in c["command"] for a in group.args[side])
            assert {"name": "FASTTRACK_IMAGE_DIGEST", "value": DIGEST} in c["env"]
        lead = tmpl["leaderTemplate"]["spec"]["containers"][0]["command"]
        assert "leader" in lead and "--headless" not in lead
        work = tmpl["workerTemplate"]["spec"]["containers"][0]["command"]
        assert "--headless" in work and "$(LWS_WORKER_INDEX)" in work
    drivers = [
        d
        for d in rendered.documents
        if d["kind"] == "Job" and d["metadata"]["labels"]["fasttrack.dev/role"] == "driver"
    ]
    assert len(drivers) == n
    merge = [d for d in rendered.documents if d["metadata"]["name"].endswith("-merge")]
    assert (
        len(merge) == 1 and "k8s merge /bundles" in merge[0]["spec"]["template"]["spec"]["containers"][0]["command"][2]
    )


def _driver_argv(job: dict[str, Any]) -> tuple[list[str], list[str]]:
    """The driver's `k8s drive` options and its validate command line."""
    script = job["spec"]["template"]["spec"]["containers"][0]["command"][2]
    line = next(ln for ln in script.splitlines() if ln.startswith("exec "))
    import shlex

    argv = shlex.split(line)[1:]
    cut = argv.index("--")
    return argv[:cut], argv[cut + 1 :]


def test_drivers_hold_no_gpu_and_validate_the_pr_head_in_the_pinned_image(rendered: k8s.K8sRender) -> None:
    for d in rendered.documents:
        if d["kind"] != "Job":
            continue
        (c,) = d["spec"]["template"]["spec"]["containers"]
        assert c["image"] == IMAGE
        if d["metadata"]["labels"]["fasttrack.dev/role"] != "driver":
            continue
        assert not c.get("resources"), "a driver's engines are remote: it needs no GPU"
        drive, validate = _driver_argv(d)
        assert drive[:3] == ["fasttrack", "k8s", "drive"]
        assert validate[:2] == ["fasttrack", "validate"]
        for flag, value in (("--repo", str(PR.repo)), ("--base", PR.base), ("--head", PR.head)):
            assert validate[validate.index(flag) + 1] == value
        shard = d["metadata"]["labels"]["fasttrack.dev/shard"]
        assert validate[validate.index("--shard") + 1] == f"{shard}/36"
        assert validate[validate.index("--baseline-url") + 1] == drive[drive.index("--baseline-url") + 1]
        env = {e["name"]: e for e in c["env"]}
        assert env["FASTTRACK_IMAGE_DIGEST"]["value"] == DIGEST
        assert "batch.kubernetes.io/controller-uid" in env["JOB_UID"]["valueFrom"]["fieldRef"]["fieldPath"]
    assert rendered.job["image_digest"] == DIGEST and rendered.job["pr"]["head"] == PR.head


def test_every_engine_object_is_owned_by_its_driver_and_every_job_expires(rendered: k8s.K8sRender) -> None:
    for d in rendered.documents:
        if d["kind"] == "Job":
            assert d["spec"]["ttlSecondsAfterFinished"] == 86400
    drivers = {d["metadata"]["labels"]["fasttrack.dev/shard"]: d["metadata"]["name"] for d in rendered.documents
               if d["kind"] == "Job" and d["metadata"]["labels"]["fasttrack.dev/role"] == "driver"}  # fmt: skip
    for shard, objs in rendered.engines.items():
        for d in objs:
            (ref,) = d["metadata"]["ownerReferences"]
            assert (ref["kind"], ref["name"], ref["uid"]) == ("Job", drivers[str(shard)], "$(JOB_UID)")
    # the drivers may create, read and delete exactly those kinds, and own their ConfigMaps
    role = next(d for d in rendered.documents if d["kind"] == "Role")
    kinds = {r for rule in role["rules"] for r in rule["resources"]}
    assert kinds == {"leaderworkersets", "computedomains", "services", "configmaps"}
    for d in rendered.documents:
        if d["kind"] == "Job" and d["metadata"]["labels"]["fasttrack.dev/role"] == "driver":
            assert d["spec"]["template"]["spec"]["serviceAccountName"] == role["metadata"]["name"]


def test_engines_spanning_trays_get_a_compute_domain_in_one_clique(rendered: k8s.K8sRender) -> None:
    for objs in rendered.engines.values():
        domains = {d["metadata"]["name"]: d for d in objs if d["kind"] == "ComputeDomain"}
        for lws in (d for d in objs if d["kind"] == "LeaderWorkerSet"):
            cd = domains[f"{lws['metadata']['name']}-cd"]
            tmpl = lws["spec"]["leaderWorkerTemplate"]
            assert cd["spec"]["numNodes"] == tmpl["size"]
            channel = cd["spec"]["channel"]["resourceClaimTemplate"]["name"]
            for role in ("leaderTemplate", "workerTemplate"):
                spec = tmpl[role]["spec"]
                assert spec["resourceClaims"] == [{"name": "imex-channel", "resourceClaimTemplateName": channel}]
                assert spec["containers"][0]["resources"]["claims"] == [{"name": "imex-channel"}]
                (term,) = spec["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
                assert term["topologyKey"] == "nvidia.com/gpu.clique"
                assert (
                    term["labelSelector"]["matchLabels"]["fasttrack.dev/side"]
                    == lws["metadata"]["labels"]["fasttrack.dev/side"]
                )
        # created first, so the channel's claim template exists when the pods are
        kinds = [d["kind"] for d in objs]
        assert kinds.index("ComputeDomain") < kinds.index("LeaderWorkerSet")


def test_waves_without_a_queue_and_kueue_labels_with_one(tmp_path: Path) -> None:
    loaded = load_scope("kimi-k3")
    lay = layout(loaded, tier="full")
    r = k8s.render(lay, load_site(None), k8s.K8sOptions(ValidateOptions("kimi-k3"), max_parallel=3))
    drivers = sorted(
        (d for d in r.documents if d["kind"] == "Job" and d["metadata"]["labels"]["fasttrack.dev/role"] == "driver"),
        key=lambda d: int(d["metadata"]["labels"]["fasttrack.dev/shard"]),
    )
    for k, d in enumerate(drivers):
        drive, _ = _driver_argv(d)
        if k < 3:
            assert "--after" not in drive  # the first wave starts at once
        else:
            ahead = drivers[k - 3]["metadata"]["labels"]["fasttrack.dev/shard"]
            assert drive[drive.index("--after") + 1] == f"/bundles/shards/shard-{ahead}-of-36/exit-status"
            assert float(drive[drive.index("--after-max-s") + 1]) > 0
    assert not any("kueue.x-k8s.io/queue-name" in d["metadata"]["labels"] for d in _every_object(r))
    assert r.job["max_parallel"] == 3 and r.job["queue"] is None

    site = tmp_path / "site.yaml"
    site.write_text("kubernetes: {queue: gpu-evals}\n")
    r = k8s.render(lay, load_site(site), k8s.K8sOptions(ValidateOptions("kimi-k3")))
    for d in _every_object(r):
        q = d["metadata"]["labels"].get("kueue.x-k8s.io/queue-name")
        role = d["metadata"]["labels"].get("fasttrack.dev/role")
        if d["kind"] == "LeaderWorkerSet" or (d["kind"] == "Job" and role != "driver"):
            assert q == "gpu-evals", d["metadata"]["name"]
        else:
            assert q is None, d["metadata"]["name"]  # the drivers hold no GPU: not queued
    for d in r.documents:
        if d["kind"] == "Job" and d["metadata"]["labels"]["fasttrack.dev/role"] == "driver":
            assert "--after" not in _driver_argv(d)[0]


def test_single_node_shards_become_one_indexed_job(crd_schemas) -> None:
    """The demo target's shards (one node each) run as an Indexed Job: pod k runs the k-th shard, at most
    max_parallel at once."""
    loaded = load_scope("demo-llama")
    lay = layout(loaded, tier="smoke", shards=3)
    r = k8s.render(lay, load_site(None), k8s.K8sOptions(ValidateOptions("demo-llama"), max_parallel=2))
    (job,) = [d for d in r.documents if d["kind"] == "Job" and d["metadata"]["name"].endswith("-shards")]
    spec = job["spec"]
    assert spec["completionMode"] == "Indexed" and spec["completions"] == 3 and spec["backoffLimitPerIndex"] == 0
    assert spec["parallelism"] == 2 and spec["ttlSecondsAfterFinished"] == 86400
    c = spec["template"]["spec"]["containers"][0]
    assert {"name": "FASTTRACK_SHARDS", "value": "1 2 3"} in c["env"]
    script = c["command"][2]
    assert 'shift "$JOB_COMPLETION_INDEX"' in script and '--shard "$SHARD/3"' in script
    assert "resources" not in c or not c["resources"], "a CPU scope requests no GPUs"
    assert not [d for d in r.documents if d["kind"] in ("LeaderWorkerSet", "Role")]
    for doc in r.documents:
        _validate(doc, crd_schemas)
    job_json = json.loads(next(d for d in r.documents if d["kind"] == "ConfigMap")["data"]["fasttrack-job.json"])
    assert job_json["shard_jobs"]["2/3"] == {"job": job["metadata"]["name"], "completion_index": 1}


def test_slurm_site_settings_stay_out_of_the_pods(tmp_path: Path) -> None:
    site = tmp_path / "site.yaml"
    site.write_text(
        "fasttrack: /shared/venv/bin/fasttrack\nsetup: ['module load cuda/12.9']\nenv: {HF_HOME: /shared/hf}\n"
        "validate_args: ['--run-anyway']\n"
        "slurm: {env: {SLURM_ONLY: '1'}, sbatch: ['--exclusive']}\n"
        "kubernetes: {env: {HF_HOME: /models/hf}, setup: ['echo pod']}\n"
    )
    r = k8s.render(
        layout(load_scope("kimi-k3"), tier="smoke"), load_site(site), k8s.K8sOptions(ValidateOptions("kimi-k3"))
    )
    text = yaml.safe_dump_all(_every_object(r))
    for leak in ("/shared/venv", "module load", "/shared/hf", "SLURM_ONLY", "--exclusive", "--run-anyway"):
        assert leak not in text, leak
    assert "/models/hf" in text and "echo pod" in text


def test_shard_script_passes_sigterm_on_and_records_its_exit_status(tmp_path: Path) -> None:
    """The pod script as a shell runs it: the shard's exit status lands next to its bundle, and SIGTERM
    (pod deletion) reaches the validate process instead of killing only the shell."""
    site = load_site(None)
    script = k8s._shard_script(site, "python3 -c 'import sys; sys.exit(3)'", 2, 'SHARD=2; EXTRA_ARGS=""')
    script = script.replace(k8s.BUNDLES, str(tmp_path))
    res = subprocess.run(["bash", "-c", script], capture_output=True, text=True)
    assert res.returncode == 3
    assert (tmp_path / "shards/shard-2-of-2/exit-status").read_text().strip() == "3"
    marker, ready = tmp_path / "got-term", tmp_path / "ready"
    child = (
        "python3 -c 'import signal,sys,time; "
        f'signal.signal(signal.SIGTERM, lambda *a: (open("{marker}","w").write("x"), sys.exit(7))); '
        f'open("{ready}","w").write("x"); time.sleep(60)\''
    )
    script = k8s._shard_script(site, child, 2, 'SHARD=1; EXTRA_ARGS=""').replace(k8s.BUNDLES, str(tmp_path))
    proc = subprocess.Popen(["bash", "-c", script])
    deadline = time.time() + 60
    while not ready.exists() and time.time() < deadline:
        time.sleep(0.1)
    proc.terminate()
    assert proc.wait(timeout=20) == 7
    assert marker.exists() and (tmp_path / "shards/shard-1-of-2/exit-status").read_text().strip() == "7"


def test_cli_render_writes_files(tmp_path: Path) -> None:
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "fasttrack",
            "k8s",
            "render",
            "--model",
            "demo-llama",
            "--shards",
            "2",
            "-o",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0, res.stderr
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names[0].startswith("00-persistentvolumeclaim-") and any("-job-" in n for n in names)
    assert "IMAGE NOT PINNED BY DIGEST" in res.stderr and "waves of 4" in res.stderr
