"""The features check's data: a feature's typed result (one side, one engine group), one side's measurements,
a sub-test's outcome, and helpers the feature tests share."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from pydantic import Field, SerializeAsAny

from fasttrack.checks.windows import WindowRecord
from fasttrack.errors import FasttrackError
from fasttrack.modelbase import DocModel
from fasttrack.results import Verdict
from fasttrack.stats.logprobs import TopLogprobs

JSON_MAX_TOKENS = 192
"""Token budget of one structured-output request (the shipped schemas need far fewer)."""
SAMPLING_TOP_LOGPROBS = 20
"""Logprobs requested for the reference distribution (vLLM's default ``max_logprobs``)."""
SAMPLING_WAVE = 8
"""Preferred choices per sampling request (``n``): one decode batch, snapped to a batch size of the plan."""
PROBE_TOKENS = 6
"""Tokens per request of the profiled path probes (a prefill and a few decode steps per point)."""
MASK_SAMPLES = 120
"""Samples per mask test (top-k, top-p)."""


class Outcome(DocModel):
    """The verdict of one sub-test, with its rows."""

    feature: str
    verdict: Verdict
    reason: str
    """One sentence."""
    rows: list[dict[str, Any]] = Field(default_factory=list)
    """Result rows (table ``features``)."""
    failures: list[str] = Field(default_factory=list)
    """Failure messages naming the config point and the evidence."""
    extra_tables: dict[str, list[dict[str, Any]]] = Field(default_factory=dict)


class FeatureResult(DocModel):
    """What one side measured of one feature on one engine group; each feature's result model extends it."""

    points: list[str] = Field(default_factory=list)
    """The config points its requests ran at."""


class GreedyOutput(DocModel):
    """A greedy generation with its logprobs: the chosen tokens, their logprobs, the top-k alternatives."""

    token_ids: list[int] = Field(default_factory=list)
    logprobs: list[float | None] = Field(default_factory=list)
    top: list[list[tuple[int, float]]] = Field(default_factory=list)
    """Per position: (token id, logprob) of the top-k alternatives."""


class SideData(DocModel):
    """What one side measured for one engine group."""

    results: dict[str, SerializeAsAny[FeatureResult]] = Field(default_factory=dict)
    """feature -> its typed result (the feature's ``result_model``)."""
    errors: dict[str, str] = Field(default_factory=dict)
    """feature -> why it could not be measured."""
    windows: dict[str, WindowRecord] = Field(default_factory=dict)
    """window name -> evidence window (each attributed to one config point)."""
    points: dict[str, str] = Field(default_factory=dict)
    """feature -> config point its requests ran at (multi-point features list them in their data)."""


class FeatureError(FasttrackError):
    """A feature's requests could not produce the measurements the test needs."""


def choice_ids(ch: Any) -> list[int]:
    """Generated token ids of one choice (from the logprobs when the server returned no ids)."""
    if ch.token_ids is not None:
        return list(ch.token_ids)
    return [p.token_id for p in (ch.logprobs or []) if p.token_id is not None]


def err(exc: BaseException) -> str:
    """A failed request's message."""
    return getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}"


def tops(d: GreedyOutput) -> list[TopLogprobs | None]:
    """Top-k logprobs per position as maps (the chosen token added where it is not among them)."""
    out: list[TopLogprobs | None] = []
    for i, pos in enumerate(d.top):
        m: dict[Hashable, float] = {int(t): float(lp) for t, lp in pos}
        lp = d.logprobs[i] if i < len(d.logprobs) else None
        if lp is not None and i < len(d.token_ids):
            m.setdefault(int(d.token_ids[i]), float(lp))
        out.append(m or None)
    return out


def greedy_output(r: Any) -> dict[str, Any]:
    """The token ids, logprobs and top-k alternatives of a completion (the fields of :class:`GreedyOutput`)."""
    pos = r.logprobs or []
    return {
        "token_ids": list(r.token_ids or []),
        "logprobs": [p.logprob for p in pos],
        "top": [[(t.token_id, t.logprob) for t in p.top if t.token_id is not None] for p in pos],
    }
