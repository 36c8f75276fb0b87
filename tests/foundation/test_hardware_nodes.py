"""The node model: nodes per engine in the plan, node-hours, and the host check (model and arch,
GPUs per node, NVLink, the multi-node NVLink fabric, the allocation's nodes)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from fasttrack import ROOT
from fasttrack.checks.base import build_run_plan
from fasttrack.errors import ScopeError
from fasttrack.host.hardware import (
    GPU,
    HostInfo,
    allocation_from_env,
    match_hardware,
    parse_fabric,
    parse_gpu_query,
    parse_nvlink_status,
)
from fasttrack.scope import load_scope, parse_scope


@pytest.fixture(scope="module")
def k3():
    return load_scope("kimi-k3")


def test_k3_smoke_plan_json_states_four_nodes_of_four_gpus_per_tp16_engine() -> None:
    res = subprocess.run(
        [sys.executable, "-m", "fasttrack", "plan", "--model", "kimi-k3", "--tier", "smoke", "--json"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
        check=False,
    )
    assert res.returncode == 0, res.stderr
    plan = json.loads(res.stdout)
    tp16 = [g for g in plan["groups"] if g["tp"] == 16]
    assert tp16, plan["groups"]
    for g in tp16:
        assert (g["nodes"], g["gpus_per_node"], g["gpus"]) == (4, 4, 16)
        assert g["node_kind"] == "GB300 NVL72 compute tray"
    est = plan["estimate"]
    assert est["node_hours"] > 0 and est["gpu_hours"] == pytest.approx(4 * est["node_hours"], rel=1e-3)


def test_standard_tier_tp8_spans_two_trays(k3) -> None:
    plan = build_run_plan(k3.scope, tier="standard")
    by_tp = {g.tp: (g.nodes, g.gpus_per_node) for g in plan.groups}
    assert by_tp == {8: (2, 4), 16: (4, 4)}
    node_h = sum(g.nodes for g in plan.groups)
    assert node_h > 0 and plan.estimate.node_hours < plan.estimate.gpu_hours


def test_engines_that_fit_one_host_have_one_node() -> None:
    plan = build_run_plan(load_scope("demo-llama").scope, tier="smoke")
    assert {(g.nodes, g.gpus_per_node) for g in plan.groups} == {(1, None)}


def _k3_text(**replace: str) -> str:
    text = (ROOT / "suites/kimi-k3/scope.yaml").read_text()
    for old, new in replace.items():
        assert old in text, old
        text = text.replace(old, new)
    return text


def test_a_tp_size_that_does_not_split_over_nodes_is_a_scope_error() -> None:
    text = _k3_text(**{"node: {gpus: 4,": "node: {gpus: 3,"})
    with pytest.raises(ScopeError) as exc:
        parse_scope(text, source="k3")
    assert "8 ranks do not split evenly over nodes of 3 GPUs" in exc.value.message
    # without gpu_counts the envelope's tensor-parallel sizes are checked against the node model
    with pytest.raises(ScopeError) as exc:
        parse_scope(text.replace("gpu_counts: [8, 16]", "gpu_counts: []"), source="k3")
    assert "envelope.tensor_parallel 8 cannot be laid out" in exc.value.message


def test_an_engine_larger_than_the_nvlink_domain_is_a_scope_error() -> None:
    text = _k3_text(**{"nvlink_domain: 72": "nvlink_domain: 8"})
    with pytest.raises(ScopeError) as exc:
        parse_scope(text, source="k3")
    assert "16 GPUs do not fit in one NVLink domain of 8" in exc.value.message


# --------------------------------------------------------------------------- host check


def _host(
    name: str, cc: str, n: int, *, links: int | None = 18, fabric: str | None = "Completed", nodes: int | None = 4
) -> HostInfo:
    return HostInfo(
        cpu_model="Grace",
        cpu_count=72,
        gpus=[
            GPU(index=i, name=name, compute_capability=cc, nvlink_active=links, fabric_state=fabric, fabric_clique="c1")
            for i in range(n)
        ],
        source="nvidia-smi",
        allocation_nodes=nodes,
        allocation=f"slurm job 7: {nodes} node(s)" if nodes else None,
    )


def test_a_gb300_tray_in_a_four_node_allocation_matches(k3) -> None:
    m = match_hardware(k3.scope.hardware, _host("NVIDIA GB300", "10.3", 4))
    assert m.ok, m.problems
    text = "\n".join(m.facts)
    assert "NVIDIA GB300" in text and "sm_103" in text and "GPUs on this host: 4" in text
    assert "state Completed" in text and "slurm job 7" in text


def test_an_eight_gpu_b200_host_no_longer_passes(k3) -> None:
    m = match_hardware(k3.scope.hardware, _host("NVIDIA B200", "10.0", 8, fabric="Not Supported", nodes=None))
    assert not m.ok
    joined = " | ".join(m.problems)
    assert "GPU model ['NVIDIA B200'] is not one of ['GB300']" in joined
    assert "architecture ['sm_100'] is not sm_103" in joined
    assert "fabric state is Not Supported" in joined
    assert "allocation of 4 nodes" in joined


def test_model_and_arch_are_both_checked(k3) -> None:
    # the right name with the wrong architecture fails (the model alone is not enough) ...
    m = match_hardware(k3.scope.hardware, _host("NVIDIA GB300", "10.0", 4))
    assert [p for p in m.problems if "architecture" in p] and not [p for p in m.problems if "model" in p]
    # ... and the right architecture under another name fails too (the arch alone is not enough)
    m = match_hardware(k3.scope.hardware, _host("NVIDIA B300 SXM6", "10.3", 4))
    assert [p for p in m.problems if "GPU model" in p] and not [p for p in m.problems if "architecture" in p]


def test_nvlink_and_fabric_are_checked(k3) -> None:
    m = match_hardware(k3.scope.hardware, _host("NVIDIA GB300", "10.3", 4, links=0))
    assert any("no active NVLink link" in p for p in m.problems)
    m = match_hardware(k3.scope.hardware, _host("NVIDIA GB300", "10.3", 4, fabric="In Progress"))
    assert any("fabric state is In Progress" in p for p in m.problems)


def test_allocation_too_small_for_the_tier(k3) -> None:
    hw = k3.scope.hardware
    m = match_hardware(hw, _host("NVIDIA GB300", "10.3", 4, nodes=2))
    assert any("spans 4 nodes; the allocation has 2" in p for p in m.problems)
    # a run whose engines are all TP8 needs only two trays
    assert match_hardware(hw, _host("NVIDIA GB300", "10.3", 4, nodes=2), engine_gpus=[8]).ok


def test_too_few_gpus_per_node(k3) -> None:
    m = match_hardware(k3.scope.hardware, _host("NVIDIA GB300", "10.3", 2))
    assert any("2 GPU(s) found, the scope needs nodes of 4 GPUs" in p for p in m.problems)


def test_cpu_host_for_a_gpu_scope_names_what_it_found(k3) -> None:
    host = HostInfo(cpu_model="Xeon", cpu_count=2, source="none")
    m = match_hardware(k3.scope.hardware, host)
    assert not m.ok and "no GPU found" in m.problems and any("GPUs: none" in f for f in m.facts)
    assert "8 or 16 GPUs" in m.required and "nodes of 4 GPUs" in m.required


# --------------------------------------------------------------------------- parsing nvidia-smi

QUERY = "0, NVIDIA GB300, 10.3, 284208, 580.82.07\n1, NVIDIA GB300, 10.3, 284208, 580.82.07\n"

NVLINK = """GPU 0: NVIDIA GB300 (UUID: GPU-aaaa)
\t Link 0: 50 GB/s
\t Link 1: 50 GB/s
\t Link 2: <inactive>
GPU 1: NVIDIA GB300 (UUID: GPU-bbbb)
\t Link 0: <inactive>
"""

SMI_Q = """==============NVSMI LOG==============

