"""Serving metrics of one run, computed from per-request timestamps and server usage.

Definitions (all times from the client's ``time.perf_counter()``; a *content chunk*
is a streamed SSE message whose ``choices`` is not empty):

* **TTFT** (time to first token): arrival of the first content chunk minus the
  moment the request was sent.
* **E2E latency**: arrival of the last content chunk minus the moment the request
  was sent (vLLM's ``latency``; the trailing usage message and ``[DONE]`` are not
  counted).
* **TPOT** (time per output token, excluding the first, as vLLM defines it):
  ``(e2e - ttft) / (output_tokens - 1)`` per request, with ``output_tokens`` taken
  from the server's ``usage.completion_tokens``; undefined for one-token outputs.
* **ITL** (inter-token latency): the gaps between consecutive content chunks of a
  request. One chunk normally carries one token; when the server coalesces tokens
  the gap covers all of them, as in vLLM's benchmark client.
* **Output throughput** (whole engine): total ``usage.completion_tokens`` of the
  run divided by the run's wall time (first send to last response).
* **Decode throughput** (whole engine, prefill excluded): the tokens generated
  after each request's first token, ``sum(output_tokens - 1)``, divided by the
  wall time during which at least one request was between its first and its last
  token (the union of the requests' decode intervals).
* **Per-GPU throughput**: output throughput divided by the GPUs of one engine
  (undefined on CPU hosts, where the plan counts 0 GPUs).
* **Interactivity** (output tokens/s per user) = ``1000 / ITL_ms``. Its
  percentiles are taken from ITL's, so they run the other way:
  ``interactivity_pNN = 1000 / ITL_pNN``. **P90 interactivity** is therefore the
  *slow* tail: 90% of inter-token gaps were at least this fast (it is the 10th
  percentile of per-gap tokens/s, not the 90th).

**Burst-delivered requests.** A request whose content reached the client in very few
network reads (after its first chunk, fewer distinct arrival times than
``BURST_READ_FRACTION`` of its remaining tokens, with at least ``BURST_MIN_TOKENS``
of them) was not observed as it streamed: a stalled API server or client delivered
it at once, and its TTFT, TPOT and ITL would read as the stall, or as zero. Those
three are not taken from it (its tokens still count for throughput and its E2E
latency stands); the run records how many requests that was
(``burst_delivered``).

**Engine-timed TPOT** (``engine_tpot_ms``). An engine started with vLLM's
``--enable-per-request-metrics`` reports, in each stream's final usage message, the
request's timing from the engine core's own timestamps (``metrics``:
``time_to_first_token_ms`` from scheduling, ``generation_time_ms`` from the first to
the last output token, ``mean_itl_ms`` = that over ``output_tokens - 1``). Its
``mean_itl_ms`` is TPOT as defined above, taken where the tokens were produced, so
it does not depend on how the stream travelled through the API server and the
client; burst-delivered requests keep it. The gate can use it
(``median_engine_tpot_ms``); engines without the flag report none, and the metric
then has no samples.

Percentiles are numpy's linear interpolation (``np.percentile``), p50/p90/p99.
Tokens are never counted by re-tokenising text: a request without server usage is
counted as failed (``usage_missing``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

PERCENTILES: tuple[int, ...] = (50, 90, 99)
ENGINE_TIMING_KEYS = frozenset(
    {"time_to_first_token_ms", "generation_time_ms", "queue_time_ms", "mean_itl_ms", "tokens_per_second"}
)
"""Fields of vLLM's per-request ``metrics`` (``--enable-per-request-metrics``) that are kept."""
BURST_READ_FRACTION = 0.25
BURST_MIN_TOKENS = 4
"""A request with at least this many tokens after its first is checked for burst delivery."""

Direction = Literal["lower_is_better", "higher_is_better"]


