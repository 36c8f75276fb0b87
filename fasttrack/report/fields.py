"""Column conventions the report recognises in check tables.

Checks write their rows freely (see :class:`fasttrack.checks.base.CheckResult`); the report
shows every table as it is and, where a table carries the columns below, also draws it.
Each concept accepts a few spellings; the first present one wins.

=================  ==========================================================================
concept            columns
=================  ==========================================================================
config point       ``point``, ``point_id``, ``config_point``
row verdict        ``verdict`` / ``status`` (``pass``/``fail``/``not_run``...), or ``passed`` / ``ok`` (bool)
batch size         ``batch``, ``batch_size``, ``concurrency``
context length     ``context``, ``context_len``, ``context_length``, ``input_len``
metric             ``metric``
baseline value     ``baseline``, ``baseline_value``, ``baseline_median``, ``baseline_score``
candidate value    ``candidate``, ``candidate_value``, ``candidate_median``, ``candidate_score``
speedup            ``speedup`` (> 1: candidate better); else ``ratio`` (candidate / baseline)
interval           ``ci_low`` / ``ci_high`` (of the speedup, or of the ratio when only it is given)
detectable effect  ``mde`` / ``detectable_slowdown`` (a fraction: 0.07 = 7 %)
eval bin           ``bin``, ``context_bin``, ``needles``, ``needle_count``
eval item          ``problem``, ``problem_id``, ``sample_id``, ``doc_id``
claim              table named ``claims``: ``id``/``claim``, ``text``, ``status``
                   (``supported``/``refuted``/``inconclusive``/``not_measured``; older bundles:
                   ``confirmed``/``contradicted``), ``claimed``, ``measured``, ``ci_low``/``ci_high``,
                   ``tolerance``, ``bound``
=================  ==========================================================================

The perf check's per-point table is its ``points`` table (or else the first perf table with
a point, a speedup or ratio, and both interval columns); one chart per ``metric`` value
(the perf check writes ``workload/metric``) and engine group. Rows without a verdict are
reported metrics that are not gated. Eval tables with a bin column are drawn per bin, tables
with an item column per item; a table named ``discordant`` (or with ``discordant`` in its
name) lists the samples on which the sides disagree.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

POINT = ("point", "point_id", "config_point")
VERDICT = ("verdict", "status")
PASSED = ("passed", "ok")
BATCH = ("batch", "batch_size", "concurrency")
CONTEXT = ("context", "context_len", "context_length", "input_len")
METRIC = ("metric",)
BASELINE = ("baseline", "baseline_value", "baseline_median", "baseline_score")
CANDIDATE = ("candidate", "candidate_value", "candidate_median", "candidate_score")
SPEEDUP = ("speedup",)
RATIO = ("ratio",)
CI_LOW = ("ci_low", "speedup_ci_low", "lower")
CI_HIGH = ("ci_high", "speedup_ci_high", "upper")
MDE = ("mde", "detectable_slowdown", "mde_slowdown")
BIN = ("bin", "context_bin", "needles", "needle_count")
ITEM = ("problem", "problem_id", "sample_id", "doc_id")
DIRECTION = ("direction",)
RUNS = ("runs", "n_runs", "runs_used", "runs_candidate")
BURST = ("burst_delivered", "burst_delivered_requests")
CLAIM_ID = ("id", "claim", "claim_id")

#: Metrics timed by the client as the stream arrived, for tables that do not say (``client_timed``).
CLIENT_TIMED_METRICS = ("median_tpot_ms", "median_itl_ms", "median_ttft_ms", "p90_interactivity")


def client_timed(row: Mapping[str, Any], metric: str) -> bool:
    """Whether a perf row's metric is client-timed: the row's ``client_timed``, else by the metric's name."""
    v = row.get("client_timed")
    if isinstance(v, bool):
        return v
    name = row.get("metric_name")
    name = name if isinstance(name, str) else metric.rsplit("/", 1)[-1]
    return name in CLIENT_TIMED_METRICS


CLAIM_STATUS = ("status", "verdict", "result")

_PASS_WORDS = {"pass", "passed", "ok", "true", "confirmed", "supported", "agree", "match", "yes"}
_FAIL_WORDS = {
    "fail",
    "failed",
    "false",
    "not_confirmed",
    "contradicted",
    "refuted",
    "regression",
    "mismatch",
    "no",
    "error",
}
_NOT_RUN_WORDS = {"not_run", "skipped", "not_measured", "none", "n/a", "incomplete", "undecided", "inconclusive"}


def pick(columns: Sequence[str], names: Sequence[str]) -> str | None:
    """The first of ``names`` present in ``columns``."""
    cols = set(columns)
    for n in names:
        if n in cols:
            return n
    return None


def get(row: Mapping[str, Any], names: Sequence[str]) -> Any:
    for n in names:
        if n in row and row[n] is not None:
            return row[n]
    return None


def as_float(v: Any) -> float | None:
    """A finite float, or None (booleans, text and non-finite values are not numbers here)."""
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, (int, float)):
        f = float(v)
        return f if math.isfinite(f) else None
    if isinstance(v, str):
        try:
            f = float(v)
        except ValueError:
            return None
        return f if math.isfinite(f) else None
    return None


PLOT_MAX = 1e9
"""The largest magnitude a chart places (a speedup, a latency, a throughput); the smallest non-zero one is its
inverse. A value outside is shown as text in its table and left out of the chart, never drawn off a scale."""


def drawable(v: Any) -> float | None:
    """A number a chart can place: finite, and zero or of magnitude within [1/PLOT_MAX, PLOT_MAX]; else None."""
    f = as_float(v)
    if f is None or (f != 0 and not 1 / PLOT_MAX <= abs(f) <= PLOT_MAX):
        return None
    return f


def as_int(v: Any) -> int | None:
    f = as_float(v)
    if f is None or f != int(f):
        return None
    return int(f)


def row_verdict(row: Mapping[str, Any]) -> str | None:
    """``pass``, ``fail``, ``not_run`` or None (no verdict column) for one row."""
    v = get(row, VERDICT)
    if isinstance(v, str):
        w = v.strip().lower().replace(" ", "_").replace("-", "_")
        if w in _PASS_WORDS:
            return "pass"
        if w in _FAIL_WORDS:
            return "fail"
        if w in _NOT_RUN_WORDS:
            return "not_run"
    b = get(row, PASSED)
    if isinstance(b, bool):
        return "pass" if b else "fail"
    return None


def lower_is_better(metric: str, direction: Any = None) -> bool:
    """Whether a smaller value of ``metric`` is better (latencies) or not (throughput)."""
    if isinstance(direction, str):
        d = direction.lower()
        if "lower" in d:
            return True
        if "higher" in d:
            return False
    m = metric.lower()
    if any(k in m for k in ("throughput", "tok_s", "tokens_per", "interactivity", "per_user", "qps")):
        return False
    return any(k in m for k in ("_ms", "latency", "ttft", "tpot", "itl", "_us", "_s", "time"))
