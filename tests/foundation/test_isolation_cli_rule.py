"""``fasttrack isolation`` and the isolation row of ``fasttrack validate`` apply one rule: for every kind of
diff, the command's verdict and exit code (0 pass, 1 fail) are the row's verdict, and the same paths fail."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from git_testlib import commit, git, init_repo, write
from scope_testlib import demo_scope_variant

from fasttrack import ROOT

ALLOWED = {"  owned_paths:\n": '  allowed_paths: ["docs/**"]\n  owned_paths:\n'}

#: case -> (changed files, the verdict both must give)
CASES = {
    "owned only": ({"examples/demo_plugin/x.py": "b\n"}, "pass"),
    "a path elsewhere": ({"README.md": "b\n"}, "fail"),
    "an allowed path": ({"docs/notes.md": "b\n", "examples/demo_plugin/x.py": "c\n"}, "pass"),
    "a shared component": ({"vllm/v1/sample/sampler.py": "b\n"}, "fail"),
}


BASE_FILES = ("README.md", "examples/demo_plugin/x.py", "docs/notes.md", "vllm/v1/sample/sampler.py")


def ft(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    return subprocess.run(
        [sys.executable, "-m", "fasttrack", *args], capture_output=True, text=True, cwd=ROOT, env=env, timeout=300
    )


@pytest.fixture(scope="module")
def scope(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo scope with ``docs/**`` allowed (its shared components are the defaults: vLLM's sampler among them)."""
    return demo_scope_variant(tmp_path_factory.mktemp("scope"), ALLOWED)


@pytest.mark.parametrize("case", list(CASES))
def test_isolation_command_and_validate_row_agree(case: str, tmp_path: Path, scope: Path) -> None:
    files, expected = CASES[case]
    repo = tmp_path / "repo"
    init_repo(repo, {rel: "a\n" for rel in BASE_FILES})
    git(repo, "checkout", "-q", "-b", "pr")
    for rel, text in files.items():
        write(repo, rel, text)
    commit(repo)
    cmd = ft("isolation", "--model", str(scope), "--repo", str(repo), "--base", "main", "--head", "pr", "--json")
    assert cmd.returncode in (0, 1), cmd.stderr
    out = json.loads(cmd.stdout)
    run = ft(
        "validate", "--model", str(scope), "--checks", "isolation", "--repo", str(repo), "--base", "main",
        "--head", "pr", "--out", str(tmp_path / "run"),
    )  # fmt: skip
    assert run.returncode in (0, 1), run.stderr
    with tarfile.open(tmp_path / "run" / "bundle.tar.gz") as tf:
        member = tf.extractfile("manifest.json")
        assert member is not None
        row = json.loads(member.read())["checks"]["isolation"]
    assert out["verdict"] == row["verdict"] == expected, (out["message"], row["reason"])
    assert cmd.returncode == (0 if expected == "pass" else 1)
    assert out["failures"] == row["failures"]
    if case == "a path elsewhere":
        assert out["failures"] == [
            "README.md (M) is outside the owned paths and the scope does not allow it (isolation.allowed_paths)"
        ]
