"""Every view leads with the gate: the rehearsal verdict in the report, the PR comment and the
dashboard; the comment's headline states, its performance table's order, the burst-distorted rows
it leaves out, the claims with their intervals, and its size in bytes."""

from __future__ import annotations

import json
from pathlib import Path

from perf_testlib import DECODE_ONLY_SMOKE, demo_perf_ctx, simulate

from fasttrack.bundle.attest import sign_bundle
from fasttrack.bundle.consistency import pr_link_state
from fasttrack.bundle.layout import MANIFEST
from fasttrack.bundle.manifest import load_manifest
from fasttrack.checks.perf import PerfCheck
from fasttrack.report import render_report
from fasttrack.report.comment import GITHUB_LIMIT, md, pr_headline_words, render_comment, shown_perf_rows, size
from fasttrack.report.load import build_report_data
from fasttrack.report.perf_view import burst_by_point, perf_rows
from fasttrack.report.site import build_site
from fasttrack.report.tableread import LoadedTable
from fasttrack.report.views import PerfMetricView, PerfRow
from fasttrack.results import Verdict


def _row(point: str, metric: str, speedup: float, verdict: str | None, **kw: object) -> PerfRow:
    return PerfRow(
        point=point,
        metric=metric,
        batch=1,
        context=32,
        context_label="32",
        group="g",
        baseline=1.0,
        candidate=1.0,
        speedup=speedup,
        ci_low=speedup * 0.9,
        ci_high=speedup * 1.1,
        mde=0.1,
        verdict=verdict,
        **kw,  # type: ignore[arg-type]  # the optional PerfRow fields under test
    )


def test_a_rehearsal_reads_rehearsal_in_the_report_and_the_comment(bundle_factory, keys, tmp_path: Path) -> None:
    b = bundle_factory("rehearsal", model="demo-llama", seed=1, rehearsal=True)
    out, comment = tmp_path / "report.html", tmp_path / "pr-comment.md"
    d = render_report(b, out, keys=[keys.trusted_pub], comment_path=comment)
    assert d.verdict == "rehearsal" and d.rehearsal
    html = out.read_text()
    assert 'class="verdict-box v-rehearsal"' in html and "<title>REHEARSAL" in html
    lines = comment.read_text().splitlines()
    assert lines[1].startswith("## 🧪 fasttrack: REHEARSAL")
    state = lines[3]
    assert state.startswith("verdict **rehearsal** · verification ✅ **verified** · PR link:")
    assert "rehearsal: ⚠️ **yes, not valid evidence**" in state


def test_an_older_rehearsal_bundle_that_recorded_pass_reads_rehearsal(bundle_factory, keys, tmp_path: Path) -> None:
    b = bundle_factory("old-rehearsal", model="demo-llama", seed=2, rehearsal=True)
    doc = json.loads((b / MANIFEST).read_text())
    assert doc["verdict"] == "rehearsal"
    doc["verdict"] = "pass"  # what bundles written before the rehearsal verdict said
    (b / MANIFEST).write_text(json.dumps(doc, indent=2, sort_keys=True))
    sign_bundle(b, keys.trusted, replace=True)
    d = build_report_data(b, keys=[keys.trusted_pub])
    assert d.verification.verified and d.verdict == "rehearsal"
    assert render_comment(d).splitlines()[1].startswith("## 🧪 fasttrack: REHEARSAL")


def test_the_dashboard_queue_labels_a_rehearsal(bundle_factory, keys, tmp_path: Path) -> None:
    bundles = tmp_path / "bundles"
    bundle_factory("r", parent=bundles, model="demo-llama", seed=3, rehearsal=True, head_sha="c" * 40)
    bundle_factory("p", parent=bundles, model="demo-llama", seed=4, head_sha="d" * 40)
    site = tmp_path / "site"
    build_site(bundles, site, keys=[keys.trusted_pub], jobs=1)
    doc = json.loads((site / "index.json").read_text())
    verdicts = {b["path"]: b["verdict"] for b in doc["bundles"]}
    assert verdicts == {"r": "rehearsal", "p": "pass"}
    assert doc["counts"]["rehearsal"] == 1 and doc["counts"]["pass"] == 1
    assert doc["bundles"][0]["path"] == "r", "the rehearsal is in the review queue, above the passing bundle"
    html = (site / "index.html").read_text()
    queue = html[html.index('id="queue"') : html.index("</section>", html.index('id="queue"'))]
    assert '<span class="badge v-rehearsal">rehearsal</span>' in queue


def test_the_comment_headline_without_a_pr_says_it_is_not_pr_evidence(bundle_factory, keys) -> None:
    d = build_report_data(bundle_factory("no-pr", model="demo-llama", seed=5), keys=[keys.trusted_pub])
    d.pr = None
    state = render_comment(d).splitlines()[3]
    assert (
        "verdict **pass**" in state
        and "PR link: none, so the bundle is not PR evidence" in state
        and "rehearsal: no" in state
    )


