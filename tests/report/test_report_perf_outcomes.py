"""A perf point measured slower within the margin is never a plain pass: not in the check's rows, not in the
report, not in the PR comment."""

from __future__ import annotations

from pathlib import Path

from perf_testlib import demo_perf_ctx, simulate

from fasttrack.checks.perf import PerfCheck
from fasttrack.perf.outcomes import SLOWER
from fasttrack.report import render_report
from fasttrack.report.comment import render_comment
from fasttrack.report.load import build_report_data
from fasttrack.results import Verdict


def _gated(res) -> dict[str, dict]:
    return {r["point"]: r for r in res.tables["points"] if r["metric_name"] == "median_engine_tpot_ms"}


def test_a_point_measured_slower_within_the_margin_is_never_a_plain_pass(tmp_path: Path, bundle_factory, keys) -> None:
    """As in the demo's run where batch 8 passed at 0.822 [0.682, 0.928]: the margin (0.6) lets it pass, and it
    is labelled 'measured slower, within margin' in the rows, the reason, the report and the PR comment."""
    ctx = demo_perf_ctx("smoke", tmp_path)
    chk = PerfCheck()
    assert chk.skip_reason(ctx) is None
    simulate(chk, ctx, slow_batch=None, factor={8: 1.25})
    res = chk.judge(ctx)
    assert res.verdict is Verdict.PASS, res.failures
    rows = _gated(res)
    slow = {p for p, r in rows.items() if r.get("slower_within_margin")}
    assert slow == {p.id for p in ctx.plan.points if p.batch == 8}
    for p in slow:
        r = rows[p]
        assert r["verdict"] == "pass" and r["ci_high"] < 1 and r["outcome"] == SLOWER
        assert r["statement"].startswith(SLOWER)
    assert all(rows[p]["outcome"] == "pass" for p in set(rows) - slow)
    assert SLOWER in res.reason and res.summary["slower_within_margin"]
    b = bundle_factory("slower", model="demo-llama", seed=21, extra_tables={"perf": res.tables})
    d = build_report_data(b, keys=[keys.trusted_pub])
    shown = {r.point: r for r in d.perf.all_rows if r.gated and r.metric == "decode/median_engine_tpot_ms"}
    assert {p for p, r in shown.items() if r.outcome == SLOWER} == slow
    out = tmp_path / "report.html"
    render_report(b, out, keys=[keys.trusted_pub])
    html = out.read_text()
    perf = html[html.index('<section id="perf">') : html.index('<section id="evals">')]
    gated_table = perf[perf.index("decode/median_engine_tpot_ms") :]
    for p in slow:
        row = gated_table[gated_table.index(f"<code>{p}</code>") :]
        row = row[: row.index("</tr>")]
        assert "measured slower, within margin" in row and ">pass<" not in row, row
    comment = render_comment(d)
    lines = [ln for ln in comment.splitlines() if "median\\_engine\\_tpot\\_ms" in ln and "-b8-" in ln]
    assert lines and all("measured slower, within margin" in ln and "✅" not in ln for ln in lines), lines
