"""Metric definitions, checked on synthetic timestamps."""

from __future__ import annotations

import numpy as np
import pytest

from fasttrack.perf.metrics import METRICS, RequestRecord, compute_run_metrics, union_length


def _rec(
    rid: str, t_send: float, first: float, gap: float, n_tokens: int, *, usage: int | None = None
) -> RequestRecord:
    r = RequestRecord(id=rid, t_send=t_send)
    r.chunk_times = [first + k * gap for k in range(n_tokens)]
    r.chunk_tokens = [1] * n_tokens
    r.output_tokens = n_tokens if usage is None else usage
    r.prompt_tokens = 10
    return r


def _run(records: list[RequestRecord], *, t_start: float = 0.0, t_end: float | None = None, gpus: int = 0):
    t_end = t_end if t_end is not None else max(r.chunk_times[-1] for r in records if r.chunk_times)
    return compute_run_metrics(
        records,
        workload="w",
        point="p",
        side="baseline",
        lifetime=0,
        run=0,
        t_start=t_start,
        t_end=t_end,
        gpus=gpus,
        client_cpu_s=0.01,
    )


def test_ttft_tpot_itl_e2e_follow_vllm_definitions() -> None:
    # sent at 1.0, first token at 1.1, then 9 more every 20 ms: TTFT 100 ms, TPOT 20 ms, E2E 280 ms
    r = _rec("a", 1.0, 1.1, 0.02, 10)
    m = _run([r], t_start=1.0)
    assert m.ttft_ms == [pytest.approx(100.0)]
    assert m.tpot_ms == [pytest.approx(20.0)]
    assert m.e2e_ms == [pytest.approx(280.0)]
    assert len(m.itl_ms) == 9 and all(x == pytest.approx(20.0) for x in m.itl_ms)
    # TPOT excludes the first token: (e2e - ttft) / (n - 1)
    assert m.tpot_ms[0] == pytest.approx((m.e2e_ms[0] - m.ttft_ms[0]) / 9)


def test_tokens_come_from_usage_not_from_chunks() -> None:
    # the server coalesced 20 tokens into 10 chunks: TPOT uses usage (20), ITL is per chunk
    r = _rec("a", 0.0, 0.1, 0.02, 10, usage=20)
    m = _run([r])
    assert m.output_tokens == 20
    assert m.tpot_ms[0] == pytest.approx(0.18 / 19 * 1e3)
    assert m.content_chunks == 10


def test_request_without_usage_counts_as_failed() -> None:
    good = _rec("a", 0.0, 0.1, 0.01, 5)
    no_usage = _rec("b", 0.0, 0.1, 0.01, 5)
    no_usage.output_tokens = None
    errored = RequestRecord(id="c", t_send=0.0, error="HTTP 500: boom")
    m = _run([good, no_usage, errored])
    assert m.requests == 3 and m.failed == 2
    assert m.output_tokens == 5
    assert len(m.tpot_ms) == 1
    assert any("usage" in e for e in m.errors) and any("boom" in e for e in m.errors)


def test_throughputs_and_per_gpu() -> None:
    # two requests decoding in parallel from 0.1 to 0.3 and a third from 0.5 to 0.6
    recs = [_rec("a", 0.0, 0.1, 0.02, 11), _rec("b", 0.0, 0.1, 0.02, 11), _rec("c", 0.4, 0.5, 0.01, 11)]
    m = _run(recs, t_start=0.0, t_end=1.0, gpus=4)
    assert m.output_throughput == pytest.approx(33 / 1.0)
    # decode tokens: 3 x 10; decode wall time: [0.1, 0.3] and [0.5, 0.6] = 0.3 s
    assert m.decode_throughput == pytest.approx(30 / 0.3)
    assert m.per_gpu_throughput == pytest.approx(33 / 4)
    assert _run(recs, t_start=0.0, t_end=1.0, gpus=0).per_gpu_throughput is None