@dataclass(slots=True)
class RequestRecord:
    """What the load generator observed for one request (plain dataclass: it is built on the hot path)."""

    id: str
    t_send: float
    """perf_counter() just before the request was written."""
    chunk_times: list[float] = field(default_factory=list)
    """perf_counter() at the arrival of each content chunk."""
    chunk_tokens: list[int] = field(default_factory=list)
    """Tokens each content chunk carried when it was parsed (token ids requested), else 1 (counts use usage)."""
    t_done: float | None = None
    """perf_counter() when the response was complete (after ``[DONE]``)."""
    prompt_tokens: int | None = None
    """``usage.prompt_tokens``."""
    output_tokens: int | None = None
    """``usage.completion_tokens``."""
    cached_tokens: int | None = None
    """``usage.prompt_tokens_details.cached_tokens`` (prefix-cache hits), when reported."""
    token_ids: list[int] | None = None
    """Generated token ids (only when asked for: trace replay appends them to the session history)."""
    error: str | None = None
    """Why the request failed (HTTP status and message, transport error, missing usage)."""
    engine_timing: dict[str, float] | None = None
    """The engine core's timing of the request (``metrics`` of the usage message), when reported."""

    @property
    def ok(self) -> bool:
        return self.error is None and bool(self.chunk_times) and self.output_tokens is not None

    @property
    def ttft(self) -> float | None:
        return self.chunk_times[0] - self.t_send if self.chunk_times else None

    @property
    def e2e(self) -> float | None:
        return self.chunk_times[-1] - self.t_send if self.chunk_times else None

    @property
    def tpot(self) -> float | None:
        """(e2e - ttft) / (output_tokens - 1); None for one-token outputs."""
        if not self.chunk_times or self.output_tokens is None or self.output_tokens <= 1:
            return None
        return (self.chunk_times[-1] - self.chunk_times[0]) / (self.output_tokens - 1)

    @property
    def burst_delivered(self) -> bool:
        """The stream arrived in too few network reads to time its tokens (module docstring)."""
        ts = self.chunk_times
        if self.output_tokens is None or self.output_tokens - 1 < BURST_MIN_TOKENS or not ts:
            return False
        later_reads = len({t for t in ts if t != ts[0]})
        return later_reads < BURST_READ_FRACTION * (self.output_tokens - 1)

    @property
    def engine_tpot_ms(self) -> float | None:
        """TPOT from the engine core's timestamps (``mean_itl_ms``); None when not reported."""
        if self.output_tokens is None or self.output_tokens <= 1 or not self.engine_timing:
            return None
        v = self.engine_timing.get("mean_itl_ms")
        return float(v) if v is not None and math.isfinite(v) and v > 0 else None

    def itls(self) -> list[float]:
        ts = self.chunk_times
        return [b - a for a, b in zip(ts, ts[1:], strict=False)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, ser_json_inf_nan="null")


