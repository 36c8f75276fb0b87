"""Prometheus ``/metrics`` of an engine: parsing, scraping, and the change between two scrapes.

:func:`parse_prometheus` reads the text exposition format into a :class:`MetricsSnapshot`
(every sample keyed by name and sorted labels); :func:`metrics_diff` gives counter changes
and gauge pairs; :func:`scrape_metrics` fetches and parses one engine's metrics.
"""

from __future__ import annotations

import math
import re
import time
from collections import defaultdict
from typing import TYPE_CHECKING

import httpx
from pydantic import Field

from fasttrack.engine.errors import EngineRequestError
from fasttrack.engine.tls import tls_context
from fasttrack.modelbase import StrictModel

if TYPE_CHECKING:  # pragma: no cover
    from fasttrack.engine.handle import EngineHandle


_TYPE_SUFFIXES = ("_bucket", "_sum", "_count", "_total", "_created", "_gsum", "_gcount", "_info")
_SAMPLE_RE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})?\s+(\S+)(?:\s+\S+)?\s*$")


def _parse_value(s: str) -> float:
    low = s.lower()
    if low in ("nan",):
        return math.nan
    if low in ("+inf", "inf"):
        return math.inf
    if low == "-inf":
        return -math.inf
    return float(s)


def _parse_labels(s: str) -> dict[str, str]:
    """Parse ``{a="x",b="y\\"z"}`` (with Prometheus escapes) into a dict."""
    labels: dict[str, str] = {}
    i, n = 1, len(s) - 1  # inside the braces
    while i < n:
        while i < n and s[i] in " ,":
            i += 1
        if i >= n:
            break
        eq = s.index("=", i)
        key = s[i:eq].strip()
        i = eq + 1
        while s[i] == " ":
            i += 1
        if s[i] != '"':
            raise ValueError(f"label value of {key!r} is not quoted: {s!r}")
        i += 1
        buf: list[str] = []
        while True:
            c = s[i]
            if c == "\\":
                nxt = s[i + 1]
                buf.append({"n": "\n", "\\": "\\", '"': '"'}.get(nxt, "\\" + nxt))
                i += 2
                continue
            if c == '"':
                i += 1
                break
            buf.append(c)
            i += 1
        labels[key] = "".join(buf)
    return labels


def _escape(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def metric_key(name: str, labels: dict[str, str] | None = None) -> str:
    """Canonical key of one sample: ``name{a="x",b="y"}`` with labels sorted (or bare ``name``)."""
    if not labels:
        return name
    inner = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(labels.items()))
    return f"{name}{{{inner}}}"


def split_metric_key(key: str) -> tuple[str, dict[str, str]]:
    """Inverse of :func:`metric_key`."""
    brace = key.find("{")
    if brace < 0:
        return key, {}
    return key[:brace], _parse_labels(key[brace:])


class MetricsSnapshot(StrictModel):
    """One scrape of ``/metrics``: every sample, keyed by name and sorted labels."""

    samples: dict[str, float] = Field(default_factory=dict)
    """Sample value per :func:`metric_key` (histogram buckets, sums and counts are separate samples)."""
    types: dict[str, str] = Field(default_factory=dict)
    """Declared type per metric family (counter, gauge, histogram, summary, untyped)."""
    scraped_at: float | None = None
    """Wall-clock time of the scrape (time.time())."""

    def type_of(self, sample_name: str) -> str:
        """The declared type of the family a sample name belongs to."""
        if sample_name in self.types:
            return self.types[sample_name]
        for suf in _TYPE_SUFFIXES:
            if sample_name.endswith(suf) and sample_name[: -len(suf)] in self.types:
                return self.types[sample_name[: -len(suf)]]
        return "untyped"

    def select(self, name: str, **labels: str) -> dict[str, float]:
        """Samples named ``name`` whose labels include ``labels``."""
        out: dict[str, float] = {}
        for key, v in self.samples.items():
            n, lab = split_metric_key(key)
            if n == name and all(lab.get(k) == val for k, val in labels.items()):
                out[key] = v
        return out

    def get(self, name: str, **labels: str) -> float | None:
        """The value of exactly one sample (None when absent; error when ambiguous)."""
        sel = self.select(name, **labels)
        if not sel:
            return None
        if len(sel) > 1:
            raise KeyError(f"{name} with {labels} matches {len(sel)} samples: {sorted(sel)[:5]}")
        return next(iter(sel.values()))

    def total(self, name: str, **labels: str) -> float:
        """Sum of all samples named ``name`` whose labels include ``labels`` (0 when none)."""
        return float(sum(self.select(name, **labels).values()))

    def histogram(self, family: str, **labels: str) -> dict[float, float]:
        """Cumulative bucket counts of one histogram family: upper bound -> count."""
        out: dict[float, float] = defaultdict(float)
        for key, v in self.select(family + "_bucket", **labels).items():
            _, lab = split_metric_key(key)
            out[_parse_value(lab["le"])] += v
        return dict(sorted(out.items()))