Driver Version                            : 580.82.07

GPU 00000008:01:00.0
    Product Name                          : NVIDIA GB300
    Fabric
        State                             : Completed
        Status                            : Success
        CliqueId                          : 32766
        ClusterUUID                       : 9e0c-aa
    Persistence Mode                      : Enabled

GPU 00000009:01:00.0
    Product Name                          : NVIDIA GB300
    Fabric
        State                             : Not Supported
        Status                            : N/A
"""


def test_parsers() -> None:
    gpus, driver = parse_gpu_query(QUERY)
    assert [(g.index, g.name, g.compute_capability, g.memory_mib) for g in gpus] == [
        (0, "NVIDIA GB300", "10.3", 284208),
        (1, "NVIDIA GB300", "10.3", 284208),
    ]
    assert driver == "580.82.07"
    assert parse_nvlink_status(NVLINK) == {0: 2, 1: 0}
    assert parse_fabric(SMI_Q) == {0: ("Completed", "9e0c-aa"), 1: ("Not Supported", None)}
    assert allocation_from_env({"SLURM_JOB_NUM_NODES": "4", "SLURM_JOB_ID": "9", "SLURM_JOB_NODELIST": "gb[1-4]"}) == (
        4,
        "slurm job 9: 4 node(s) (gb[1-4])",
    )
    assert allocation_from_env({}) == (None, None)
