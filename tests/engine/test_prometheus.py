"""Prometheus text parsing and scrape diffs."""

from __future__ import annotations

import math

import pytest

from fasttrack.engine import metrics_diff, parse_prometheus
from fasttrack.engine.metrics import metric_key, split_metric_key

TEXT_BEFORE = r"""
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="demo"} 0.0
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="demo"} 10.0
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.01",model_name="demo"} 1.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="demo"} 2.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="demo"} 2.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="demo"} 2.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="demo"} 0.05
# TYPE fasttrack_demo_fallback_steps counter
fasttrack_demo_fallback_steps_total{reason="prefill"} 3
fasttrack_demo_fallback_steps_total{reason="mixed"} 1
weird_labels{path="a \"quoted\" \\ back\nslash",empty=""} NaN
process_start_time_seconds 1.7e9 1700000000000
"""

TEXT_AFTER = TEXT_BEFORE.replace(
    'vllm:prompt_tokens_total{engine="0",model_name="demo"} 10.0',
    'vllm:prompt_tokens_total{engine="0",model_name="demo"} 25.0',
).replace(
    'vllm:num_requests_running{engine="0",model_name="demo"} 0.0',
    'vllm:num_requests_running{engine="0",model_name="demo"} 4.0',
).replace(
    'fasttrack_demo_fallback_steps_total{reason="prefill"} 3', 'fasttrack_demo_fallback_steps_total{reason="prefill"} 7'
) + ('fasttrack_demo_fallback_steps_total{reason="batch_out_of_range"} 2\n')


def test_parse_samples_labels_and_types() -> None:
    snap = parse_prometheus(TEXT_BEFORE)
    assert snap.get("vllm:prompt_tokens_total", model_name="demo") == 10.0
    assert snap.type_of("vllm:prompt_tokens_total") == "counter"
    assert snap.type_of("vllm:num_requests_running") == "gauge"
    assert snap.type_of("vllm:time_to_first_token_seconds_bucket") == "histogram"
    assert snap.type_of("fasttrack_demo_fallback_steps_total") == "counter"
    assert snap.total("fasttrack_demo_fallback_steps_total") == 4
    assert snap.histogram("vllm:time_to_first_token_seconds") == {0.01: 1.0, 0.1: 2.0, math.inf: 2.0}
    weird = snap.select("weird_labels")
    (key,) = weird
    name, labels = split_metric_key(key)
    assert name == "weird_labels"
    assert labels == {"path": 'a "quoted" \\ back\nslash', "empty": ""}
    assert math.isnan(weird[key])
    assert snap.get("process_start_time_seconds") == 1.7e9  # timestamp column ignored
    assert snap.get("no_such_metric") is None


def test_key_round_trip_is_canonical() -> None:
    k = metric_key("m", {"b": "2", "a": 'x"y'})
    assert k == 'm{a="x\\"y",b="2"}'
    assert split_metric_key(k) == ("m", {"a": 'x"y', "b": "2"})
    assert metric_key("m") == "m"


def test_ambiguous_get_raises() -> None:
    snap = parse_prometheus(TEXT_BEFORE)
    with pytest.raises(KeyError, match="matches 2 samples"):
        snap.get("fasttrack_demo_fallback_steps_total")


def test_diff_counters_and_gauges() -> None:
    before = parse_prometheus(TEXT_BEFORE, scraped_at=100.0)
    after = parse_prometheus(TEXT_AFTER, scraped_at=102.5)
    d = metrics_diff(before, after)
    assert d.seconds == 2.5
    assert d.delta("vllm:prompt_tokens_total") == 15.0
    assert d.delta("fasttrack_demo_fallback_steps_total", reason="prefill") == 4
    assert d.delta("fasttrack_demo_fallback_steps_total", reason="batch_out_of_range") == 2  # new series
    assert d.delta("fasttrack_demo_fallback_steps_total") == 6
    key = metric_key("vllm:num_requests_running", {"engine": "0", "model_name": "demo"})
    assert d.gauges[key] == (0.0, 4.0)
    assert key not in d.deltas


def test_malformed_line_is_reported_with_its_number() -> None:
    with pytest.raises(ValueError, match="line 2"):
        parse_prometheus("ok 1\nthis is not a sample line at all {\n")
