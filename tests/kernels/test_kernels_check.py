"""The kernels check and the ``fasttrack kernels`` command."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from kernels_testlib import DEMO_SUITE, K3_SUITE

import fasttrack.checks.kernels as kc
from fasttrack.checks.base import RunContext, Verdict, registered_checks
from fasttrack.kernels.spec import from_scope_section
from fasttrack.scope import load_scope

CPU_ONLY = pytest.mark.skipif(torch.cuda.is_available(), reason="asserts what a host without CUDA reports")


def _ctx(scope, tmp_path: Path, tier: str = "smoke") -> RunContext:
    return RunContext(scope=scope, plan=SimpleNamespace(tier=tier), run_dir=tmp_path, log=lambda m: None)  # type: ignore[arg-type] - the kernels check reads only the plan's tier


def test_registered_without_engine():
    cls = registered_checks()["kernels"]
    assert cls is kc.KernelsCheck and cls.needs_engine is False and cls.name == "kernels"


def test_gpu_suite_without_cuda_is_not_run_never_pass(tmp_path, monkeypatch):
    monkeypatch.setattr(kc, "cuda_available", lambda: False)
    loaded = load_scope("kimi-k3")
    res = kc.KernelsCheck().run(_ctx(loaded.scope, tmp_path))
    assert res.verdict is Verdict.NOT_RUN
    assert "no CUDA device on this host" in res.reason
    assert res.gate is not None and res.failures == []


def test_scope_section_paths_resolve_against_the_scope_file():
    loaded = load_scope("kimi-k3")
    specs = from_scope_section(loaded.scope.kernels, base_dir=loaded.base_dir)
    assert specs[0].path == K3_SUITE.resolve()
    assert specs[0].requires_gpu is True
    file_spec = from_scope_section(
        [{"name": "x", "path": "kernels", "candidate": "kernels/k3_triton_candidates.py"}], base_dir=loaded.base_dir
    )[0]
    assert file_spec.candidate == str(K3_SUITE.resolve() / "k3_triton_candidates.py")
    with pytest.raises(ValueError, match="no 'path'"):
        from_scope_section([{"name": "x"}], base_dir=loaded.base_dir)


def test_cpu_suite_runs_and_tables_are_flat(tmp_path):
    scope = SimpleNamespace(
        name="demo-llama",
        kernels=[{"name": "demo", "path": str(DEMO_SUITE), "requires_gpu": False, "dtypes": ["fp32"]}],
    )
    res = kc.KernelsCheck().run(_ctx(scope, tmp_path))
    assert res.verdict is Verdict.PASS, res.failures[:3]
    assert set(res.tables) == {"cases", "determinism", "perturbation", "sanitizer", "speed_of_light"}
    assert res.tables["cases"] and {r["dtype"] for r in res.tables["cases"]} == {"fp32"}
    for table in res.tables.values():
        for row in table:
            assert all(not isinstance(v, (dict, list)) for v in row.values())
    assert res.artifacts and (tmp_path / res.artifacts[0]).is_file()
    assert res.summary["suites"][0]["verdict"] == "pass"


def test_judge_combines_suites():
    def doc(verdict):
        return {
            "suite": verdict,
            "summary": {
                "suite": verdict,
                "verdict": verdict,
                "reason": verdict,
                "failures": ["x"] if verdict == "fail" else [],
            },
        }

    assert kc.judge([doc("pass"), doc("pass")]).verdict is Verdict.PASS
    assert kc.judge([doc("pass"), doc("not_run")]).verdict is Verdict.NOT_RUN
    assert kc.judge([doc("not_run"), doc("fail")]).verdict is Verdict.FAIL
    assert kc.judge([]).verdict is Verdict.NOT_RUN


def test_skip_reason_without_suites(tmp_path):
    assert (
        kc.KernelsCheck().skip_reason(_ctx(SimpleNamespace(kernels=[]), tmp_path))
        == "the scope declares no kernel suites"
    )


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", "from fasttrack.cli import main; main()", *args],
        capture_output=True,
        text=True,
        timeout=600,
    )


@CPU_ONLY
def test_cli_model_without_cuda_exits_not_run(tmp_path):
    p = _cli("kernels", "--model", "kimi-k3", "--out", str(tmp_path), "--json")
    assert p.returncode == 4, p.stderr
    res = json.loads(p.stdout)
    assert res["check"] == "kernels" and res["verdict"] == "not_run"
    assert "no CUDA device on this host" in res["reason"]
    assert (tmp_path / "kernels.json").is_file()


def test_cli_bad_suite_is_one_paragraph_exit_2(tmp_path):
    p = _cli("kernels", "--suite", str(tmp_path / "missing"))
    assert p.returncode == 2
    assert "not found" in p.stderr and "Traceback" not in p.stderr
    p = _cli("kernels", "--suite", str(K3_SUITE), "--defect", "nonsense")
    assert p.returncode == 2 and "unknown planted defect" in p.stderr
