"""What the checks exercise and observe: fallback situations, isolation paths, path markers,
kernel suites, evals, perf workloads and the published claims."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from fasttrack.limits import GLOB_MAX_CHARS
from fasttrack.scope.common import (
    DEFAULT_SHARED_COMPONENTS,
    SLUG_MAX,
    SLUG_PATTERN,
    FallbackSituation,
    ScopeModel,
    SharedComponent,
    check_regex,
    stricter,
)

KernelDtype = Literal["fp32", "fp16", "bf16", "fp8"]


def _bf16_only() -> list[KernelDtype]:
    return ["bf16"]


class FallbackSpec(ScopeModel):
    stock_path_for: list[FallbackSituation]
    """Situations that must run the stock path."""
    unsupported_deployment: Literal["reject_at_startup", "fallback"] = "reject_at_startup"
    """What the engine does when started outside the envelope."""
    unsupported_deployment_args: list[str] = Field(default_factory=list)
    """Candidate arguments that start it outside its envelope, for the ``unsupported_deployment`` probe
    (e.g. a tensor-parallel size the envelope excludes). They are appended to the candidate arguments of
    the plan's first engine group; a later flag overrides an earlier one."""
    reject_regex: str | None = None
    """Regex over the engine log that marks a refusal to start outside the envelope
    (``unsupported_deployment: reject_at_startup``); null: any failed start counts as the refusal."""
    visible: bool = True
    """Whether each fallback must be visible (log line or metric)."""
    log_regex: str | None = None
    """Regex over engine log lines that marks a fallback."""
    metric: str | None = None
    """Prometheus metric counting fallbacks, if any."""

    @model_validator(mode="after")
    def _sane(self) -> "FallbackSpec":
        if self.log_regex:
            check_regex(self.log_regex, "log_regex")
        if self.reject_regex:
            check_regex(self.reject_regex, "reject_regex")
        if self.visible and not (self.log_regex or self.metric):
            raise ValueError("visible fallbacks need log_regex or metric to observe them")
        return self


