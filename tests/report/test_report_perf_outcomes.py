"""A perf point measured slower within the margin is never a plain pass: not in the check's rows, not in the
report, not in the PR comment."""

from __future__ import annotations

from pathlib import Path

from perf_testlib import DECODE_ONLY_SMOKE, demo_perf_ctx, simulate

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
    b = bundle_factory(
        "slower",
        model="demo-llama",
        seed=21,
        tier="smoke",
        scope_swaps=DECODE_ONLY_SMOKE,
        extra_tables={"perf": res.tables},
    )
    d = build_report_data(b, keys=[keys.trusted_pub])
    shown = {r.point: r for r in d.perf.all_rows if r.gated and r.metric == "decode/median_engine_tpot_ms"}
    assert {p for p, r in shown.items() if r.outcome == SLOWER} == slow
    out = tmp_path / "report.html"
    render_report(b, out, keys=[keys.trusted_pub])
    html = out.read_text()
    perf = html[html.index('id="perf"') : html.index('id="evals"')]
    gated_table = perf[perf.index("decode/median_engine_tpot_ms") :]
    for p in slow:
        row = gated_table[gated_table.index(f"<code>{p}</code>") :]
        row = row[: row.index("</tr>")]
        assert "measured slower, within margin" in row and ">pass<" not in row, row
    comment = render_comment(d)
    lines = [ln for ln in comment.splitlines() if "median\\_engine\\_tpot\\_ms" in ln and "-b8-" in ln]
    assert lines and all("measured slower, within margin" in ln and "✅" not in ln for ln in lines), lines


def test_a_claim_across_unequal_gpus_reads_not_like_for_like_with_both_per_gpu_figures(
    bundle_factory, keys, tmp_path: Path
) -> None:
    from fasttrack.perf.claims import MeasuredMetric, match_claims
    from fasttrack.scope import Claim

    claim = Claim(
        id="agentx-c1",
        text="AgentX: 403.2 vs 223.7 P90 tokens/s/user at concurrency 1 (16 GB300 vs 8)",
        metric="interactivity_p90",
        candidate=403.2,
        baseline=223.7,
        point={"batch": 1},
        workload="agent",
        like_for_like=False,
        baseline_gpus=8,
        candidate_gpus=16,
    )
    measured = MeasuredMetric(
        workload="agent",
        kind="trace_replay",
        point="g-trace",
        point_dims={"tp": 16},
        metric="p90_interactivity",
        speedup=1.1,
        ci_low=1.0,
        ci_high=1.2,
        confidence=0.95,
        baseline_value=270.0,
        candidate_value=300.0,
    )
    (c,) = match_claims(
        [claim],
        [measured],
        workload_kinds={"agent": "trace_replay"},
        workloads_run={"agent"},
        rehearsal=True,
    )
    b = bundle_factory(
        "agentx", model="kimi-k3", seed=22, extra_tables={"perf": {"claims": [c.model_dump(mode="json")]}}
    )
    d = build_report_data(b, keys=[keys.trusted_pub])
    (view,) = [v for v in d.claims if v.id == "agentx-c1"]
    assert view.per_gpu == (
        "not like-for-like (16 candidate GPUs vs 8 baseline); per GPU: candidate 25.2, baseline 27.96 (0.901x per GPU)"
    )
    out = tmp_path / "report.html"
    render_report(b, out, keys=[keys.trusted_pub])
    assert "not like-for-like" in out.read_text() and "27.96" in out.read_text()
    line = next(ln for ln in render_comment(d).splitlines() if "agentx-c1" in ln)
    assert "not like-for-like" in line and "25.2" in line and "27.96" in line
