"""The record of a run: the run summary, the typed record the bundle is written from, and the report.

:func:`finished_run` turns what the pipeline knows (the loaded scope, the plan, the host,
the engines it launched, the seeds and datasets the checks recorded) into the bundle's
:class:`~fasttrack.bundle.writer.FinishedRun`; :func:`write_outputs` writes the summary, the
bundle (verified once) and the report rendered from it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from fasttrack import __version__
from fasttrack.bundle.manifest import EngineRecord, Hardware, plan_info, scope_info
from fasttrack.bundle.prlink import PRLink
from fasttrack.bundle.provenance import collect_provenance, redact_env
from fasttrack.bundle.writer import FinishedRun, WrittenBundle, write_run_bundle
from fasttrack.checks.context import RunContext
from fasttrack.errors import FasttrackError
from fasttrack.pipeline.engines import EngineLaunch, RunState
from fasttrack.results import ISOLATION, CheckResult, bundle_verdict, overall_verdict

if TYPE_CHECKING:  # pragma: no cover
    from fasttrack.bundle.keys import SigningKey
    from fasttrack.host.hardware import HostInfo
    from fasttrack.planning.plan import Plan
    from fasttrack.scope import LoadedScope

SUMMARY = "run-summary.json"
_SHA_RE = re.compile(r"^[0-9a-fA-F]{7,64}$")


@dataclass(frozen=True)
class RunFacts:
    """What the pipeline established before the engines ran."""

    loaded: LoadedScope
    plan: Plan
    host: HostInfo | None
    rehearsal: bool = False
    rehearsal_reason: str | None = None
    pr_repository: str | None = None
    pr_number: int | None = None
    base: str | None = None
    head: str | None = None
    sign_keys: Sequence[SigningKey] = ()
    """Loaded once, before the run (a bad key fails before any engine starts)."""


def engine_record(launch: EngineLaunch) -> EngineRecord:
    """One engine lifetime as the bundle's provenance lists it (secret-looking environment values hidden),
    with the vLLM build it served (version; commit where the build records one or runs from a git checkout)
    and the torch/CUDA build and driver under it."""
    env = launch.environment or {}
    source = env.get("vllm_commit_source")
    if launch.environment_error and not source:
        source = f"not recorded: the engine's environment could not be captured ({launch.environment_error})"
    return EngineRecord(
        vllm_version=env.get("vllm_version"),
        vllm_commit=env.get("vllm_commit"),
        vllm_commit_source=source,
        torch_version=env.get("torch_version"),
        cuda_version=env.get("torch_cuda_version"),
        driver_version=env.get("driver_version")
        or ((env.get("device") or {}).get("detail") or {}).get("driver_version"),
        side=launch.side,
        group=launch.group,
        mode="attached" if launch.owned is False else "owned",
        args=[str(a) for a in launch.args or []],
        env=redact_env(launch.env),
        url=launch.base_url,
        lifetime=launch.lifetime,
        log=launch.log,
    )


def host_hardware(host: HostInfo) -> Hardware:
    """The host as the bundle's provenance describes it."""
    if host.gpus:
        return Hardware(
            kind="gpu",
            gpu_model=" + ".join(sorted({g.name for g in host.gpus})),
            gpu_count=len(host.gpus),
            cpu_model=host.cpu_model,
            cpu_count=host.cpu_count,
        )
    return Hardware(kind="cpu", cpu_model=host.cpu_model, cpu_count=host.cpu_count)


def isolation_row(results: Sequence[CheckResult]) -> CheckResult | None:
    """The isolation row when it classified a diff (it then holds the resolved base and head SHAs)."""
    iso = next((r for r in results if r.check == ISOLATION), None)
    return iso if iso is not None and iso.summary.get("diff_sha256") else None


def pr_link(facts: RunFacts, results: Sequence[CheckResult] = ()) -> PRLink | None:
    """The PR the run tested: the base..head the isolation row checked, else a ``--head`` that is a commit."""
    iso = isolation_row(results)
    if iso is not None:
        return PRLink(
            repository=facts.pr_repository,
            number=facts.pr_number,
            base_sha=iso.summary["base_sha"],
            head_sha=iso.summary["head_sha"],
            diff_sha256=iso.summary["diff_sha256"],
            isolation="pass" if iso.verdict.value == "pass" else "fail" if iso.verdict.value == "fail" else "not_run",
            isolation_reason=iso.reason,
        )
    head, base = facts.head, facts.base
    if head and _SHA_RE.match(head):
        return PRLink(
            repository=facts.pr_repository,
            number=facts.pr_number,
            base_sha=base.lower() if base and _SHA_RE.match(base) else None,
            head_sha=head.lower(),
            isolation="not_run",
            isolation_reason="no --repo was given, so the diff was not checked: the PR link is unproven",
        )
    return None


