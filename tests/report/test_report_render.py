"""The HTML report: rendered from the bundle only, verification state shown, sections degrade."""

from __future__ import annotations

import json
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path

import pytest

from fasttrack.bundle.pack import pack_bundle
from fasttrack.report import render_report
from fasttrack.report.links import inert_type
from fasttrack.report.load import build_report_data
from fasttrack.report.report import report_html


class Page(HTMLParser):
    """Collects tags, attributes and text of a page."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self._in_style = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        self._in_style = tag == "style"

    def handle_endtag(self, tag: str) -> None:
        self._in_style = False

    def handle_data(self, data: str) -> None:
        if not self._in_style:
            self.text.append(data)

    def hrefs(self) -> list[str]:
        return [a["href"] or "" for t, a in self.tags if t == "a" and "href" in a]

    def by_id(self, ident: str) -> dict[str, str | None] | None:
        for _, a in self.tags:
            if a.get("id") == ident:
                return a
        return None


def parse(html: str) -> Page:
    p = Page()
    p.feed(html)
    return p


def test_verified_report_shows_verdict_sections_and_charts(bundle_factory, keys, tmp_path: Path) -> None:
    b = bundle_factory("good", model="demo-llama", seed=1)
    out = tmp_path / "report.html"
    data = render_report(b, out, keys=[keys.trusted_pub])
    html = out.read_text()
    page = parse(html)
    assert data.verification.verified and data.verdict == "pass"
    body = [a for t, a in page.tags if t == "body"][0]
    assert body["data-verified"] == "true" and body["data-verdict"] == "pass"
    for section in (
        "verdict",
        "pr",
        "hardware",
        "gates",
        "matrix",
        "perf",
        "evals",
        "features",
        "coverage",
        "isolation",
        "claims",
        "checks",
        "environment",
        "artifacts",
    ):
        assert page.by_id(section) is not None, section
    assert page.by_id("unverified-banner") is None
    # perf: one row per (workload, point, metric) and two charts per metric, drawn as inline SVG; the heatmap shows
    # every point of the plan
    manifest = json.loads((b / "manifest.json").read_text())
    plan_points = manifest["plan"]["plan"]["points"]
    assert 0 < len(plan_points) and {p["id"] for p in plan_points} <= set(data.heatmap.points)  # type: ignore[union-attr]
    assert len(data.perf.all_rows) == manifest["checks"]["perf"]["tables"]["points"]["rows"]  # type: ignore[union-attr]
    assert html.count("<svg") >= 4 + 2  # perf charts + eval charts
    assert "speedup per batch size" in html.lower()
    # gates table lists every check with its statistic
    gates = re.search(r'<table id="gates-table">(.*?)</table>', html, re.S).group(1)  # type: ignore[union-attr]
    for check in ("kernels", "equivalence", "features", "coverage", "evals", "perf"):
        assert f"#check-{check}" in gates
    assert "hierarchical bootstrap 95% lower bound of speedup" in gates
    # self-contained: no external resource of any kind
    for tag, attrs in page.tags:
        for attr in ("src", "srcset", "data", "action", "formaction", "poster", "xlink:href"):
            assert attr not in attrs, (tag, attrs)
        if tag == "link":
            raise AssertionError(f"external link element: {attrs}")
    assert "http://" not in html.replace("http://www.w3.org/2000/svg", "").replace("http://127.0.0.1:8000", "")


def test_csp_forbids_scripts_and_remote_content(bundle_factory, keys, tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    render_report(bundle_factory("good", model="demo-llama", seed=1), out, keys=[keys.trusted_pub])
    page = parse(out.read_text())
    metas = [
        a for t, a in page.tags if t == "meta" and (a.get("http-equiv") or "").lower() == "content-security-policy"
    ]
    assert len(metas) == 1
    csp = metas[0]["content"] or ""
    assert "default-src 'none'" in csp and "script-src 'none'" in csp and "base-uri 'none'" in csp
    assert re.search(r"style-src 'sha256-[A-Za-z0-9+/=]+'", csp)
    assert "unsafe-inline" not in csp
    assert not [a for t, a in page.tags if t == "script"]
    # the meta tag comes before the stylesheet it governs
    html = out.read_text()
    assert html.index("Content-Security-Policy") < html.index("<style>")


def test_unverified_without_key_is_marked(bundle_factory, tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    data = render_report(bundle_factory("good", model="demo-llama", seed=1), out)
    page = parse(out.read_text())
    assert not data.verification.verified
    assert page.by_id("unverified-banner") is not None
    assert "NOT VERIFIED" in out.read_text()
    assert "no trusted key given" in data.verification.signature.detail
    # without a trusted signature the attested files are listed but not linked
    assert not [h for h in page.hrefs() if not h.startswith("#")]


def test_untrusted_signer_and_tampered_file(bundle_factory, keys, tmp_path: Path) -> None:
    other = bundle_factory("by-stranger", signer="other", model="demo-llama", seed=2)
    d = build_report_data(other, keys=[keys.trusted_pub])
    assert not d.verification.verified and d.verification.signature.ok is False
    tampered = tmp_path / "tampered"
    shutil.copytree(bundle_factory("good", model="demo-llama", seed=1), tampered)
    (tampered / "artifacts" / "perf" / "notes.txt").write_text("edited after signing")
    out = tmp_path / "t.html"
    data = render_report(tampered, out, keys=[keys.trusted_pub])
    assert not data.verification.verified and data.verification.hashes.ok is False
    assert "artifacts/perf/notes.txt" in data.verification.hashes.detail
    assert "do not match its attestation" in data.artifacts_note
    assert not [h for h in parse(out.read_text()).hrefs() if not h.startswith("#")]


def test_pr_head_checked_when_given(bundle_factory, keys) -> None:
    b = bundle_factory("good", model="demo-llama", seed=1)
    ok = build_report_data(b, keys=[keys.trusted_pub], pr_head="a" * 40)
    assert ok.verification.pr_head.ok is True and ok.verification.verified
    bad = build_report_data(b, keys=[keys.trusted_pub], pr_head="1234567")
    assert bad.verification.pr_head.ok is False and not bad.verification.verified
    assert "expected 1234567" in bad.verification.pr_head.detail
    none = build_report_data(b, keys=[keys.trusted_pub])
    assert none.verification.pr_head.ok is None


def test_failures_reach_gates_matrix_and_charts(bundle_factory, keys) -> None:
    b = bundle_factory("perf-cov-fail", model="demo-llama", seed=3, fail=("perf", "coverage"))
    d = build_report_data(b, keys=[keys.trusted_pub])
    assert d.verdict == "fail"
    assert {g.check for g in d.gates if g.verdict == "fail"} == {"perf", "coverage"}
    failing = [r for r in d.perf.all_rows if r.verdict == "fail"]  # type: ignore[union-attr]
    assert failing and all(r.speedup < 0.95 for r in failing)
    slow_point = failing[0].point
    assert d.heatmap.cells[slow_point]["perf"].state == "fail"  # type: ignore[union-attr]
    assert d.coverage.gaps and "path evidence fails the gate" in d.coverage.gaps[0]  # type: ignore[union-attr]
    html = report_html(d)
    assert 'class="fail-ring"' in html  # the failing point is ringed in its chart


def test_not_run_checks_say_why(bundle_factory, keys) -> None:
    b = bundle_factory("no-perf", model="demo-llama", seed=4, not_run=("perf", "evals", "coverage"))
    d = build_report_data(b, keys=[keys.trusted_pub])
    assert d.verdict == "incomplete"
    assert d.perf.status == "not_run" and "perf did not run" in d.perf.reason  # type: ignore[union-attr]
    assert d.evals.status == "not_run" and d.coverage.status == "not_run"  # type: ignore[union-attr]
    html = report_html(d)
    assert 'id="perf-not-run"' in html and "perf did not run: the tier does not select it" in html
    assert all(c.state == "not_run" for c in (d.heatmap.cells[p]["perf"] for p in d.heatmap.points))  # type: ignore[union-attr]


def test_perf_table_absent_is_reported(bundle_factory, keys) -> None:
    """A points table without speedup columns (an older bundle's, no row model recorded) draws no perf section."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    b = bundle_factory("perf-odd-table", model="demo-llama", seed=5)
    pq.write_table(pa.table({"point": ["x"], "note": ["no speedup columns"]}), b / "results/perf/points.parquet")
    m = json.loads((b / "manifest.json").read_text())
    m["checks"]["perf"]["tables"]["points"].update(rows=1, columns=["point", "note"], model=None, version=None)
    (b / "manifest.json").write_text(json.dumps(m))
    d = build_report_data(b, keys=[keys.trusted_pub])
    assert d.perf.status == "no_table"  # type: ignore[union-attr]
    assert "no per-point table" in d.perf.reason  # type: ignore[union-attr]


def test_evals_bins_items_and_discordant(bundle_factory, keys) -> None:
    b = bundle_factory("evals-fail", model="demo-llama", seed=6, fail=("evals",))
    d = build_report_data(b, keys=[keys.trusted_pub])
    ev = d.evals
    assert ev is not None and ev.bins and ev.items
    assert [b.title for b in ev.bins] == ["mrcr per bin", "mrcr per n_needles"]
    assert [b.title for b in ev.items] == ["aime25 per problem"]
    assert ev.tables and ev.tables[0].name == "eval_comparisons"  # one row per eval and point
    assert ev.discordant is not None and ev.discordant.name == "eval_review"
    assert ev.discordant_count == ev.discordant.total_rows > 0
    assert d.check_verdicts["evals"] == "fail" and d.heatmap.cells[d.heatmap.points[0]]["evals"].state == "fail"  # type: ignore[union-attr]


def test_views_and_titles_follow_what_each_check_recorded(bundle_factory, keys) -> None:
    # perf and evals recorded under other names: their entries' views pick the perf and evals sections
    b = bundle_factory("renamed", model="demo-llama", seed=7, check_names={"perf": "speed", "evals": "quality"})
    d = build_report_data(b, keys=[keys.trusted_pub])
    # the scope's tier runs perf and evals: a bundle without their entries does not verify, whatever it calls them
    assert not d.verification.verified and set(d.check_verdicts) >= {"speed", "quality"}
    verdicts = next(it for it in d.verification.items if it.name == "verdicts")
    assert "check 'perf' has no entry" in verdicts.detail and "check 'evals' has no entry" in verdicts.detail
    assert "perf" not in d.check_verdicts and "evals" not in d.check_verdicts
    assert d.perf.status == "shown" and d.perf.all_rows  # type: ignore[union-attr]
    assert d.evals.status == "shown" and d.evals.bins  # type: ignore[union-attr]
    titles = {c.name: c.title for c in d.checks}
    assert titles["speed"] == "Performance" and titles["quality"] == "Model evaluations"
    # a bundle whose entries record no view or title: sections by check name, titles from the report's table
    old = build_report_data(
        bundle_factory("legacy", model="demo-llama", seed=7, legacy_entries=True), keys=[keys.trusted_pub]
    )
    assert old.perf.status == "shown" and old.evals.status == "shown"  # type: ignore[union-attr]
    assert {c.name: c.title for c in old.checks}["perf"] == "Performance"
    # renamed and without a recorded view, a check gets no perf section
    lost = build_report_data(
        bundle_factory(
            "legacy-renamed", model="demo-llama", seed=7, legacy_entries=True, check_names={"perf": "speed"}
        ),
        keys=[keys.trusted_pub],
    )
    assert lost.perf.status == "not_run" and "no perf check entry" in lost.perf.reason  # type: ignore[union-attr]
    assert {c.name: c.title for c in lost.checks}["speed"] == "speed"


def test_claims_from_table(bundle_factory, keys) -> None:
    d = build_report_data(bundle_factory("good", model="demo-llama", seed=1), keys=[keys.trusted_pub])
    status = {c.id: c.status for c in d.claims}
    assert status["claim-b64"] == "not_measured"
    assert status["claim-b1"] == "supported"  # the synthetic fast path runs at about 1.12x at batch 1
    slow = build_report_data(
        bundle_factory("slow-claim", model="demo-llama", seed=1, speedup=0.8), keys=[keys.trusted_pub]
    )
    slow_b1 = {c.id: c for c in slow.claims}["claim-b1"]
    assert slow_b1.status == "refuted"  # about 0.8x: the whole interval lies below 1.0 x (1 - 0.05)
    assert slow_b1.claimed == "1" and slow_b1.bound == "0.95" and slow_b1.interval.startswith("[0.")
    assert slow_b1.tolerance == "0.05"


def test_a_claim_recorded_by_an_older_rule_reads_as_the_data_say() -> None:
    """An older perf check judged claims against the gate's noise margin and recorded "claimed 1, measured 0.84
    [0.75, 0.93], confirmed" (bound 1 x (1 - 0.6) = 0.4). The report re-judges the recorded interval by the
    claim's tolerance (the recorded scope's, else 5%) and says the bundle recorded otherwise."""
    from fasttrack.report.check_views import claims_view
    from fasttrack.report.tableread import LoadedTable

    row = {"id": "demo-b1", "text": "parity at batch 1", "claimed": 1.0, "measured": 0.84, "ci_low": 0.75}
    row |= {"ci_high": 0.93, "bound": 0.4, "status": "confirmed", "point": "decode-b1"}
    old = {"perf": {"claims": LoadedTable(path="x", columns=list(row), rows=[row], total_rows=1)}}
    (c,), note = claims_view(None, old, {})  # type: ignore[arg-type]
    assert c.status == "refuted" and c.bound == "0.95" and c.interval == "[0.75, 0.93]" and c.tolerance == "0.05"
    assert c.detail.startswith("the bundle recorded confirmed") and "says refuted" in c.detail
    assert note == "from results/perf/claims.parquet"
    # the recorded scope's tolerance for that claim is the one used
    (c,), _ = claims_view(None, old, {"claims": [{"id": "demo-b1", "tolerance": 0.3}]})  # type: ignore[arg-type]
    assert c.status == "supported" and c.bound == "0.7" and c.tolerance == "0.3"
    # a row recorded by this rule, with its tolerance, is shown as recorded
    new = dict(row, status="inconclusive", tolerance=0.1, ci_high=1.2, bound=0.9)
    tables = {"perf": {"claims": LoadedTable(path="x", columns=list(new), rows=[new], total_rows=1)}}
    (c,), _ = claims_view(None, tables, {})  # type: ignore[arg-type]
    assert c.status == "inconclusive" and c.bound == "0.9" and "recorded" not in c.detail


def test_tarball_renders_and_verifies_without_links(bundle_factory, keys, tmp_path: Path) -> None:
    tar = tmp_path / "b.tar.gz"
    pack_bundle(bundle_factory("good", model="demo-llama", seed=1), tar)
    out = tmp_path / "r.html"
    d = render_report(tar, out, keys=[keys.trusted_pub])
    assert d.verification.verified and d.readable
    assert "tarball" in d.artifacts_note
    assert not [h for h in parse(out.read_text()).hrefs() if not h.startswith("#")]


def test_links_are_relative_and_only_to_attested_files(bundle_factory, keys, tmp_path: Path) -> None:
    b = bundle_factory("good", model="demo-llama", seed=1)
    out_dir = tmp_path / "deep" / "er"
    out = out_dir / "report.html"
    d = render_report(b, out, keys=[keys.trusted_pub])
    from fasttrack.bundle.dsse import read_envelope

    subjects = {s["name"] for s in read_envelope((b / "attestation.dsse.json").read_bytes()).statement()["subject"]}
    hrefs = [h for h in parse(out.read_text()).hrefs() if not h.startswith("#")]
    assert hrefs
    for h in hrefs:
        assert not re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", h) and not h.startswith("/")
        target = (out_dir / h).resolve()
        rel = target.relative_to(b.resolve()).as_posix()
        assert rel in subjects, rel
    # straight into a bundle folder, exactly the attested files whose type is on the inert allow-list are linked
    assert set(d.linkable) == {n for n in subjects if inert_type(n) is not None}
    assert d.linkable and len(d.linkable) < len(subjects)
    for a in d.artifacts:
        assert (a.href is not None) == (inert_type(a.name) is not None), a
        assert a.href or "only files of inert types" in a.why_not


def test_active_members_are_listed_not_linked(bundle_factory, keys, tmp_path: Path) -> None:
    b = bundle_factory("with-html", model="demo-llama", seed=7, payload="x")
    out = tmp_path / "r.html"
    d = render_report(b, out, keys=[keys.trusted_pub])
    html_member = [a for a in d.artifacts if a.name.endswith(".html")]
    assert html_member and html_member[0].href is None
    assert "only files of inert types" in html_member[0].why_not


def test_unreadable_bundle_still_renders(tmp_path: Path) -> None:
    bad = tmp_path / "broken"
    bad.mkdir()
    (bad / "manifest.json").write_text(json.dumps({"schema_version": "nonsense"}))
    (bad / "attestation.dsse.json").write_text("{}")
    out = tmp_path / "r.html"
    d = render_report(bad, out)
    assert not d.readable and not d.verification.verified
    html = out.read_text()
    assert 'id="unreadable"' in html and "NOT VERIFIED" in html


def test_report_is_deterministic(bundle_factory, keys, tmp_path: Path) -> None:
    b = bundle_factory("good", model="demo-llama", seed=1)
    render_report(b, tmp_path / "a.html", keys=[keys.trusted_pub])
    render_report(b, tmp_path / "b.html", keys=[keys.trusted_pub])
    assert (tmp_path / "a.html").read_bytes() == (tmp_path / "b.html").read_bytes()


def test_missing_bundle_is_a_clear_error(tmp_path: Path) -> None:
    from fasttrack.errors import FasttrackError

    with pytest.raises(FasttrackError, match="does not exist"):
        render_report(tmp_path / "nope", tmp_path / "r.html")


def test_report_inside_the_bundle_is_refused(bundle_factory, tmp_path: Path) -> None:
    from fasttrack.errors import FasttrackError

    b = tmp_path / "copy"
    shutil.copytree(bundle_factory("good", model="demo-llama", seed=1), b)
    with pytest.raises(FasttrackError, match="inside the bundle"):
        render_report(b, b / "report.html")
    assert not (b / "report.html").exists()


def test_hostile_tarball_is_refused_and_marked(tmp_path: Path) -> None:
    import io
    import tarfile

    tar = tmp_path / "evil.tar.gz"
    with tarfile.open(tar, "w:gz") as t:
        data = b'{"schema_version": "fasttrack.bundle/v1"}'
        info = tarfile.TarInfo("manifest.json")
        info.size = len(data)
        t.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo("artifacts/passwd")
        link.type = tarfile.SYMTYPE
        link.linkname = "/etc/passwd"
        t.addfile(link)
    out = tmp_path / "r.html"
    d = render_report(tar, out)
    assert not d.readable and not d.verification.verified
    assert "link" in d.verification.items[0].detail and d.verification.items[0].ok is False  # archive item
    assert "NOT VERIFIED" in out.read_text() and not (tmp_path / "artifacts").exists()