class RunMetrics(_Model):
    """One run (one execution of a workload at one point on one engine lifetime) with its raw samples."""

    workload: str
    """Workload name (scope ``workloads``)."""
    point: str
    """Config point id (or ``<group>-trace`` for trace replay)."""
    side: Literal["baseline", "candidate"]
    lifetime: int
    """0-based engine lifetime of this side."""
    run: int
    """0-based run index within the lifetime."""
    requests: int
    """Requests sent (warm-up excluded)."""
    failed: int
    """Requests that failed (error, no content, no usage); their samples are excluded."""
    errors: list[str] = Field(default_factory=list)
    """The first few failure messages."""
    duration_s: float
    """Wall time of the run: first send to last response."""
    started_at: float | None = None
    """Unix time at which the run started (orders the runs of interleaved engines)."""
    prompt_tokens: int
    """Sum of usage.prompt_tokens."""
    cached_prompt_tokens: int | None = None
    """Sum of usage.prompt_tokens_details.cached_tokens, when the server reports it."""
    output_tokens: int
    """Sum of usage.completion_tokens."""
    output_throughput: float
    """output_tokens / duration_s (tokens/s, whole engine)."""
    decode_throughput: float | None
    """sum(output_tokens - 1) / wall time with at least one request decoding (tokens/s, whole engine)."""
    per_gpu_throughput: float | None
    """output_throughput / GPUs of one engine; None on CPU hosts."""
    gpus: int
    """GPUs one engine used (0 on CPU hosts)."""
    ttft_ms: list[float]
    """Per request (raw)."""
    tpot_ms: list[float]
    """Per request with more than one output token (raw)."""
    itl_ms: list[float]
    """Per content-chunk gap, all requests (raw)."""
    e2e_ms: list[float]
    """Per request (raw)."""
    engine_tpot_ms: list[float] = Field(default_factory=list)
    """Per request with more than one output token, from the engine core's timestamps (raw; empty when the
    engine does not report per-request metrics)."""
    engine_ttft_ms: list[float] = Field(default_factory=list)
    """Per request: the engine core's scheduling to first token (queue time excluded; raw)."""
    percentiles: dict[str, float | None]
    """``<metric>_p50|p90|p99`` for ttft_ms, tpot_ms, itl_ms, e2e_ms, engine_tpot_ms and interactivity
    (tokens/s/user)."""
    client_cpu_s: float
    """CPU time of the load generator's process during the run (all its threads)."""
    client_cpu_us_per_token: float | None
    """client_cpu_s per streamed content chunk, in microseconds."""
    content_chunks: int
    """Content chunks streamed in the run."""
    burst_delivered: int = 0
    """Requests whose stream arrived at once (module docstring): no TTFT, TPOT or ITL from them."""
    itl_counts: list[int] = Field(default_factory=list)
    """Per request with client timing (the requests of ``ttft_ms``, in that order): how many of ``itl_ms``'s
    gaps are its own, so each request's gaps can be told apart (SLO attainment per request)."""
    timed_output_tokens: list[int] = Field(default_factory=list)
    """Per request with client timing (same order): its ``usage.completion_tokens``."""
    good_requests: int | None = None
    """Requests that met the scope's SLO (``gates.perf.slo``; None without one)."""
    good_output_tokens: int | None = None
    """Output tokens of the requests that met the SLO."""
    goodput: float | None = None
    """good_output_tokens / duration_s: output tokens/s of the requests that met the SLO (whole engine)."""
    warmup_requests: int = 0
    """Warm-up requests sent before the run and discarded."""
    extra: dict[str, Any] = Field(default_factory=dict)
    """Workload-specific facts (arrival seed, trace clipping, ...)."""

    def samples(self, metric: str) -> list[float] | float | None:
        """The samples a metric's statistic is computed from (see :data:`METRICS`)."""
        return METRICS[metric].samples(self)


def pct(values: list[float] | np.ndarray, q: float) -> float | None:
    """numpy's linear-interpolation percentile; None for no values."""
    if len(values) == 0:
        return None
    return float(np.percentile(np.asarray(values, dtype=float), q))


def union_length(intervals: list[tuple[float, float]]) -> float:
    """Total length covered by a set of closed intervals."""
    total = 0.0
    cur: tuple[float, float] | None = None  # the merged interval being extended
    for a, b in sorted(intervals):
        if b < a:
            continue
        if cur is None or a > cur[1]:
            if cur is not None:
                total += cur[1] - cur[0]
            cur = (a, b)
        else:
            cur = (cur[0], max(cur[1], b))
    if cur is not None:
        total += cur[1] - cur[0]
    return total


def _failure_messages(bad: list[RequestRecord]) -> list[str]:
    """Why the first few failed requests failed."""
    errors = []
    for r in bad[:5]:
        if r.error:
            errors.append(f"{r.id}: {r.error}")
        elif not r.chunk_times:
            errors.append(f"{r.id}: no content chunk arrived")
        else:
            errors.append(f"{r.id}: the server sent no usage (tokens are counted from usage only)")
    return errors


