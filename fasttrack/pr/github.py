"""A small GitHub REST client: the handful of endpoints the PR flow uses.

Every request is first built as a :class:`Call` (method, URL, headers, exact body), so
``--dry-run`` prints the very requests a real run sends. Endpoints (REST API version
``2022-11-28``):

- ``GET /user``: the login the token belongs to (its sticky comment is the one it may edit)
- ``GET /repos/{owner}/{repo}/pulls/{number}``: the PR exists; its head SHA, author, head repository
- ``GET|POST /repos/{owner}/{repo}/issues/{number}/comments``: list (paginated) / create
- ``PATCH /repos/{owner}/{repo}/issues/comments/{comment_id}``: update a comment
- ``GET /repos/{owner}/{repo}/releases/tags/{tag}``, ``POST /repos/{owner}/{repo}/releases``
- ``POST {upload_url}?name=...``: upload a release asset (raw bytes; ``upload_url`` comes
  from the release, on ``uploads.github.com`` for github.com)

Rate limits follow GitHub's guidance: on 403/429 wait ``retry-after`` seconds when given,
else until ``x-ratelimit-reset`` when ``x-ratelimit-remaining`` is 0, else a minute for a
secondary limit; at most ``max_retries`` times, and never longer than ``max_wait`` seconds
at once (a longer wait is an error naming the reset time). Every failure is a
:class:`GitHubError` (exit code 2) that says what failed and what to do.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

import httpx

from fasttrack import __version__
from fasttrack.errors import FasttrackError

API_VERSION = "2022-11-28"
DEFAULT_API_URL = "https://api.github.com"
DEFAULT_SERVER_URL = "https://github.com"
#: Environment variables holding a token, in the order they are tried (as ``gh`` does).
TOKEN_ENV = ("GH_TOKEN", "GITHUB_TOKEN")
#: GitHub's limit on an issue comment body (characters).
COMMENT_LIMIT = 65_536
TOKEN_PLACEHOLDER = "<token>"

_REPO = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")
_NEXT = re.compile(r'<([^>]+)>;\s*rel="next"')


class GitHubError(FasttrackError):
    """A GitHub request failed, or the PR flow cannot go on (exit code 2)."""


def check_repo(repo: str, what: str = "--repo") -> str:
    """``OWNER/NAME`` or a clear error."""
    r = repo.strip()
    if not _REPO.match(r) or r.split("/")[1] in (".", ".."):
        raise GitHubError(f"{what} {repo!r} is not of the form OWNER/NAME", hint="e.g. --repo vllm-project/vllm")
    return r


@dataclass
class Call:
    """One HTTP request, as sent (or as ``--dry-run`` prints it)."""

    method: str
    url: str
    headers: dict[str, str]
    body: bytes | None = None
    #: Shown instead of a binary body.
    body_note: str | None = None
    #: A file streamed as the body (release asset uploads).
    body_file: str | None = None
    what: str = ""
    expect: tuple[int, ...] = (200,)

    def render(self) -> str:
        """The request as text: request line, headers (token masked), body."""
        lines = [f"{self.method} {self.url}"]
        for k, v in self.headers.items():
            lines.append(f"{k}: Bearer {TOKEN_PLACEHOLDER}" if k.lower() == "authorization" else f"{k}: {v}")
        if self.body_note is not None:
            lines += ["", self.body_note]
        elif self.body is not None:
            lines += ["", self.body.decode("utf-8")]
        return "\n".join(lines)


def json_body(payload: Mapping[str, Any]) -> bytes:
    """The exact bytes sent for a JSON payload."""
    return json.dumps(payload, ensure_ascii=False, indent=2).encode("utf-8")


def server_from_api(api_url: str) -> str:
    """``https://api.github.com`` -> ``https://github.com``; ``https://HOST/api/v3`` -> ``https://HOST``."""
    u = urlsplit(api_url.rstrip("/"))
    return DEFAULT_SERVER_URL if u.netloc == "api.github.com" else f"{u.scheme}://{u.netloc}"


