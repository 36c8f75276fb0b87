"""Kernel rows from the shipped example kernels are labelled and never pass (K3 names the PR's module)."""

from __future__ import annotations

from pathlib import Path

from fasttrack.checks.kernels import EXAMPLE_LABEL, label_examples, module_available
from fasttrack.results import CheckResult, Verdict
from fasttrack.scope import load_scope


def test_k3_names_the_prs_module_and_the_example_kernels() -> None:
    k = load_scope("kimi-k3").scope.kernels[0]
    assert k.candidate == "vllm.model_executor.models.kimi_k3.latency_specialized"
    assert k.example_candidate == "k3_triton_candidates"
    assert not module_available(k.candidate)  # no PR here: a rehearsal would run the example kernels


def test_module_available_finds_modules_without_importing_them(tmp_path: Path) -> None:
    assert module_available("fasttrack.checks.kernels")
    assert not module_available("fasttrack.checks.no_such_module")
    f = tmp_path / "cands.py"
    f.write_text("")
    assert module_available(str(f)) and not module_available(str(tmp_path / "missing.py"))


def test_example_rows_are_labelled_and_cannot_pass() -> None:
    res = CheckResult(
        check="kernels",
        verdict=Verdict.PASS,
        reason="all kernels within tolerance",
        tables={"numerics": [{"suite": "k3-families", "kernel": "kda_decode"}, {"suite": "other", "kernel": "x"}]},
    )
    out = label_examples(res, {"k3-families": f"{EXAMPLE_LABEL} (pr.module is not importable here)"}, scope="kimi-k3")
    assert out.verdict is Verdict.NOT_RUN
    assert out.reason.startswith(EXAMPLE_LABEL) and "cannot be evidence for kimi-k3" in out.reason
    rows = out.tables["numerics"]
    assert rows[0]["candidate"].startswith(EXAMPLE_LABEL) and "candidate" not in rows[1]
    assert out.summary["example_kernels"] == {"k3-families": f"{EXAMPLE_LABEL} (pr.module is not importable here)"}
    assert label_examples(res, {}, scope="kimi-k3") is res
