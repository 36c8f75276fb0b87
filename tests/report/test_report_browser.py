"""The report and the dashboard in real headless Chromium (Debian's package, driven by
playwright-python): pages load, filters and drill-down work, the report's first screen answers
(below), screenshots are saved for CI, and a bundle carrying script and link payloads in every
text field runs nothing and links nowhere it should not. One browser serves every test here."""

from __future__ import annotations

import concurrent.futures
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dashboard_testlib import served_dashboard
from report_testlib import CHROMIUM_ARGS, ROOT, SCREENSHOTS, BundleFactory, Keys, chromium_or_skip
from synthetic import PAYLOADS, payload_text

from fasttrack.report import render_report
from fasttrack.report.site import build_site

pytestmark = pytest.mark.browser

HEAD = "c0ffee" + "2" * 34

#: A page's links, scripts, injected elements and event-handler attributes, read from the live DOM.
DOM_AUDIT = """() => {
  const handlers = [];
  for (const el of document.querySelectorAll('*')) {
    for (const a of el.getAttributeNames()) {
      if (a.toLowerCase().startsWith('on')) handlers.push(el.tagName + ' ' + a);
    }
  }
  return {
    pwned: typeof window.__pwned === 'undefined' ? null : String(window.__pwned),
    title: document.title,
    links: Array.from(document.querySelectorAll('a[href]')).map(a => ({raw: a.getAttribute('href'), abs: a.href})),
    scripts: Array.from(document.querySelectorAll('script')).map(s => s.type || 'classic'),
    injected: document.querySelectorAll('img, iframe, object, embed, form, base, link, video, audio').length,
    handlers: handlers,
  };
}"""


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One headless Chromium for every test of this module (each test opens a context of its own)."""
    exe = chromium_or_skip()
    from playwright.sync_api import sync_playwright

    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=exe, args=CHROMIUM_ARGS, headless=True)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture()
def page(browser: Any) -> Iterator[Any]:
    ctx = browser.new_context(viewport={"width": 1280, "height": 900}, java_script_enabled=True)
    pg = ctx.new_page()
    pg.errors = []  # type: ignore[attr-defined]
    pg.on("pageerror", lambda e: pg.errors.append(str(e)))  # type: ignore[attr-defined]
    pg.on("dialog", lambda d: (pg.errors.append("dialog: " + d.message), d.dismiss()))  # type: ignore[attr-defined]
    try:
        yield pg
    finally:
        ctx.close()


@pytest.fixture(scope="module")
def site_bundles(tmp_path_factory: pytest.TempPathFactory, bundle_factory) -> Path:
    d = tmp_path_factory.mktemp("browser-bundles")
    bundle_factory("pass-a", parent=d, model="demo-llama", seed=1, head_sha=HEAD, created="2026-01-10T00:00:00+00:00")
    bundle_factory("pass-b", parent=d, model="demo-llama", seed=2, head_sha=HEAD, created="2026-01-11T00:00:00+00:00")
    bundle_factory(
        "slow",
        parent=d,
        model="demo-llama",
        seed=3,
        head_sha="d" * 40,
        pr_number=77,
        fail=("perf", "coverage"),
        created="2026-01-12T00:00:00+00:00",
    )
    bundle_factory(
        "k3",
        parent=d,
        model="kimi-k3",
        seed=4,
        head_sha="e" * 40,
        pr_number=88,
        isolation="fail",
        created="2026-01-13T00:00:00+00:00",
    )
    bundle_factory(
        "unsigned",
        parent=d,
        signer=None,
        model="kimi-k3",
        seed=5,
        head_sha="f" * 40,
        pr_number=99,
        not_run=("evals",),
        created="2026-01-14T00:00:00+00:00",
    )
    return d


def _shot(pg: Any, name: str, *, full: bool = True) -> Path:
    out = SCREENSHOTS / name
    pg.screenshot(path=str(out), full_page=full)
    assert out.stat().st_size > 10_000
    return out


def _assert_inert(audit: dict[str, Any], *, allowed_prefixes: tuple[str, ...], scripts: int) -> None:
    assert audit["pwned"] is None, audit["pwned"]
    assert audit["title"] != "PWNED"  # the payloads set exactly this title (the page may show it as text)
    assert audit["injected"] == 0
    assert audit["handlers"] == []
    assert len([s for s in audit["scripts"] if s != "application/json"]) <= scripts
    for link in audit["links"]:
        raw, absolute = link["raw"], link["abs"]
        assert (
            not raw.lower().lstrip().startswith(("javascript:", "data:", "vbscript:", "//", "http:", "https:", "file:"))
        ), raw
        assert absolute.startswith(allowed_prefixes), (raw, absolute)


def test_report_static_file_reads_well(page: Any, bundle_factory, keys, tmp_path: Path) -> None:
    b = bundle_factory("slow-report", model="demo-llama", seed=3, fail=("perf", "coverage"))
    out = tmp_path / "report.html"
    render_report(b, out, keys=[keys.trusted_pub])
    page.goto(out.as_uri())
    assert page.title().startswith("FAIL")
    assert page.locator("#verification .big").inner_text() == "Verified"
    assert page.locator("#verdict-box .big").inner_text().lower() == "fail"
    assert page.locator("#perf svg.chart").count() >= 4
    assert page.locator("#heatmap td.h-fail").count() >= 2
    assert page.locator("#gates-table tr.gate-fail").count() == 2
    assert page.errors == []  # type: ignore[attr-defined]
    _shot(page, "report.png")
    page.locator("#perf > summary").click()  # sections below the first screen open on a click
    page.locator("#perf").scroll_into_view_if_needed()
    assert page.locator("#perf svg.chart").first.is_visible()
    _shot(page, "report-perf.png", full=False)
    page.emulate_media(media="print")
    assert page.locator("nav.toc").is_hidden()
    _shot(page, "report-print.png")


def test_unverified_report_is_marked_in_browser(page: Any, bundle_factory, tmp_path: Path) -> None:
    out = tmp_path / "u.html"
    render_report(bundle_factory("good", model="demo-llama", seed=1), out)
    page.goto(out.as_uri())
    assert page.locator("#verification .big").inner_text() == "NOT VERIFIED"
    assert page.locator("#unverified-banner").is_visible()
    _shot(page, "report-unverified.png", full=False)


@pytest.fixture(scope="module")
def served(site_bundles: Path, keys, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    out = tmp_path_factory.mktemp("served-site")
    with served_dashboard(site_bundles, out, keys=[str(keys.trusted_pub)], jobs=2) as base:
        yield base


def test_dashboard_served_filter_and_drill_down(page: Any, served: str) -> None:
    page.goto(served + "/")
    assert page.title().startswith("fasttrack dashboard")
    count = page.locator("#shown-count")
    assert count.inner_text() == "5 of 5 bundles match"
    # the review queue leads with the unverified bundle, then the failed one
    first = page.locator("#queue tbody tr").first
    assert "unverified" in first.inner_text().lower()
    _shot(page, "dashboard.png")
    page.fill("#q", "kimi-k3")
    assert count.inner_text() == "2 of 5 bundles match"
    assert page.locator("#all tr[data-bundle]:visible").count() == 2
    page.fill("#q", "")
    page.select_option("#f-verdict", "fail")
    # the failed bundle and the one whose change touches a shared component (isolation fails the verdict)
    assert count.inner_text() == "2 of 5 bundles match"
    page.select_option("#f-verdict", "")
    page.select_option("#f-verified", "unverified")
    assert count.inner_text() == "1 of 5 bundles match"
    _shot(page, "dashboard-filtered.png", full=False)
    page.select_option("#f-verified", "")
    # drill down from the queue to a report, and back
    link = page.locator("#queue a.report-link").nth(1)
    short = link.inner_text()  # the bundle's ID, as the report shows it
    href = link.get_attribute("href")
    link.click()
    page.wait_for_url(f"**/{href}")
    assert "fasttrack report" in page.title()
    assert page.locator("#bundle-id").inner_text() == short
    assert page.locator("#verdict-box").is_visible()
    _shot(page, "dashboard-drilldown-report.png")
    # files of a verified bundle open as text from the server
    notes = page.locator("#checks a", has_text="artifacts/perf/notes.txt")
    page.locator("#checks > summary").click()  # the check details are a closed section below the first screen
    if notes.count():
        with page.expect_navigation():
            notes.first.click()
        assert "synthetic notes for perf" in page.content()
        page.go_back()
    page.click("#back-link")
    page.wait_for_url(served + "/index.html")
    # independent bundles for the same head, side by side
    page.click("a.compare-link")
    page.wait_for_url("**/compare/*.html")
    assert "AGREE" in page.title()
    _shot(page, "dashboard-compare.png")
    assert page.errors == []  # type: ignore[attr-defined]


def test_dashboard_static_site(page: Any, site_bundles: Path, keys, tmp_path: Path) -> None:
    site = tmp_path / "site"
    build_site(site_bundles, site, keys=[keys.trusted_pub], jobs=2)
    page.goto((site / "index.html").as_uri())
    assert (
        page.locator("#shown-count").inner_text() == "5 of 5 bundles match"
    )  # the inline script ran (allowed by hash)
    page.fill("#q", "isolation violated")
    assert page.locator("#shown-count").inner_text() == "1 of 5 bundles match"
    page.locator("#queue tr[data-bundle]:visible a.report-link").click()
    page.wait_for_url("**/reports/*.html")
    assert page.locator("#isolation .badge").first.inner_text().lower() == "fail"
    _shot(page, "static-drilldown.png", full=False)
    assert page.errors == []  # type: ignore[attr-defined]


def test_malicious_bundle_runs_nothing_and_links_nowhere(page: Any, bundle_factory, keys, tmp_path: Path) -> None:
    evil_dir = tmp_path / "evil-bundles"
    evil_dir.mkdir()
    evil = bundle_factory(
        "evil",
        parent=evil_dir,
        model="demo-llama",
        seed=9,
        payload=payload_text(),
        head_sha="ab" * 20,
        fail=("perf", "evals", "coverage"),
    )
    bundle_factory(
        "evil-twin",
        parent=evil_dir,
        signer="other",
        model="demo-llama",
        seed=10,
        payload=payload_text(),
        head_sha="ab" * 20,
    )
    bundle_factory(
        "evil-model", parent=evil_dir, model=f"x{PAYLOADS[1]}", seed=11, payload=payload_text(), head_sha="cd" * 20
    )
    # 1. the report as a static file
    out = tmp_path / "out" / "evil.html"
    render_report(evil, out, keys=[keys.trusted_pub])
    page.goto(out.as_uri())
    page.wait_for_timeout(300)
    audit = page.evaluate(DOM_AUDIT)
    _assert_inert(audit, allowed_prefixes=(out.as_uri() + "#", evil.resolve().as_uri() + "/"), scripts=0)
    # bundle text reaches an href only as a percent-encoded relative path (the payload-named file)
    assert all(not any(ch in link["raw"] for ch in "<>\"' :") for link in audit["links"])
    assert "window.__pwned=1" in page.locator("#pr").inner_text()  # shown as text
    _shot(page, "malicious-report.png", full=False)
    # 2. the static dashboard and every page it links
    site = tmp_path / "site"
    build_site(evil_dir, site, keys=[keys.trusted_pub], jobs=1)
    prefix = (site.resolve().as_uri() + "/",)
    page.goto((site / "index.html").as_uri())
    page.wait_for_timeout(300)
    _assert_inert(page.evaluate(DOM_AUDIT), allowed_prefixes=prefix, scripts=1)
    page.fill("#q", "pwned")  # searching bundle text must not inject anything either
    _assert_inert(page.evaluate(DOM_AUDIT), allowed_prefixes=prefix, scripts=1)
    _shot(page, "malicious-dashboard.png", full=False)
    pages = sorted((site / "reports").glob("*.html")) + sorted((site / "compare").glob("*.html"))
    assert len(pages) == 4
    for p in pages:
        page.goto(p.as_uri())
        page.wait_for_timeout(100)
        _assert_inert(page.evaluate(DOM_AUDIT), allowed_prefixes=prefix, scripts=0)
    # 3. the served dashboard: click through to a report and open every linked file
    with served_dashboard(evil_dir, tmp_path / "served", keys=[str(keys.trusted_pub)]) as base:
        page.goto(base + "/")
        _assert_inert(page.evaluate(DOM_AUDIT), allowed_prefixes=(base + "/",), scripts=1)
        page.select_option("#f-verified", "verified")
        page.locator("#all tr[data-bundle]:visible a.report-link").first.click()
        page.wait_for_url("**/reports/*.html")
        audit = page.evaluate(DOM_AUDIT)
        _assert_inert(audit, allowed_prefixes=(base + "/",), scripts=0)
        files = sorted({link["abs"].split("#")[0] for link in audit["links"] if "/bundles/" in link["abs"]})
        assert len(files) > 10  # every attested file of the verified bundle, the payload-named one included
        for url in files:
            if url.endswith(".parquet"):  # binary: offered as a download, never rendered
                r = page.request.get(url)
                assert r.headers["content-disposition"].startswith("attachment"), url
                continue
            page.goto(url)
            page.wait_for_timeout(50)
            got = page.evaluate(
                "() => [typeof window.__pwned, document.title, document.querySelectorAll('script,img,iframe').length]"
            )
            assert got[0] == "undefined" and got[1] != "PWNED" and got[2] == 0, (url, got)
    assert page.errors == []  # type: ignore[attr-defined]


def test_report_draws_the_interactivity_throughput_curves(page: Any, bundle_factory, keys, tmp_path: Path) -> None:
    """A demo-shaped bundle with a concurrency sweep: both sides' curves with their interval bands, drawn inline
    (no external asset), visible in the page, and a screenshot for the record."""
    from perf_testlib import demo_perf_ctx, simulate

    from fasttrack.checks.perf import PerfCheck

    def measure() -> Any:
        ctx = demo_perf_ctx("smoke", tmp_path / "ctx", workloads=["decode", "sweep"])
        chk = PerfCheck()
        assert chk.skip_reason(ctx) is None
        simulate(chk, ctx, slow_batch=None, factor={8: 1.3})
        return chk.judge(ctx)

    # the simulated engines run their own event loop: a thread of its own, away from the browser's
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        res = pool.submit(measure).result()
    b = bundle_factory("curves", model="demo-llama", seed=31, tier="smoke", extra_tables={"perf": res.tables})
    out = tmp_path / "report.html"
    render_report(b, out, keys=[keys.trusted_pub])
    page.goto(out.as_uri())
    if page.locator("#perf").get_attribute("open") is None:  # a collapsed section: opened as a reader opens it
        page.locator("#perf > summary").click()
    fig = page.locator("#perf figure.curve-figure")
    assert fig.count() == 1 and fig.is_visible()
    fig.scroll_into_view_if_needed()
    assert fig.locator("svg polygon.curve-band").count() == 2, "one interval band per side"
    for side in ("baseline", "candidate"):
        g = fig.locator(f"svg g.curve-{side}")
        assert g.locator("polyline.curve-line").count() == 1 and g.locator("circle.curve-dot").count() == 4
        box = g.locator("polygon.curve-band").bounding_box()
        assert box is not None and box["width"] > 100 and box["height"] > 5, box
    assert "dominates the baseline's within the margin" in fig.inner_text()
    assert page.locator("#perf-tails + p + div table tbody tr").count() > 0
    assert page.errors == []  # type: ignore[attr-defined]
    shot = tmp_path / "curves.png"
    fig.screenshot(path=str(shot))
    assert shot.stat().st_size > 10_000
    _shot(page, "report-curves.png", full=False)


# ---------------------------------------------------------------- the first screen
# The report's first screen answers the maintainer's questions on a laptop screen (1280 x 900): the headline and
# why, the speedup summary with its plot, the tier's caveats, the PR and verification status and the claims are
# all inside the first screen; every other section is closed, and the page is at most six screens tall.
#
# The screenshot in docs/img/ is of a real demo run's report: ``FASTTRACK_DEMO_RUN=runs/demo`` (a folder
# ``scripts/demo.sh`` wrote, with its key in ``runs/demo-keys``) adds that run to the cases, and
# ``FASTTRACK_WRITE_DOCS_SCREENSHOT=1`` writes its first screen to ``DOCS_SHOT``.

W, H = 1280, 900
FIRST_SCREEN = ("#headline-text", "#headline-why", "#speedup svg.speedup-plot", "#speedup-geomean", "#speedup-worst")
FIRST_SCREEN += ("#tier-caveats", "#verification", "#pr-summary", "#claims-summary")
DOCS_SHOT = ROOT / "docs" / "img" / "report-first-screen.png"
DEMO_RUN = os.environ.get("FASTTRACK_DEMO_RUN")


@pytest.fixture(scope="module")
def static_page(browser: Any) -> Iterator[Any]:
    """A page at the first screen's size, with script off (the report needs none)."""
    ctx = browser.new_context(viewport={"width": W, "height": H}, java_script_enabled=False)
    try:
        yield ctx.new_page()
    finally:
        ctx.close()


