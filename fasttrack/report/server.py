"""``fasttrack dashboard serve``: the dashboard on 127.0.0.1, rebuilt incrementally on demand.

The site is built into a cache folder with ``artifacts="serve"``: bundle files are not
copied; ``/bundles/<id>/<file>`` is answered from the bundle itself, only for files its
verified attestation lists. A file whose type is on the inert allow-list
(:data:`fasttrack.report.links.INERT_TYPES`) goes as that type; any other file as plain
text, or as a download when it is not text: never as a page. Every file goes with
``nosniff`` and a sandboxing Content-Security-Policy. Only GET and HEAD are answered, and
only for the host names the server is bound to (``127.0.0.1``, ``localhost``, with the
port): a page on another site that rebinds its own name to 127.0.0.1 gets nothing.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections.abc import Callable, Sequence
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar
from urllib.parse import unquote, urlsplit

from fasttrack.errors import FasttrackError
from fasttrack.limits import SERVE_MAX_MEMBER_BYTES, read_capped
from fasttrack.report.index_db import Index
from fasttrack.report.links import inert_type, served_headers
from fasttrack.report.site import INDEX_DB, build_site

#: Seconds between rebuild checks triggered by page loads.
REFRESH_S = 5.0
#: Host names the server answers to (with its port); anything else is refused (DNS rebinding).
BOUND_HOSTS = ("127.0.0.1", "localhost")

PAGE_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
    "Content-Security-Policy": "frame-ancestors 'none'; base-uri 'none'; form-action 'none'; object-src 'none'",
}
FILE_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cross-Origin-Resource-Policy": "same-origin",
    "Content-Security-Policy": "sandbox; default-src 'none'",
}


def default_site_dir(bundles: Path) -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "fasttrack" / "dashboard"
    return base / hashlib.sha256(str(bundles.resolve()).encode()).hexdigest()[:16]


class Dashboard:
    """The state behind the server: where bundles and the site are, and when it was built."""

    def __init__(
        self,
        bundles: Path,
        site: Path,
        *,
        keys: Sequence[str] = (),
        trust_dir: str | None = None,
        jobs: int | None = None,
        log: Callable[[str], None] = print,
    ) -> None:
        self.bundles, self.site = bundles.resolve(), site.resolve()
        self.keys, self.trust_dir, self.jobs, self.log = list(keys), trust_dir, jobs, log
        self.lock = threading.Lock()
        self.built_at = 0.0

    def build(self) -> None:
        with self.lock:
            build_site(
                self.bundles,
                self.site,
                keys=self.keys,
                trust_dir=self.trust_dir,
                artifacts="serve",
                jobs=self.jobs,
                log=self.log,
            )
            self.built_at = time.monotonic()

    def maybe_rebuild(self) -> None:
        if time.monotonic() - self.built_at >= REFRESH_S:
            self.build()

    def member_file(self, short: str, served: str) -> tuple[Path | None, bytes | None, str]:
        """The bytes of an attested member of bundle ``short``, only while they still hash to what was verified
        when the site was built (a member edited on disk since, or one with no recorded hash, is not sent)."""
        idx = Index(self.site / INDEX_DB)
        try:
            rec = idx.find(short)
            if rec is None or len(short) != 16:
                return None, None, ""
            member = served if served in rec.members else None
            want = rec.member_sha256.get(member) if member is not None else None
            src = idx.source_of(rec.id)
        finally:
            idx.close()
        if member is None or src is None or want is None:
            return None, None, ""
        data = self._member_bytes(self.bundles / src, member)
        if data is None:
            return None, None, ""
        if hashlib.sha256(data).hexdigest() != want:
            self.log(f"not sending {member} of bundle {short}: it changed since the bundle was verified")
            return None, None, ""
        return None, data, member

    @staticmethod
    def _member_bytes(path: Path, member: str) -> bytes | None:
        """A member's bytes as they are now (None: absent, not a regular file inside the bundle, or too large)."""
        if path.is_dir():
            root = path.resolve()
            f = root / member
            if f.is_symlink() or not f.resolve().is_relative_to(root) or not f.is_file():
                return None
            data = read_capped(f, SERVE_MAX_MEMBER_BYTES)
            return data
        from fasttrack.bundle.safe_tar import iter_members

        for m in iter_members(path):
            if m.name == member and m.stream is not None:
                if m.size > SERVE_MAX_MEMBER_BYTES:
                    return None
                return m.stream.read(SERVE_MAX_MEMBER_BYTES + 1)[: SERVE_MAX_MEMBER_BYTES + 1]
        return None


