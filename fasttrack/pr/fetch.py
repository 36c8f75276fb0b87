"""``fasttrack pr fetch``: the maintainers' side downloads the bundle a PR links, and checks its sha256.

The bundle is the one linked by the sticky comment of the PR's author (``--author``
names another login), in the comment's machine-readable line. Only a release download
URL on the GitHub server is accepted (``{server}/{owner}/{repo}/releases/download/{tag}/{file}``),
the download carries no token, it stops at ``max_bytes``, and a file whose sha256 differs
from the one the comment names is deleted and reported (exit 2). The PR's head SHA,
author and comment id come from the API (not from the bundle) and can be written to
``$GITHUB_OUTPUT`` for later steps.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

import httpx

from fasttrack.bundle import outfile
from fasttrack.pr.github import GitHubClient, GitHubError, check_repo
from fasttrack.pr.sticky import MARKER, BundleLink, find_sticky, login_of, parse_link

#: GitHub's limit on a release asset.
MAX_BYTES = 2 * 1024**3


@dataclass
class Fetched:
    path: Path
    link: BundleLink
    comment_id: int
    comment_author: str
    pr_author: str
    head_sha: str

    def outputs(self) -> dict[str, str]:
        return {
            "bundle": str(self.path),
            "url": self.link.url,
            "sha256": self.link.sha256,
            "comment_id": str(self.comment_id),
            "comment_author": self.comment_author,
            "pr_author": self.pr_author,
            "head_sha": self.head_sha,
        }


def check_download_url(url: str, server_url: str) -> str:
    server = server_url.rstrip("/")
    pat = re.escape(server) + r"/[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+/releases/download/[A-Za-z0-9_.+-]+/[A-Za-z0-9_.+-]+"
    if not re.fullmatch(pat, url):
        raise GitHubError(
            f"the PR's fasttrack comment links {url[:200]!r}, which is not a release download on {server}",
            hint="Bundles are fetched only from release assets ({server}/OWNER/REPO/releases/download/TAG/FILE), "
            "as `fasttrack pr publish` uploads them.",
        )
    return url


def download(url: str, dest: Path, *, sha256: str, max_bytes: int = MAX_BYTES, timeout: float = 300.0) -> int:
    """Stream ``url`` to ``dest`` (no credentials sent); check size and sha256; return the size."""
    h = hashlib.sha256()
    n = 0
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        # only over a regular file, through an exclusive temporary file beside it (removed on any error)
        with outfile.exclusive_temp(dest) as (f, tmp):
            with httpx.Client(follow_redirects=True, timeout=timeout) as http, http.stream("GET", url) as resp:
                if resp.status_code != 200:
                    raise GitHubError(f"downloading {url}: the server answered {resp.status_code}")
                for chunk in resp.iter_bytes(1 << 20):
                    n += len(chunk)
                    if n > max_bytes:
                        raise GitHubError(f"downloading {url}: larger than {max_bytes:,} bytes; stopped")
                    h.update(chunk)
                    f.write(chunk)
    except httpx.HTTPError as exc:
        raise GitHubError(f"downloading {url}: {exc}") from None
    got = h.hexdigest()
    if got != sha256:
        tmp.unlink(missing_ok=True)
        raise GitHubError(
            f"the bundle downloaded from {url} has sha256 {got}, but the PR's comment names {sha256}; "
            "it was changed after it was published (or the link is wrong)",
            hint="Ask the contributor to publish the bundle again with `fasttrack pr publish`.",
        )
    outfile.commit(tmp, dest)
    return n


def fetch_bundle(
    client: GitHubClient,
    repo: str,
    number: int,
    out: Path,
    *,
    server_url: str,
    author: str | None = None,
    max_bytes: int = MAX_BYTES,
) -> Fetched:
    """Find the PR's published bundle, download it to ``out`` and check its sha256."""
    repo = check_repo(repo)
    pull = client.get_pull(repo, number)
    head_sha = str((pull.get("head") or {}).get("sha") or "")
    pr_author = str((pull.get("user") or {}).get("login") or "")
    who = author or pr_author or None
    comment = find_sticky(client.list_comments(repo, number), who)
    if comment is None:
        raise GitHubError(
            f"PR {repo}#{number} has no fasttrack comment ({MARKER}) by {who or 'anyone'}: no bundle was published",
            hint=f"The contributor publishes one with `fasttrack pr publish BUNDLE --repo {repo} --pr {number}`.",
        )
    link = parse_link(str(comment.get("body") or ""))
    if link is None:
        raise GitHubError(f"the fasttrack comment {comment.get('html_url', comment.get('id'))} links no bundle")
    check_download_url(link.url, server_url)
    if link.size > max_bytes:
        raise GitHubError(f"the linked bundle is {link.size:,} bytes, more than the {max_bytes:,} accepted")
    download(link.url, out, sha256=link.sha256, max_bytes=max_bytes)
    return Fetched(
        path=out,
        link=link,
        comment_id=int(comment["id"]),
        comment_author=login_of(comment),
        pr_author=pr_author,
        head_sha=head_sha,
    )


def write_outputs(path: Path, values: dict[str, str]) -> None:
    """Append ``key=value`` lines (GitHub Actions step outputs); values are single-line."""
    with open(path, "a", encoding="utf-8") as f:
        for k, v in values.items():
            if "\n" in v or "\r" in v:
                raise GitHubError(f"output {k} spans lines")
            f.write(f"{k}={v}\n")
