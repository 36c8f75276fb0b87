"""The PR comment: order, size limit, escaping."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from markdown_it import MarkdownIt
from synthetic import payload_text

from fasttrack.errors import FasttrackError
from fasttrack.report import render_report
from fasttrack.report.comment import GITHUB_LIMIT, md, render_comment
from fasttrack.report.load import build_report_data


def to_html(text: str) -> str:
    """Render like a CommonMark + tables renderer with raw HTML allowed (GitHub then sanitises)."""
    return MarkdownIt("commonmark", {"html": True}).enable("table").render(text)


ALLOWED_TAGS = {
    "h2",
    "h3",
    "p",
    "strong",
    "em",
    "code",
    "table",
    "thead",
    "tbody",
    "tr",
    "th",
    "td",
    "ul",
    "li",
    "hr",
    "details",
    "summary",
    "blockquote",
    "br",
    "a",
}


def tags_of(html: str) -> list[tuple[str, dict[str, str | None]]]:
    from html.parser import HTMLParser

    found: list[tuple[str, dict[str, str | None]]] = []

    class P(HTMLParser):
        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            found.append((tag, dict(attrs)))

    P().feed(html)
    return found


def test_failed_gates_first_deltas_gaps_and_report_link(bundle_factory, keys, tmp_path: Path) -> None:
    b = bundle_factory("perf-cov-fail", model="demo-llama", seed=3, fail=("perf", "coverage"))
    out, comment = tmp_path / "site" / "report.html", tmp_path / "pr-comment.md"
    render_report(b, out, keys=[keys.trusted_pub], comment_path=comment)
    text = comment.read_text()
    assert len(text) < GITHUB_LIMIT
    assert text.splitlines()[1].startswith("## ❌ fasttrack: FAIL")
    gates = text[text.index("### Gates") : text.index("### Performance")]
    rows = [ln for ln in gates.splitlines() if ln.startswith("| ") and "check |" not in ln]
    verdicts = [ln.split("|")[1].strip() for ln in rows]
    assert verdicts[:2] == ["❌ fail", "❌ fail"] and all("fail" not in v for v in verdicts[2:])
    deltas = text[text.index("### Performance") : text.index("### Claims")]
    assert deltas.count("❌ fail") >= 1
    first = [ln for ln in deltas.splitlines() if ln.startswith("| tp1")][0]
    assert "❌ fail" in first  # failing points lead the deltas
    assert "path evidence fails the gate" in text[text.index("### Coverage gaps") :]
    assert "**Full report:** `site/report.html`" in text
    html = to_html(text)
    assert "<table>" in html


def test_unverified_comment_says_so(bundle_factory, tmp_path: Path) -> None:
    d = build_report_data(bundle_factory("good", model="demo-llama", seed=1))
    text = render_comment(d)
    assert "**NOT VERIFIED**" in text and "Do not rely on these results" in text


def test_report_url_must_be_http(bundle_factory, keys) -> None:
    d = build_report_data(bundle_factory("good", model="demo-llama", seed=1), keys=[keys.trusted_pub])
    ok = render_comment(d, report_ref="report.html", report_url="https://ci.example.org/run/1/report.html")
    assert "[report.html](https://ci.example.org/run/1/report.html)" in ok
    for bad in ("javascript:alert(1)", "data:text/html,x", "//evil.example/x", "https://x.example/a b"):
        with pytest.raises(FasttrackError):
            render_comment(d, report_url=bad)


def test_long_comment_is_cut_with_a_note(bundle_factory, keys) -> None:
    failures = [f"point-{i:05d}: " + "slow " * 40 for i in range(3000)]
    b = bundle_factory("many-failures", model="demo-llama", seed=8, fail=("perf",))
    d = build_report_data(b, keys=[keys.trusted_pub])
    perf = d.check("perf")
    assert perf is not None
    perf.failures = failures  # as many as a huge sweep could produce
    d.coverage.gaps = [f"gap-{i}: no path evidence " + "x" * 200 for i in range(2000)]  # type: ignore[union-attr]
    text = render_comment(d)
    assert len(text) <= 60_000
    assert "### Gates" in text and "**Full report:**" in text
    assert re.search(r"first \d+ shown", text) and "more in the full report" in text
    small = render_comment(d, limit=3000)  # fits by showing fewer rows
    assert len(small) <= 3000 and "**Full report:**" in small and "Truncated" not in small
    tiny = render_comment(d, limit=900)  # does not fit even then: cut at a line, with a note
    assert len(tiny) <= 900 and tiny.rstrip().endswith("the full report has everything.")


def test_md_escape_defeats_links_html_and_mentions() -> None:
    evil = payload_text() + " | cell | ![img](https://evil.example/i.png) <b>bold</b> `code` ~~s~~ user@example.com"
    cell = md(evil, 5000)
    assert "<" not in cell and ">" not in cell
    html = to_html("| h | h2 |\n|---|---|\n" + f"| a | {cell} |\n")
    assert {t for t, _ in tags_of(html)} <= {"table", "thead", "tbody", "tr", "th", "td"}
    assert html.count("<td>") == 2  # the pipe in the payload did not open a new cell
    assert "https:\u200b//evil" in cell and "@\u200bmaintainers" in cell and "www\u200b.evil" in cell


def test_payload_in_every_field_stays_text(bundle_factory, keys) -> None:
    b = bundle_factory("evil", model="demo-llama", seed=9, payload=payload_text(), fail=("perf", "coverage"))
    d = build_report_data(b, keys=[keys.trusted_pub])
    text = render_comment(d)
    assert payload_text()[:20] not in text  # never verbatim
    tags = tags_of(to_html(text))
    assert {t for t, _ in tags} <= ALLOWED_TAGS, {t for t, _ in tags} - ALLOWED_TAGS
    assert [a for t, a in tags if t == "a"] == []  # no link at all (no --report-url given)
    for t, attrs in tags:
        assert set(attrs) <= {"style"}, (t, attrs)
