"""A local HTTP server that stands in for the GitHub REST API in tests.

This is a test double for a service the tests cannot reach (api.github.com, its upload
host and its release downloads). It implements only the endpoints the PR flow uses,
answering with the request/response shapes recorded from GitHub's REST documentation in
``github_rest_shapes.json``:

- ``GET /user``
- ``GET /repos/{owner}/{repo}/pulls/{number}``
- ``GET|POST /repos/{owner}/{repo}/issues/{number}/comments`` (``per_page``/``page``, ``Link``)
- ``PATCH /repos/{owner}/{repo}/issues/comments/{id}`` (the author, or a collaborator)
- ``GET /repos/{owner}/{repo}/releases/tags/{tag}``, ``POST /repos/{owner}/{repo}/releases``
- ``POST /uploads/repos/{owner}/{repo}/releases/{id}/assets?name=`` (the release's ``upload_url``)
- ``GET /{owner}/{repo}/releases/download/{tag}/{name}`` -> 302 -> ``/_objects/{id}`` (no auth)

Like GitHub it checks the token (401), 404s what does not exist, refuses comment bodies
over 65,536 characters and duplicate asset names (422), and can be told to answer the
next requests with a rate-limit response. It records every request it gets.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

SHAPES: dict[str, Any] = json.loads((Path(__file__).with_name("github_rest_shapes.json")).read_text())
COMMENT_LIMIT = 65_536


def fill(obj: Any, **vals: Any) -> Any:
    """A copy of a recorded shape with its ``{placeholders}`` filled in."""
    if isinstance(obj, dict):
        return {k: fill(v, **vals) for k, v in obj.items()}
    if isinstance(obj, list):
        return [fill(v, **vals) for v in obj]
    if isinstance(obj, str):
        m = re.fullmatch(r"\{(\w+)\}", obj)
        if m and m.group(1) in vals:
            return vals[m.group(1)]
        for k, v in vals.items():
            obj = obj.replace("{" + k + "}", str(v))
        return obj
    return obj


@dataclass
class Recorded:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes


@dataclass
class Pull:
    author: str
    head_sha: str
    head_repo: str | None


@dataclass
class State:
    tokens: dict[str, str] = field(default_factory=dict)  # token -> login
    collaborators: dict[str, set[str]] = field(default_factory=dict)  # repo -> logins
    pulls: dict[tuple[str, int], Pull] = field(default_factory=dict)
    comments: dict[tuple[str, int], list[dict[str, Any]]] = field(default_factory=dict)
    releases: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    blobs: dict[int, bytes] = field(default_factory=dict)
    requests: list[Recorded] = field(default_factory=list)
    #: Canned answers for the next API requests: (status, headers, body).
    fail_next: list[tuple[int, dict[str, str], dict[str, Any]]] = field(default_factory=list)
    next_id: int = 1000


class GitHubDouble:
    """Start with ``with GitHubDouble() as gh:``; ``gh.api_url`` is the REST base."""

    def __init__(self) -> None:
        self.state = State()
        self.lock = threading.Lock()
        double = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_a: Any) -> None:
                pass

            def _handle(self) -> None:
                double._dispatch(self)

            do_GET = do_POST = do_PATCH = _handle  # noqa: N815 - http.server's handler names

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    # ------------------------------------------------------------------ setup

    @property
    def api_url(self) -> str:
        return self.url + "/api"

    def __enter__(self) -> GitHubDouble:
        self.thread.start()
        return self

    def __exit__(self, *_exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)

    def add_user(self, login: str, token: str) -> None:
        self.state.tokens[token] = login

    def add_pull(self, repo: str, number: int, *, author: str, head_sha: str, head_repo: str | None) -> None:
        self.state.pulls[(repo, number)] = Pull(author=author, head_sha=head_sha, head_repo=head_repo)
        self.state.comments.setdefault((repo, number), [])
        self.state.collaborators.setdefault(repo, {repo.split("/")[0]})
        if head_repo:
            self.state.collaborators.setdefault(head_repo, {head_repo.split("/")[0]})

    def add_comment(self, repo: str, number: int, login: str, body: str) -> dict[str, Any]:
        with self.lock:
            return self._new_comment(repo, number, login, body)

    def rate_limit_next(self, count: int = 1, *, reset_in: float = 1.0, secondary: bool = False) -> None:
        """Answer the next ``count`` API requests like an exhausted rate limit."""
        if secondary:
            headers = {"retry-after": str(int(reset_in))}
            body = SHAPES["errors"]["secondary_rate_limited"]
        else:
            headers = fill(
                SHAPES["rate_limit_headers"],
                remaining="0",
                used="5000",
                reset_epoch_seconds=int(time.time() + reset_in),
            )
            body = SHAPES["errors"]["rate_limited"]
        self.state.fail_next.extend([(403, headers, body)] * count)

    def comments(self, repo: str, number: int) -> list[dict[str, Any]]:
        return self.state.comments[(repo, number)]

    def calls(self, method: str | None = None, prefix: str = "") -> list[Recorded]:
        return [r for r in self.state.requests if (method is None or r.method == method) and r.path.startswith(prefix)]

    # ------------------------------------------------------------------ serving

    def _dispatch(self, h: BaseHTTPRequestHandler) -> None:
        u = urlsplit(h.path)
        n = int(h.headers.get("Content-Length") or 0)
        body = h.rfile.read(n) if n else b""
        rec = Recorded(
            h.command, unquote(u.path), parse_qs(u.query), {k.lower(): v for k, v in h.headers.items()}, body
        )
        with self.lock:
            self.state.requests.append(rec)
            status, headers, payload = self._route(rec)
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        h.send_response(status)
        for k, v in headers.items():
            h.send_header(k, v)
        if not isinstance(payload, bytes):
            h.send_header("Content-Type", "application/json; charset=utf-8")
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)

    def _route(self, r: Recorded) -> tuple[int, dict[str, str], Any]:
        p = r.path
        if p.startswith("/_objects/"):
            blob = self.state.blobs.get(int(p.rsplit("/", 1)[1]))
            return (200, {}, blob) if blob is not None else (404, {}, SHAPES["errors"]["not_found"])
        m = re.fullmatch(r"/([^/]+/[^/]+)/releases/download/([^/]+)/([^/]+)", p)
        if m and r.method == "GET":
            rel = self.state.releases.get((m.group(1), m.group(2)))
            asset = next((a for a in (rel or {}).get("assets", []) if a["name"] == m.group(3)), None)
            if asset is None:
                return 404, {}, SHAPES["errors"]["not_found"]
            return 302, {"Location": f"{self.url}/_objects/{asset['id']}"}, b""
        login = self.state.tokens.get(r.headers.get("authorization", "").removeprefix("Bearer ").strip())
        if login is None:
            return 401, {}, SHAPES["errors"]["bad_credentials"]
        if self.state.fail_next:
            return self.state.fail_next.pop(0)
        if r.headers.get("x-github-api-version") != "2022-11-28":
            return 400, {}, {"message": "missing X-GitHub-Api-Version"}
        if p.startswith("/uploads/"):
            return self._upload(r, login)
        if not p.startswith("/api/"):
            return 404, {}, SHAPES["errors"]["not_found"]
        p = p.removeprefix("/api")
        if p == "/user" and r.method == "GET":
            return 200, {}, fill(SHAPES["user"], login=login)
        if m := re.fullmatch(r"/repos/([^/]+/[^/]+)/pulls/(\d+)", p):
            return self._pull(m.group(1), int(m.group(2)))
        if m := re.fullmatch(r"/repos/([^/]+/[^/]+)/issues/(\d+)/comments", p):
            return self._comments(r, login, m.group(1), int(m.group(2)))
        if (m := re.fullmatch(r"/repos/([^/]+/[^/]+)/issues/comments/(\d+)", p)) and r.method == "PATCH":
            return self._update_comment(r, login, m.group(1), int(m.group(2)))
        if (m := re.fullmatch(r"/repos/([^/]+/[^/]+)/releases/tags/([^/]+)", p)) and r.method == "GET":
            rel = self.state.releases.get((m.group(1), m.group(2)))
            return (200, {}, rel) if rel else (404, {}, SHAPES["errors"]["not_found"])
        if (m := re.fullmatch(r"/repos/([^/]+/[^/]+)/releases", p)) and r.method == "POST":
            return self._create_release(r, login, m.group(1))
        return 404, {}, SHAPES["errors"]["not_found"]

    def _id(self) -> int:
        self.state.next_id += 1
        return self.state.next_id

    def _pull(self, repo: str, number: int) -> tuple[int, dict[str, str], Any]:
        pr = self.state.pulls.get((repo, number))
        if pr is None:
            return 404, {}, SHAPES["errors"]["not_found"]
        head_owner, head_name = (pr.head_repo or "ghost/deleted").split("/")
        data = fill(
            SHAPES["pull"],
            api=self.api_url,
            repo=repo,
            number=number,
            owner=repo.split("/")[0],
            name=repo.split("/")[1],
            author=pr.author,
            head_sha=pr.head_sha,
            head_repo=pr.head_repo or "",
            head_owner=head_owner,
            head_name=head_name,
        )
        if pr.head_repo is None:
            data["head"]["repo"] = None
        return 200, {}, data

    def _new_comment(self, repo: str, number: int, login: str, body: str) -> dict[str, Any]:
        cid = self._id()
        assoc = "COLLABORATOR" if login in self.state.collaborators.get(repo, set()) else "CONTRIBUTOR"
        c = fill(SHAPES["issue_comment"], api=self.api_url, repo=repo, number=number, id=cid, login=login)
        c["body"], c["author_association"] = body, assoc
        self.state.comments[(repo, number)].append(c)
        return c

    def _comments(self, r: Recorded, login: str, repo: str, number: int) -> tuple[int, dict[str, str], Any]:
        if (repo, number) not in self.state.pulls:
            return 404, {}, SHAPES["errors"]["not_found"]
        items = self.state.comments[(repo, number)]
        if r.method == "GET":
            per = min(int(r.query.get("per_page", ["30"])[0]), 100)
            page = int(r.query.get("page", ["1"])[0])
            last = max(1, -(-len(items) // per))
            headers = {}
            if page < last:
                base = f"{self.api_url}/repos/{repo}/issues/{number}/comments?per_page={per}"
                headers["Link"] = fill(
                    SHAPES["link_header"], next_url=f"{base}&page={page + 1}", last_url=f"{base}&page={last}"
                )
            return 200, headers, copy.deepcopy(items[(page - 1) * per : page * per])
        if r.method == "POST":
            body = json.loads(r.body)["body"]
            if len(body) > COMMENT_LIMIT:
                return 422, {}, SHAPES["errors"]["body_too_long"]
            return 201, {}, copy.deepcopy(self._new_comment(repo, number, login, body))
        return 404, {}, SHAPES["errors"]["not_found"]

    def _update_comment(self, r: Recorded, login: str, repo: str, cid: int) -> tuple[int, dict[str, str], Any]:
        for (rp, _n), items in self.state.comments.items():
            for c in items:
                if rp == repo and c["id"] == cid:
                    if c["user"]["login"] != login and login not in self.state.collaborators.get(repo, set()):
                        return 403, {}, SHAPES["errors"]["forbidden"]
                    body = json.loads(r.body)["body"]
                    if len(body) > COMMENT_LIMIT:
                        return 422, {}, SHAPES["errors"]["body_too_long"]
                    c["body"] = body
                    return 200, {}, copy.deepcopy(c)
        return 404, {}, SHAPES["errors"]["not_found"]

    def _create_release(self, r: Recorded, login: str, repo: str) -> tuple[int, dict[str, str], Any]:
        if login not in self.state.collaborators.get(repo, set()):
            return 404, {}, SHAPES["errors"]["not_found"]
        payload = json.loads(r.body)
        tag = payload["tag_name"]
        if (repo, tag) in self.state.releases:
            return 422, {}, SHAPES["errors"]["tag_exists"]
        rel = fill(
            SHAPES["release"],
            api=self.api_url,
            uploads=self.url + "/uploads",
            repo=repo,
            id=self._id(),
            tag=tag,
            name=payload.get("name", tag),
            body=payload.get("body", ""),
            prerelease=bool(payload.get("prerelease", False)),
            login=login,
        )
        rel["draft"] = bool(payload.get("draft", False))
        self.state.releases[(repo, tag)] = rel
        return 201, {}, copy.deepcopy(rel)

    def _upload(self, r: Recorded, login: str) -> tuple[int, dict[str, str], Any]:
        m = re.fullmatch(r"/uploads/repos/([^/]+/[^/]+)/releases/(\d+)/assets", r.path)
        rel = next(
            (x for (rp, _t), x in self.state.releases.items() if m and rp == m.group(1) and x["id"] == int(m.group(2))),
            None,
        )
        if m is None or rel is None or r.method != "POST":
            return 404, {}, SHAPES["errors"]["not_found"]
        if login not in self.state.collaborators.get(m.group(1), set()):
            return 404, {}, SHAPES["errors"]["not_found"]
        if not r.headers.get("content-type"):
            return 422, {}, {"message": "Content-Type header is required"}
        name = r.query.get("name", [""])[0]
        if any(a["name"] == name for a in rel["assets"]):
            return 422, {}, SHAPES["errors"]["asset_exists"]
        aid = self._id()
        self.state.blobs[aid] = r.body
        asset = fill(
            SHAPES["release_asset"],
            api=self.api_url,
            server=self.url,
            repo=m.group(1),
            tag=quote(rel["tag_name"]),
            id=aid,
            name=name,
            content_type=r.headers["content-type"],
            size=len(r.body),
            sha256=hashlib.sha256(r.body).hexdigest(),
            login=login,
        )
        rel["assets"].append(asset)
        return 201, {}, copy.deepcopy(asset)
