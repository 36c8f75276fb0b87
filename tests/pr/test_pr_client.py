"""The GitHub client against the GitHub test double: rate limits, pagination, errors.

GitHub cannot be reached from the tests; ``github_double.GitHubDouble`` is a local HTTP
server implementing the REST endpoints the client uses, with the shapes recorded from
GitHub's REST documentation. Waits go through an injected clock and sleep.
"""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import pytest
from github_double import GitHubDouble
from pr_testlib import PR, TOKENS, UPSTREAM

from fasttrack.pr.github import GitHubClient, GitHubError, resolve_token
from fasttrack.pr.sticky import MARKER, find_sticky, upsert


class FakeTime:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.slept.append(s)
        self.now += s


def client(gh: GitHubDouble, t: FakeTime | None = None, **kw: object) -> GitHubClient:
    t = t or FakeTime()
    return GitHubClient(token=TOKENS["alice"], api_url=gh.api_url, sleep=t.sleep, clock=t.clock, **kw)  # type: ignore[arg-type]


def test_primary_rate_limit_waits_until_the_reset_then_retries(gh: GitHubDouble) -> None:
    t = FakeTime()
    t.now = time.time()
    gh.rate_limit_next(2, reset_in=30)
    c = client(gh, t)
    pull = c.get_pull(UPSTREAM, PR)
    assert pull["number"] == PR
    # x-ratelimit-reset - now + 1; the second answer names the same reset, which has passed by then
    assert len(t.slept) == 2 and 29 <= t.slept[0] <= 32 and t.slept[1] == 1.0
    assert len(gh.calls("GET", f"/api/repos/{UPSTREAM}/pulls/")) == 3


def test_secondary_rate_limit_honours_retry_after(gh: GitHubDouble) -> None:
    t = FakeTime()
    gh.rate_limit_next(1, reset_in=7, secondary=True)
    assert client(gh, t).get_user() == "alice"
    assert t.slept == [7.0]


def test_rate_limit_waits_are_bounded(gh: GitHubDouble) -> None:
    t = FakeTime()
    t.now = time.time()
    gh.rate_limit_next(1, reset_in=3600)
    with pytest.raises(GitHubError) as e:
        client(gh, t, max_wait=300).get_pull(UPSTREAM, PR)
    assert "rate limit for this token is exhausted until" in e.value.message and "--max-wait" in (e.value.hint or "")
    assert t.slept == [] and e.value.exit_code == 2
    gh.state.fail_next.clear()
    gh.rate_limit_next(5, reset_in=1)
    with pytest.raises(GitHubError, match="still rate limited by GitHub after 3 waits"):
        client(gh, t, max_retries=3).get_pull(UPSTREAM, PR)


def test_comments_are_read_across_pages_and_the_sticky_one_updated(gh: GitHubDouble) -> None:
    for i in range(5):
        gh.add_comment(UPSTREAM, PR, "alice", f"plain comment {i}")
    sticky = gh.add_comment(UPSTREAM, PR, "alice", f"{MARKER}\nold")
    gh.add_comment(UPSTREAM, PR, "alice", f"{MARKER}\na later duplicate is left alone")
    c = client(gh, per_page=2)
    comments = c.list_comments(UPSTREAM, PR)
    assert len(comments) == 7 and len(gh.calls("GET", f"/api/repos/{UPSTREAM}/issues/{PR}/comments")) == 4
    assert find_sticky(comments, "alice")["id"] == sticky["id"]  # type: ignore[index]
    assert find_sticky(comments, "ALICE")["id"] == sticky["id"]  # type: ignore[index]
    assert find_sticky(comments, "mallory") is None
    res = upsert(c, UPSTREAM, PR, f"{MARKER}\nnew", author="alice")
    assert not res.created and res.comment["id"] == sticky["id"]
    assert [x["body"] for x in gh.comments(UPSTREAM, PR)][-2:] == [
        f"{MARKER}\nnew",
        f"{MARKER}\na later duplicate is left alone",
    ]


def test_errors_name_what_failed(gh: GitHubDouble) -> None:
    c = client(gh)
    with pytest.raises(GitHubError, match=f"PR #42 does not exist in {UPSTREAM}"):
        c.get_pull(UPSTREAM, 42)
    other = gh.add_comment(UPSTREAM, PR, "mallory", f"{MARKER}\nmallory's")
    with pytest.raises(GitHubError, match=r"GitHub refused \(403"):
        c.update_comment(UPSTREAM, other["id"], f"{MARKER}\nx")
    with pytest.raises(GitHubError, match="body is too long"):
        c.create_comment(UPSTREAM, PR, "x" * 70_000)  # the server's own 422, as GitHub words it
    bad = GitHubClient(token="nope", api_url=gh.api_url)
    with pytest.raises(GitHubError, match="401 Bad credentials"):
        bad.get_user()
    down = GitHubClient(token="t", api_url="http://127.0.0.1:9/api", timeout=5)
    with pytest.raises(GitHubError, match="cannot reach http://127.0.0.1:9"):
        down.get_user()


def test_token_sources(tmp_path: Path) -> None:
    assert resolve_token({"GH_TOKEN": "a", "GITHUB_TOKEN": "b"}, gh=None) == ("a", "$GH_TOKEN")
    assert resolve_token({"GITHUB_TOKEN": " b "}, gh=None) == ("b", "$GITHUB_TOKEN")
    with pytest.raises(GitHubError, match="no GitHub token"):
        resolve_token({}, gh=None)
    fake = tmp_path / "gh"
    fake.write_text('#!/bin/sh\n[ "$1 $2 $3 $4" = "auth token --hostname github.com" ] && echo from-gh\n')
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    assert resolve_token({}, gh=os.fspath(fake)) == ("from-gh", "gh auth token")