def parse_prometheus(text: str, *, scraped_at: float | None = None) -> MetricsSnapshot:
    """Parse Prometheus text exposition format into a :class:`MetricsSnapshot`."""
    samples: dict[str, float] = {}
    types: dict[str, str] = {}
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) >= 4 and parts[1] == "TYPE":
                types[parts[2]] = parts[3].strip()
            continue
        m = _SAMPLE_RE.match(line)
        if not m:
            raise ValueError(f"line {lineno} of the metrics text is not a sample: {raw!r}")
        name, lab, val = m.group(1), m.group(2), m.group(3)
        labels = _parse_labels(lab) if lab else {}
        samples[metric_key(name, labels)] = _parse_value(val)
    return MetricsSnapshot(samples=samples, types=types, scraped_at=scraped_at)


class MetricsDelta(StrictModel):
    """The change between two scrapes."""

    deltas: dict[str, float] = Field(default_factory=dict)
    """after - before for counters, histograms and summaries (absent before = 0)."""
    gauges: dict[str, tuple[float, float]] = Field(default_factory=dict)
    """(before, after) for gauges (a difference of gauges means little)."""
    seconds: float | None = None
    """Time between the scrapes."""

    def delta(self, name: str, **labels: str) -> float:
        """Sum of the deltas of samples named ``name`` whose labels include ``labels``."""
        tot = 0.0
        for key, v in self.deltas.items():
            n, lab = split_metric_key(key)
            if n == name and all(lab.get(k) == val for k, val in labels.items()):
                tot += v
        return tot


def metrics_diff(before: MetricsSnapshot, after: MetricsSnapshot) -> MetricsDelta:
    """Per-sample change from ``before`` to ``after``."""
    deltas: dict[str, float] = {}
    gauges: dict[str, tuple[float, float]] = {}
    for key, v in after.samples.items():
        name, _ = split_metric_key(key)
        kind = after.type_of(name)
        prev = before.samples.get(key)
        if kind == "gauge":
            gauges[key] = (math.nan if prev is None else prev, v)
        else:
            deltas[key] = v - (prev or 0.0)
    secs = None
    if before.scraped_at is not None and after.scraped_at is not None:
        secs = after.scraped_at - before.scraped_at
    return MetricsDelta(deltas=deltas, gauges=gauges, seconds=secs)


def _metrics_url(target: "EngineHandle | str") -> str:
    base = target if isinstance(target, str) else target.base_url
    return base.rstrip("/") + "/metrics"


async def scrape_metrics(target: "EngineHandle | str", *, timeout: float = 10.0) -> MetricsSnapshot:
    """GET /metrics of an engine (handle or base URL) and parse it."""
    url = _metrics_url(target)
    async with httpx.AsyncClient(timeout=timeout, verify=tls_context()) as http:
        r = await http.get(url)
    if r.status_code != 200:
        raise EngineRequestError(r.text[:500], status_code=r.status_code, body=r.text, url=url)
    return parse_prometheus(r.text, scraped_at=time.time())


def scrape_metrics_sync(target: "EngineHandle | str", *, timeout: float = 10.0) -> MetricsSnapshot:
    """Synchronous :func:`scrape_metrics`."""
    url = _metrics_url(target)
    r = httpx.get(url, timeout=timeout)
    if r.status_code != 200:
        raise EngineRequestError(r.text[:500], status_code=r.status_code, body=r.text, url=url)
    return parse_prometheus(r.text, scraped_at=time.time())