def test_percentiles_and_interactivity_tail() -> None:
    # ITLs: 90 gaps of 10 ms and 10 gaps of 50 ms
    r = RequestRecord(id="a", t_send=0.0)
    t = 0.05
    r.chunk_times = [t]
    for k in range(100):
        t += 0.05 if k % 10 == 9 else 0.01
        r.chunk_times.append(t)
    r.output_tokens = 101
    m = _run([r])
    itl = np.array(m.itl_ms)
    assert m.percentiles["itl_ms_p50"] == pytest.approx(np.percentile(itl, 50))
    assert m.percentiles["itl_ms_p99"] == pytest.approx(np.percentile(itl, 99))
    # P90 interactivity = 1000 / p90 ITL: the slow tail, slower than the median interactivity
    assert m.percentiles["interactivity_p90"] == pytest.approx(1000.0 / np.percentile(itl, 90))
    assert m.percentiles["interactivity_p90"] <= m.percentiles["interactivity_p50"]


def test_one_token_output_has_no_tpot() -> None:
    r = _rec("a", 0.0, 0.1, 0.01, 1)
    m = _run([r])
    assert m.tpot_ms == [] and m.percentiles["tpot_ms_p50"] is None and m.ttft_ms


def test_union_length() -> None:
    assert union_length([(0, 1), (0.5, 2), (3, 4)]) == pytest.approx(3.0)
    assert union_length([]) == 0.0
    assert union_length([(1, 1)]) == 0.0


def test_metric_registry_samples_and_display() -> None:
    m = _run([_rec("a", 0.0, 0.1, 0.02, 10)])
    assert METRICS["median_tpot_ms"].samples(m) == m.tpot_ms
    assert METRICS["output_throughput"].samples(m) == pytest.approx(m.output_throughput)
    p90 = METRICS["p90_interactivity"]
    assert p90.direction == "lower_is_better" and p90.statistic == "p90" and p90.field == "itl_ms"
    assert p90.display(20.0) == pytest.approx(50.0)
    for md in METRICS.values():
        assert md.direction in ("lower_is_better", "higher_is_better")
        assert md.description and md.unit


def test_burst_delivered_request_gives_no_timing_samples_but_counts_its_tokens() -> None:
    steady = _rec("a", 0.0, 0.1, 0.01, 64)
    # every chunk of this one arrived in one read at the end (a stalled API server or client)
    burst = _rec("b", 0.0, 0.73, 0.0, 64)
    # coalesced two tokens per read is still timed (vLLM's own client does the same)
    paired = _rec("c", 0.0, 0.1, 0.0, 64)
    paired.chunk_times = [0.1 + (k // 2) * 0.02 for k in range(64)]
    m = _run([steady, burst, paired])
    assert steady.burst_delivered is False and burst.burst_delivered is True and paired.burst_delivered is False
    assert m.burst_delivered == 1 and m.failed == 0
    assert len(m.tpot_ms) == 2 and min(m.tpot_ms) > 9.0, "no zero TPOT from the burst"
    assert len(m.ttft_ms) == 2 and len(m.e2e_ms) == 3
    assert all(x > 0 for x in m.itl_ms[:63])
    assert m.output_tokens == 3 * 64


def test_short_outputs_are_not_judged_for_bursts() -> None:
    r = _rec("a", 0.0, 0.1, 0.0, 3)
    assert r.burst_delivered is False
    assert len(_run([r]).tpot_ms) == 1


def test_engine_timed_tpot_survives_burst_delivery() -> None:
    steady = _rec("a", 0.0, 0.1, 0.01, 64)
    steady.engine_timing = {"mean_itl_ms": 9.5, "time_to_first_token_ms": 80.0}
    burst = _rec("b", 0.0, 0.73, 0.0, 64)
    burst.engine_timing = {"mean_itl_ms": 10.5, "time_to_first_token_ms": 90.0}
    silent = _rec("c", 0.0, 0.1, 0.01, 64)  # an engine without per-request metrics
    one = _rec("d", 0.0, 0.1, 0.0, 1)
    one.engine_timing = {"time_to_first_token_ms": 70.0}  # one token: no TPOT
    m = _run([steady, burst, silent, one])
    assert m.burst_delivered == 1
    assert m.engine_tpot_ms == [9.5, 10.5], "the burst-delivered request keeps its engine-side TPOT"
    assert m.engine_ttft_ms == [80.0, 90.0, 70.0]
    assert len(m.tpot_ms) == 2  # client-side: steady and silent only
    assert m.percentiles["engine_tpot_ms_p50"] == pytest.approx(10.0)
    d = METRICS["median_engine_tpot_ms"]
    assert d.direction == "lower_is_better" and d.samples(m) == [9.5, 10.5]
    assert METRICS["median_engine_tpot_ms"].samples(_run([silent])) is None, "no engine samples: none invented"
