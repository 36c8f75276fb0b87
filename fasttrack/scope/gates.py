"""The pass rules per check (thresholds and statistics), the tiers (which subset of the
matrix each runs) and the assumptions of the plan's cost estimate.

A check's section of ``gates`` is its gate model: a :class:`CheckGate` subclass that names its
check (``class PerfGate(CheckGate, check="perf")``); defining one registers it (the registry's kind
``gate``, keyed by the check's name), which is what makes ``gates.<check>`` part of the scope and of its
JSON Schema (:func:`gate_models`). The check declares it as its ``gate_model``. Each setting says which
way is stricter as its field metadata (:func:`stricter`), which the comparison with a trusted scope reads
(:mod:`fasttrack.scope.compare`). The shipped checks' gate models are here because other layers read them
too (the plan's cost estimate reads ``gates.equivalence``, the features check compares outputs by the
equivalence gate); a new check defines its gate model in its own module.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, TypeVar

from pydantic import ConfigDict, Field, ValidationError, create_model, field_validator, model_validator
from pydantic_core import InitErrorDetails

from fasttrack import registry
from fasttrack.scope.common import Direction, ScopeModel, stricter, stricter_directions
from fasttrack.scope.reference import StockReference

PerfMetric = Literal[
    "median_tpot_ms",
    "median_engine_tpot_ms",
    "median_itl_ms",
    "output_throughput",
    "median_ttft_ms",
    "p50_interactivity",
    "p90_interactivity",
    "goodput",
]
"""Metrics the perf check reports per point (``goodput`` needs ``gates.perf.slo``)."""


#: Highest sampling temperature a scope may ask for (the shipped scopes use 1.0 and 0.6).
MAX_TEMPERATURE = 10.0


def _default_perf_metrics() -> list[PerfMetric]:
    return ["median_tpot_ms", "output_throughput"]


class CheckGate(ScopeModel):
    """The gate settings of one check (its section of the scope's ``gates``); subclasses name the check."""

    check_name: ClassVar[str] = ""
    """The check whose section this is (the key under ``gates``)."""

    def __init_subclass__(cls, *, check: str | None = None, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        if check is not None:
            prior = registry.peek("gate", check)
            if prior is not None and prior.__qualname__ != cls.__qualname__:
                raise TypeError(f"gates.{check} is declared twice ({prior.__qualname__}, {cls.__qualname__})")
            cls.check_name = check
            registry.register("gate", check, cls, replace=prior is not None)

    @classmethod
    def directions(cls) -> dict[str, Direction]:
        """Which way each of its settings is stricter (:func:`stricter`; the others: ``equal``)."""
        return stricter_directions(cls)


G = TypeVar("G", bound=CheckGate)


def gate_models() -> dict[str, type[CheckGate]]:
    """Every gate section a scope may have: check name -> its gate model (the registry's kind ``gate``: the shipped
    ones in the order they were declared, then other packages')."""
    return registry.entries("gate")


class EquivalenceGate(CheckGate, check="equivalence"):
    top_k: Annotated[int, stricter("higher")] = Field(default=5, ge=1, le=100)
    """Logprobs requested per position; vLLM's check_logprobs_close rule uses them."""
    max_tokens: Annotated[int, stricter("higher")] = Field(default=32, ge=1, le=65_536)
    max_abs_logprob_diff: Annotated[float, stricter("lower")] = Field(default=0.1, ge=0, le=100)
    """Largest allowed |logprob difference| of the chosen token on matching prefixes, candidate against baseline:
    the absolute limit of a scope without ``reference`` (with one, the limits come from stock's own builds)."""
    max_kl: Annotated[float, stricter("lower")] = Field(default=0.02, ge=0, le=100)
    """Largest allowed mean KL estimate (top-k) on matching prefixes, candidate against baseline (a hard cap, with
    or without ``reference``)."""
    min_close_fraction: Annotated[float, stricter("higher")] = Field(default=1.0, ge=0, le=1)
    """Fraction of requests per batch size that must satisfy the check_logprobs_close rule (a hard gate, with or
    without ``reference``)."""
    reference: StockReference | None = None
    """Stock's own legitimate builds (variants of the baseline run in the same validate run), which calibrate the
    limits: the candidate's distance from the reference must be within ``multiple`` x stock's + ``tolerance``
    (:mod:`fasttrack.scope.reference`). None: the absolute ``max_abs_logprob_diff``."""

    @model_validator(mode="after")
    def _one_drift_rule(self) -> "EquivalenceGate":
        if self.reference is not None and "max_abs_logprob_diff" in self.model_fields_set:
            raise ValueError(
                "max_abs_logprob_diff is the absolute limit of a scope without reference; with reference the "
                "limit is reference.multiple x stock's distance + reference.tolerance.max_abs_logprob_diff: "
                "remove max_abs_logprob_diff"
            )
        return self


class FeaturesGate(CheckGate, check="features"):
    min_json_conformance: Annotated[float, stricter("higher")] = Field(default=1.0, ge=0, le=1)
    sampling_alpha: Annotated[float, stricter("higher")] = Field(default=0.001, gt=0, lt=1)
    """Significance level of the chi-square goodness-of-fit test."""
    sampling_samples: Annotated[int, stricter("higher")] = Field(default=2000, ge=50, le=1_000_000)
    temperatures: Annotated[list[float], stricter("superset")] = Field(default_factory=lambda: [1.0], max_length=16)
    """Sampling temperatures the features check tests, each in [0, 10] (vLLM's own range is unbounded above)."""

    @model_validator(mode="after")
    def _temperatures(self) -> "FeaturesGate":
        bad = [t for t in self.temperatures if not 0 <= t <= MAX_TEMPERATURE]
        if bad:
            raise ValueError(f"temperatures {bad} lie outside [0, {MAX_TEMPERATURE}]")
        return self


class CoverageGate(CheckGate, check="coverage"):
    min_optimized_decode_fraction: Annotated[float, stricter("higher")] = Field(default=0.95, ge=0, le=1)
    """Fraction of decode steps at an in-scope point that must run the optimized path."""


class ServiceLevel(ScopeModel):
    """A latency service-level objective: goodput is the output throughput of the requests that meet it."""

    percentile: float = Field(default=99.0, gt=0, lt=100)
    """The percentile each bound applies to at a point (e.g. TTFT p99 <= ttft_ms)."""
    ttft_ms: float | None = Field(default=None, gt=0, le=1e7)
    """Bound on time to first token (ms)."""
    itl_ms: float | None = Field(default=None, gt=0, le=1e7)
    """Bound on the gap between consecutive tokens (ms)."""
    tpot_ms: float | None = Field(default=None, gt=0, le=1e7)
    """Bound on time per output token after the first (ms)."""
    gate: bool = False
    """Gate goodput at every point as well: its speedup's lower bound must reach 1 - noise_margin."""

    @model_validator(mode="after")
    def _some_bound(self) -> "ServiceLevel":
        if self.ttft_ms is None and self.itl_ms is None and self.tpot_ms is None:
            raise ValueError("an SLO needs at least one of ttft_ms, itl_ms, tpot_ms")
        return self

    def describe(self) -> str:
        q = f"p{self.percentile:g}"
        parts = [
            f"{name} {q} <= {v:g} ms"
            for name, v in (("TTFT", self.ttft_ms), ("ITL", self.itl_ms), ("TPOT", self.tpot_ms))
            if v is not None
        ]
        return ", ".join(parts)


class PerfCalibration(ScopeModel):
    """A signed record of this host class's lifetime variance per point (``fasttrack calibrate``): the perf
    intervals of a run with one engine lifetime per side take their lifetime-to-lifetime variance from it."""

    record: str = Field(min_length=1, max_length=4096)
    """The record file (a DSSE envelope), relative to the scope file's folder."""
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    """The record file's sha256: the scope pins the record it was reviewed with."""
    keys: list[str] = Field(default_factory=list, max_length=16)
    """Public keys (relative paths) one of which must have signed the record; empty: the pinned hash alone."""


class PerfGate(CheckGate, check="perf"):
    noise_margin: Annotated[float, stricter("lower")] = Field(default=0.05, ge=0, lt=1)
    """A point passes when the lower confidence bound of its speedup is >= 1 - noise_margin."""
    confidence: Annotated[float, stricter("higher")] = Field(default=0.95, gt=0.5, lt=1)
    metrics: Annotated[list[PerfMetric], stricter("superset")] = Field(default_factory=_default_perf_metrics)
    min_runs: Annotated[int, stricter("higher")] = Field(default=3, ge=1, le=1000)
    max_runs: Annotated[int, stricter("higher")] = Field(default=8, ge=1, le=1000)
    gated_metric: Literal["median_tpot_ms", "median_engine_tpot_ms", "median_itl_ms", "output_throughput"] = (
        "median_tpot_ms"
    )
    """The metric whose interval decides each point. ``median_engine_tpot_ms`` needs engines that report
    per-request metrics (the harness starts its own with ``--enable-per-request-metrics``)."""
    interval: Literal["lifetime", "bootstrap", "lifetime_t"] = "lifetime"
    """Confidence interval of the speedup; its unit is always the engine lifetime. 'lifetime' (the default): a t
    interval whose lifetime variance comes from ``calibration`` and/or the run's own lifetimes (three or more in
    all). 'bootstrap': the hierarchical bootstrap (lifetimes, then runs) where each side has two lifetimes or
    more (it underestimates the variance with two or three). 'lifetime_t': the t interval over the run's own
    lifetimes only, with three or more in all. Where the chosen one has too few lifetimes, 'lifetime' applies;
    a point where nothing measures the lifetime variance is inconclusive (never passed, never strictly better)."""
    calibration: PerfCalibration | None = None
    """The calibration record of this host class's lifetime variance (``interval: lifetime``)."""
    adaptive: bool = True
    """Adaptive repetition: looks after ``min_runs`` runs, and a decided point is not measured on later
    lifetimes. False: a fixed design, every lifetime measures every point with ``min_runs`` runs and the point is
    judged once at the end (what a calibration needs: every lifetime pair at every point)."""
    interleave: bool = False
    """Keep the k-th baseline and the k-th candidate engine of a group up together and alternate each
    point's runs between them (baseline, candidate, candidate, baseline, ...), so that a host that slows
    down for minutes slows both sides alike instead of one side's whole lifetime; the speedup's
    bootstrap then resamples those run pairs together. Needs hardware that holds both engines at once
    (the other checks still use one engine at a time)."""
    require: Literal["no_regression", "strictly_better"] = "no_regression"
    """What every point must show: ``no_regression`` (lower bound >= 1 - noise_margin) or ``strictly_better``
    (lower bound > 1: the candidate is measurably faster at every point)."""
    curve_dominance: bool = False
    """``concurrency_sweep`` workloads: require the candidate's interactivity-throughput curve to dominate the
    baseline's within the margin at every measured concurrency (the lower bounds of both the per-GPU output
    throughput and the P90 interactivity speedups >= 1 - noise_margin)."""
    slo: ServiceLevel | None = None
    """A latency SLO: goodput (output tokens/s of the requests meeting it) is reported per point, and gated
    when ``slo.gate``."""
    interleave_settle_s: Annotated[float, stricter("neutral")] = Field(default=1.5, ge=0, le=60)
    """Interleaved: pause between one side's run and the other's. A vLLM worker keeps polling its
    input queue for about a second after its last step (``shm_broadcast.SpinCondition``,
    ``busy_loop_s=1``), which would compete with the other engine's run for the same cores."""

    @model_validator(mode="after")
    def _runs(self) -> "PerfGate":
        if self.min_runs > self.max_runs:
            raise ValueError(f"min_runs ({self.min_runs}) exceeds max_runs ({self.max_runs})")
        if self.interleave and (self.min_runs % 2 or self.max_runs % 2):
            raise ValueError(
                f"interleave takes runs in A B B A blocks (two run pairs each), so min_runs ({self.min_runs}) and "
                f"max_runs ({self.max_runs}) must be even"
            )
        if "goodput" in self.metrics and self.slo is None:
            raise ValueError("the goodput metric needs an slo")
        return self


class Gates(ScopeModel):
    """Thresholds and statistics per check: one section per check that declares a gate, with its defaults where
    the scope leaves it out."""

    # the sections are the declared gate models (gate_models()); ``gates.perf`` reads the perf check's section,
    # ``gates.of(PerfGate)`` the same, typed

    model_config = ConfigDict(extra="allow")

    if TYPE_CHECKING:  # pragma: no cover - the sections are the declared gate models, read as attributes

        def __getattr__(self, name: str) -> Any: ...

    @model_validator(mode="before")
    @classmethod
    def _sections(cls, data: Any) -> Any:
        if isinstance(data, Gates):
            return data
        if data is None:
            data = {}
        if not isinstance(data, Mapping):
            raise ValueError("gates must be a mapping of check name to that check's gate settings")
        models = gate_models()
        errors: list[InitErrorDetails] = [
            {"type": "extra_forbidden", "loc": (str(k),), "input": v} for k, v in data.items() if k not in models
        ]
        out: dict[str, Any] = {}
        for name, model in models.items():
            given = data.get(name)
            try:
                out[name] = given if isinstance(given, model) else model.model_validate({} if given is None else given)
            except ValidationError as exc:
                for e in exc.errors(include_url=False):
                    err: InitErrorDetails = {"type": e["type"], "loc": (name, *e["loc"]), "input": e["input"]}
                    if "ctx" in e:
                        err["ctx"] = e["ctx"]
                    errors.append(err)
        if errors:
            raise ValidationError.from_exception_data("Gates", errors)
        return out

    def of(self, model: type[G]) -> G:
        """The section of ``model``'s check, typed."""
        got = getattr(self, model.check_name, None)
        if not isinstance(got, model):
            raise KeyError(f"gates.{model.check_name} is not a {model.__name__} (is its check registered?)")
        return got

    @classmethod
    def declared_schema(cls) -> dict[str, Any]:
        """The JSON Schema of ``gates`` with one property per declared gate model (for the scope's schema)."""
        fields: dict[str, Any] = {n: (m, Field(default_factory=m)) for n, m in gate_models().items()}
        model = create_model("Gates", __base__=ScopeModel, __doc__=cls.__doc__, **fields)
        return model.model_json_schema(ref_template="#/$defs/{model}")


class TierSpec(ScopeModel):
    tensor_parallel: list[int] | None = None
    """Subset of the envelope (null = all)."""
    decode_context_parallel: list[int] | None = None
    speculative: list[str] | None = None
    """Speculative config names; 'name:dl' selects one draft length."""
    batch: list[int] | None = None
    context: list[int | Literal["full"]] | None = None
    checks: list[str] | None = Field(default=None, min_length=1)
    """Checks this tier runs (null = all registered). A check the list leaves out is recorded ``not_run`` and
    is not required for this tier's verdict; isolation runs in every tier."""
    workloads: list[str] | None = None
    """Perf workloads this tier runs (null = all)."""
    features: list[str] | None = None
    """Serving features this tier checks (null = every feature of the scope)."""
    evals: list[str] | None = None
    """Evals this tier runs, by name (null = all)."""
    lifetimes_per_side: int = Field(default=1, ge=1, le=100)
    """Engine lifetimes per side per engine group (the unit of replication for perf)."""
    eval_limit: int | None = Field(default=None, ge=1, le=1_000_000)
    """Cap on samples per eval in this tier."""


class Estimates(ScopeModel):
    """The engine's speed on the scope's hardware, behind the plan's cost estimate (:mod:`fasttrack.planning.cost`: each
    check's work, counted from the scope and the tier, in these units)."""

    engine_start_s: float = Field(default=600.0, ge=0, le=86_400)
    """Seconds from launch to healthy."""
    engine_stop_s: float = Field(default=10.0, ge=0, le=86_400)
    """Seconds to stop an engine."""
    requests_per_point: int = Field(default=64, ge=1, le=1_000_000)
    """Not used by the cost model any more (each check's requests are counted); accepted for older scopes."""
    tokens_per_request: int = Field(default=1024, ge=1, le=16 * 1024 * 1024)
    """Not used by the cost model any more (each check's output lengths are counted); accepted for older scopes."""
    decode_tokens_per_s: float = Field(default=2000.0, gt=0, le=1e9)
    """Whole-engine decode throughput at a full batch (output tokens per second)."""
    stream_tokens_per_s: float | None = Field(default=None, gt=0, le=1e9)
    """Decode speed of one request alone (batch 1); default ``decode_tokens_per_s`` / 16."""
    prefill_tokens_per_s: float = Field(default=20_000.0, gt=0, le=1e12)
    """Prompt tokens per second."""
    profile_window_s: float = Field(default=10.0, ge=0, le=86_400)
    """Seconds a profiler window costs beyond its requests (start, stop, trace export)."""
    eval_run_s: float = Field(default=10.0, ge=0, le=86_400)
    """Seconds an lm-eval run costs before its requests (loading the task and the tokenizer)."""
    eval_output_fraction: float = Field(default=1.0, gt=0, le=1)
    """Share of an eval's ``max_tokens`` a request generates on average (1: every answer runs to the limit)."""
    eval_samples: dict[str, int] = Field(default_factory=dict)
    """Samples of an eval's dataset, by eval name (``*``: any other), where the scope names no limit; the public
    AIME 2025 (30) and MRCR (2,400) are known."""
    kernels_s: float = Field(default=600.0, ge=0, le=864_000)
    """Seconds of the engine-less kernel tests (every shard runs them)."""

    @field_validator("eval_samples")
    @classmethod
    def _positive_samples(cls, v: dict[str, int]) -> dict[str, int]:
        if any(not 1 <= n <= 100_000_000 for n in v.values()):
            raise ValueError("eval_samples values must lie in [1, 100000000]")
        return v
