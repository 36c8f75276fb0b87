"""The isolation check: the bundle row that ties a run to a PR (diff base..head, and the build the engines served)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from git_testlib import commit, git, init_repo, write
from helpers_checks import demo_ctx

from fasttrack import bundle as B
from fasttrack.bundle.consistency import pr_link_state
from fasttrack.bundle.manifest import EngineRecord, Hardware, Provenance
from fasttrack.checks.base import registered_checks
from fasttrack.checks.context import ChangeRequest
from fasttrack.checks.isolation import IsolationCheck, bind_served_builds, engine_builds
from fasttrack.engine.environment import probe_local_environment
from fasttrack.results import NOT_PR_EVIDENCE, CheckResult, Verdict, head_binding


@pytest.fixture()
def repo(tmp_path: Path) -> Path:
    r = tmp_path / "vllm"
    init_repo(
        r,
        {
            "vllm/v1/sample/sampler.py": "def sample(): pass\n",
            "examples/demo_plugin/fast.py": "x = 1\n",
            "README.md": "vllm\n",
        },
    )
    git(r, "checkout", "-q", "-b", "pr", "main")
    return r


def run_check(tmp_path: Path, repo: Path | None, head: str | None = "pr", **scope_updates) -> CheckResult:
    ctx = demo_ctx(tmp_path / "run", **scope_updates)
    ctx.change = ChangeRequest(repo=repo, base="main" if repo else None, head=head) if head else None
    chk = IsolationCheck()
    return chk.run(ctx)


def test_registered_first_in_every_tier() -> None:
    reg = registered_checks()
    assert next(iter(reg)) == "isolation"
    assert reg["isolation"].every_tier and not reg["isolation"].needs_engine


def test_without_a_pr_link_the_row_says_not_pr_evidence(tmp_path: Path) -> None:
    res = run_check(tmp_path, None, head=None)
    assert res.verdict is Verdict.NOT_RUN and not res.required
    assert res.reason == NOT_PR_EVIDENCE and "not evidence for any pull request" in res.reason


def test_sampler_change_fails_naming_the_file_and_component(tmp_path: Path, repo: Path) -> None:
    write(repo, "vllm/v1/sample/sampler.py", "def sample(): return 1\n")
    write(repo, "examples/demo_plugin/fast.py", "x = 2\n")
    head = commit(repo)
    res = run_check(tmp_path, repo)
    assert res.verdict is Verdict.FAIL and res.required
    assert "sampling" in res.reason and "vllm/v1/sample/sampler.py" in res.reason
    assert any("vllm/v1/sample/sampler.py" in f and "sampling" in f for f in res.failures)
    assert res.summary["head_sha"] == head and res.summary["shared_components"] == ["sampling"]
    rows = {r["path"]: r for r in res.tables["changed"]}
    assert rows["vllm/v1/sample/sampler.py"]["class"] == "shared"
    assert rows["examples/demo_plugin/fast.py"]["class"] == "owned"


def test_owned_only_passes_with_the_range_and_diff_hash(tmp_path: Path, repo: Path) -> None:
    base = git(repo, "rev-parse", "main")
    write(repo, "examples/demo_plugin/fast.py", "x = 3\n")
    head = commit(repo)
    res = run_check(tmp_path, repo)
    assert res.verdict is Verdict.PASS and res.required and not res.failures
    assert (res.summary["base_sha"], res.summary["head_sha"]) == (base, head)
    assert len(res.summary["diff_sha256"]) == 64 and res.gate is not None
    assert res.tables["changed"] == [
        {
            "path": "examples/demo_plugin/fast.py",
            "status": "M",
            "old_path": None,
            "class": "owned",
            "component": None,
            "allowed": False,
            "matched": "examples/demo_plugin/**",
        }
    ]


def test_paths_elsewhere_fail_unless_the_scope_allows_them(tmp_path: Path, repo: Path) -> None:
    write(repo, "examples/demo_plugin/fast.py", "x = 4\n")
    write(repo, "README.md", "vllm, faster\n")
    commit(repo)
    res = run_check(tmp_path, repo)
    assert res.verdict is Verdict.FAIL
    assert res.summary["elsewhere"] == ["README.md"] and "README.md" in res.reason
    from fasttrack.scope import load_scope

    iso = load_scope("demo-llama").scope.isolation
    allowed = iso.model_copy(update={"allowed_paths": ["README.md"]})
    res = run_check(tmp_path, repo, isolation=allowed)
    assert res.verdict is Verdict.PASS, res.reason
    assert res.summary["allowed"] == ["README.md"] and res.summary["elsewhere"] == []
    assert "README.md" in res.reason


def test_head_without_repo_is_an_unchecked_link(tmp_path: Path) -> None:
    res = run_check(tmp_path, None, head="ab" * 20)
    assert res.verdict is Verdict.NOT_RUN and res.required
    assert "without --repo" in res.reason and res.summary["head_sha"] == "ab" * 20


def _passing_row(head: str) -> CheckResult:
    return CheckResult(
        check="isolation",
        verdict=Verdict.PASS,
        reason="owned only",
        summary={"pr_link": True, "head_sha": head, "base_sha": "c" * 40, "diff_sha256": "d" * 64},
    )


def _engines(commit: str | None) -> list[dict]:
    env = {"vllm_version": "0.32.0", "vllm_commit": commit, "vllm_commit_source": "vllm/_version.py"}
    return [
        {"group": "g0", "side": "baseline", "lifetime": 0, "environment": env},
        {"group": "g0", "side": "candidate", "lifetime": 0, "environment": env},
        {"group": "g0", "side": "candidate", "lifetime": 0, "environment": None},  # a probe that never served
    ]


def test_a_served_build_other_than_the_head_fails_naming_both() -> None:
    head, other = "a" * 40, "b" * 40
    res = bind_served_builds(_passing_row(head), engine_builds(_engines(other)))
    assert res.verdict is Verdict.FAIL and res.summary["head_binding"] == "mismatch"
    assert head in res.reason and other in res.reason
    assert any(head in f and other in f for f in res.failures)
    assert len(res.summary["served_builds"]) == 2


def test_an_unreadable_commit_leaves_the_link_unproven() -> None:
    head = "a" * 40
    res = bind_served_builds(_passing_row(head), engine_builds(_engines(None)))
    assert res.verdict is Verdict.PASS and res.summary["head_binding"] == "unproven"
    assert "could not be read" in res.summary["head_binding_reason"] and "unproven" in res.reason
    res = bind_served_builds(_passing_row(head), [])
    assert res.summary["head_binding"] == "unproven" and "no engine ran" in res.summary["head_binding_reason"]
    res = bind_served_builds(_passing_row(head), engine_builds(_engines(head[:10])))
    assert res.verdict is Verdict.PASS and res.summary["head_binding"] == "proven"


def test_head_binding_rule() -> None:
    h = "0123456789abcdef0123456789abcdef01234567"
    assert head_binding(h, [("e", h.upper())])[0] == "proven"
    assert head_binding(h, [("e", h[:7])])[0] == "proven"
    assert head_binding(h, [("e", h[:6])])[0] == "mismatch"  # too short to stand for the head
    assert head_binding(h, [("e", h), ("f", None)])[0] == "unproven"
    assert head_binding(h, [("e", "f" * 40), ("f", None)])[0] == "mismatch"


def _bundle(tmp_path: Path, *, commit: str | None, results: list[CheckResult], head: str = "a" * 40) -> B.Manifest:
    engine = EngineRecord(side="candidate", group="g0", mode="owned", vllm_commit=commit)
    return B.build_manifest(
        results,
        scope=B.scope_info("name: x\n", model="x", tier="smoke"),
        plan=B.plan_info({"points": []}),
        provenance=Provenance(
            fasttrack_version="0",
            python_version="3",
            platform="p",
            hardware=Hardware(kind="cpu"),
            packages_sha256="0" * 64,
            engines=[engine],
        ),
        pr=B.PRLink(head_sha=head, base_sha="c" * 40, diff_sha256="d" * 64, isolation="pass"),
        expected_checks=(),
    )


def test_pr_link_state_from_the_manifest(tmp_path: Path) -> None:
    head = "a" * 40
    ok = _bundle(tmp_path, commit=head, results=[_passing_row(head)])
    assert pr_link_state(ok)[0] == "proven"
    assert pr_link_state(_bundle(tmp_path, commit=None, results=[_passing_row(head)]))[0] == "unproven"
    state, detail = pr_link_state(_bundle(tmp_path, commit="b" * 40, results=[_passing_row(head)]))
    assert state == "mismatch" and "b" * 40 in detail
    other_range = _passing_row("e" * 40)
    state, detail = pr_link_state(_bundle(tmp_path, commit=head, results=[other_range]))
    assert state == "unproven" and "another range" in detail
    assert pr_link_state(ok.model_copy(update={"pr": None}))[0] == "none"
    # a row that judged exactly the range and failed it still proves which head was tested (the verdict fails)
    failed = _passing_row(head).model_copy(update={"verdict": Verdict.FAIL, "failures": ["vllm/v1/sample/x.py"]})
    m = _bundle(tmp_path, commit=head, results=[failed])
    assert pr_link_state(m)[0] == "proven" and m.verdict == "fail"
    unchecked = CheckResult.not_run("isolation", "--head without --repo")
    assert pr_link_state(_bundle(tmp_path, commit=head, results=[unchecked]))[0] == "unproven"


def test_the_probe_reads_the_commit_of_a_clean_vllm_checkout(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "vllm").mkdir(parents=True)
    (src / "vllm" / "__init__.py").write_text("")
    git(src, "init", "-q", "-b", "main")
    git(src, "config", "user.email", "t@example.com")
    git(src, "config", "user.name", "t")
    head = commit(src, "vllm")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(src)}
    facts = probe_local_environment(python=sys.executable, env=env)
    assert facts["vllm_commit"] == head, json.dumps(facts)[:500]
    assert facts["vllm_commit_source"].startswith("git rev-parse HEAD in ")
    (src / "vllm" / "__init__.py").write_text("x = 1\n")  # a modified tracked file: HEAD is not what runs
    facts = probe_local_environment(python=sys.executable, env=env)
    assert facts["vllm_commit"] is None and "uncommitted changes" in facts["vllm_commit_source"]


def test_a_merged_bundle_needs_every_shard_to_have_checked_the_range(tmp_path: Path) -> None:
    head = "a" * 40
    row = _passing_row(head)
    both = row.model_copy(update={"summary": {"shards": {"1/2": row.summary, "2/2": row.summary}}})
    assert pr_link_state(_bundle(tmp_path, commit=head, results=[both]))[0] == "proven"
    one = row.model_copy(update={"summary": {"shards": {"1/2": row.summary, "2/2": {"pr_link": False}}}})
    state, detail = pr_link_state(_bundle(tmp_path, commit=head, results=[one]))
    assert state == "unproven" and "not checked" in detail


def test_validate_runs_isolation_first_and_names_a_bad_ref_before_anything(tmp_path: Path, repo: Path) -> None:
    from fasttrack.errors import IsolationError
    from fasttrack.pipeline import ValidateOptions, run_validate

    out = tmp_path / "run"
    opts = ValidateOptions(model="demo-llama", out=out, checks=["isolation"], repo=repo, base="main", head="nope")
    with pytest.raises(IsolationError, match="head ref 'nope'"):
        run_validate(opts, log=lambda m: None)
    assert not out.exists()

    write(repo, "vllm/v1/sample/sampler.py", "def sample(): return 2\n")
    head = commit(repo)
    opts = ValidateOptions(model="demo-llama", out=out, checks=["isolation"], repo=repo, base="main", head="pr")
    res = run_validate(opts, log=lambda m: None)
    assert res.verdict == "fail" and res.state is not None and res.state.engines == []
    iso = next(r for r in res.results if r.check == "isolation")
    assert iso.verdict is Verdict.FAIL and "vllm/v1/sample/sampler.py" in iso.reason
    assert iso.summary["head_sha"] == head and iso.summary["head_binding"] == "unproven"
    assert iso.title == "Isolation and PR head" and iso.view == "generic"


def test_pipeline_binds_the_head_to_the_engines_builds() -> None:
    from fasttrack.pipeline.engines import EngineLaunch, RunState
    from fasttrack.pipeline.validate import _bind_pr_head

    head, other = "a" * 40, "c" * 40
    state = RunState()
    state.results["isolation"] = _passing_row(head)
    for side, commit_ in (("baseline", head), ("candidate", other)):
        launch = EngineLaunch(side=side, group="g0", lifetime=0, checks=["perf"])  # type: ignore[arg-type]
        launch.environment = {
            "vllm_version": "0.32.0",
            "vllm_commit": commit_,
            "vllm_commit_source": "vllm/_version.py",
        }
        state.engines.append(launch)
    _bind_pr_head(state, lambda m: None)
    iso = state.results["isolation"]
    assert iso.verdict is Verdict.FAIL and iso.summary["head_binding"] == "mismatch"
    assert "g0/candidate#1 served vLLM commit " + other in iso.reason and head in iso.reason

    from fasttrack.pipeline.record import engine_record

    rec = engine_record(state.engines[1])
    assert (rec.vllm_version, rec.vllm_commit, rec.vllm_commit_source) == ("0.32.0", other, "vllm/_version.py")
