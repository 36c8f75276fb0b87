"""The command line: JSON output, exit codes, one-paragraph errors without tracebacks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fasttrack import ROOT

FT = [sys.executable, "-m", "fasttrack"]


def ft(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    return subprocess.run([*FT, *args], capture_output=True, text=True, cwd=cwd or ROOT, env=env, timeout=300)


def assert_clean_error(res: subprocess.CompletedProcess[str], code: int = 2) -> None:
    assert res.returncode == code, (res.returncode, res.stdout, res.stderr)
    assert "Traceback" not in res.stderr + res.stdout
    assert "error:" in res.stderr


def test_plan_json_k3_full() -> None:
    res = ft("plan", "--model", "kimi-k3", "--tier", "full", "--json")
    assert res.returncode == 0, res.stderr
    plan = json.loads(res.stdout)
    pts = plan["points"]
    assert {p["tp"] for p in pts} == {8, 16}
    assert max(p["batch"] for p in pts) == 64
    assert max(p["draft_length"] or 0 for p in pts) == 7
    assert {p["acceptance_length"] for p in pts if p["spec"] == "dspark-al6"} == {6}
    assert any(p["dcp"] > 1 for p in pts) and any(p["full_context"] for p in pts)
    assert plan["groups"] and plan["estimate"]["gpu_hours"] > 0
    ids = set()
    for i in (1, 2, 3):
        part = json.loads(ft("plan", "--model", "kimi-k3", "--tier", "full", "--json", "--shard", f"{i}/3").stdout)
        new = {p["id"] for p in part["points"]}
        assert not (ids & new)
        ids |= new
    assert ids == {p["id"] for p in pts}


def test_plan_human_table() -> None:
    res = ft("plan", "--model", "demo-llama")
    assert res.returncode == 0
    assert "engine groups" in res.stdout and "tp1-dcp1-none" in res.stdout


@pytest.mark.parametrize("shard", ["0/4", "5/4", "x"])
def test_bad_shard_exit_2(shard: str) -> None:
    assert_clean_error(ft("plan", "--model", "kimi-k3", "--shard", shard))


def test_unknown_model_lists_suites() -> None:
    res = ft("plan", "--model", "no-such")
    assert_clean_error(res)
    assert "kimi-k3" in res.stderr


def test_malformed_scope_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "scope.yaml"
    bad.write_text("name: [oops\n")
    res = ft("plan", "--model", str(bad))
    assert_clean_error(res)
    assert "malformed YAML" in res.stderr


def test_partial_scope_plan_says_what_is_missing() -> None:
    res = ft("plan", "--model", "muse-spark")
    assert_clean_error(res)
    assert "incomplete" in res.stderr and "hardware" in res.stderr


def test_isolation_cli(tmp_path: Path) -> None:
    repo = tmp_path / "r"
    repo.mkdir()

    def g(*a: str) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(["git", "-C", str(repo), *a], check=True, capture_output=True)

    g("init", "-q", "-b", "main")
    g("config", "user.email", "t@e")
    g("config", "user.name", "t")
    (repo / "vllm/v1/sample").mkdir(parents=True)
    (repo / "vllm/v1/sample/sampler.py").write_text("a\n")
    g("add", "-A")
    g("commit", "-qm", "a")
    g("checkout", "-q", "-b", "pr")
    (repo / "vllm/v1/sample/sampler.py").write_text("b\n")
    g("commit", "-qam", "b")
    res = ft("isolation", "--model", "kimi-k3", "--repo", str(repo), "--base", "main", "--head", "pr", "--json")
    assert res.returncode == 1
    out = json.loads(res.stdout)
    assert out["verdict"] == "fail" and out["changed"][0]["component"] == "sampling"
    assert_clean_error(ft("isolation", "--model", "kimi-k3", "--repo", str(tmp_path), "--base", "main", "--head", "pr"))
    assert_clean_error(ft("isolation", "--model", "kimi-k3", "--repo", str(repo), "--base", "main", "--head", "nope"))


def test_validate_on_mismatched_host_says_what_is_required(tmp_path: Path) -> None:
    res = ft("validate", "--model", "kimi-k3", "--out", str(tmp_path / "run"))
    assert res.returncode == 3, res.stderr
    assert "Traceback" not in res.stderr
    assert "8 or 16 GPUs" in res.stderr and "fasttrack plan" in res.stderr and "--allow-hardware-mismatch" in res.stderr


def test_validate_partial_scope_refused(tmp_path: Path) -> None:
    res = ft("validate", "--model", "glm-5.3", "--out", str(tmp_path / "run"))
    assert_clean_error(res)
    assert "incomplete" in res.stderr


def test_validate_group_selection_keeps_the_plan_whole_and_names_unknown_groups(tmp_path: Path) -> None:
    from fasttrack.checks.base import build_run_plan
    from fasttrack.errors import FasttrackError
    from fasttrack.pipeline.validate import select_groups
    from fasttrack.scope import load_scope

    plan = build_run_plan(load_scope("demo-llama").scope, tier="standard")
    assert select_groups(plan, None) is plan
    only = select_groups(plan, ["tp1-dcp1-ngram-synth.dl3"])
    assert [g.id for g in only.groups] == ["tp1-dcp1-ngram-synth.dl3"]
    assert len(plan.groups) == 2 and only.points == plan.points  # the run's plan (and its points) stay whole
    with pytest.raises(FasttrackError, match="--group tp9: not an engine group"):
        select_groups(plan, ["tp9"])
    # on the command line: exit 2 before any engine, naming the groups there are
    res = ft("validate", "--model", "demo-llama", "--tier", "standard", "--group", "tp9", "--out", str(tmp_path / "r"))
    assert_clean_error(res)
    assert "tp1-dcp1-none" in res.stderr and "tp1-dcp1-ngram-synth.dl3" in res.stderr
