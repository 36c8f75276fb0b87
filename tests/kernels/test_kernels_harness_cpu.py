"""The numerics harness end to end on the CPU: the runner over the K3 suite with the torch
candidates (clean and with the planted DCP off-by-one), and over the demo suite."""

from __future__ import annotations

import json

import pytest
import torch
from kernels_testlib import DEMO_SUITE, K3_SUITE, SMALL_K3_DIMS

from fasttrack.kernels import sanitizer
from fasttrack.kernels.inputs import DISTRIBUTIONS
from fasttrack.kernels.run import UsageError, main, run_suite

CPU_ONLY = pytest.mark.skipif(torch.cuda.is_available(), reason="asserts what a host without CUDA records")


@pytest.fixture(scope="module")
def k3_clean(tmp_path_factory):
    out = tmp_path_factory.mktemp("k3") / "rows.json"
    doc = run_suite(
        K3_SUITE,
        out,
        candidate="k3_torch_candidates",
        tier="smoke",
        dims=SMALL_K3_DIMS,
        sanitize="auto",
        select="not speed",
        quiet=True,
    )
    doc["_path"] = str(out)
    return doc


@pytest.fixture(scope="module")
def k3_off_by_one(tmp_path_factory):
    out = tmp_path_factory.mktemp("k3d") / "rows.json"
    return run_suite(
        K3_SUITE,
        out,
        candidate="k3_torch_candidates",
        tier="smoke",
        dims=SMALL_K3_DIMS,
        defects=["dcp-off-by-one"],
        sanitize="off",
        select="dcp and numerics",
        quiet=True,
    )


def test_clean_torch_candidates_pass_every_case(k3_clean):
    s = k3_clean["summary"]
    assert s["verdict"] == "pass", s["failures"][:5]
    cases = k3_clean["cases"]
    kernels = {r["kernel"] for r in cases}
    assert {"fused_add_rmsnorm", "kda_decode", "dcp_attention", "router_latent_tp"} <= kernels
    assert {r["dist"] for r in cases} == set(DISTRIBUTIONS)
    assert {r["dtype"] for r in cases} == {"bf16", "fp32"}
    for r in cases:
        assert r["verdict"] == "pass"
        assert {"max_abs_err", "max_rel_err", "max_ulp", "atol", "rtol", "tol_source"} <= set(r)
    # NaN/Inf cases really carry non-finite values through the kernels
    assert any(r["expected_nonfinite"] > 0 for r in cases if r["dist"] == "nonfinite")
    det = k3_clean["determinism"]
    assert det and all(r["bitwise_equal"] for r in det)


@CPU_ONLY
def test_gpu_only_parts_say_why_they_did_not_run(k3_clean):
    skipped = [t for t in k3_clean["tests"] if t["outcome"] == "skipped"]
    assert skipped and all("no CUDA device on this host" in t["reason"] for t in skipped)
    assert k3_clean["perturbation"] == []
    assert [r["status"] for r in k3_clean["sanitizer"]] == ["not_run"] * 3
    assert all(r["reason"] == "no CUDA device on this host" for r in k3_clean["sanitizer"])
    assert sanitizer.environment_reason() == "no CUDA device on this host"


def test_rows_file_is_json_with_schema(k3_clean):
    with open(k3_clean["_path"], encoding="utf-8") as fh:
        doc = json.load(fh)
    assert doc["summary"] == k3_clean["summary"]
    assert doc["schema"] == "fasttrack.kernels.rows/1"
    assert doc["candidate"] == "k3_torch_candidates" and doc["tier"] == "smoke"
    assert doc["host"]["torch"] == torch.__version__


def test_planted_dcp_off_by_one_is_caught(k3_off_by_one):
    s = k3_off_by_one["summary"]
    assert s["verdict"] == "fail"
    failed = [r for r in k3_off_by_one["cases"] if r["verdict"] == "fail"]
    assert failed, "the off-by-one was not caught"
    # only the combine is wrong: the per-rank partial results still match their references
    assert {r["output"] for r in failed} == {"out"}
    assert all(r["kernel"] == "dcp_attention" for r in failed)
    assert any("dcp_attention/out" in f for f in s["failures"])
    # with one token of context only rank 0 holds data, so dropping the last rank changes nothing
    ctx1 = [r for r in k3_off_by_one["cases"] if "ctx=1," in r["shape"] and r["output"] == "out"]
    assert ctx1 and all(r["verdict"] == "pass" for r in ctx1)


def test_candidate_that_cannot_be_imported_is_not_run(tmp_path):
    doc = run_suite(
        K3_SUITE,
        tmp_path / "rows.json",
        candidate="no_such_candidate_module",
        tier="smoke",
        dims=SMALL_K3_DIMS,
        sanitize="off",
        select="rmsnorm and numerics",
        quiet=True,
    )
    assert doc["summary"]["verdict"] == "not_run"
    assert "no_such_candidate_module" in doc["summary"]["reason"]


def test_demo_suite_passes_and_catches_the_demo_numerics_defect(tmp_path, monkeypatch):
    monkeypatch.delenv("FASTTRACK_DEMO_DEFECT", raising=False)
    clean = run_suite(DEMO_SUITE, tmp_path / "clean.json", tier="smoke", sanitize="off", quiet=True)
    assert clean["summary"]["verdict"] == "pass", clean["summary"]["failures"][:3]
    monkeypatch.setenv("FASTTRACK_DEMO_DEFECT", "numerics-batch")
    bad = run_suite(DEMO_SUITE, tmp_path / "bad.json", tier="smoke", sanitize="off", select="fused_mlp", quiet=True)
    assert bad["summary"]["verdict"] == "fail"
    failed = {(r["kernel"], r["shape"].split(",")[0]) for r in bad["cases"] if r["verdict"] == "fail"}
    assert failed == {("demo_fused_mlp", "B=3")}


def test_runner_usage_errors(tmp_path, capsys):
    with pytest.raises(UsageError, match="does not exist"):
        run_suite(tmp_path / "nope", tmp_path / "r.json")
    with pytest.raises(UsageError, match="unknown planted defect"):
        run_suite(K3_SUITE, tmp_path / "r.json", defects=["typo"])
    assert main(["--suite", str(tmp_path), "--out", str(tmp_path / "r.json")]) == 2
    assert "holds no test_*.py" in capsys.readouterr().err
    assert (
        main(
            [
                "--suite",
                str(K3_SUITE),
                "--out",
                str(tmp_path / "r.json"),
                "--tolerances",
                '{"k": {"bf16": {"atol": -1}}}',
            ]
        )
        == 2
    )
