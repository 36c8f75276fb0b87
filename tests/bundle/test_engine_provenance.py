"""Each engine record in a bundle's provenance names the build it served: vLLM version and commit, the torch
build, the CUDA version torch was built for and the driver (an H200 with vLLM 0.26.0, torch 2.11.0+cu130)."""

from __future__ import annotations

from fasttrack.bundle.provenance import scm_commit
from fasttrack.engine.environment import DeviceInfo, EngineEnvironment
from fasttrack.pipeline.engines import EngineLaunch
from fasttrack.pipeline.record import engine_record
from fasttrack.results import head_binding


def _h200_environment() -> EngineEnvironment:
    return EngineEnvironment(
        side="candidate",
        owned=True,
        base_url="http://127.0.0.1:8001",
        source="local-probe",
        vllm_version="0.26.0",
        vllm_commit="ffd46bfab",
        vllm_commit_source="vllm/_version.py",
        vllm_distribution="vllm",
        torch_version="2.11.0+cu130",
        torch_cuda_version="13.0",
        driver_version="580.159.04",
        device=DeviceInfo(kind="cuda", count=1, names=["NVIDIA H200"], detail={"driver_version": "580.159.04"}),
    )


def test_an_engine_record_names_the_torch_cuda_and_driver_it_ran_on() -> None:
    launch = EngineLaunch(side="candidate", group="g0", lifetime=0, checks=["perf"], owned=True)
    launch.environment = _h200_environment().model_dump(mode="json")
    rec = engine_record(launch)
    assert (rec.vllm_version, rec.vllm_commit) == ("0.26.0", "ffd46bfab")
    assert (rec.torch_version, rec.cuda_version, rec.driver_version) == ("2.11.0+cu130", "13.0", "580.159.04")
    # a CPU build: no CUDA, no driver
    cpu = EngineLaunch(side="baseline", group="g0", lifetime=0, checks=["perf"], owned=True)
    cpu.environment = {"vllm_version": "0.32.0", "torch_version": "2.13.0+cpu", "torch_cuda_version": None}
    rec = engine_record(cpu)
    assert (rec.torch_version, rec.cuda_version, rec.driver_version) == ("2.13.0+cpu", None, None)
    # an attached engine reports none of it
    attached = EngineLaunch(side="baseline", group="g0", lifetime=0, checks=["perf"], owned=False)
    rec = engine_record(attached)
    assert (rec.mode, rec.torch_version, rec.cuda_version, rec.driver_version) == ("attached", None, None, None)


def test_vllm_0_26s_commit_id_binds_to_its_full_sha() -> None:
    """vLLM 0.26.0's ``vllm/_version.py`` says ``__commit_id__ = 'gffd46bfab'``: setuptools-scm's 'g' and an
    abbreviated hash. Kept as it is, it could never match the PR head."""
    assert scm_commit("gffd46bfab") == "ffd46bfab"
    assert scm_commit("ffd46bfab") == "ffd46bfab" and scm_commit(None) is None
    assert scm_commit("gpu") == "gpu"  # not a commit id: left alone
    head = "ffd46bfab" + "0" * 31
    assert head_binding(head, [("g0/candidate#1", scm_commit("gffd46bfab"))])[0] == "proven"
    assert head_binding(head, [("g0/candidate#1", "gffd46bfab")])[0] == "mismatch"
