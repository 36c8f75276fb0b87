"""One engine command line for every executor: the local launcher's node processes, the srun tasks of the
Slurm launcher and the LeaderWorkerSet pods of `fasttrack k8s render` run a multi-node group with the same
vLLM arguments, the profiler configuration (the path evidence) included, and the same safety settings."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from fasttrack.checks.base import build_run_plan
from fasttrack.engine.cmdline import NODE_MAIN, serve_spec
from fasttrack.engine.launchers import LaunchRequest, LocalLauncher, SlurmLauncher
from fasttrack.executors import k8s
from fasttrack.executors.shards import layout
from fasttrack.executors.site import load_site
from fasttrack.pipeline.options import ValidateOptions
from fasttrack.scope import HOST_SAFETY_ENV, load_scope

SIDE = "candidate"
PLACE = {"--master-addr": "<master>", "--host": "<bind>"}
"""Where the ranks meet and the API listens: the executor's own (loopback, the first node's NodeAddr, the
LeaderWorkerSet's leader address)."""


@pytest.fixture(scope="module")
def node_main() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fasttrack_node_main_executors_test", NODE_MAIN)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def rendered() -> tuple[Any, Any, Any, k8s.K8sRender]:
    """kimi-k3's full tier, one shard per engine group; shard 1 and its (multi-node) group."""
    loaded = load_scope("kimi-k3")
    lay = layout(loaded, tier="full")
    shard = lay.shard(1)
    (group,) = [g for g in build_run_plan(loaded.scope, tier="full").groups if g.id in shard.groups]
    assert group.nodes == shard.nodes > 1
    return loaded.scope, group, shard, k8s.render(lay, load_site(None), k8s.K8sOptions(ValidateOptions("kimi-k3")))


def _placed(args: list[str]) -> tuple[list[str], dict[str, str]]:
    """vLLM's arguments with the executor's placement values masked, and those values."""
    out, seen = list(args), {}
    for flag, mask in PLACE.items():
        if flag in out:
            i = out.index(flag) + 1
            seen[flag], out[i] = out[i], mask
    return out, seen


def _pod(docs: list[dict[str, Any]], shard: int) -> dict[str, dict[str, Any]]:
    (lws,) = [
        d
        for d in docs
        if d["kind"] == "LeaderWorkerSet"
        and d["metadata"]["labels"]["fasttrack.dev/shard"] == str(shard)
        and d["metadata"]["labels"]["fasttrack.dev/side"] == SIDE
    ]
    tmpl = lws["spec"]["leaderWorkerTemplate"]
    return {role: tmpl[f"{role}Template"]["spec"]["containers"][0] for role in ("leader", "worker")}