def render(bundle: Path, out: Path, key: Path, pg: Any) -> Any:
    render_report(bundle, out, keys=[key])
    pg.goto(out.as_uri())
    return pg


def in_first_screen(pg: Any, selector: str) -> bool:
    box = pg.locator(selector).first.bounding_box()
    return box is not None and box["y"] >= 0 and box["y"] + box["height"] <= H and box["width"] > 0


@pytest.mark.parametrize(
    "name, fields, want",
    [
        # the demo: the smoke tier, signed with the local demo key, no PR: every check passed, not PR evidence
        ("demo", {"tier": "smoke", "pr_link": False}, "NOT EVIDENCE FOR THIS PR"),
        ("pr-failing", {"fail": ("perf",)}, "FAIL"),
        ("pr-pass", {}, "PASS"),
    ],
)
def test_the_first_screen_answers_and_the_page_is_short(
    name: str,
    fields: dict[str, Any],
    want: str,
    bundle_factory: BundleFactory,
    keys: Keys,
    tmp_path: Path,
    static_page: Any,
) -> None:
    b = bundle_factory(f"first-screen-{name}", model="demo-llama", **fields)
    render(b, tmp_path / "report.html", keys.trusted_pub, static_page)
    assert static_page.locator("#headline-text").inner_text() == want
    for sel in FIRST_SCREEN:
        assert in_first_screen(static_page, sel), f"{sel} is not inside the first {W}x{H} screen"
    caveats = static_page.locator("#tier-caveats").inner_text()
    assert "noise margin" in caveats and ("smoke" in caveats if name == "demo" else True)
    if name == "demo":
        why = static_page.locator("#headline-why").inner_text()
        assert "Bound to the PR head" in why and "no PR link" in why
        assert static_page.locator("#not-pr-evidence").is_visible()
    # every section below the first screen is closed, and the whole page is at most six screens tall
    assert static_page.locator("details.sec[open]").count() == 0
    assert static_page.locator("details.sec").count() >= 12
    height = static_page.evaluate("document.documentElement.scrollHeight")
    assert height <= 6 * H, height
    static_page.screenshot(path=str(SCREENSHOTS / f"report-first-screen-{name}.png"))
    # a section opens on a click, and the performance table is there
    static_page.locator("#perf > summary").click()
    assert static_page.locator("#perf table.perf-table").first.is_visible()


