"""Goodput at a latency SLO (``gates.perf.slo``).

A scope may declare a service-level objective, e.g. TTFT p99 <= 500 ms and ITL p99 <= 50 ms.
Two figures come from it:

* **Goodput** (per run, as vLLM's benchmark ``--goodput`` counts it per request): a request
  *meets the SLO* when its TTFT is within ``ttft_ms``, its TPOT (first to last token over
  ``output_tokens - 1``) within ``tpot_ms``, and the ``percentile``-th percentile of its own
  inter-token gaps within ``itl_ms`` (each bound only when set). Goodput is the output tokens
  of the requests that met it, per second of the run (whole engine). A request without client
  timing (failed, or burst-delivered: the stream reached the client at once, so its latencies
  are unknown) does not count as meeting it. The gate compares goodput like a throughput
  (``METRICS['goodput']``: mean over runs, candidate / baseline), with one token added per run
  so that a run in which no request met the SLO still has a ratio.
* **Attainment per point** (the ``tails`` table): each bound against the pooled percentile
  of its metric on each side, with a bootstrap interval: ``met`` when the whole interval is
  within the bound, ``missed`` when it lies beyond, ``uncertain`` otherwise.

The per-request data behind goodput stay in the bundle (``ttft_ms``, ``itl_ms`` split by
``itl_counts``, ``timed_output_tokens``), so it can be recomputed for another SLO.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from fasttrack.perf.metrics import RunMetrics

if TYPE_CHECKING:  # pragma: no cover
    from fasttrack.scope import ServiceLevel


def request_meets(ttft: float, gaps: list[float], tokens: int, slo: "ServiceLevel") -> bool:
    """Whether one request (TTFT and its inter-token gaps in ms, its output tokens) meets ``slo``."""
    if slo.ttft_ms is not None and ttft > slo.ttft_ms:
        return False
    if slo.tpot_ms is not None and tokens > 1 and sum(gaps) / (tokens - 1) > slo.tpot_ms:
        return False
    if slo.itl_ms is not None and gaps and float(np.percentile(gaps, slo.percentile)) > slo.itl_ms:
        return False
    return True


def good_requests(run: RunMetrics, slo: "ServiceLevel") -> tuple[int, int] | None:
    """(requests that met ``slo``, their output tokens) from the run's raw per-request data; None when the run
    carries no per-request split (recorded before it was kept)."""
    n = len(run.ttft_ms)
    if len(run.itl_counts) != n or len(run.timed_output_tokens) != n or sum(run.itl_counts) != len(run.itl_ms):
        return None
    good = tokens = 0
    pos = 0
    for ttft, k, out in zip(run.ttft_ms, run.itl_counts, run.timed_output_tokens, strict=True):
        gaps = run.itl_ms[pos : pos + k]
        pos += k
        if request_meets(ttft, gaps, out, slo):
            good += 1
            tokens += out
    return good, tokens


def with_goodput(run: RunMetrics, slo: "ServiceLevel | None") -> RunMetrics:
    """``run`` with ``good_requests``, ``good_output_tokens`` and ``goodput`` at ``slo`` (unchanged without one)."""
    if slo is None:
        return run
    got = good_requests(run, slo)
    if got is None:
        return run
    good, tokens = got
    return run.model_copy(
        update={
            "good_requests": good,
            "good_output_tokens": tokens,
            "goodput": tokens / run.duration_s if run.duration_s > 0 else None,
        }
    )


def attainment(low: float | None, high: float | None, bound: float) -> str:
    """``met`` / ``missed`` / ``uncertain``: a percentile's interval against its SLO bound."""
    if low is None or high is None:
        return "unknown"
    if high <= bound:
        return "met"
    if low > bound:
        return "missed"
    return "uncertain"