def test_local_srun_and_pod_nodes_run_identical_vllm_arguments(rendered, node_main, tmp_path: Path) -> None:
    scope, group, shard, render = rendered
    n = shard.nodes
    spec = serve_spec(
        scope,
        group,
        SIDE,
        model=scope.model.id,
        run_dir=k8s.engine_run_dir(shard),
        name=f"{group.id}.{SIDE}.0",
        per_request_metrics=True,
    )
    req = LaunchRequest(
        python=sys.executable,
        spec=spec,
        nnodes=n,
        api_port=k8s.API_PORT,
        master_port=k8s.MASTER_PORT,
        host_env={"PATH": "/usr/bin:/bin"},
        log_dir=tmp_path,
        log_name="g",
    )
    local = [c.vllm_args for c in LocalLauncher().commands(req)]

    bin_dir = tmp_path / "bin"  # a stand-in scontrol: nodes gb1..gbN, reached at 10.1.0.i
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(
        "#!/bin/bash\n"
        f'if [[ "$1 $2" == "show hostnames" ]]; then printf "gb%s\\n" $(seq 1 {n}); exit 0; fi\n'
        'if [[ "$1 $2 $3" == "-o show node" ]]; then echo "NodeName=$4 NodeAddr=10.1.0.${4#gb}"; exit 0; fi\n'
        "exit 1\n"
    )
    (bin_dir / "scontrol").chmod(0o755)
    slurm_env = {"SLURM_JOB_NUM_NODES": str(n), "SLURM_JOB_NODELIST": f"gb[1-{n}]", "PATH": f"{bin_dir}:/usr/bin:/bin"}
    _, task, _ = SlurmLauncher(env=slurm_env).command(req)
    srun = [node_main.slurm_node(task.vllm_args, r)[1] for r in range(n)]  # what each task runs, by SLURM_NODEID

    pods = _pod(k8s.engines_of(render), shard.index)
    lead, work = (pods[r]["command"] for r in ("leader", "worker"))
    assert lead[:4] == ["python", "-m", "fasttrack.engine.node_main", "leader"]
    assert work[:4] == ["python", "-m", "fasttrack.engine.node_main", "follower"]
    pod = [lead[4:]] + [[str(r) if a == "$(LWS_WORKER_INDEX)" else a for a in work[4:]] for r in range(1, n)]

    for r in range(n):
        (a, where_a), (b, where_b), (c, where_c) = _placed(local[r]), _placed(srun[r]), _placed(pod[r])
        assert a == b == c, (r, a, b, c)
        assert a[a.index("--node-rank") + 1] == str(r) and ("--headless" in a) == (r > 0)
        assert where_a["--master-addr"] == "127.0.0.1" and where_b["--master-addr"] == "10.1.0.1"
        assert where_c["--master-addr"] == "$(LWS_LEADER_ADDRESS)"
        if r == 0:
            assert (where_a["--host"], where_b["--host"], where_c["--host"]) == ("127.0.0.1", "0.0.0.0", "0.0.0.0")
        else:
            assert "--host" not in where_a and "--host" not in where_b and "--host" not in where_c  # no API here

    args = pod[0]
    assert args[: len(group.args[SIDE]) + 6][6:] == group.args[SIDE]
    cfg = json.loads(args[args.index("--profiler-config") + 1])  # the path evidence reaches the pods
    assert cfg["torch_profiler_dir"] == f"{k8s.BUNDLES}/engines/{shard.dirname}/profiles/{group.id}.{SIDE}.0"
    assert not cfg["torch_profiler_dir"].startswith(f"{k8s.BUNDLES}/shards/")  # the driver's --force replaces those
    assert "--enable-per-request-metrics" in args
    assert ("--served-model-name" in args) == bool(scope.model.served_name)


def test_local_srun_and_pod_nodes_get_the_same_engine_environment(rendered, tmp_path: Path) -> None:
    scope, group, shard, render = rendered
    spec = serve_spec(scope, group, SIDE, model=scope.model.id, run_dir=tmp_path, name="g")
    req = LaunchRequest(
        python=sys.executable,
        spec=spec,
        nnodes=shard.nodes,
        api_port=8000,
        master_port=29500,
        host_env={"PATH": "/usr/bin:/bin"},
        log_dir=tmp_path,
        log_name="g",
    )
    env = {"SLURM_JOB_NUM_NODES": str(shard.nodes), "SLURM_JOB_NODELIST": f"gb[1-{shard.nodes}]", "PATH": "/none"}
    envs = [c.env for c in LocalLauncher().commands(req)]
    envs.append(SlurmLauncher(env=env).command(req)[1].env)
    for container in _pod(k8s.engines_of(render), shard.index).values():
        envs.append({e["name"]: e["value"] for e in container["env"]})
    wanted = {**HOST_SAFETY_ENV, "VLLM_SERVER_DEV_MODE": "1", **group.env[SIDE]}
    for e in envs:
        assert {k: e.get(k) for k in wanted} == wanted


def test_the_sites_safety_settings_reach_the_pods_unchanged(tmp_path: Path) -> None:
    site_file = tmp_path / "site.yaml"
    site_file.write_text("kubernetes: {env: {NCCL_NVLS_ENABLE: '0', HF_HOME: /shared/hf}}\n")
    site = load_site(site_file)
    loaded = load_scope("kimi-k3")
    r = k8s.render(layout(loaded, tier="smoke"), site, k8s.K8sOptions(ValidateOptions("kimi-k3")))
    containers = []
    for d in r.documents + k8s.engines_of(r):
        if d["kind"] == "Job":
            containers += d["spec"]["template"]["spec"]["containers"]
        elif d["kind"] == "LeaderWorkerSet":
            for role in ("leaderTemplate", "workerTemplate"):
                containers += d["spec"]["leaderWorkerTemplate"][role]["spec"]["containers"]
    assert containers
    for c in containers:
        env = {e["name"]: e.get("value") for e in c["env"]}
        assert {k: env[k] for k in HOST_SAFETY_ENV} == HOST_SAFETY_ENV and env["HF_HOME"] == "/shared/hf"