def check_demo_run(run: str, tmp_path: Path, static_page: Any) -> None:
    """A real demo run: its report verified against its own demo key answers in one screen; with
    ``FASTTRACK_WRITE_DOCS_SCREENSHOT=1`` the screen becomes docs/img's screenshot."""
    folder = Path(run)
    key = folder.parent / "demo-keys" / "fasttrack-demo-key.pub"
    render(folder / "bundle.tar.gz", tmp_path / "report.html", key, static_page)
    assert "NOT EVIDENCE FOR THIS PR" in static_page.locator("#headline-text").inner_text()  # the demo has no PR link
    for sel in FIRST_SCREEN:
        assert in_first_screen(static_page, sel), f"{sel} is not inside the first {W}x{H} screen"
    assert static_page.locator("#verification").inner_text().startswith("Verified")
    shot = SCREENSHOTS / "report-first-screen-demo-run.png"
    static_page.screenshot(path=str(shot))
    if os.environ.get("FASTTRACK_WRITE_DOCS_SCREENSHOT") == "1":
        from PIL import Image

        img = Image.open(shot).convert("RGB").quantize(colors=64, dither=Image.Dither.NONE)
        DOCS_SHOT.parent.mkdir(exist_ok=True)
        img.save(DOCS_SHOT, optimize=True)


if DEMO_RUN:  # collected only when asked for (no skipped test in an ordinary run)

    def test_a_demo_runs_first_screen(tmp_path: Path, static_page: Any) -> None:
        check_demo_run(str(DEMO_RUN), tmp_path, static_page)


def test_the_docs_screenshot_is_a_first_screen_and_small() -> None:
    """The README shows docs/img's screenshot of a demo run's first screen: one screen, kept small."""
    data = DOCS_SHOT.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) < 120_000
    assert (int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")) == (W, H)
    assert "(docs/img/report-first-screen.png)" in (ROOT / "README.md").read_text()