def finished_run(facts: RunFacts, ctx: RunContext, results: Sequence[CheckResult], state: RunState) -> FinishedRun:
    """The typed record of the run that the bundle is written from."""
    loaded = facts.loaded
    models = {}
    if ctx.model is not None and ctx.model.sha256:
        models[loaded.scope.model.id] = ctx.model.sha256
    provenance = collect_provenance(
        engines=[engine_record(e) for e in state.engines],
        datasets=ctx.provenance.datasets,
        models=models,
        seeds=ctx.provenance.seeds,
        hardware=host_hardware(facts.host) if facts.host is not None else None,
        driver_version=facts.host.driver_version if facts.host is not None else None,
    )
    try:
        scope_path = str(Path(loaded.path).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        scope_path = str(loaded.path)
    summary = ctx.run_dir / SUMMARY
    return FinishedRun(
        run_dir=ctx.run_dir,
        results=list(results),
        scope=scope_info(loaded.text, model=loaded.scope.name, tier=facts.plan.tier, path=scope_path),
        plan=plan_info(facts.plan),
        provenance=provenance,
        pr=pr_link(facts, results),
        rehearsal=facts.rehearsal,
        rehearsal_reason=facts.rehearsal_reason,
        logs={SUMMARY: summary} if summary.is_file() else {},
        expected_checks=facts.plan.check_order or (),
    )


def write_summary(facts: RunFacts, ctx: RunContext, results: Sequence[CheckResult], state: RunState) -> Path:
    """``run-summary.json``: the verdicts, the engine lifetimes, a crash or an interrupt (also without a bundle)."""
    summary = {
        "fasttrack_version": __version__,
        "scope": facts.loaded.scope.name,
        "tier": facts.plan.tier,
        "shard": facts.plan.shard,
        "rehearsal": facts.rehearsal,
        "rehearsal_reason": facts.rehearsal_reason,
        "verdict": bundle_verdict(overall_verdict(results), rehearsal=facts.rehearsal),
        "checks": {r.check: {"verdict": r.verdict.value, "reason": r.reason} for r in results},
        "engines": [e.to_json(redact=redact_env) for e in state.engines],
        "crash": state.crash,
        "interrupted": state.interrupted,
        "timing": {
            "started": round(state.started, 3),
            "finished": round(state.finished, 3) if state.finished is not None else None,
            "wall_s": round(state.finished - state.started, 3) if state.finished is not None else None,
            "check_seconds": dict(state.check_seconds),
        },
    }
    path = ctx.run_dir / SUMMARY
    path.write_text(json.dumps(summary, indent=2, default=str))
    return path


def write_outputs(
    facts: RunFacts,
    ctx: RunContext,
    results: Sequence[CheckResult],
    state: RunState,
    *,
    log: Callable[[str], None],
) -> Path:
    """The summary, the bundle (signed and verified once) and the report next to it; returns the tarball."""
    write_summary(facts, ctx, results, state)
    iso = isolation_row(results)
    pr_head = str(iso.summary["head_sha"]) if iso is not None else None
    written = write_run_bundle(
        finished_run(facts, ctx, results, state), sign_keys=facts.sign_keys, pr_head=pr_head, log=log
    )
    write_report(facts, ctx, written, pr_head=pr_head, log=log)
    return written.tarball


def write_report(
    facts: RunFacts, ctx: RunContext, written: WrittenBundle, *, pr_head: str | None, log: Callable[[str], None]
) -> None:
    """report.html and pr-comment.md next to the bundle, rendered from the bundle alone (with its verification)."""
    from fasttrack.report.report import render_report

    try:
        render_report(
            written.directory,
            ctx.run_dir / "report.html",
            keys=[k.public for k in facts.sign_keys],
            pr_head=pr_head,
            comment_path=ctx.run_dir / "pr-comment.md",
            verify_result=written.verification,
        )
        log(f"report: {ctx.run_dir / 'report.html'}  PR comment: {ctx.run_dir / 'pr-comment.md'}")
        if written.verification.bundle_id:
            log(f"bundle ID: {written.verification.bundle_id}")
    except FasttrackError as exc:
        log(f"report not written: {exc.message}")
