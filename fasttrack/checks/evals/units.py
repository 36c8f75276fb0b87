"""The evals check's units of work and records: one eval at one (engine group, batch size), one lm-eval run."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import httpx

from fasttrack.checks.context import RunContext
from fasttrack.engine.client import KEEPALIVE_EXPIRY_S
from fasttrack.engine.tls import tls_context
from fasttrack.errors import FasttrackError
from fasttrack.evals.compare import SampleOutcome
from fasttrack.evals.datasets import ResolvedDataset
from fasttrack.evals.runner import LmEvalOutput
from fasttrack.evals.samples import Selection
from fasttrack.planning.plan import ConfigPoint
from fasttrack.results import Gate
from fasttrack.scope import EvalSpec

PROFILE_WINDOW_S = 30.0
"""Longest profiler window around an evidence run (traces of long runs grow without bound)."""
EVIDENCE_SAMPLES_PER_BATCH = 2
"""The evidence run repeats the first 2 x batch samples (enough to fill the batch and drain it)."""
EVIDENCE_MAX_TOKENS = 64
"""Generated tokens per request in the evidence run, end-of-sequence ignored (enough decode steps at the batch
to show the path taken)."""
POINT_DIMENSIONS = ("tp", "dcp", "spec", "draft_length", "batch", "context")
"""Dimensions an eval's ``points`` filter may name (as in claims)."""

GATE = Gate(
    statistic=(
        "per eval and config point: (1) mean paired difference of task scores, candidate - baseline, and "
        "(2) mean paired difference of output agreement with the baseline (difflib ratio), candidate minus a "
        "repeated baseline run; each with its 95% percentile-bootstrap lower bound (samples resampled; "
        "repeats of a sample resampled together); graded runs are unprofiled, at the point's batch size"
    ),
    threshold="-margin (the eval's margin in the scope); floor on the candidate's mean score",
    rule=(
        "pass iff at every eval point: lower bound of (1) >= -margin and candidate mean score >= floor, "
        "and lower bound of (2) >= -margin"
    ),
)


@dataclass
class EvalUnit:
    """One eval at one (engine group, batch size): one lm-eval run per side and role."""

    eval: str
    group: str
    batch: int
    points: list[str]
    """Plan points the run covers (same group and batch)."""

    @property
    def point(self) -> str:
        return self.points[0]


@dataclass
class RunRecord:
    """One lm-eval run that completed."""

    eval: str
    kind: str
    point: str
    points: list[str]
    group: str
    batch: int
    side: str
    role: str
    """'primary', 'reference' (the repeated baseline run, graded) or 'evidence' (profiled, not graded)."""
    repeat: int
    lifetime: int
    output: LmEvalOutput
    outcomes: list[SampleOutcome]
    artifact: str
    engine: dict[str, Any]
    evidence: dict[str, Any] | None = None


@dataclass
class EvalState:
    """Everything the check prepared and collected."""

    datasets: dict[str, ResolvedDataset] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)
    """eval -> why its data is not available."""
    unusable: dict[str, str] = field(default_factory=dict)
    """eval -> why it cannot run in this plan (no matching point, no sample fits)."""
    units: dict[str, list[EvalUnit]] = field(default_factory=dict)
    selections: dict[str, Selection] = field(default_factory=dict)
    runs: list[RunRecord] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    """Runs that failed: 'eval at point on side: message'."""
    notes: list[str] = field(default_factory=list)


def _point_value(point: ConfigPoint, dim: str) -> Any:
    if dim == "context":
        return "full" if point.full_context else point.context
    return getattr(point, dim)


def matching_units(ctx: RunContext, spec: EvalSpec) -> list[EvalUnit]:
    """The (group, batch) runs an eval's ``points`` filter selects in this plan."""
    bad = sorted(set(spec.points) - set(POINT_DIMENSIONS))
    if bad:
        raise FasttrackError(
            f"eval {spec.name!r} filters on unknown point dimension(s) {bad}.",
            hint=f"Use {', '.join(POINT_DIMENSIONS)} in the eval's 'points'.",
        )
    units: dict[tuple[str, int], EvalUnit] = {}
    for group in ctx.plan.groups:
        if group.synthetic_acceptance:  # drafts accepted at fixed rates, whatever the model says: no accuracy
            continue
        for p in ctx.plan.group_points(group):
            if all(str(_point_value(p, d)) in {str(v) for v in vals} for d, vals in spec.points.items()):
                u = units.setdefault(
                    (group.id, p.batch), EvalUnit(eval=spec.name, group=group.id, batch=p.batch, points=[])
                )
                u.points.append(p.id)
    return list(units.values())


class TokenCounter:
    """Counts chat prompt tokens with the served model's tokenizer (vLLM's POST /tokenize)."""

    def __init__(self, base_url: str, model: str) -> None:
        self.base_url = base_url
        self.model = model
        self.max_model_len: int | None = None
        self._http = httpx.Client(
            timeout=120.0, verify=tls_context(), limits=httpx.Limits(keepalive_expiry=KEEPALIVE_EXPIRY_S)
        )
        self(([{"role": "user", "content": "x"}]))

    def __call__(self, messages: list[dict[str, str]]) -> int:
        try:
            r = self._http.post(
                self.base_url + "/tokenize",
                json={"model": self.model, "messages": messages, "add_generation_prompt": True},
            )
        except httpx.HTTPError as exc:
            raise FasttrackError(f"could not count MRCR prompt tokens at {self.base_url}/tokenize: {exc}") from exc
        if r.status_code != 200:
            raise FasttrackError(
                f"{self.base_url}/tokenize answered {r.status_code} while counting MRCR prompt tokens: {r.text[:300]}",
                hint="MRCR needs vLLM's /tokenize endpoint (chat messages) to bin samples by context length.",
            )
        body = r.json()
        if body.get("max_model_len"):
            self.max_model_len = int(body["max_model_len"])
        return int(body["count"])