def _raw_samples(ok: list[RequestRecord], timed: list[RequestRecord]) -> dict[str, Any]:
    """The run's raw samples (``RunMetrics`` fields): client-timed ones from ``timed`` (the usable requests that
    were not burst-delivered), E2E and engine-timed ones from every usable request."""
    # a usable record has chunks, so its ttft and e2e are set
    itl: list[float] = []
    itl_counts: list[int] = []
    for r in timed:
        gaps = r.itls()
        itl.extend(g * 1e3 for g in gaps)
        itl_counts.append(len(gaps))
    return {
        "ttft_ms": [t * 1e3 for r in timed if (t := r.ttft) is not None],
        "tpot_ms": [t * 1e3 for r in timed if (t := r.tpot) is not None],
        "itl_ms": itl,
        "e2e_ms": [t * 1e3 for r in ok if (t := r.e2e) is not None],
        "engine_tpot_ms": [t for r in ok if (t := r.engine_tpot_ms) is not None],
        "engine_ttft_ms": [
            float(r.engine_timing["time_to_first_token_ms"])
            for r in ok
            if r.engine_timing and r.engine_timing.get("time_to_first_token_ms") is not None
        ],
        "itl_counts": itl_counts,
        "timed_output_tokens": [int(r.output_tokens or 0) for r in timed],
    }


def _percentiles(samples: dict[str, Any]) -> dict[str, float | None]:
    """``<metric>_p50|p90|p99`` of the raw samples, and interactivity's from ITL's (``1000 / ITL_pNN``)."""
    ptiles: dict[str, float | None] = {}
    for name in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "engine_tpot_ms"):
        for q in PERCENTILES:
            ptiles[f"{name}_p{q}"] = pct(samples[name], q)
    for q in PERCENTILES:
        v = ptiles[f"itl_ms_p{q}"]
        ptiles[f"interactivity_p{q}"] = (1000.0 / v) if v else None
    return ptiles


def compute_run_metrics(
    records: list[RequestRecord],
    *,
    workload: str,
    point: str,
    side: Literal["baseline", "candidate"],
    lifetime: int,
    run: int,
    t_start: float,
    t_end: float,
    gpus: int,
    client_cpu_s: float,
    warmup_requests: int = 0,
    extra: dict[str, Any] | None = None,
    started_at: float | None = None,
) -> RunMetrics:
    """Apply the module's definitions to one run's request records."""
    ok = [r for r in records if r.ok]
    bad = [r for r in records if not r.ok]
    timed = [r for r in ok if not r.burst_delivered]
    samples = _raw_samples(ok, timed)
    out_tokens = sum(int(r.output_tokens or 0) for r in ok)
    prompt_tokens = sum(int(r.prompt_tokens or 0) for r in ok)
    cached = [r.cached_tokens for r in ok if r.cached_tokens is not None]
    duration = max(t_end - t_start, 1e-9)
    decode_tokens = sum(max(int(r.output_tokens or 0) - 1, 0) for r in ok)
    decode_time = union_length([(r.chunk_times[0], r.chunk_times[-1]) for r in ok if len(r.chunk_times) > 1])
    chunks = sum(len(r.chunk_times) for r in records)
    thr = out_tokens / duration
    return RunMetrics(
        workload=workload,
        point=point,
        side=side,
        lifetime=lifetime,
        run=run,
        requests=len(records),
        failed=len(bad),
        errors=_failure_messages(bad),
        duration_s=duration,
        started_at=started_at,
        prompt_tokens=prompt_tokens,
        cached_prompt_tokens=sum(cached) if cached else None,
        output_tokens=out_tokens,
        output_throughput=thr,
        decode_throughput=(decode_tokens / decode_time) if decode_time > 0 else None,
        per_gpu_throughput=(thr / gpus) if gpus > 0 else None,
        gpus=gpus,
        **samples,
        percentiles=_percentiles(samples),
        client_cpu_s=client_cpu_s,
        client_cpu_us_per_token=(client_cpu_s / chunks * 1e6) if chunks else None,
        content_chunks=chunks,
        burst_delivered=len(ok) - len(timed),
        warmup_requests=warmup_requests,
        extra=dict(extra or {}),
    )


