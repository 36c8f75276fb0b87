"""The isolation check against real git repositories."""

from __future__ import annotations

from pathlib import Path

import pytest
from git_testlib import commit, git, init_repo, write

from fasttrack.change.diff import check_isolation, glob_match
from fasttrack.errors import IsolationError
from fasttrack.scope import load_scope


@pytest.fixture()
def repo(tmp_path: Path) -> Path:
    r = tmp_path / "vllm"
    init_repo(
        r,
        {
            "vllm/v1/sample/sampler.py": "def sample(): pass\n",
            "vllm/model_executor/models/kimi_k3/model.py": "x = 1\n",
            "vllm/v1/core/block_pool.py": "class BlockPool: pass\n",
            "README.md": "vllm\n",
        },
    )
    return r


@pytest.fixture(scope="module")
def spec():
    return load_scope("kimi-k3").scope.isolation


def branch(repo: Path, name: str) -> None:
    git(repo, "checkout", "-q", "-b", name, "main")


def test_owned_only_passes(repo: Path, spec) -> None:
    branch(repo, "pr")
    write(repo, "vllm/model_executor/models/kimi_k3/model.py", "x = 2\n")
    write(repo, "vllm/model_executor/models/kimi_k3/fast_decode.py", "y = 1\n")
    commit(repo)
    res = check_isolation(repo, "main", "pr", spec)
    assert res.verdict == "pass", res.message
    assert res.exit_code == 0
    assert {c.classification for c in res.changed} == {"owned"}
    assert res.head_sha == git(repo, "rev-parse", "pr") and len(res.diff_sha256) == 64


def test_sampler_change_fails_and_names_file_and_component(repo: Path, spec) -> None:
    branch(repo, "pr")
    write(repo, "vllm/model_executor/models/kimi_k3/model.py", "x = 2\n")
    write(repo, "vllm/v1/sample/sampler.py", "def sample(): return 1\n")
    commit(repo)
    res = check_isolation(repo, "main", "pr", spec)
    assert res.verdict == "fail" and res.exit_code == 1
    assert "vllm/v1/sample/sampler.py" in res.message and "sampling" in res.message
    assert "core-maintainer review" in res.message


def test_deletion_and_rename_of_shared_files_are_seen(repo: Path, spec) -> None:
    branch(repo, "pr")
    git(repo, "mv", "vllm/v1/core/block_pool.py", "vllm/model_executor/models/kimi_k3/block_pool.py")
    commit(repo)
    res = check_isolation(repo, "main", "pr", spec)
    assert res.verdict == "fail"
    paths = {c.path: c for c in res.changed}
    assert paths["vllm/v1/core/block_pool.py"].component == "kv_cache_management"
    assert paths["vllm/model_executor/models/kimi_k3/block_pool.py"].old_path == "vllm/v1/core/block_pool.py"

    branch(repo, "pr2")
    git(repo, "rm", "-q", "vllm/v1/sample/sampler.py")
    commit(repo)
    res2 = check_isolation(repo, "main", "pr2", spec)
    assert res2.verdict == "fail"
    assert any(c.status == "D" and c.path == "vllm/v1/sample/sampler.py" for c in res2.changed)


def test_a_path_elsewhere_fails_as_in_the_validate_row(repo: Path, spec) -> None:
    branch(repo, "pr")
    write(repo, "README.md", "changed\n")
    commit(repo)
    res = check_isolation(repo, "main", "pr", spec)
    assert res.verdict == "fail" and "README.md" in res.message
    assert res.exit_code == 1 and res.failures == [
        "README.md (M) is outside the owned paths and the scope does not allow it (isolation.allowed_paths)"
    ]


def test_not_a_repo_and_unknown_refs(tmp_path: Path, repo: Path, spec) -> None:
    with pytest.raises(IsolationError, match="not a git repository"):
        check_isolation(tmp_path, "main", "pr", spec)
    with pytest.raises(IsolationError, match="does not exist"):
        check_isolation(tmp_path / "nope", "main", "pr", spec)
    with pytest.raises(IsolationError, match="head ref 'nope'"):
        check_isolation(repo, "main", "nope", spec)


@pytest.mark.parametrize(
    "path, glob, expected",
    [
        ("vllm/v1/sample/ops/topk.py", "vllm/v1/sample/**", True),
        ("vllm/v1/sampler.py", "vllm/v1/sample/**", False),
        ("vllm/model_executor/models/kimi_k3.py", "vllm/model_executor/models/kimi_k3*.py", True),
        ("vllm/model_executor/models/kimi_k3/x/y.py", "vllm/model_executor/models/kimi_k3*.py", False),
        ("a/b/c.py", "**/c.py", True),
        ("c.py", "**/c.py", True),
    ],
)
def test_glob_semantics(path: str, glob: str, expected: bool) -> None:
    assert glob_match(path, glob) is expected
