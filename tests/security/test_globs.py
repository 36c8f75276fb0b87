"""Path globs of a scope's isolation section: matched in time linear in the path, whatever the glob.

A backtracking translation of ``************Z`` took 149 s to match one diff. The matcher is a
bit-parallel NFA (``fasttrack.change.diff.Glob``); its answers equal the regex translation's on
every glob (checked against that translation here), and a glob over the length limit is a scope
error naming the file and field.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fasttrack import limits
from fasttrack.change.diff import Glob, check_isolation, glob_match
from fasttrack.errors import ScopeError
from fasttrack.scope import IsolationSpec
from fasttrack.scope.loading import parse_scope

pytestmark = pytest.mark.timeout(120)

PATHOLOGICAL = [
    "************Z",
    "*" * 200 + "Z",
    "**" * 60 + "Z",
    "*a" * 60 + "b",
    "**/" * 60 + "Z",
    "?*" * 100 + "Z",
    "a**a**a**a**a**a**a**a**a**a**a**a**a**b",
    "**a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a/**/b",
    "*/" * 100 + "Z",
]
LONG_PATHS = ["a" * 4000, "a/" * 2000, "aZ" * 2000 + "a", ("a" * 50 + "/") * 80]


def _reference(glob: str) -> re.Pattern[str]:
    """The regex translation the matcher replaced (same semantics, backtracking)."""
    i, out = 0, []
    while i < len(glob):
        if glob.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif glob.startswith("**", i):
            out.append(".*")
            i += 2
        elif glob[i] == "*":
            out.append("[^/]*")
            i += 1
        elif glob[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(glob[i]))
            i += 1
    return re.compile("".join(out) + r"\Z")


@pytest.mark.parametrize("glob", PATHOLOGICAL)
def test_pathological_globs_match_in_linear_time(glob: str) -> None:
    t0 = time.perf_counter()
    for p in LONG_PATHS:
        glob_match(p, glob)
    took = time.perf_counter() - t0
    assert took < 2.0, f"{glob[:40]!r}: {took:.2f} s for {len(LONG_PATHS)} long paths"


def test_a_diff_with_a_pathological_owned_glob(tmp_path: Path) -> None:
    """The reported case, through the isolation check: ``owned_paths: ["************Z"]`` over a diff."""
    import subprocess

    repo = tmp_path / "repo"
    repo.mkdir()

    def git(*a: str) -> None:
        subprocess.run(["git", "-C", str(repo), *a], check=True, capture_output=True)

    git("init", "-q", "-b", "main")
    git("config", "user.email", "t@example.org")
    git("config", "user.name", "t")
    (repo / "x.txt").write_text("x\n")
    git("add", "-A")
    git("commit", "-qm", "base")
    git("checkout", "-qb", "pr")
    long_dir = repo / ("a" * 200)
    long_dir.mkdir()
    for n in range(20):
        (long_dir / ("b" * 150 + f"{n}.py")).write_text("y\n")
    git("add", "-A")
    git("commit", "-qm", "change")
    spec = IsolationSpec(owned_paths=["************Z"], allowed_paths=["*" * 100 + "Q"])
    t0 = time.perf_counter()
    res = check_isolation(repo, "main", "pr", spec)
    assert time.perf_counter() - t0 < 10
    assert res.verdict == "fail" and len(res.changed) == 20


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    glob=st.text(alphabet="ab/*?.", max_size=12),
    path=st.text(alphabet="ab/.", max_size=14),
)
def test_the_matcher_agrees_with_the_regex_translation(glob: str, path: str) -> None:
    assert Glob(glob).match(path) is bool(_reference(glob).match(path)), (glob, path)


@pytest.mark.parametrize(
    "glob, path, expected",
    [
        ("**/x.py", "x.py", True),
        ("**/x.py", "a/b/x.py", True),
        ("a/**/b", "a/b", True),
        ("a/**/b", "a/x/y/b", True),
        ("a/**/**/b", "a/b", True),
        ("a/*/b", "a/x/y/b", False),
        ("a/***/b", "a/x/y/b", True),
        ("?", "/", False),
        ("a?c", "abc", True),
        ("", "", True),
        ("**", "", True),
        ("*", "a/b", False),
    ],
)
def test_glob_semantics(glob: str, path: str, expected: bool) -> None:
    assert glob_match(path, glob) is expected
    assert bool(_reference(glob).match(path)) is expected


def _scope_with(glob: str) -> str:
    from fasttrack import ROOT

    text = (ROOT / "suites" / "demo-llama" / "scope.yaml").read_text()
    return text.replace('    - "examples/demo_plugin/**"', f"    - {json.dumps(glob)}", 1)


def test_a_glob_over_the_limit_is_a_scope_error() -> None:
    long = "a" * (limits.GLOB_MAX_CHARS + 1)
    parse_scope(_scope_with("a" * limits.GLOB_MAX_CHARS), source="s.yaml")
    with pytest.raises(ScopeError) as e:
        parse_scope(_scope_with(long), source="s.yaml")
    msg = e.value.message
    assert "s.yaml:" in msg and "isolation.owned_paths" in msg and str(limits.GLOB_MAX_CHARS) in msg, msg
    with pytest.raises(ValueError, match="over the limit"):
        Glob(long)
    with pytest.raises(ScopeError, match="control character"):
        parse_scope(_scope_with("a\x00b"), source="s.yaml")