class IsolationSpec(ScopeModel):
    owned_paths: list[str]
    """Globs (repo-relative) of the code the optimization owns."""
    shared_components: dict[SharedComponent, list[str]] = Field(default_factory=lambda: dict(DEFAULT_SHARED_COMPONENTS))
    """Off-limits components and their path globs; defaults cover vLLM's tree."""
    allowed_paths: list[str] = Field(default_factory=list)
    """Globs outside the owned paths that the change may also touch (e.g. its tests or docs): listed in the
    isolation row, not failed. Any other path outside the owned ones fails isolation. Shared components
    are never allowed."""

    @field_validator("owned_paths")
    @classmethod
    def _nonempty(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("owned_paths must name at least one glob")
        return _bounded_globs(v)

    @field_validator("allowed_paths")
    @classmethod
    def _allowed_bounded(cls, v: list[str]) -> list[str]:
        return _bounded_globs(v)

    @field_validator("shared_components")
    @classmethod
    def _shared_bounded(cls, v: dict[SharedComponent, list[str]]) -> dict[SharedComponent, list[str]]:
        for globs in v.values():
            _bounded_globs(globs)
        return v


def _bounded_globs(globs: list[str]) -> list[str]:
    """Each glob at most ``GLOB_MAX_CHARS`` characters and free of control characters (a glob is matched in
    linear time whatever it holds; the bound keeps each match short)."""
    for g in globs:
        if len(g) > GLOB_MAX_CHARS:
            raise ValueError(f"glob {g[:40]!r}... is {len(g)} characters; a glob may have at most {GLOB_MAX_CHARS}")
        if any(ord(c) < 32 or c == "\x7f" for c in g):
            raise ValueError(f"glob {g[:60]!r} holds a control character")
    return globs


class DeviceCounters(ScopeModel):
    """Prometheus counter names (as ``/metrics`` shows them, e.g. with the ``_total`` suffix) that the
    optimized path's kernels count on the device."""

    optimized: str = Field(pattern=r"^[A-Za-z_:][A-Za-z0-9_:]*$", max_length=200)
    """Counts decode steps whose kernels ran the optimized path (replays of CUDA graphs included)."""
    stock: str | None = Field(default=None, pattern=r"^[A-Za-z_:][A-Za-z0-9_:]*$", max_length=200)
    """Counts the candidate's steps on the stock path (recorded beside the evidence; not required)."""


class PathMarkers(ScopeModel):
    optimized: list[str]
    """Regexes over op/kernel names that prove the optimized path ran."""
    stock: list[str]
    """Regexes over op/kernel names that prove the stock path ran."""
    stock_on_baseline: bool = True
    """Whether the stock markers name ops the baseline (the stock build) runs: then each stock marker must match
    an op on the baseline, or the coverage check reports a scope error. False when they mark only the candidate's
    own steps off the optimized path (an op the optimized build calls when it falls back, which stock vLLM never
    runs); each must then match an op on the candidate."""
    device_counters: DeviceCounters | None = None
    """Counters the optimized path's kernels increment on the device, exported as Prometheus counters on the
    engine's ``/metrics``: the evidence of a fast path that branches inside its kernels (a CUDA graph replays
    the same kernels whatever path they take). Null: kernel and op names are the only evidence."""

    @model_validator(mode="after")
    def _compile_all(self) -> "PathMarkers":
        if not self.optimized or not self.stock:
            raise ValueError("both optimized and stock need at least one regex")
        for r in [*self.optimized, *self.stock]:
            check_regex(r, "marker")
        return self


class KernelSuite(ScopeModel):
    name: str = Field(pattern=SLUG_PATTERN, max_length=SLUG_MAX)
    path: str
    """Suite directory, relative to the scope file's directory."""
    candidate: str | None = None
    """Module the candidate kernels are imported from (dotted name or file path): the PR's own kernels
    (or an adapter exposing them under the suite's interface). Null: the suite's default."""
    example_candidate: str | None = None
    """The shipped example kernels (module or file, as the suite names its default) that stand in for
    ``candidate`` in a rehearsal where the PR's module cannot be imported. Their rows are labelled
    'example kernels, not the PR's', and a kernels result built from them is never a pass."""
    requires_gpu: bool = True
    dtypes: list[KernelDtype] = Field(default_factory=_bf16_only)
    tolerances: dict[str, dict[str, dict[str, float]]] = Field(default_factory=dict)
    """Per-kernel overrides: {kernel or kernel.output: {dtype or '*': {atol, rtol, ulp}}}; ``ulp`` is the
    budget for repeated runs of one input (0 = bitwise equal). See docs/kernels.md."""
    dims: dict[str, int] = Field(default_factory=dict)
    """Model dimensions the suite uses (hidden size, heads, head dim...), each in [1, 2**31)."""

    @field_validator("dims")
    @classmethod
    def _dims_bounded(cls, v: dict[str, int]) -> dict[str, int]:
        bad = sorted(k for k, n in v.items() if not 1 <= n < 2**31)
        if bad:
            raise ValueError(f"dims {bad} lie outside [1, 2**31)")
        return v


class EvalSpec(ScopeModel):
    name: str = Field(pattern=SLUG_PATTERN, max_length=SLUG_MAX)
    """A slug: it names the eval's artifact folder."""
    kind: Literal["aime25", "mrcr"]
    data: str | None = None
    """Local dataset file in the original format (relative to the scope file), or null for the hub."""
    hub_dataset: str | None = None
    """Hub dataset id used when the hub is reachable."""
    points: dict[str, list[Any]] = Field(default_factory=dict)
    """Config point filter: dimension -> values the eval runs at (e.g. batch: [1, 2])."""
    repeats: Annotated[int, stricter("higher")] = Field(default=1, ge=1, le=100)
    """Generations per sample (distinct seeds)."""
    limit: Annotated[int | None, stricter("higher")] = Field(default=None, ge=1, le=1_000_000)
    """At most this many samples (per tier scaling is done by the tier)."""
    max_tokens: Annotated[int, stricter("higher")] = Field(default=1024, ge=1, le=1024 * 1024)
    temperature: float = Field(default=0.0, ge=0, le=10)
    margin: Annotated[float, stricter("lower")] = Field(default=0.05, ge=0, le=1)
    """Non-inferiority margin on the score scale."""
    floor: Annotated[float, stricter("higher")] = Field(default=0.0, ge=0, le=1)
    """Absolute floor on the candidate's mean score."""


class WorkloadSpec(ScopeModel):
    name: str = Field(pattern=SLUG_PATTERN, max_length=SLUG_MAX)
    kind: Literal["pure_decode", "context_sweep", "mixed", "prompts", "trace_replay", "concurrency_sweep"]
    input_len: int | None = Field(default=None, ge=1, le=16 * 1024 * 1024)
    output_len: int = Field(default=256, ge=1, le=1024 * 1024)
    requests_per_run: Annotated[int | None, stricter("higher")] = Field(default=None, ge=1, le=100_000)
    arrival_rate: float | None = Field(default=None, gt=0, le=1e6)
    """Poisson arrival rate (requests/s) for mixed traffic."""
    prompts: str | None = None
    """Prompt set file (relative to the scope file) for 'prompts'."""
    trace: str | None = None
    """Trace file (relative to the scope file) for 'trace_replay'."""
    concurrencies: list[Annotated[int, Field(ge=1, le=100_000)]] | None = Field(default=None, max_length=64)
    """'concurrency_sweep': the concurrency levels (users sending back to back), e.g. [1, 2, 4, 8]."""

    @model_validator(mode="after")
    def _sweep(self) -> "WorkloadSpec":
        if self.kind == "concurrency_sweep":
            if not self.concurrencies:
                raise ValueError(
                    f"workload {self.name!r} is a concurrency_sweep and needs concurrencies, e.g. [1, 4, 16]"
                )
            if any(c < 1 for c in self.concurrencies) or len(set(self.concurrencies)) != len(self.concurrencies):
                raise ValueError(f"workload {self.name!r}: concurrencies must be distinct positive integers")
        elif self.concurrencies is not None:
            raise ValueError(f"workload {self.name!r}: concurrencies apply to concurrency_sweep only, not {self.kind}")
        return self


class Claim(ScopeModel):
    id: str = Field(pattern=SLUG_PATTERN, max_length=SLUG_MAX)
    """Short identifier (a slug)."""
    text: str
    """The claim as published."""
    metric: Literal[
        "output_throughput",
        "speedup_output_throughput",
        "speedup_tpot",
        "speedup_engine_tpot",
        "interactivity_p90",
        "kernels_per_layer",
        "latency_per_layer_us",
    ]
    candidate: float | None = Field(default=None, ge=0)
    """Claimed candidate value (absolute)."""
    baseline: float | None = Field(default=None, ge=0)
    """Claimed baseline value (absolute)."""
    speedup: float | None = Field(default=None, gt=0, le=1e6)
    """Claimed candidate/baseline ratio."""
    point: dict[str, Any]
    """Config point the claim was measured at: tp, dcp, spec, draft_length, batch, context."""
    workload: str | None = None
    notes: str | None = None
    like_for_like: bool = True
    """False when the published comparison used different resources on each side."""
    baseline_gpus: int | None = Field(default=None, ge=1, le=1_000_000)
    """GPUs of the published baseline figure (null: the claim's point, both sides alike)."""
    candidate_gpus: int | None = Field(default=None, ge=1, le=1_000_000)
    """GPUs of the published candidate figure (null: the claim's point, both sides alike)."""

    tolerance: float = Field(default=0.05, ge=0, lt=1)
    """How far below the claimed figure the measured interval may reach and the claim still hold: the claim is
    supported when the whole interval lies at or above ``claimed x (1 - tolerance)``, refuted when it lies
    below, inconclusive when it straddles it (:func:`fasttrack.results.claim_verdict`). Not the perf gate's
    noise margin: a claim states what the change achieves, the margin what a run may fail to show."""

    @model_validator(mode="after")
    def _resources(self) -> "Claim":
        b, c = self.baseline_gpus, self.candidate_gpus
        if self.like_for_like and b is not None and c is not None and b != c:
            raise ValueError(
                f"claim {self.id!r} compares {c} candidate GPUs with {b} baseline GPUs, which is not like-for-like: "
                "set like_for_like: false (the claim is then judged per GPU and both per-GPU figures are shown) "
                "or state figures at equal GPU counts"
            )
        if not self.like_for_like and (b is None or c is None):
            raise ValueError(
                f"claim {self.id!r} is not like-for-like: state baseline_gpus and candidate_gpus, so it can be "
                "compared per GPU"
            )
        return self
