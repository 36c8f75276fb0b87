"""Coverage's ``unsupported_deployment``: the candidate started outside its envelope does what the scope
declares (fakes; no engine). The demo's real refusal runs in the checks' end-to-end tests."""

from __future__ import annotations

from pathlib import Path

from helpers_checks import demo_ctx

from fasttrack.checks.base import Deployment
from fasttrack.checks.coverage import CoverageCheck
from fasttrack.checks.coverage.judge import judge_deployments
from fasttrack.engine.deployment import DeploymentOutcome
from fasttrack.results import Verdict

GID = "tp1-dcp1-none"
REFUSAL = "DemoBackendConfigError: decode_backend=latency_specialized does not support this deployment: ..."


def _dep() -> Deployment:
    return Deployment(name="unsupported_deployment", side="candidate", group=GID, args=("--enable-lora",))


def test_the_demo_asks_for_its_candidate_with_lora(tmp_path: Path) -> None:
    ctx = demo_ctx(tmp_path)
    deps = CoverageCheck().deployments(ctx)
    assert len(deps) == 1
    d = deps[0]
    assert d.side == "candidate" and d.group == ctx.plan.groups[0].id
    assert list(d.args[: len(ctx.plan.groups[0].args["candidate"])]) == ctx.plan.groups[0].args["candidate"]
    # LoRA: the example fast path refuses it when the model is built (n-gram speculation is inside its envelope)
    assert d.args[-1] == "--enable-lora" and "--speculative-config" not in d.args


def test_a_refusal_with_the_declared_message_passes(tmp_path: Path) -> None:
    ctx = demo_ctx(tmp_path)
    out = DeploymentOutcome(args=[], started=False, exit_code=1, reject_lines=[REFUSAL])
    rows, verdicts, failures = judge_deployments(ctx, [(_dep(), out, "")])
    assert verdicts == [Verdict.PASS] and not failures
    assert rows[0]["expected"] == "reject_at_startup" and rows[0]["fallback_line"].startswith("DemoBackendConfigError")


def test_a_candidate_that_serves_outside_its_envelope_fails(tmp_path: Path) -> None:
    ctx = demo_ctx(tmp_path)
    out = DeploymentOutcome(args=[], started=True, served=2)
    _, verdicts, failures = judge_deployments(ctx, [(_dep(), out, "")])
    assert verdicts == [Verdict.FAIL] and "instead of refusing the deployment" in failures[0]


def test_a_crash_without_the_declared_refusal_fails(tmp_path: Path) -> None:
    ctx = demo_ctx(tmp_path)
    out = DeploymentOutcome(args=[], started=False, exit_code=-11, log_tail="Segmentation fault")
    _, verdicts, failures = judge_deployments(ctx, [(_dep(), out, "")])
    assert verdicts == [Verdict.FAIL]
    assert "without the declared refusal" in failures[0] and "Segmentation fault" in failures[0]


def test_a_scope_that_falls_back_needs_a_visible_fallback(tmp_path: Path) -> None:
    ctx = demo_ctx(tmp_path)
    fb = ctx.scope.fallback.model_copy(update={"unsupported_deployment": "fallback"})
    ctx.scope = ctx.scope.model_copy(update={"fallback": fb})
    ok = DeploymentOutcome(args=[], started=True, served=2, fallback_lines=["fasttrack-demo fallback reason=x"])
    silent = DeploymentOutcome(args=[], started=True, served=2)
    refused = DeploymentOutcome(args=[], started=False, exit_code=1)
    _, verdicts, failures = judge_deployments(ctx, [(_dep(), ok, ""), (_dep(), silent, ""), (_dep(), refused, "")])
    assert verdicts == [Verdict.PASS, Verdict.FAIL, Verdict.FAIL]
    assert "not visible" in failures[0] and "refused to start" in failures[1]


def test_an_attached_candidate_is_not_probed(tmp_path: Path) -> None:
    ctx = demo_ctx(tmp_path)
    rows, verdicts, _ = judge_deployments(ctx, [(_dep(), None, "not probed: the candidate engine is attached by URL")])
    assert verdicts == [Verdict.NOT_RUN] and "attached" in rows[0]["detail"]
