"""The report's first screen answers the maintainer's questions, checked in real headless Chromium on a laptop
screen (1280 x 900): the headline and why, the speedup summary with its plot, the tier's caveats, the PR and
verification status and the claims are all inside the first screen; every other section is closed, and the
page is at most six screens tall. The screenshots are saved under .artifacts/screenshots/."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from report_testlib import CHROMIUM_ARGS, SCREENSHOTS, BundleFactory, Keys, chromium_or_skip

from fasttrack.report import render_report

pytestmark = pytest.mark.browser

W, H = 1280, 900
FIRST_SCREEN = ("#headline-text", "#headline-why", "#speedup svg.speedup-plot", "#speedup-geomean", "#speedup-worst")
FIRST_SCREEN += ("#tier-caveats", "#verification", "#pr-summary", "#claims-summary")


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    exe = chromium_or_skip()
    from playwright.sync_api import sync_playwright

    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=exe, args=CHROMIUM_ARGS, headless=True)
        ctx = b.new_context(viewport={"width": W, "height": H}, java_script_enabled=False)
        try:
            yield ctx.new_page()
        finally:
            ctx.close()
            b.close()


def render(bundle: Path, out: Path, keys: Keys, page: Any) -> Any:
    render_report(bundle, out, keys=[keys.trusted_pub])
    page.goto(out.as_uri())
    return page


def in_first_screen(page: Any, selector: str) -> bool:
    box = page.locator(selector).first.bounding_box()
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
    name: str, fields: dict[str, Any], want: str, bundle_factory: BundleFactory, keys: Keys, tmp_path: Path, page: Any
) -> None:
    b = bundle_factory(f"first-screen-{name}", model="demo-llama", **fields)
    render(b, tmp_path / "report.html", keys, page)
    assert page.locator("#headline-text").inner_text() == want
    for sel in FIRST_SCREEN:
        assert in_first_screen(page, sel), f"{sel} is not inside the first {W}x{H} screen"
    caveats = page.locator("#tier-caveats").inner_text()
    assert "noise margin" in caveats and ("smoke" in caveats if name == "demo" else True)
    if name == "demo":
        why = page.locator("#headline-why").inner_text()
        assert "Bound to the PR head" in why and "no PR link" in why
        assert page.locator("#not-pr-evidence").is_visible()
    # every section below the first screen is closed, and the whole page is at most six screens tall
    assert page.locator("details.sec[open]").count() == 0
    assert page.locator("details.sec").count() >= 12
    height = page.evaluate("document.documentElement.scrollHeight")
    assert height <= 6 * H, height
    page.screenshot(path=str(SCREENSHOTS / f"report-first-screen-{name}.png"))
    # a section opens on a click, and the performance table is there
    page.locator("#perf > summary").click()
    assert page.locator("#perf table.perf-table").first.is_visible()
