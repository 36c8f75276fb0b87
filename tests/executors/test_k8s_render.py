"""`fasttrack k8s render` for kimi-k3's full tier, validated offline: built-in kinds against the Kubernetes
OpenAPI schema (kubernetes-validate), LeaderWorkerSets against the vendored LWS CRD (schemas/README.md).
No cluster runs these manifests here."""

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

from fasttrack.executors import k8s
from fasttrack.executors.shards import layout
from fasttrack.executors.site import load_site
from fasttrack.plan import build_plan
from fasttrack.scope import load_scope

kubernetes_validate = pytest.importorskip("kubernetes_validate", reason="kubernetes-validate (test extra)")

K8S_VERSION = "1.37.0"
CRD = Path(__file__).parent / "schemas" / "leaderworkerset.x-k8s.io_leaderworkersets.v0.10.0.yaml.gz"
CRD_SHA256 = "c5dcad8ed943e495490241f00b9a1b45d51203b6d484020db3636d5bf553568e"


@pytest.fixture(scope="module")
def lws_schema() -> dict[str, Any]:
    raw = gzip.decompress(CRD.read_bytes())
    assert hashlib.sha256(raw).hexdigest() == CRD_SHA256, "the vendored CRD is not the one schemas/README.md names"
    crd = yaml.safe_load(raw)
    (v1,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    return v1["schema"]["openAPIV3Schema"]  # type: ignore[no-any-return]  # the CRD's schema object


@pytest.fixture(scope="module")
def rendered() -> k8s.K8sRender:
    loaded = load_scope("kimi-k3")
    lay = layout(loaded, tier="full")
    return k8s.render(lay, load_site(None), k8s.K8sOptions(model="kimi-k3"))


def _validate(doc: dict[str, Any], lws_schema: dict[str, Any]) -> None:
    if doc["kind"] == "LeaderWorkerSet":
        assert doc["apiVersion"] == "leaderworkerset.x-k8s.io/v1"
        jsonschema.Draft4Validator(lws_schema).validate(doc)
    else:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_every_manifest_passes_offline_schema_validation(rendered: k8s.K8sRender, lws_schema) -> None:
    kinds = [d["kind"] for d in rendered.documents]
    assert {"PersistentVolumeClaim", "ConfigMap", "Job", "LeaderWorkerSet", "Service"} <= set(kinds)
    for doc in rendered.documents:
        _validate(doc, lws_schema)


def test_validation_catches_broken_manifests(rendered: k8s.K8sRender, lws_schema) -> None:
    """The validators reject what a cluster would: a string size, an unknown Job field."""
    lws = copy.deepcopy(next(d for d in rendered.documents if d["kind"] == "LeaderWorkerSet"))
    lws["spec"]["leaderWorkerTemplate"]["size"] = "four"
    with pytest.raises(jsonschema.ValidationError):
        _validate(lws, lws_schema)
    job = copy.deepcopy(next(d for d in rendered.documents if d["kind"] == "Job"))
    job["spec"]["completionsMode"] = "Indexed"
    with pytest.raises(kubernetes_validate.ValidationError):
        _validate(job, lws_schema)


def test_node_counts_match_the_plan(rendered: k8s.K8sRender) -> None:
    loaded = load_scope("kimi-k3")
    full = build_plan(loaded.scope, tier="full", scope_sha256=loaded.sha256)
    n = len(full.groups)
    docs = rendered.documents
    lws = [d for d in docs if d["kind"] == "LeaderWorkerSet"]
    # every K3 engine spans several GB300 trays: one shard per group, two LeaderWorkerSets (one per side) each
    assert len(lws) == 2 * n
    for d in lws:
        shard = int(d["metadata"]["labels"]["fasttrack.dev/shard"])
        plan = build_plan(loaded.scope, tier="full", shard=f"{shard}/{n}", scope_sha256=loaded.sha256)
        (group,) = plan.groups
        tmpl = d["spec"]["leaderWorkerTemplate"]
        assert tmpl["size"] == group.nodes
        for role in ("leaderTemplate", "workerTemplate"):
            (c,) = tmpl[role]["spec"]["containers"]
            assert c["resources"]["limits"]["nvidia.com/gpu"] == group.gpus_per_node
            assert c["command"][c["command"].index("--nnodes") + 1] == str(group.nodes)
            side = d["metadata"]["labels"]["fasttrack.dev/side"]
            assert all(a in c["command"] for a in group.args[side])
        lead = tmpl["leaderTemplate"]["spec"]["containers"][0]["command"]
        assert "leader" in lead and "--headless" not in lead
        work = tmpl["workerTemplate"]["spec"]["containers"][0]["command"]
        assert "--headless" in work and "$(LWS_WORKER_INDEX)" in work
    drivers = [d for d in docs if d["kind"] == "Job" and d["metadata"]["labels"].get("fasttrack.dev/role") == "driver"]
    assert len(drivers) == n
    script = drivers[0]["spec"]["template"]["spec"]["containers"][0]["command"][2]
    assert "--baseline-url http://" in script and f'--shard "$SHARD/{n}"' in script
    merge = [d for d in docs if d["metadata"]["name"].endswith("-merge")]
    assert (
        len(merge) == 1 and "k8s merge /bundles" in merge[0]["spec"]["template"]["spec"]["containers"][0]["command"][2]
    )


def test_single_node_shards_become_one_indexed_job(lws_schema) -> None:
    """The demo target's shards (one node each) run as an Indexed Job: pod k runs the k-th shard."""
    loaded = load_scope("demo-llama")
    lay = layout(loaded, tier="smoke", shards=3)
    r = k8s.render(lay, load_site(None), k8s.K8sOptions(model="demo-llama"))
    (job,) = [d for d in r.documents if d["kind"] == "Job" and d["metadata"]["name"].endswith("-shards")]
    spec = job["spec"]
    assert spec["completionMode"] == "Indexed" and spec["completions"] == 3 and spec["backoffLimitPerIndex"] == 0
    c = spec["template"]["spec"]["containers"][0]
    assert {"name": "FASTTRACK_SHARDS", "value": "1 2 3"} in c["env"]
    script = c["command"][2]
    assert 'shift "$JOB_COMPLETION_INDEX"' in script and '--shard "$SHARD/3"' in script
    assert "resources" not in c or not c["resources"], "a CPU scope requests no GPUs"
    assert not [d for d in r.documents if d["kind"] == "LeaderWorkerSet"]
    for doc in r.documents:
        _validate(doc, lws_schema)
    job_json = json.loads(next(d for d in r.documents if d["kind"] == "ConfigMap")["data"]["fasttrack-job.json"])
    assert job_json["shard_jobs"]["2/3"] == {"job": job["metadata"]["name"], "completion_index": 1}


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
    assert "no cluster" not in res.stdout