def test_the_comment_headline_takes_the_pr_link_state_from_the_bundle(bundle_factory, keys) -> None:
    b = bundle_factory("pr-link", model="demo-llama", seed=8, head_sha="e" * 40)
    d = build_report_data(b, keys=[keys.trusted_pub])
    assert d.pr is not None
    state, _ = pr_link_state(load_manifest((b / MANIFEST).read_bytes()))
    assert d.pr.link == state != "none", "the PR view carries the bundle's consistency rule's state"
    words = pr_headline_words(d)
    assert words.startswith(d.pr.repository) and f"at {'e' * 12}, isolation {d.pr.isolation}" in words
    assert words.endswith(f", link {state}")
    assert f"PR link: {md(words, 300)} · rehearsal:" in render_comment(d).splitlines()[3]
    for other in ("mismatch", "unproven", "proven"):
        d.pr.link = other
        assert pr_headline_words(d).endswith(f", link {other}")
        assert f"link {other}" in render_comment(d).splitlines()[3]


def test_gated_metric_first_and_burst_distorted_rows_left_out(bundle_factory, keys) -> None:
    d = build_report_data(bundle_factory("perf-order", model="demo-llama", seed=6), keys=[keys.trusted_pub])
    assert d.perf is not None and d.perf.status == "shown"
    # the fresh-clone demo's case: a non-gated client-timed TPOT at 3.4x from burst-delivered runs,
    # the gated engine-timed TPOT near 1.0
    gated = [_row(f"tp1-b{b}", "decode/median_engine_tpot_ms", 1.0 + b / 100, "pass") for b in (1, 2, 3)]
    burst = _row("tp1-b3", "decode/median_tpot_ms", 3.401, None, client_timed=True, burst_delivered=17)
    steady = _row("tp1-b1", "decode/median_tpot_ms", 1.5, None, client_timed=True, burst_delivered=0)
    thr = _row("tp1-b3", "decode/output_throughput", 2.0, None, burst_delivered=17)  # engine-wide: not distorted
    d.perf.metrics = [
        PerfMetricView(metric="decode/median_tpot_ms", lower_is_better=True, rows=[burst, steady], charts=[]),
        PerfMetricView(metric="decode/output_throughput", lower_is_better=False, rows=[thr], charts=[]),
        PerfMetricView(metric="decode/median_engine_tpot_ms", lower_is_better=True, rows=gated, charts=[]),
    ]
    rows, dropped = shown_perf_rows(d)
    assert dropped == [burst] and burst.burst_distorted and not thr.burst_distorted
    assert [r.verdict for r in rows[:3]] == ["pass"] * 3, "the gated metric's rows come first"
    assert rows[3:] == [thr, steady], "then the others, largest |log speedup| first"
    text = render_comment(d)
    perf = text[text.index("### Performance") : text.index("### Claims")]
    table = [ln for ln in perf.splitlines() if ln.startswith("| tp1")]
    assert "median\\_engine\\_tpot\\_ms" in table[0] and "✅ pass" in table[0]
    assert "3.401" not in perf and "1 non-gated client-timed row(s) left out" in perf
    assert "not gated" in table[-1] and "unknown" not in perf
    assert "Gated metric: `decode/median_engine_tpot_ms`" in perf