# ---------------------------------------------------------------------------------- metric registry


@dataclass(frozen=True)
class MetricDef:
    """How a gate metric is compared across sides."""

    name: str
    direction: Direction
    statistic: str
    """Statistic over the pooled samples of a side ('median', 'mean', 'pNN')."""
    field: str
    """RunMetrics field holding the samples (a list per run, or one number per run)."""
    unit: str
    description: str
    display_inverse: bool = False
    """Samples are ITL (ms) but the metric is shown as 1000/value (interactivity)."""

    def samples(self, run: RunMetrics) -> list[float] | float | None:
        if self.name == "goodput":  # one number per run; +1 token so a run where no request met the SLO has a ratio
            g = run.good_output_tokens
            return (g + 1) / run.duration_s if g is not None and run.duration_s > 0 else None
        v = getattr(run, self.field)
        if isinstance(v, list):
            return [float(x) for x in v if x is not None and math.isfinite(x) and x > 0] or None
        if v is None or not math.isfinite(v) or v <= 0:
            return None
        return float(v)

    def display(self, value: float | None) -> float | None:
        """A side's value in the metric's unit (interactivity: tokens/s/user from ITL ms)."""
        if value is None:
            return None
        return 1000.0 / value if self.display_inverse else value


CLIENT_TIMED_FIELDS: frozenset[str] = frozenset({"ttft_ms", "tpot_ms", "itl_ms", "goodput"})
"""Sample fields timed by the client as the stream arrived (burst delivery distorts them, and goodput is
judged on them; the engine-timed fields and throughputs do not depend on how the stream travelled)."""

METRICS: dict[str, MetricDef] = {
    "median_tpot_ms": MetricDef(
        "median_tpot_ms",
        "lower_is_better",
        "median",
        "tpot_ms",
        "ms",
        "median over requests of (e2e - ttft) / (output_tokens - 1)",
    ),
    "median_engine_tpot_ms": MetricDef(
        "median_engine_tpot_ms",
        "lower_is_better",
        "median",
        "engine_tpot_ms",
        "ms",
        "median over requests of TPOT from the engine core's timestamps (vLLM --enable-per-request-metrics: "
        "first to last output token over output_tokens - 1); independent of stream delivery",
    ),
    "median_itl_ms": MetricDef(
        "median_itl_ms", "lower_is_better", "median", "itl_ms", "ms", "median gap between consecutive content chunks"
    ),
    "median_ttft_ms": MetricDef(
        "median_ttft_ms", "lower_is_better", "median", "ttft_ms", "ms", "median time to first token"
    ),
    "output_throughput": MetricDef(
        "output_throughput",
        "higher_is_better",
        "mean",
        "output_throughput",
        "tokens/s",
        "mean over runs of the run's completion tokens / wall time (whole engine)",
    ),
    "p50_interactivity": MetricDef(
        "p50_interactivity",
        "lower_is_better",
        "p50",
        "itl_ms",
        "tokens/s/user",
        "1000 / p50 ITL: the typical user's tokens/s; the speedup of p50 ITL equals the speedup of p50 interactivity",
        display_inverse=True,
    ),
    "goodput": MetricDef(
        "goodput",
        "higher_is_better",
        "mean",
        "goodput",
        "tokens/s",
        "mean over runs of (output tokens of the requests that met gates.perf.slo + 1) / wall time (whole engine; "
        "the one token keeps a run where no request met the SLO comparable)",
    ),
    "p90_interactivity": MetricDef(
        "p90_interactivity",
        "lower_is_better",
        "p90",
        "itl_ms",
        "tokens/s/user",
        "1000 / p90 ITL: the slow tail, 90% of inter-token gaps were at least this fast; the speedup of "
        "p90 ITL equals the speedup of p90 interactivity",
        display_inverse=True,
    ),
}
"""Metrics the perf gate can compare (``gates.perf.metrics`` / ``gated_metric``)."""