def resolve_token(
    env: Mapping[str, str] | None = None, *, api_url: str = DEFAULT_API_URL, gh: str | None = "auto"
) -> tuple[str, str]:
    """``(token, where it came from)``: ``$GH_TOKEN``, ``$GITHUB_TOKEN``, else ``gh auth token``."""
    env = os.environ if env is None else env
    for var in TOKEN_ENV:
        tok = env.get(var, "").strip()
        if tok:
            return tok, f"${var}"
    exe = shutil.which("gh") if gh == "auto" else gh
    if exe:
        host = urlsplit(server_from_api(api_url)).netloc
        try:
            out = subprocess.run(
                [exe, "auth", "token", "--hostname", host], capture_output=True, text=True, timeout=30, check=False
            )
        except (OSError, subprocess.TimeoutExpired):
            out = None
        if out is not None and out.returncode == 0 and out.stdout.strip():
            return out.stdout.strip(), "gh auth token"
    raise GitHubError(
        "no GitHub token: set GITHUB_TOKEN or GH_TOKEN, or log in with `gh auth login`",
        hint="The token needs to comment on the PR and to create releases on the repository that holds the "
        "bundle (a classic token with public_repo, or `gh auth login`); --dry-run needs none.",
    )


@dataclass
class GitHubClient:
    """Sends :class:`Call` s with retries on rate limits; builds them for ``--dry-run`` too."""

    token: str | None
    api_url: str = DEFAULT_API_URL
    max_wait: float = 300.0
    max_retries: int = 3
    per_page: int = 100
    timeout: float = 120.0
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.time
    log: Callable[[str], None] = lambda _m: None
    transport: httpx.BaseTransport | None = None

    def __post_init__(self) -> None:
        self.api_url = self.api_url.rstrip("/")
        self._http = httpx.Client(timeout=self.timeout, transport=self.transport, follow_redirects=False)

    def close(self) -> None:
        self._http.close()

    # ------------------------------------------------------------------ building

    def headers(self, *, content_type: str | None = None) -> dict[str, str]:
        h = {
            "Accept": "application/vnd.github+json",
            "Authorization": f"Bearer {self.token or TOKEN_PLACEHOLDER}",
            "X-GitHub-Api-Version": API_VERSION,
            "User-Agent": f"fasttrack/{__version__}",
        }
        if content_type:
            h["Content-Type"] = content_type
        return h

    def url(self, path: str, **query: Any) -> str:
        return self.api_url + path + (("?" + urlencode(query)) if query else "")

    def call_get_user(self) -> Call:
        return Call("GET", self.url("/user"), self.headers(), what="reading the token's user")

    def call_get_pull(self, repo: str, number: int) -> Call:
        return Call(
            "GET", self.url(f"/repos/{repo}/pulls/{number}"), self.headers(), what=f"reading PR {repo}#{number}"
        )

    def call_list_comments(self, repo: str, number: int) -> Call:
        return Call(
            "GET",
            self.url(f"/repos/{repo}/issues/{number}/comments", per_page=self.per_page),
            self.headers(),
            what=f"listing the comments of {repo}#{number}",
        )

    def call_create_comment(self, repo: str, number: int, body: str) -> Call:
        return Call(
            "POST",
            self.url(f"/repos/{repo}/issues/{number}/comments"),
            self.headers(content_type="application/json"),
            body=json_body({"body": body}),
            what=f"commenting on {repo}#{number}",
            expect=(201,),
        )

    def call_update_comment(self, repo: str, comment_id: int | str, body: str) -> Call:
        return Call(
            "PATCH",
            self.url(f"/repos/{repo}/issues/comments/{comment_id}"),
            self.headers(content_type="application/json"),
            body=json_body({"body": body}),
            what=f"updating comment {comment_id} on {repo}",
        )

    def call_get_release_by_tag(self, repo: str, tag: str) -> Call:
        return Call(
            "GET",
            self.url(f"/repos/{repo}/releases/tags/{quote(tag, safe='')}"),
            self.headers(),
            what=f"reading release {tag} of {repo}",
            expect=(200, 404),
        )

    def call_create_release(self, repo: str, payload: Mapping[str, Any]) -> Call:
        return Call(
            "POST",
            self.url(f"/repos/{repo}/releases"),
            self.headers(content_type="application/json"),
            body=json_body(payload),
            what=f"creating release {payload.get('tag_name')} on {repo}",
            expect=(201,),
        )

    def call_upload_asset(self, upload_url: str, name: str, path: str, size: int, sha256: str) -> Call:
        base = re.sub(r"\{\?[^}]*\}$", "", upload_url)  # drop the URI template's {?name,label}
        h = self.headers(content_type="application/gzip")
        h["Content-Length"] = str(size)
        return Call(
            "POST",
            f"{base}?{urlencode({'name': name})}",
            h,
            body_file=path,
            body_note=f"<{size} bytes of {os.path.basename(path)}, sha256 {sha256}>",
            what=f"uploading {name}",
            expect=(201, 422),
        )

    # ------------------------------------------------------------------ sending

    def send(self, call: Call) -> httpx.Response:
        """Send one call; retry rate limits; raise :class:`GitHubError` on anything unexpected."""
        if not self.token:
            raise GitHubError("no GitHub token given to the client")
        attempt = 0
        while True:
            headers = dict(call.headers)
            headers["Authorization"] = f"Bearer {self.token}"
            try:
                if call.body_file is not None:
                    with open(call.body_file, "rb") as f:
                        resp = self._http.request(call.method, call.url, headers=headers, content=_chunks(f))
                else:
                    resp = self._http.request(call.method, call.url, headers=headers, content=call.body)
            except httpx.HTTPError as exc:
                raise GitHubError(f"{call.what}: cannot reach {_origin(call.url)}: {exc}") from None
            wait = self._rate_limit_wait(resp)
            if wait is not None:
                attempt += 1
                if attempt > self.max_retries:
                    raise GitHubError(
                        f"{call.what}: still rate limited by GitHub after {self.max_retries} waits",
                        hint="Wait a few minutes and run the command again.",
                    )
                if wait > self.max_wait:
                    at = dt.datetime.fromtimestamp(self.clock() + wait, dt.timezone.utc).strftime("%H:%M:%S UTC")
                    raise GitHubError(
                        f"{call.what}: GitHub's rate limit for this token is exhausted until {at} "
                        f"(in {wait:.0f} s, more than the {self.max_wait:.0f} s this command waits)",
                        hint="Run the command again after that time, or raise --max-wait.",
                    )
                self.log(f"rate limited by GitHub while {call.what}; waiting {wait:.0f} s (retry {attempt})")
                self.sleep(wait)
                continue
            if resp.status_code in call.expect:
                return resp
            raise self._error(call, resp)

    def _rate_limit_wait(self, resp: httpx.Response) -> float | None:
        if resp.status_code not in (403, 429):
            return None
        h = resp.headers
        ra = h.get("retry-after", "").strip()
        if ra.isdigit():
            return float(ra)
        if h.get("x-ratelimit-remaining", "").strip() == "0" and h.get("x-ratelimit-reset", "").strip().isdigit():
            return max(0.0, float(h["x-ratelimit-reset"]) - self.clock()) + 1.0
        if "rate limit" in _message(resp).lower() or resp.status_code == 429:
            return 60.0
        return None

    def _error(self, call: Call, resp: httpx.Response) -> GitHubError:
        msg = _message(resp)
        code = resp.status_code
        if code == 401:
            return GitHubError(
                f"{call.what}: GitHub rejected the token (401 {msg or 'Bad credentials'})",
                hint="Check $GH_TOKEN / $GITHUB_TOKEN (or `gh auth status`): it may be expired or mistyped.",
            )
        if code == 403:
            return GitHubError(
                f"{call.what}: GitHub refused (403 {msg or 'Forbidden'})",
                hint="The token may lack a permission: commenting needs pull-requests write (or public_repo), "
                "releases need contents write on that repository.",
            )
        if code == 404:
            return GitHubError(f"{call.what}: not found (404); the token may not see that repository")
        if code == 422:
            return GitHubError(f"{call.what}: GitHub rejected the request (422 {msg}{_errors(resp)})")
        return GitHubError(f"{call.what}: GitHub answered {code} {msg}".rstrip())

    # ------------------------------------------------------------------ endpoints

    def json(self, call: Call) -> Any:
        resp = self.send(call)
        try:
            return resp.json()
        except ValueError:
            raise GitHubError(f"{call.what}: GitHub's answer is not JSON") from None

    def get_user(self) -> str | None:
        """The token's login, or None for a token that has no user (an Actions GITHUB_TOKEN)."""
        call = self.call_get_user()
        call.expect = (200, 403)
        resp = self.send(call)
        if resp.status_code != 200:
            return None
        login = resp.json().get("login")
        return str(login) if login else None

    def get_pull(self, repo: str, number: int) -> dict[str, Any]:
        call = self.call_get_pull(repo, number)
        call.expect = (200, 404)
        resp = self.send(call)
        if resp.status_code == 404:
            raise GitHubError(
                f"PR #{number} does not exist in {repo} (or the token cannot see that repository)",
                hint="Check --repo OWNER/NAME and --pr NUMBER.",
            )
        data = resp.json()
        if not isinstance(data, dict) or "head" not in data:
            raise GitHubError(f"{call.what}: unexpected answer (no 'head')")
        return data

    def list_comments(self, repo: str, number: int) -> list[dict[str, Any]]:
        call = self.call_list_comments(repo, number)
        out: list[dict[str, Any]] = []
        for _page in range(1000):
            resp = self.send(call)
            data = resp.json()
            if not isinstance(data, list):
                raise GitHubError(f"{call.what}: unexpected answer (not a list)")
            out.extend(c for c in data if isinstance(c, dict))
            m = _NEXT.search(resp.headers.get("link", ""))
            if not m:
                return out
            call = Call("GET", m.group(1), call.headers, what=call.what)
        raise GitHubError(f"{call.what}: more than 1000 pages of comments")

    def create_comment(self, repo: str, number: int, body: str) -> dict[str, Any]:
        return dict(self.json(self.call_create_comment(repo, number, body)))

    def update_comment(self, repo: str, comment_id: int | str, body: str) -> dict[str, Any]:
        return dict(self.json(self.call_update_comment(repo, comment_id, body)))

    def get_release_by_tag(self, repo: str, tag: str) -> dict[str, Any] | None:
        resp = self.send(self.call_get_release_by_tag(repo, tag))
        return None if resp.status_code == 404 else dict(resp.json())

    def create_release(self, repo: str, payload: Mapping[str, Any]) -> dict[str, Any]:
        return dict(self.json(self.call_create_release(repo, payload)))

    def upload_asset(self, upload_url: str, name: str, path: str, size: int, sha256: str) -> dict[str, Any] | None:
        """The new asset, or None when the release already holds an asset of that name (422)."""
        resp = self.send(self.call_upload_asset(upload_url, name, path, size, sha256))
        if resp.status_code == 422:
            if "already_exists" in resp.text:
                return None
            raise GitHubError(f"uploading {name}: GitHub rejected the upload (422 {_message(resp)}{_errors(resp)})")
        return dict(resp.json())


def _chunks(f: Any, size: int = 1 << 20) -> Iterator[bytes]:
    while True:
        b = f.read(size)
        if not b:
            return
        yield b


def _origin(url: str) -> str:
    u = urlsplit(url)
    return f"{u.scheme}://{u.netloc}"


def _message(resp: httpx.Response) -> str:
    try:
        data = resp.json()
    except ValueError:
        return resp.text[:200].strip()
    return str(data.get("message", ""))[:300] if isinstance(data, dict) else ""


def _errors(resp: httpx.Response) -> str:
    try:
        errs = resp.json().get("errors") or []
    except (ValueError, AttributeError):
        return ""
    parts = []
    for e in errs[:5]:
        if isinstance(e, dict):
            parts.append(
                str(e.get("message") or " ".join(str(e.get(k, "")) for k in ("resource", "field", "code")).strip())
            )
        else:
            parts.append(str(e))
    return (": " + "; ".join(p for p in parts if p)) if parts else ""
