"""Passability: every tier of every shipped complete scope can pass; each rule finds what a tier can
never run; engine arguments are checked against the installed vLLM's own parser."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fasttrack import ROOT
from fasttrack.checks.base import build_run_plan
from fasttrack.checks.passability import analyze, analyze_tiers
from fasttrack.engine.argcheck import check_arg_lists
from fasttrack.scope import TIER_ORDER, available_suites, load_scope, parse_scope

COMPLETE = [n for n in available_suites() if load_scope(n).scope.is_complete]


def test_there_are_complete_scopes() -> None:
    assert {"kimi-k3", "demo-llama"} <= set(COMPLETE)


@pytest.mark.parametrize("name", COMPLETE)
@pytest.mark.parametrize("tier", TIER_ORDER)
def test_every_tier_of_every_complete_scope_can_pass(name: str, tier: str) -> None:
    loaded = load_scope(name)
    res = analyze(loaded.scope, build_run_plan(loaded.scope, tier=tier), base_dir=loaded.base_dir)
    assert res.ok, "\n".join(res.lines())


def _k3(**replace: str):
    text = (ROOT / "suites/kimi-k3/scope.yaml").read_text()
    for old, new in replace.items():
        assert old in text, old
        text = text.replace(old, new)
    return parse_scope(text, source="k3")


def _blockers(scope, tier: str) -> list[str]:
    return analyze(scope, build_run_plan(scope, tier=tier), base_dir=ROOT / "suites/kimi-k3").lines()


def test_a_feature_without_its_point_is_found() -> None:
    smoke_features = "features: [structured_output, temperature_sampling, seeded_sampling"
    s = _k3(
        **{
            smoke_features: "features: [full_context, speculative_acceptance, structured_output, "
            "temperature_sampling, seeded_sampling"
        }
    )
    lines = _blockers(s, "smoke")
    assert any("feature full_context: the smoke tier has no point at the full context" in x for x in lines)
    assert any(
        "feature speculative_acceptance: the smoke tier has no engine group with a speculative config" in x
        for x in lines
    )


def test_an_eval_whose_context_is_not_in_the_tier_is_found() -> None:
    s = _k3(**{"evals: [aime25]": "evals: [aime25, mrcr]"})
    lines = _blockers(s, "smoke")
    assert any(x.startswith("evals: eval mrcr: its points (batch in [1], context in [131072, 'full'])") for x in lines)


def test_a_trace_replay_without_its_trace_is_found() -> None:
    full = "workloads: [decode, context, mixed, real-prompts]\nestimates"
    s = _k3(**{full: full.replace("real-prompts]", "real-prompts, agentx]")})
    lines = _blockers(s, "full")
    assert any("workload agentx: a trace replay that names no trace file" in x for x in lines)


def test_a_fallback_situation_without_a_probe_is_found() -> None:
    s = _k3(**{'unsupported_deployment_args: ["--tensor-parallel-size", "4"]': "unsupported_deployment_args: []"})
    assert any("fallback unsupported_deployment" in x for x in _blockers(s, "standard"))
    s = _k3(**{'common_args: ["--trust-remote-code"]': 'common_args: ["--trust-remote-code", "--max-num-seqs", "64"]'})
    lines = _blockers(s, "standard")
    assert any("fallback batch_above_range: the candidate engine admits at most 64 sequences" in x for x in lines)


def test_a_gpu_kernel_suite_on_a_cpu_scope_is_found() -> None:
    text = (ROOT / "suites/demo-llama/scope.yaml").read_text().replace("requires_gpu: false", "requires_gpu: true")
    s = parse_scope(text, source="demo")
    lines = analyze(s, build_run_plan(s, tier="smoke"), base_dir=ROOT / "suites/demo-llama").lines()
    assert any("kernel suite demo-fused-ops: it needs a GPU and the scope targets CPUs" in x for x in lines)


def test_eval_data_that_is_missing_is_found() -> None:
    text = (ROOT / "suites/demo-llama/scope.yaml").read_text().replace("data/mrcr.jsonl", "data/nowhere.jsonl")
    s = parse_scope(text, source="demo")
    lines = analyze(s, build_run_plan(s, tier="smoke"), base_dir=ROOT / "suites/demo-llama").lines()
    assert any("eval mrcr: its data file data/nowhere.jsonl does not exist" in x for x in lines)


def test_a_tier_that_skips_a_check_needs_nothing_of_it() -> None:
    s = _k3(
        **{"evals: [aime25]": "evals: [aime25, mrcr]\n    checks: [kernels, equivalence, features, coverage, perf]"}
    )
    assert not any(x.startswith("evals:") for x in _blockers(s, "smoke"))


def test_analyze_tiers_covers_all() -> None:
    loaded = load_scope("kimi-k3")
    assert set(analyze_tiers(loaded.scope, base_dir=loaded.base_dir)) == set(TIER_ORDER)


# --------------------------------------------------------------------------- the CLI


def _ft(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    return subprocess.run(
        [sys.executable, "-m", "fasttrack", *args], capture_output=True, text=True, cwd=ROOT, env=env, timeout=600
    )


def test_plan_lists_what_a_tier_can_never_run(tmp_path: Path) -> None:
    text = (ROOT / "suites/kimi-k3/scope.yaml").read_text().replace("evals: [aime25]", "evals: [aime25, mrcr]")
    scope_dir = tmp_path / "k3"
    scope_dir.mkdir()
    (scope_dir / "scope.yaml").write_text(text)
    (scope_dir / "kernels").symlink_to(ROOT / "suites/kimi-k3/kernels")
    res = _ft("plan", "--model", str(scope_dir / "scope.yaml"), "--tier", "smoke", "--no-arg-check")
    assert res.returncode == 0, res.stderr
    assert "the smoke tier can never pass" in res.stdout and "eval mrcr" in res.stdout
    res = _ft("plan", "--model", str(scope_dir / "scope.yaml"), "--tier", "smoke", "--no-arg-check", "--json")
    doc = json.loads(res.stdout)
    assert doc["passability"]["ok"] is False
    assert [b["item"] for b in doc["passability"]["blockers"]] == ["eval mrcr"]


# --------------------------------------------------------------------------- engine arguments


def test_vllm_rejects_the_removed_flag_and_accepts_the_k3_arguments() -> None:
    pytest.importorskip("vllm")
    plan = build_run_plan(load_scope("kimi-k3").scope, tier="full")
    lists = plan.engine_arg_lists()
    lists["planted/baseline"] = ["--trust-remote-code", "--disable-log-requests"]
    lists["planted/value"] = ["--tensor-parallel-size", "sixteen"]
    res = check_arg_lists(lists)
    assert res.skipped is None and res.vllm_version
    assert {i.key for i in res.issues} == {"planted/baseline", "planted/value"}, res.lines()
    lines = "\n".join(res.lines())
    assert f"planted/baseline: vLLM {res.vllm_version} does not accept --disable-log-requests" in lines
    assert "invalid int value: 'sixteen'" in lines
    # every group's arguments (speculative and synthetic-acceptance configs included) were parsed
    assert set(plan.engine_arg_lists()) <= set(res.checked)


def test_plan_refuses_a_scope_with_a_removed_flag(tmp_path: Path) -> None:
    pytest.importorskip("vllm")
    text = (ROOT / "suites/kimi-k3/scope.yaml").read_text()
    text = text.replace(
        'common_args: ["--trust-remote-code"]', 'common_args: ["--trust-remote-code", "--disable-log-requests"]'
    )
    (tmp_path / "scope.yaml").write_text(text)
    res = _ft("plan", "--model", str(tmp_path / "scope.yaml"))
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert "Traceback" not in res.stderr
    assert "--disable-log-requests" in res.stderr and "vLLM 0.32" in res.stderr


def test_validate_refuses_a_tier_that_can_never_pass(tmp_path: Path) -> None:
    text = (ROOT / "suites/kimi-k3/scope.yaml").read_text().replace("evals: [aime25]", "evals: [aime25, mrcr]")
    scope_dir = tmp_path / "k3"
    scope_dir.mkdir()
    (scope_dir / "scope.yaml").write_text(text)
    (scope_dir / "kernels").symlink_to(ROOT / "suites/kimi-k3/kernels")
    out = tmp_path / "run"
    res = _ft("validate", "--model", str(scope_dir / "scope.yaml"), "--allow-hardware-mismatch", "--out", str(out))
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert "Traceback" not in res.stderr
    assert "the smoke tier of 'kimi-k3' can never pass" in res.stderr and "eval mrcr" in res.stderr
    assert "--run-anyway" in res.stderr
    assert not out.exists() or not any(out.iterdir())  # refused before any run folder or engine
    # with --checks that leave the evals out, nothing blocks the run (it goes on to the argument check)
    res = _ft(
        "validate",
        "--model",
        str(scope_dir / "scope.yaml"),
        "--allow-hardware-mismatch",
        "--out",
        str(out),
        "--checks",
        "kernels",
    )
    assert "can never pass" not in res.stderr


@pytest.mark.parametrize(
    ("emptied", "check", "item"),
    [("kernels", "kernels", "kernel suites"), ("evals", "evals", "evals"), ("workloads", "perf", "perf workloads")],
)
def test_a_required_check_with_nothing_to_run_is_a_blocker(emptied: str, check: str, item: str) -> None:
    """A scope without kernel suites, evals or perf workloads: the check would end 'not run' and the bundle
    incomplete, so the plan says so before anything starts, naming the section."""
    loaded = load_scope("demo-llama")
    scope = loaded.scope.model_copy(update={emptied: []})
    if emptied == "evals":  # the tiers' eval selections name the evals that are gone
        scope = scope.model_copy(
            update={"tiers": {t: v.model_copy(update={"evals": None}) for t, v in scope.tiers.items()}}
        )
    if emptied == "workloads":
        scope = scope.model_copy(
            update={"tiers": {t: v.model_copy(update={"workloads": None}) for t, v in scope.tiers.items()}}
        )
    res = analyze(scope, build_run_plan(scope, tier="smoke"), base_dir=loaded.base_dir)
    assert [(b.check, b.item) for b in res.blockers] == [(check, item)], res.lines()
    # a tier that leaves the check out does not need it
    tiers = dict(scope.tiers)
    others = [c for c in ("kernels", "equivalence", "features", "coverage", "evals", "perf") if c != check]
    tiers["smoke"] = tiers["smoke"].model_copy(update={"checks": others})
    scope = scope.model_copy(update={"tiers": tiers})
    assert analyze(scope, build_run_plan(scope, tier="smoke"), base_dir=loaded.base_dir).ok
