"""The one fasttrack comment on a PR ("sticky"): found by its marker, updated in place.

A PR carries one fasttrack comment. It is found by the marker ``<!-- fasttrack-report -->``
and, when given, its author: ``fasttrack pr publish`` updates the comment written by the
token's own user, the maintainers' workflow updates the one written by the PR's author.
When a matching comment exists it is updated (PATCH), never a second one added; only when
none exists is one created. Comments are read in the order GitHub lists them (ascending
id), so the oldest matching comment is the sticky one.

The comment also carries the bundle's location for the maintainers' workflow in one
machine-readable line, ``<!-- fasttrack-bundle url=URL sha256=HEX size=BYTES -->``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from fasttrack.pr.github import COMMENT_LIMIT, Call, GitHubClient, GitHubError

MARKER = "<!-- fasttrack-report -->"
_LINK = re.compile(r"<!-- fasttrack-bundle url=(\S+) sha256=([0-9a-f]{64}) size=([0-9]+) -->")
#: A plain http(s) URL: no quotes, brackets, spaces or query (what a release download URL looks like).
_URL = re.compile(r"^https?://[A-Za-z0-9.-]+(:[0-9]+)?/[A-Za-z0-9._~%/+-]*$")


@dataclass(frozen=True)
class BundleLink:
    """Where a published bundle is, and the digest it must have."""

    url: str
    sha256: str
    size: int

    def check(self) -> BundleLink:
        if not _URL.match(self.url):
            raise GitHubError(f"bundle URL {self.url[:200]!r} is not a plain http(s) URL")
        if not re.fullmatch(r"[0-9a-f]{64}", self.sha256):
            raise GitHubError(f"bundle sha256 {self.sha256[:80]!r} is not 64 lowercase hex digits")
        return self

    def line(self) -> str:
        return f"<!-- fasttrack-bundle url={self.url} sha256={self.sha256} size={self.size} -->"

    @property
    def name(self) -> str:
        return self.url.rstrip("/").rsplit("/", 1)[-1]


def parse_link(body: str) -> BundleLink | None:
    """The bundle link of a comment body (the last one when there are several), or None."""
    found = _LINK.findall(body or "")
    if not found:
        return None
    url, sha, size = found[-1]
    return BundleLink(url=url, sha256=sha, size=int(size)).check()


def login_of(comment: Mapping[str, Any]) -> str:
    user = comment.get("user")
    return str(user.get("login", "")) if isinstance(user, dict) else ""


def find_sticky(comments: Iterable[Mapping[str, Any]], author: str | None = None) -> Mapping[str, Any] | None:
    """The first comment carrying the marker (by ``author`` when given; case-insensitive)."""
    for c in comments:
        if MARKER not in str(c.get("body") or ""):
            continue
        if author is None or login_of(c).lower() == author.lower():
            return c
    return None


def check_body(body: str) -> str:
    """A comment body fit to post: carries the marker, within GitHub's limit."""
    if MARKER not in body:
        raise GitHubError(
            f"the comment body has no {MARKER} marker, so it could never be found again to update",
            hint="Render it with `fasttrack pr body` or `fasttrack report --comment`.",
        )
    if len(body) > COMMENT_LIMIT:
        raise GitHubError(
            f"the comment body is {len(body):,} characters; GitHub accepts at most {COMMENT_LIMIT:,}",
            hint="Shorten it (comments rendered by fasttrack cut their tables to fit).",
        )
    return body


@dataclass
class Upserted:
    """The comment after an upsert."""

    comment: dict[str, Any]
    created: bool

    @property
    def url(self) -> str:
        return str(self.comment.get("html_url") or self.comment.get("url") or "")


def upsert(client: GitHubClient, repo: str, number: int, body: str, *, author: str | None) -> Upserted:
    """Update the sticky comment (see :func:`find_sticky`), or create it when there is none."""
    check_body(body)
    existing = find_sticky(client.list_comments(repo, number), author)
    if existing is not None:
        return Upserted(client.update_comment(repo, existing["id"], body), created=False)
    return Upserted(client.create_comment(repo, number, body), created=True)


def plan_upsert(client: GitHubClient, repo: str, number: int, body: str, *, author_desc: str) -> list[tuple[str, Call]]:
    """The requests :func:`upsert` sends, with what decides between them (for ``--dry-run``)."""
    check_body(body)
    return [
        (
            f"find the fasttrack comment: the first with {MARKER} by {author_desc}",
            client.call_list_comments(repo, number),
        ),
        ("when there is one: update it in place", client.call_update_comment(repo, "{comment_id}", body)),
        ("otherwise: create it (the only time a comment is added)", client.call_create_comment(repo, number, body)),
    ]
