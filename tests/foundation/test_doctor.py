"""``fasttrack doctor``: a readable list of what stops validate here, exit 0 only when it can run."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from fasttrack import ROOT
from fasttrack.host.doctor import diagnose
from fasttrack.host.hardware import GPU, HostInfo
from fasttrack.scope import load_scope


def _ft(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    return subprocess.run(
        [sys.executable, "-m", "fasttrack", *args], capture_output=True, text=True, cwd=ROOT, env=env, timeout=900
    )


def test_doctor_says_why_k3_cannot_run_on_this_cpu_host() -> None:
    res = _ft("doctor", "--model", "kimi-k3")
    assert res.returncode == 1, (res.stdout, res.stderr)
    out = res.stdout
    assert "Traceback" not in out + res.stderr
    assert "problem hardware: scope asks for: 8 or 16 GPUs nvidia blackwell (GB300)" in out
    assert "; this host: no GPU (" in out and "\u2014 a GPU scope on a host without GPUs: no GPU found" in out
    assert "fix: the scope needs 8 or 16 GPUs" in out
    assert "problem CUDA driver" in out
    assert "problem nodes: engines of the smoke tier span 4 nodes" in out and "salloc -N 4" in out
    assert "validate cannot run kimi-k3 (smoke) here" in out
    # the rest is still reported: versions, passability of every tier, the estimate
    assert "ok      vLLM: " in out
    for tier in ("smoke", "standard", "full"):
        assert f"ok      passability ({tier})" in out
    assert "note    estimate: smoke: 2 config points in 1 engine groups" in out


def test_doctor_passes_the_demo_here() -> None:
    res = _ft("doctor", "--model", "demo-llama", "--json")
    assert res.returncode == 0, (res.stdout, res.stderr)
    doc = json.loads(res.stdout)
    assert doc["ok"] is True
    topics = {f["topic"]: f for f in doc["findings"]}
    assert topics["vLLM"]["status"] == "ok" and topics["engine arguments"]["status"] == "ok"
    assert topics["hardware"]["status"] == "ok"
    assert not [f for f in doc["findings"] if f["status"] == "problem"]


def test_doctor_on_a_gb300_tray_in_an_allocation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    srun = tmp_path / "srun"
    srun.write_text("#!/bin/sh\nexit 0\n")
    srun.chmod(srun.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    monkeypatch.setenv("SLURM_JOB_NUM_NODES", "4")
    host = HostInfo(
        cpu_model="Grace",
        cpu_count=72,
        gpus=[
            GPU(
                index=i,
                name="NVIDIA GB300",
                compute_capability="10.3",
                memory_mib=284208,
                nvlink_active=18,
                fabric_state="Completed",
                fabric_clique="c",
            )
            for i in range(4)
        ],
        source="nvidia-smi",
        allocation_nodes=4,
        allocation="slurm job 5: 4 node(s) (gb[1-4])",
    )
    rep = diagnose(load_scope("kimi-k3"), tier="smoke", host=host, check_args=False)
    by = {f.topic: f for f in rep.findings}
    assert by["hardware"].status == "ok" and "4x NVIDIA GB300" in by["hardware"].found
    assert by["nodes"].status == "ok" and "launcher slurm" in by["nodes"].found
    assert by["memory"].status == "ok" and "of each GPU's 278 GiB" in by["memory"].found
    # this test host has no NVIDIA driver for the engine's interpreter: that stays a problem
    assert by["CUDA driver"].status == "problem"