class DashboardHandler(BaseHTTPRequestHandler):
    """Answers the dashboard's requests (see the module docstring); :func:`make_handler` makes the subclass that
    serves one :class:`Dashboard`."""

    dash: ClassVar[Dashboard]
    """The dashboard served (set on the subclass :func:`make_handler` makes)."""
    server_version = "fasttrack"
    sys_version = ""

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib signature
        pass

    def _send(
        self, status: int, body: bytes, ctype: str, headers: dict[str, str], extra: dict[str, str] | None = None
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        for k, v in {**headers, **(extra or {})}.items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _not_found(self) -> None:
        self._send(HTTPStatus.NOT_FOUND, b"not found\n", "text/plain; charset=utf-8", FILE_HEADERS)

    def do_HEAD(self) -> None:  # noqa: N802
        self.do_GET()

    def _host_ok(self) -> bool:
        """The Host header names this server: a bound name and its port (DNS rebinding)."""
        host = (self.headers.get("Host") or "").strip().lower()
        address = self.server.server_address
        port = address[1] if isinstance(address, tuple) else None
        return host in {f"{h}:{port}" for h in BOUND_HOSTS} or (port == 80 and host in BOUND_HOSTS)

    def do_GET(self) -> None:  # noqa: N802
        if not self._host_ok():
            return self._send(
                HTTPStatus.MISDIRECTED_REQUEST,
                b"this server answers only to 127.0.0.1 and localhost\n",
                "text/plain; charset=utf-8",
                FILE_HEADERS,
            )
        path = urlsplit(self.path).path
        if path in ("/", "/index.html"):
            try:
                self.dash.maybe_rebuild()
            except FasttrackError as exc:
                self._send(
                    HTTPStatus.INTERNAL_SERVER_ERROR,
                    exc.message.encode(),
                    "text/plain; charset=utf-8",
                    FILE_HEADERS,
                )
                return
            path = "/index.html"
        parts = [unquote(p) for p in path.split("/") if p]
        if any(p in (".", "..") or "\x00" in p or "\\" in p for p in parts) or not parts:
            return self._not_found()
        if parts[0] == "bundles" and len(parts) >= 3:
            return self._member(parts[1], "/".join(parts[2:]))
        if parts[0].startswith(".") or parts[-1] == INDEX_DB or parts[-1].startswith(INDEX_DB):
            return self._not_found()
        f = self.dash.site.joinpath(*parts)
        try:
            ok = f.is_file() and not f.is_symlink() and f.resolve().is_relative_to(self.dash.site)
        except OSError:
            ok = False
        if not ok:
            return self._not_found()
        ctype = {".html": "text/html; charset=utf-8", ".json": "application/json"}.get(
            f.suffix, "application/octet-stream"
        )
        self._send(HTTPStatus.OK, f.read_bytes(), ctype, PAGE_HEADERS)

    def _member(self, short: str, served: str) -> None:
        try:
            f, data, member = self.dash.member_file(short, served)
        except Exception:  # noqa: BLE001 - a broken bundle is a 404, not a crash
            f, data, member = None, None, ""
        if f is None and data is None:
            return self._not_found()
        body = data if data is not None else f.read_bytes()  # type: ignore[union-attr]
        ctype, disp = served_headers(member, body)
        name = Path(member).name
        if disp == "attachment" and inert_type(name) is None:
            name += ".download"  # saved under a name no browser opens as a page
        name = "".join(c if c.isascii() and c.isprintable() and c not in '"\\;' else "_" for c in name)
        self._send(HTTPStatus.OK, body, ctype, FILE_HEADERS, {"Content-Disposition": f'{disp}; filename="{name}"'})

    def _refuse(self) -> None:
        self._send(
            HTTPStatus.METHOD_NOT_ALLOWED,
            b"method not allowed\n",
            "text/plain; charset=utf-8",
            FILE_HEADERS,
            {"Allow": "GET, HEAD"},
        )

    do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _refuse  # noqa: N815


def make_handler(dash: Dashboard) -> type[BaseHTTPRequestHandler]:
    """The request handler class serving ``dash``."""
    return type("Handler", (DashboardHandler,), {"dash": dash})


def make_server(dash: Dashboard, *, port: int = 8765) -> ThreadingHTTPServer:
    """A server bound to 127.0.0.1 (``port=0`` picks a free port)."""
    try:
        httpd = ThreadingHTTPServer(("127.0.0.1", port), make_handler(dash))
    except OSError as exc:
        raise FasttrackError(
            f"cannot listen on 127.0.0.1:{port}: {exc.strerror}",
            hint="Choose another --port (or --port 0 for any free one).",
        ) from None
    httpd.daemon_threads = True
    return httpd


def serve(
    bundles: str | os.PathLike[str],
    *,
    site: str | os.PathLike[str] | None = None,
    port: int = 8765,
    keys: Sequence[str] = (),
    trust_dir: str | None = None,
    jobs: int | None = None,
    log: Callable[[str], None] = print,
    ready: Callable[[str], None] | None = None,
) -> None:
    """Build the site, then serve it until interrupted."""
    b = Path(bundles)
    s = Path(site) if site else default_site_dir(b)
    dash = Dashboard(b, s, keys=keys, trust_dir=trust_dir, jobs=jobs, log=log)
    dash.build()
    httpd = make_server(dash, port=port)
    url = f"http://127.0.0.1:{httpd.server_address[1]}/"
    log(f"serving {b} at {url} (site in {s}; Ctrl-C to stop)")
    if ready:
        ready(url)
    try:
        httpd.serve_forever()
    finally:
        httpd.server_close()
