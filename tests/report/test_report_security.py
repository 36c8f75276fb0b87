"""Untrusted bundle text never becomes markup, script or a link (static checks; the browser
test proves the same in Chromium)."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from markupsafe import Markup
from synthetic import PAYLOADS, payload_text

from fasttrack.report import render_report
from fasttrack.report.links import LinkPolicy, quote_path, served_name
from fasttrack.report.render import UnsafeLink, csp, safe_href
from fasttrack.report.site import build_site
from fasttrack.report.svg import El, svg, text

SCHEME = re.compile(r"^\s*[a-zA-Z][a-zA-Z0-9+.\-]*:")


class Collect(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.script_bodies: list[str] = []
        self._script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        self._script = tag == "script"

    def handle_endtag(self, tag: str) -> None:
        self._script = False

    def handle_data(self, data: str) -> None:
        if self._script:
            self.script_bodies.append(data)


def collect(html: str) -> Collect:
    c = Collect()
    c.feed(html)
    return c


def assert_inert(html: str, *, scripts_allowed: int = 0) -> Collect:
    c = collect(html)
    scripts = [a for t, a in c.tags if t == "script"]
    executable = [a for a in scripts if a.get("type") != "application/json"]
    assert len(executable) <= scripts_allowed, executable
    for tag, attrs in c.tags:
        assert tag not in ("iframe", "img", "object", "embed", "base", "form", "link", "meta") or (
            tag == "meta" and set(attrs) <= {"charset", "http-equiv", "content", "name"}
        ), (tag, attrs)
        for name, value in attrs.items():
            assert not name.startswith("on"), (tag, name, value)
            assert name not in ("src", "srcdoc", "formaction", "xlink:href", "style"), (tag, name, value)
            if name == "href":
                assert value is not None and not SCHEME.match(value) and not value.startswith("//"), value
    return c


def test_malicious_report_is_inert(bundle_factory, keys, tmp_path: Path) -> None:
    b = bundle_factory("evil", model="demo-llama", seed=9, payload=payload_text(), fail=("perf", "evals", "coverage"))
    out = tmp_path / "evil.html"
    data = render_report(b, out, keys=[keys.trusted_pub])
    assert data.verification.verified  # a signed bundle can still carry hostile text
    html = out.read_text()
    c = assert_inert(html)
    # the payload is there as text (escaped), in the places a reviewer looks
    for needle in ("&lt;script&gt;window.__pwned=1", "&#34;&gt;&lt;img src=x onerror=", "javascript:window.__pwned=3"):
        assert needle in html, needle
    # every text field of the bundle carried it: title, PR repository, reasons, failures, summaries,
    # provenance, engines, table cells and column names, artifact names
    text_hits = html.count("&lt;script&gt;window.__pwned=1")
    assert text_hits >= 30, text_hits
    for section in ("pr", "gates", "checks", "environment", "artifacts", "claims", "coverage"):
        start = html.index(f'id="{section}"')
        assert "__pwned" in html[start : start + 400_000], section
    # hrefs: relative, percent-encoded, to attested files only; the active .html member is not linked
    hrefs = [a["href"] for t, a in c.tags if t == "a" and a.get("href") and not a["href"].startswith("#")]
    assert hrefs and all((out.parent / h).resolve().is_relative_to(b.resolve()) for h in hrefs)
    assert not any("javascript" in h.lower() and h.endswith(".html") for h in hrefs)
    assert any("%3Cscript%3E" in h for h in hrefs)  # the payload-named file is linked, as an encoded relative path


def test_malicious_dashboard_is_inert(bundle_factory, keys, tmp_path: Path) -> None:
    bundles = tmp_path / "bundles"
    bundles.mkdir()
    for i, signer in enumerate(("trusted", "other", None)):
        bundle_factory(
            f"evil-{i}",
            parent=bundles,
            signer=signer,
            model=f"m{i}{PAYLOADS[0]}",
            seed=20 + i,
            payload=payload_text(),
            head_sha="c" * 40,
            fail=("perf",) if i else (),
        )
    site = tmp_path / "site"
    build_site(bundles, site, keys=[keys.trusted_pub], jobs=1)
    index = (site / "index.html").read_text()
    c = assert_inert(index, scripts_allowed=1)
    dashboard_js = (Path(__file__).resolve().parents[2] / "templates" / "dashboard.js").read_text()
    assert c.script_bodies[-1] == dashboard_js  # the only executable script is ours, allowed by its hash
    data_blocks = re.findall(r'<script type="application/json" id="bundle-data">(.*?)</script>', index, re.S)
    assert len(data_blocks) == 1 and "<" not in data_blocks[0]
    for page in list((site / "reports").glob("*.html")) + list((site / "compare").glob("*.html")):
        assert_inert(page.read_text())
    # published copies of active files are renamed so a static host serves them as text
    copied = [p.name for p in (site / "bundles").rglob("*") if p.is_file()]
    assert copied and not any(n.endswith((".html", ".htm", ".svg", ".js")) for n in copied)


def test_safe_href_refuses_schemes() -> None:
    for bad in (
        "javascript:alert(1)",
        "JaVaScRiPt:x",
        "data:text/html,x",
        "//evil.example",
        "/etc/passwd",
        "http://x",
        "vbscript:x",
        " javascript:x",
        "a b",
        'x"onmouseover=1',
    ):
        with pytest.raises(UnsafeLink):
            safe_href(bad)
    for good in ("#check-perf", "../index.html", "reports/0123abcd.html", "b/artifacts/x%3Ay.txt", "./a/b.txt"):
        assert safe_href(good) == good


def test_link_policy_quotes_names_and_allows_only_members() -> None:
    pol = LinkPolicy(
        base="../bundles/abcd",
        members=["artifacts/javascript:x.txt", "artifacts/a.html", "logs/e.log"],
        rename=served_name,
    )
    assert pol.href("artifacts/javascript:x.txt") == "../bundles/abcd/artifacts/javascript%3Ax.txt"
    assert pol.href("artifacts/a.html") == "../bundles/abcd/artifacts/a.html.txt"
    assert pol.href("not/attested.txt") is None
    direct = LinkPolicy(base="b", members=["artifacts/a.html"])
    assert direct.href("artifacts/a.html") is None  # would open as a page
    assert quote_path("../x") is None and quote_path("/abs") is None and quote_path("a//b") is None
    with pytest.raises(ValueError):
        LinkPolicy(base="javascript:alert(1)", members=[])


def test_svg_builder_escapes_and_refuses_active_parts() -> None:
    root = svg(100, 50, label='"><script>x</script>')
    root.add(text(1, 2, "<script>alert(1)</script>&"))
    out = root.markup()
    assert isinstance(out, Markup)
    assert "<script" not in out and "&lt;script&gt;" in out and "&amp;" in out
    for tag in ("script", "a", "image", "foreignObject", "use", "style"):
        with pytest.raises(ValueError):
            El(tag)
    for attr in ("onload", "href", "xlink:href", "style"):
        with pytest.raises(ValueError):
            El("g", {attr: "x"})
    with pytest.raises(ValueError):
        El("g", {"class": 'x" onload="y'})


def test_csp_is_strict() -> None:
    policy = csp(styles=["body{}"], scripts=["1"])
    assert policy.startswith("default-src 'none'")
    assert "unsafe-inline" not in policy and "unsafe-eval" not in policy and "*" not in policy
    assert "script-src 'sha256-" in policy and "connect-src 'none'" in policy and "base-uri 'none'" in policy
    assert "script-src 'none'" in csp(styles=["x"])
