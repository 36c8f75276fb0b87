"""The bundle step of ``fasttrack validate`` on a real scope and plan (no engines): the pipeline's typed
record of the run (``fasttrack.pipeline.record``) written by ``fasttrack.bundle.writer.write_run_bundle``."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from bundle_testlib import make_results

from fasttrack import bundle as B
from fasttrack.bundle.keys import load_private_key
from fasttrack.bundle.provenance import redact_env
from fasttrack.bundle.writer import write_run_bundle
from fasttrack.checks.context import RunContext
from fasttrack.host.models import ResolvedModel
from fasttrack.pipeline.engines import EngineLaunch, RunState
from fasttrack.pipeline.record import RunFacts, finished_run


@pytest.fixture()
def run(tmp_path: Path):
    from fasttrack.checks.base import build_run_plan
    from fasttrack.host.hardware import detect_host
    from fasttrack.scope import load_scope

    loaded = load_scope("demo-llama")

    # a run's plan records the check registry's order (these are the shipped checks)
    plan = build_run_plan(loaded.scope, tier="smoke", shard=None, scope_sha256=loaded.sha256)
    run_dir = tmp_path / "run"
    (run_dir / "logs").mkdir(parents=True)
    (run_dir / "logs" / "g0.baseline.0.log").write_text("INFO started\n")
    (run_dir / "artifacts" / "evals").mkdir(parents=True)
    (run_dir / "artifacts" / "evals" / "samples.jsonl").write_text("{}\n")
    (run_dir / "profiles").mkdir()
    (run_dir / "profiles" / "huge-trace.json").write_text("{}")
    (run_dir / "run-summary.json").write_text(json.dumps({"verdict": "pass"}))
    ctx = RunContext(scope=loaded.scope, plan=plan, run_dir=run_dir, loaded=loaded)
    ctx.model = ResolvedModel(model="/models/demo", sha256="2" * 64)
    ctx.provenance.seed("sampling", 1234)
    state = RunState(
        engines=[
            EngineLaunch(
                side="baseline",
                group="g0",
                lifetime=0,
                checks=[],
                owned=True,
                args=["--dtype", "float32"],
                env={"VLLM_CPU_KVCACHE_SPACE": "1", "HF_TOKEN": "hf_secret"},
                log="logs/g0.baseline.0.log",
                base_url="http://127.0.0.1:8000",
            ),
            EngineLaunch(
                side="candidate", group="g0", lifetime=0, checks=[], owned=False, base_url="http://127.0.0.1:9000"
            ),
        ]
    )
    return SimpleNamespace(loaded=loaded, plan=plan, ctx=ctx, state=state, host=detect_host(), run_dir=run_dir)


def test_write_run_bundle_signed_and_verifiable(run, keydir: Path) -> None:
    head = "89abcdef" * 5
    key = load_private_key(keydir / "contrib")
    facts = RunFacts(
        loaded=run.loaded,
        plan=run.plan,
        host=run.host,
        rehearsal=True,
        rehearsal_reason="scope needs a GPU; host has none",
        pr_repository="org/vllm",
        pr_number=12,
        head=head,
        sign_keys=[key],
    )
    written = write_run_bundle(
        finished_run(facts, run.ctx, make_results(), run.state), sign_keys=[key], log=lambda m: None
    )
    tgz = written.tarball
    # written again with the head to bind: an unproven PR link is said, not taken for a broken bundle
    said: list[str] = []
    again = write_run_bundle(
        finished_run(facts, run.ctx, make_results(), run.state), sign_keys=[key], pr_head=head, log=said.append
    )
    assert [it.name for it in again.verification.failures] == ["pr_head"]
    assert any(m.startswith("bundle: the PR link is unproven: ") for m in said), said
    from fasttrack.pipeline.record import write_summary

    no_engines = RunState()  # a state without engines (engine records would count as starts)
    summary = json.loads(write_summary(facts, run.ctx, make_results(), no_engines).read_text())
    assert summary["verdict"] == "rehearsal" and summary["rehearsal"] is True
    assert tgz == run.run_dir / "bundle.tar.gz"
    assert written.verification.verified, written.verification.failures
    with pytest.raises(B.BundleError, match="run folder"):
        B.verify_bundle(run.run_dir, keys=[keydir / "contrib.pub"])
    res = B.verify_bundle(tgz, keys=[keydir / "contrib.pub"])
    assert res.verified, res.failures
    assert res.rehearsal  # a rehearsal, whose verdict is incomplete: the PR link's diff was not checked
    assert res.pr_link == "unproven" and "diff base..head was not checked" in res.pr_link_detail
    # --head without --repo: the head matches, but nothing proves the link, so --pr-head does not verify it
    res = B.verify_bundle(tgz, keys=[keydir / "contrib.pub"], pr_head=head[:8])
    assert not res.verified and res.item("pr_head").ok is False
    assert "matches" in res.item("pr_head").detail and "unproven, not verified" in res.item("pr_head").detail
    with B.open_bundle(tgz) as view:
        m = view.manifest
        assert m.scope.sha256 == run.loaded.sha256 and m.scope.model == "demo-llama"
        assert m.plan.fingerprint == run.plan.fingerprint and m.plan.shard == "1/1"
        assert m.rehearsal and "GPU" in m.rehearsal_reason
        assert m.pr.number == 12 and m.pr.isolation == "not_run"
        assert m.verdict == "incomplete" and m.checks["isolation"].required  # a PR link without a checked diff
        assert m.checks["isolation"].verdict.value == "not_run"
        assert m.provenance.models == {"fasttrack/demo-llama": "2" * 64}
        assert m.provenance.seeds == {"sampling": 1234}
        eng = {(e.side, e.mode) for e in m.provenance.engines}
        assert eng == {("baseline", "owned"), ("candidate", "attached")}
        assert m.provenance.engines[0].env["HF_TOKEN"] == "<redacted>"
        assert view.path("logs/run-summary.json").is_file()
        assert view.path("logs/g0.baseline.0.log").is_file()
        with pytest.raises(B.BundleError):
            view.path("profiles/huge-trace.json")


def test_bad_sign_key_fails_before_writing(tmp_path: Path) -> None:
    from fasttrack.pipeline import ValidateOptions, run_validate

    out = tmp_path / "run"
    opts = ValidateOptions(model="demo-llama", out=out, sign_keys=[tmp_path / "missing"], allow_hardware_mismatch=True)
    with pytest.raises(B.KeyFileError):
        run_validate(opts, log=lambda m: None)  # the keys are loaded once, before the run folder or any engine
    assert not (out / "bundle").exists() and not out.exists()


def test_redact_env() -> None:
    env = redact_env(
        {"HF_TOKEN": "x", "AWS_SECRET_ACCESS_KEY": "y", "API_KEY": "z", "VLLM_CPU_KVCACHE_SPACE": "4", "KEYBOARD": "us"}
    )
    assert env == {
        "API_KEY": "<redacted>",
        "AWS_SECRET_ACCESS_KEY": "<redacted>",
        "HF_TOKEN": "<redacted>",
        "KEYBOARD": "us",
        "VLLM_CPU_KVCACHE_SPACE": "4",
    }