def test_a_demo_shaped_bundle_leads_the_comments_performance_table_with_the_gated_metric(
    bundle_factory, keys, tmp_path: Path
) -> None:
    # the perf check's own tables for the demo scope (gated metric: engine-timed TPOT), from synthetic runs:
    # the batch-3 candidate delivers in bursts and reads 3.401x faster client-timed (the fresh-clone demo's
    # figure), the batch-1 candidate reads 1.5x faster client-timed without bursts; engine-timed, no change
    ctx = demo_perf_ctx("smoke", tmp_path)
    assert ctx.scope.gates.perf.gated_metric == "median_engine_tpot_ms"
    chk = PerfCheck()
    assert chk.skip_reason(ctx) is None  # prepares the check's per-point state
    simulate(chk, ctx, slow_batch=None, client={3: (3.401, 12), 1: (1.5, 0)})
    res = chk.judge(ctx)
    assert res.verdict is Verdict.PASS, res.failures
    bursty = [r for r in res.tables["points"] if r["metric_name"] == "median_tpot_ms" and r["batch"] == 3]
    assert bursty and all(r["burst_delivered"] > 0 and r["speedup"] > 3 for r in bursty)
    tables = {"points": res.tables["points"], "runs": res.tables["runs"]}
    b = bundle_factory(
        "demo-perf",
        model="demo-llama",
        seed=9,
        tier="smoke",
        scope_swaps=DECODE_ONLY_SMOKE,
        extra_tables={"perf": tables},
    )
    d = build_report_data(b, keys=[keys.trusted_pub])
    rows, dropped = shown_perf_rows(d)
    assert rows[0].metric == "decode/median_engine_tpot_ms" and rows[0].gated and rows[0].verdict == "pass"
    # client-timed figures of the bursty batch: TPOT, and goodput at the demo's SLO (judged on client timing)
    assert {(r.metric, r.batch) for r in dropped} == {("decode/median_tpot_ms", 3), ("decode/goodput", 3)}
    steady = [r for r in rows if r.metric == "decode/median_tpot_ms" and r.batch == 1]
    assert steady and all(not r.gated and r.speedup and r.speedup > 1.3 for r in steady), "shown, after the gate"
    assert all(r.gated for r in rows[: rows.index(steady[0])])
    text = render_comment(d)
    perf = text[text.index("### Performance") : text.index("### Claims")]
    first = next(ln for ln in perf.splitlines() if ln.startswith("| ") and "tpot" in ln)
    assert "median\\_engine\\_tpot\\_ms" in first and "✅ pass" in first, first
    assert not any(f"{r['speedup']:.3f}" in perf for r in bursty), "the burst-distorted 3.4x is not shown"


def test_perf_rows_read_burst_delivery_from_the_row_or_the_runs_table() -> None:
    cols = ["point", "metric", "speedup", "ci_low", "ci_high", "verdict"]
    rows = [
        {"point": "p1", "metric": "decode/median_tpot_ms", "speedup": 3.4, "ci_low": 2.4, "ci_high": 4.0},
        {"point": "p2", "metric": "decode/median_tpot_ms", "speedup": 1.1, "ci_low": 1.0, "ci_high": 1.2},
        {"point": "p1", "metric": "decode/median_engine_tpot_ms", "speedup": 1.0, "ci_low": 0.9, "ci_high": 1.1},
    ]
    rows[2]["verdict"] = "pass"
    older = LoadedTable(path="results/perf/points.parquet", columns=cols, rows=rows, total_rows=3)
    runs = LoadedTable(
        path="results/perf/runs.parquet",
        columns=["point", "burst_delivered"],
        rows=[{"point": "p1", "burst_delivered": 12}, {"point": "p1", "burst_delivered": 0}, {"point": "p2"}],
        total_rows=3,
    )
    got = perf_rows(older, {}, bursts=burst_by_point(runs))
    assert [(r.point, r.client_timed, r.burst_delivered, r.burst_distorted) for r in got] == [
        ("p1", True, 12, True),
        ("p2", True, 0, False),
        ("p1", False, 12, False),  # gated (and engine-timed): shown whatever the delivery
    ]
    newer = [dict(r, client_timed=False, burst_delivered=5) for r in rows[:1]]
    (r,) = perf_rows(LoadedTable(path="x", columns=[*cols, "client_timed"], rows=newer, total_rows=1), {})
    assert not r.client_timed and r.burst_delivered == 5 and not r.burst_distorted


def test_claims_show_the_claim_the_interval_and_the_word(bundle_factory, keys) -> None:
    d = build_report_data(bundle_factory("claims", model="demo-llama", seed=1), keys=[keys.trusted_pub])
    text = render_comment(d)
    claims = text[text.index("### Claims") : text.index("### Coverage")]
    b1 = next(ln for ln in claims.splitlines() if "claim-b1" in ln)
    c = {x.id: x for x in d.claims}["claim-b1"]
    assert c.status == "supported" and c.interval.startswith("[") and c.bound == "0.95"
    assert c.interval.replace("[", "\\[").replace("]", "\\]") in b1 and "✅ supported" in b1 and "0.95" in b1
    assert "not measured" in claims


def test_the_comment_fits_githubs_limit_in_bytes(bundle_factory, keys) -> None:
    d = build_report_data(
        bundle_factory("bytes", model="demo-llama", seed=7, fail=("coverage",)), keys=[keys.trusted_pub]
    )
    assert d.coverage is not None
    # every ':' and '@' gets a zero-width space (3 bytes in UTF-8), and every '…' is 3 bytes
    d.coverage.gaps = [f"gap {i}: a:b:c:d@e@f … " + "…:" * 90 for i in range(3000)]
    text = render_comment(d, limit=GITHUB_LIMIT)
    assert size(text) <= GITHUB_LIMIT < len(text.encode("utf-8")) + 100_000
    assert size(text) > len(text), "multi-byte text: bytes, not characters, were counted"
    tiny = render_comment(d, limit=900)
    assert size(tiny) <= 900 and tiny.rstrip().endswith("the full report has everything.")
