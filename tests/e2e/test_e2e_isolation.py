"""Isolation inside the verdict, end to end through ``fasttrack validate`` on a fresh git repository.

A repository whose head touches a sampler file gets verdict ``fail`` naming the file; an owned-only
head (the demo scope owns ``examples/demo_plugin/**``) gets a passing isolation row over exactly its
base..head. Only the isolation check is selected (``--checks isolation``), so no engine starts: the
bundle's other rows are ``not_run`` ("not selected with --checks"), which makes the owned-only
bundle ``incomplete``, never ``pass``, and its PR link unproven (no engine served the head).
A scope whose tier runs only the kernel suites (no engine either) gives the owned-only head ``pass``
with the isolation row: the checks that tier leaves out are not required."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from git_testlib import commit, git, init_repo, write
from scope_testlib import demo_scope_variant

from fasttrack import ROOT
from fasttrack.bundle import open_bundle

pytestmark = pytest.mark.e2e

FT = [sys.executable, "-m", "fasttrack"]


@pytest.fixture()
def repo(tmp_path: Path) -> tuple[Path, str]:
    r = tmp_path / "vllm"
    base = init_repo(
        r,
        {
            "vllm/v1/sample/sampler.py": "def sample(logits):\n    return logits.argmax(-1)\n",
            "examples/demo_plugin/demo_plugin/fast_path.py": "FAST = True\n",
        },
    )
    return r, base


def validate(
    tmp_path: Path, repo: Path, base: str, head: str, name: str, *, target: list[str] | None = None
) -> tuple[subprocess.CompletedProcess, Path]:
    """``validate`` of ``target`` (default: the demo model with only the isolation check selected)."""
    out = tmp_path / name
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    env.pop("FASTTRACK_DEMO_DEFECT", None)
    res = subprocess.run(
        [*FT, "validate", *(target or ["--model", "demo-llama", "--checks", "isolation"])]
        + ["--repo", str(repo), "--base", base, "--head", head, "--out", str(out)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=600,
    )
    return res, out


def test_sampler_head_fails_and_owned_head_passes_isolation(tmp_path: Path, repo: tuple[Path, str]) -> None:
    r, base = repo
    git(r, "checkout", "-q", "-b", "touches-sampler", "main")
    write(r, "vllm/v1/sample/sampler.py", "def sample(logits):\n    return logits.softmax(-1).argmax(-1)\n")
    write(r, "examples/demo_plugin/demo_plugin/fast_path.py", "FAST = 1\n")
    bad_head = commit(r, "sampler")

    res, out = validate(tmp_path, r, base, bad_head, "sampler")
    assert res.returncode == 1, res.stdout + res.stderr
    summary = json.loads((out / "run-summary.json").read_text())
    assert summary["engines"] == [], "no engine starts when no selected check needs one"
    with open_bundle(out / "bundle.tar.gz") as view:
        m = view.manifest
        iso = m.checks["isolation"]
        assert m.verdict == "fail" and iso.verdict.value == "fail" and iso.required
        assert "vllm/v1/sample/sampler.py" in iso.reason and "sampling" in iso.reason
        assert any("vllm/v1/sample/sampler.py" in f for f in iso.failures)
        assert (m.pr.base_sha, m.pr.head_sha) == (base, bad_head) and m.pr.isolation == "fail"
        assert iso.summary["diff_sha256"] == m.pr.diff_sha256 and "changed" in iso.tables

    git(r, "checkout", "-q", "-b", "owned-only", "main")
    write(r, "examples/demo_plugin/demo_plugin/fast_path.py", "FAST = 2\n")
    good_head = commit(r, "owned")
    res, out = validate(tmp_path, r, base, good_head, "owned")
    summary = json.loads((out / "run-summary.json").read_text())
    assert summary["engines"] == []
    with open_bundle(out / "bundle.tar.gz") as view:
        m = view.manifest
        iso = m.checks["isolation"]
        assert iso.verdict.value == "pass", iso.reason
        assert (iso.summary["base_sha"], iso.summary["head_sha"]) == (base, good_head)
        assert iso.summary["changed"] == 1 and iso.summary["owned"] == 1
        assert iso.summary["head_binding"] == "unproven" and "no engine ran" in iso.summary["head_binding_reason"]
        assert m.pr.isolation == "pass" and m.pr.head_sha == good_head
        # the other checks were not selected: required, not run, so the bundle is incomplete, not pass
        assert m.verdict == "incomplete"
        assert m.checks["equivalence"].verdict.value == "not_run"
    assert res.returncode != 0


def test_owned_only_head_passes_a_tier_with_the_isolation_row(tmp_path: Path, repo: tuple[Path, str]) -> None:
    """The demo scope with a smoke tier that runs the kernel suites only: isolation (every tier) and kernels
    run, the other checks are not_run and not required, and the owned-only head's bundle is ``pass``;
    its PR link stays unproven (no engine served the head), said by ``verify --json``."""
    r, base = repo
    git(r, "checkout", "-q", "-b", "owned-only", "main")
    write(r, "examples/demo_plugin/demo_plugin/fast_path.py", "FAST = 3\n")
    head = commit(r, "owned")
    scope = demo_scope_variant(tmp_path / "scope", {"\n  smoke:\n": "\n  smoke:\n    checks: [kernels]\n"})
    keys = tmp_path / "keys"
    assert subprocess.run([*FT, "keys", "generate", "-o", str(keys), "--name", "ci"], cwd=ROOT).returncode == 0
    target = ["--model", str(scope), "--tier", "smoke", "--sign-key", str(keys / "ci")]
    res, out = validate(tmp_path, r, base, head, "kernels-tier", target=target)
    assert res.returncode == 0, res.stdout + res.stderr
    with open_bundle(out / "bundle.tar.gz") as view:
        m = view.manifest
        assert m.verdict == "pass" and m.scope.tier == "smoke"
        iso = m.checks["isolation"]
        assert iso.verdict.value == "pass" and iso.required, iso.reason
        assert (iso.summary["base_sha"], iso.summary["head_sha"]) == (base, head) and iso.summary["owned"] == 1
        assert m.pr.isolation == "pass" and (m.pr.base_sha, m.pr.head_sha) == (base, head)
        assert m.checks["kernels"].verdict.value == "pass" and m.checks["kernels"].required
        for name in ("equivalence", "evals", "features", "coverage", "perf"):
            row = m.checks[name]
            assert row.verdict.value == "not_run" and not row.required, (name, row)
            assert "the smoke tier does not run it" in row.reason, row.reason
    v = subprocess.run(
        [*FT, "verify", str(out / "bundle.tar.gz"), "--key", str(keys / "ci.pub"), "--json", "--pr-head", head],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    info = json.loads(v.stdout or "{}")
    # signed and intact, verdict pass; the PR head is not proven (no engine served it), so not verified for it
    assert info.get("verdict") == "pass" and info["pr_link"] == "unproven", (info, v.stderr)
    assert [it["name"] for it in info["items"] if it["ok"] is False] == ["pr_head"], info
