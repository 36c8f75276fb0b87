"""The scope manifest: the declared envelope of one fast-track optimization.

One YAML file per validated optimization lives at ``suites/<name>/scope.yaml``.
It is loaded into the pydantic models below, which reject unknown keys. Errors
name the YAML location (file, line, dotted field path) of the bad field.

Fields that the public material does not state are left out (or null) and named
in ``unknown`` with what is known; such a scope loads, ``fasttrack plan`` says
what is missing, and ``fasttrack validate`` refuses to run it.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from fasttrack import ROOT
from fasttrack.errors import ScopeError

SCOPE_SCHEMA_VERSION = 1
SUITES_DIR = ROOT / "suites"

TierName = Literal["smoke", "standard", "full"]
TIER_ORDER: tuple[TierName, ...] = ("smoke", "standard", "full")

FallbackSituation = Literal[
    "prefill", "mixed_prefill_decode", "batch_above_range", "out_of_envelope_request", "unsupported_deployment"
]
SharedComponent = Literal["input_preparation", "sampling", "kv_cache_management"]
Feature = Literal[
    "structured_output",
    "temperature_sampling",
    "full_context",
    "seeded_sampling",
    "stop_sequences",
    "max_tokens",
    "n_best",
    "logprobs",
    "speculative_acceptance",
]

#: Default locations of the components a fast-track change must not touch, in vLLM's tree.
DEFAULT_SHARED_COMPONENTS: dict[str, list[str]] = {
    "input_preparation": [
        "vllm/v1/worker/gpu_input_batch.py",
        "vllm/v1/worker/gpu/input_batch.py",
        "vllm/v1/worker/block_table.py",
        "vllm/v1/worker/gpu/block_table.py",
        "vllm/v1/worker/gpu_model_runner.py",
        "vllm/v1/worker/gpu/model_runner.py",
        "vllm/v1/worker/cpu_model_runner.py",
        "vllm/inputs/**",
        "vllm/multimodal/inputs.py",
    ],
    "sampling": [
        "vllm/v1/sample/**",
        "vllm/model_executor/layers/sampler.py",
        "vllm/sampling_params.py",
        "vllm/v1/structured_output/**",
    ],
    "kv_cache_management": [
        "vllm/v1/core/kv_cache_manager.py",
        "vllm/v1/core/kv_cache_coordinator.py",
        "vllm/v1/core/kv_cache_utils.py",
        "vllm/v1/core/block_pool.py",
        "vllm/v1/core/single_type_kv_cache_manager.py",
        "vllm/v1/kv_cache_interface.py",
        "vllm/v1/core/sched/**",
    ],
}


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=False, use_attribute_docstrings=True)


# --------------------------------------------------------------------------- model, engine


class ModelSpec(_Model):
    id: str
    """Model id or local path served by vLLM (``--model``)."""
    revision: str | None = None
    """Model revision or content hash, when pinned."""
    served_name: str | None = None
    """Name the server exposes (``--served-model-name``); defaults to ``id``."""
    local_builder: str | None = None
    """For locally built models: the builder script (relative to the repo root). The model is
    built into the fasttrack cache ($FASTTRACK_CACHE, default ~/.cache/fasttrack) and served from there."""


class SideSpec(_Model):
    args: list[str] = Field(default_factory=list)
    """Extra vLLM server arguments for this side, as a free list (any switch can be expressed)."""
    env: dict[str, str] = Field(default_factory=dict)
    """Extra environment variables for this side's engine."""


class EngineSpec(_Model):
    common_args: list[str] = Field(default_factory=list)
    """Server arguments both sides share."""
    env: dict[str, str] = Field(default_factory=dict)
    """Environment both sides share."""
    baseline: SideSpec = Field(default_factory=SideSpec)
    """The stock path."""
    candidate: SideSpec = Field(default_factory=SideSpec)
    """The optimized path (for K3: adds the ``decode_backend: latency_specialized`` setting)."""
    point_args: dict[str, list[str]] = Field(default_factory=dict)
    """How a config point's engine-level dimensions become arguments. Keys: ``tensor_parallel``,
    ``decode_context_parallel``, ``speculative``, ``max_model_len``; values are argument lists with
    ``{tp}``, ``{dcp}``, ``{method}``, ``{draft_length}``, ``{max_model_len}`` placeholders."""
    startup_timeout_s: float = 900.0
    """How long to wait for ``/health`` before declaring the start failed."""

    @field_validator("point_args")
    @classmethod
    def _known_point_args(cls, v: dict[str, list[str]]) -> dict[str, list[str]]:
        allowed = {"tensor_parallel", "decode_context_parallel", "speculative", "max_model_len"}
        bad = sorted(set(v) - allowed)
        if bad:
            raise ValueError(f"unknown point_args key(s) {bad}; allowed: {sorted(allowed)}")
        return v


# --------------------------------------------------------------------------- hardware, envelope


class HardwareSpec(_Model):
    device: Literal["gpu", "cpu"]
    """Device kind the optimization targets."""
    vendor: Literal["nvidia", "amd", "intel", "any"] | None = None
    gpu_family: str | None = None
    """E.g. 'blackwell'."""
    sm_arch: list[str] = Field(default_factory=list)
    """Compute capabilities, e.g. ['sm_100', 'sm_103']."""
    gpu_models: list[str] = Field(default_factory=list)
    """Product names that satisfy the scope, e.g. ['GB300']."""
    gpu_counts: list[int] = Field(default_factory=list)
    """Numbers of GPUs one deployment uses (one engine)."""
    interconnect: Literal["none", "pcie", "nvlink", "nvlink-multicast"] | None = None
    """Interconnect requirement between the GPUs of one deployment."""

    @model_validator(mode="after")
    def _sane(self) -> "HardwareSpec":
        if any(c < 1 for c in self.gpu_counts):
            raise ValueError("gpu_counts must be positive")
        for arch in self.sm_arch:
            if not re.fullmatch(r"sm_\d{2,3}[a-z]?", arch):
                raise ValueError(f"sm_arch entry {arch!r} is not of the form 'sm_100'")
        return self


class BatchRange(_Model):
    min: int = Field(ge=1)
    """Smallest decode batch the optimized path serves."""
    max: int = Field(ge=1)
    """Largest decode batch the optimized path serves."""
    sweep: list[int]
    """Batch sizes the plan measures (each inside [min, max])."""

    @model_validator(mode="after")
    def _sane(self) -> "BatchRange":
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) is larger than max ({self.max})")
        _check_sorted_unique(self.sweep, "sweep")
        out = [b for b in self.sweep if not self.min <= b <= self.max]
        if out:
            raise ValueError(f"sweep values {out} lie outside [{self.min}, {self.max}]")
        return self


class ContextRange(_Model):
    max_model_len: int = Field(ge=16)
    """The engine's ``--max-model-len``: the full context."""
    sweep: list[int | Literal["full"]]
    """Context lengths (prompt tokens) the plan measures; 'full' = max_model_len - max_tokens."""

    @model_validator(mode="after")
    def _sane(self) -> "ContextRange":
        nums = [c for c in self.sweep if c != "full"]
        _check_sorted_unique(nums, "sweep")
        if len(self.sweep) != len(set(map(str, self.sweep))):
            raise ValueError("sweep has duplicates")
        too_long = [c for c in nums if c >= self.max_model_len]
        if too_long:
            raise ValueError(f"context lengths {too_long} are not below max_model_len ({self.max_model_len})")
        if any(c < 1 for c in nums):
            raise ValueError("context lengths must be positive")
        return self


class SpecDecodeSpec(_Model):
    name: str
    """Label used in config point ids, e.g. 'none' or 'dspark'."""
    method: str
    """'none' for no speculation, else the vLLM speculative method."""
    draft_lengths: list[int] = Field(default_factory=list)
    """Draft lengths (num_speculative_tokens) inside the envelope; empty for 'none'."""
    synthetic_acceptance_length: float | None = None
    """Acceptance length forced for synthetic benchmarking, if any."""

    @model_validator(mode="after")
    def _sane(self) -> "SpecDecodeSpec":
        if self.method == "none":
            if self.draft_lengths:
                raise ValueError("method 'none' takes no draft_lengths")
        else:
            if not self.draft_lengths:
                raise ValueError(f"speculative method {self.method!r} needs draft_lengths")
            _check_sorted_unique(self.draft_lengths, "draft_lengths")
            if self.draft_lengths[0] < 1:
                raise ValueError("draft lengths must be >= 1")
            al = self.synthetic_acceptance_length
            if al is not None and not 1 <= al <= self.draft_lengths[-1] + 1:
                raise ValueError(f"synthetic_acceptance_length {al} must lie in [1, max draft length + 1]")
        return self


class Envelope(_Model):
    tensor_parallel: list[int]
    """Tensor-parallel sizes the optimization supports."""
    decode_context_parallel: list[int] = Field(default_factory=lambda: [1])
    """Decode-context-parallel sizes (1 = off)."""
    batch: BatchRange
    context: ContextRange
    speculative: list[SpecDecodeSpec] = Field(default_factory=lambda: [SpecDecodeSpec(name="none", method="none")])
    """Speculative-decoding configurations ('none' included when plain decode is supported)."""

    @model_validator(mode="after")
    def _sane(self) -> "Envelope":
        _check_sorted_unique(self.tensor_parallel, "tensor_parallel")
        _check_sorted_unique(self.decode_context_parallel, "decode_context_parallel")
        if any(t < 1 for t in self.tensor_parallel) or any(d < 1 for d in self.decode_context_parallel):
            raise ValueError("parallel sizes must be >= 1")
        for d in self.decode_context_parallel:
            bad = [t for t in self.tensor_parallel if t % d]
            if bad:
                raise ValueError(f"decode_context_parallel {d} does not divide tensor_parallel {bad}")
        names = [s.name for s in self.speculative]
        if len(names) != len(set(names)):
            raise ValueError("speculative config names must be unique")
        return self

    def spec_by_name(self, name: str) -> SpecDecodeSpec | None:
        return next((s for s in self.speculative if s.name == name), None)


# --------------------------------------------------------------------------- fallback, isolation


class FallbackSpec(_Model):
    stock_path_for: list[FallbackSituation]
    """Situations that must run the stock path."""
    unsupported_deployment: Literal["reject_at_startup", "fallback"] = "reject_at_startup"
    """What the engine does when started outside the envelope."""
    visible: bool = True
    """Whether each fallback must be visible (log line or metric)."""
    log_regex: str | None = None
    """Regex over engine log lines that marks a fallback."""
    metric: str | None = None
    """Prometheus metric counting fallbacks, if any."""

    @model_validator(mode="after")
    def _sane(self) -> "FallbackSpec":
        if self.log_regex:
            _compile(self.log_regex, "log_regex")
        if self.visible and not (self.log_regex or self.metric):
            raise ValueError("visible fallbacks need log_regex or metric to observe them")
        return self


class IsolationSpec(_Model):
    owned_paths: list[str]
    """Globs (repo-relative) of the code the optimization owns."""
    shared_components: dict[SharedComponent, list[str]] = Field(default_factory=lambda: dict(DEFAULT_SHARED_COMPONENTS))
    """Off-limits components and their path globs; defaults cover vLLM's tree."""

    @field_validator("owned_paths")
    @classmethod
    def _nonempty(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("owned_paths must name at least one glob")
        return v


# --------------------------------------------------------------------------- checks' inputs


class PathMarkers(_Model):
    optimized: list[str]
    """Regexes over op/kernel names that prove the optimized path ran."""
    stock: list[str]
    """Regexes over op/kernel names that prove the stock path ran."""

    @model_validator(mode="after")
    def _compile_all(self) -> "PathMarkers":
        if not self.optimized or not self.stock:
            raise ValueError("both optimized and stock need at least one regex")
        for r in [*self.optimized, *self.stock]:
            _compile(r, "marker")
        return self


class KernelSuite(_Model):
    name: str
    path: str
    """Suite directory, relative to the scope file's directory."""
    candidate: str | None = None
    """Module the candidate kernels are imported from (dotted name or file path)."""
    requires_gpu: bool = True
    dtypes: list[Literal["fp32", "fp16", "bf16", "fp8"]] = Field(default_factory=lambda: ["bf16"])
    tolerances: dict[str, dict[str, dict[str, float]]] = Field(default_factory=dict)
    """Per-kernel overrides: {kernel or kernel.output: {dtype or '*': {atol, rtol, ulp}}}; ``ulp`` is the
    budget for repeated runs of one input (0 = bitwise equal). See docs/kernels.md."""
    dims: dict[str, int] = Field(default_factory=dict)
    """Model dimensions the suite uses (hidden size, heads, head dim...)."""


class EvalSpec(_Model):
    name: str
    kind: Literal["aime25", "mrcr"]
    data: str | None = None
    """Local dataset file in the original format (relative to the scope file), or null for the hub."""
    hub_dataset: str | None = None
    """Hub dataset id used when the hub is reachable."""
    points: dict[str, list[Any]] = Field(default_factory=dict)
    """Config point filter: dimension -> values the eval runs at (e.g. batch: [1, 2])."""
    repeats: int = Field(default=1, ge=1)
    """Generations per sample (distinct seeds)."""
    limit: int | None = Field(default=None, ge=1)
    """At most this many samples (per tier scaling is done by the tier)."""
    max_tokens: int = Field(default=1024, ge=1)
    temperature: float = Field(default=0.0, ge=0)
    margin: float = Field(default=0.05, ge=0, le=1)
    """Non-inferiority margin on the score scale."""
    floor: float = Field(default=0.0, ge=0, le=1)
    """Absolute floor on the candidate's mean score."""


class WorkloadSpec(_Model):
    name: str
    kind: Literal["pure_decode", "context_sweep", "mixed", "prompts", "trace_replay"]
    input_len: int | None = Field(default=None, ge=1)
    output_len: int = Field(default=256, ge=1)
    requests_per_run: int | None = Field(default=None, ge=1)
    arrival_rate: float | None = Field(default=None, gt=0)
    """Poisson arrival rate (requests/s) for mixed traffic."""
    prompts: str | None = None
    """Prompt set file (relative to the scope file) for 'prompts'."""
    trace: str | None = None
    """Trace file (relative to the scope file) for 'trace_replay'."""


class Claim(_Model):
    id: str
    """Short identifier."""
    text: str
    """The claim as published."""
    metric: Literal[
        "output_throughput",
        "speedup_output_throughput",
        "speedup_tpot",
        "interactivity_p90",
        "kernels_per_layer",
        "latency_per_layer_us",
    ]
    candidate: float | None = None
    """Claimed candidate value (absolute)."""
    baseline: float | None = None
    """Claimed baseline value (absolute)."""
    speedup: float | None = None
    """Claimed candidate/baseline ratio."""
    point: dict[str, Any]
    """Config point the claim was measured at: tp, dcp, spec, draft_length, batch, context."""
    workload: str | None = None
    notes: str | None = None
    like_for_like: bool = True
    """False when the published comparison used different resources on each side."""


class EquivalenceGate(_Model):
    top_k: int = Field(default=5, ge=1)
    """Logprobs requested per position; vLLM's check_logprobs_close rule uses them."""
    max_tokens: int = Field(default=32, ge=1)
    max_abs_logprob_diff: float = Field(default=0.1, ge=0)
    """Largest allowed |logprob difference| of the chosen token on matching prefixes."""
    max_kl: float = Field(default=0.02, ge=0)
    """Largest allowed mean KL estimate (top-k) on matching prefixes."""
    min_close_fraction: float = Field(default=1.0, ge=0, le=1)
    """Fraction of requests per batch size that must satisfy the check_logprobs_close rule."""


class FeaturesGate(_Model):
    min_json_conformance: float = Field(default=1.0, ge=0, le=1)
    sampling_alpha: float = Field(default=0.001, gt=0, lt=1)
    """Significance level of the chi-square goodness-of-fit test."""
    sampling_samples: int = Field(default=2000, ge=50)
    temperatures: list[float] = Field(default_factory=lambda: [1.0])


class CoverageGate(_Model):
    min_optimized_decode_fraction: float = Field(default=0.95, ge=0, le=1)
    """Fraction of decode steps at an in-scope point that must run the optimized path."""


class PerfGate(_Model):
    noise_margin: float = Field(default=0.05, ge=0, lt=1)
    """A point passes when the lower confidence bound of its speedup is >= 1 - noise_margin."""
    confidence: float = Field(default=0.95, gt=0.5, lt=1)
    metrics: list[
        Literal[
            "median_tpot_ms",
            "median_engine_tpot_ms",
            "median_itl_ms",
            "output_throughput",
            "median_ttft_ms",
            "p90_interactivity",
        ]
    ] = Field(default_factory=lambda: ["median_tpot_ms", "output_throughput"])
    min_runs: int = Field(default=3, ge=1)
    max_runs: int = Field(default=8, ge=1)
    gated_metric: Literal["median_tpot_ms", "median_engine_tpot_ms", "median_itl_ms", "output_throughput"] = (
        "median_tpot_ms"
    )
    """The metric whose interval decides each point. ``median_engine_tpot_ms`` needs engines that report
    per-request metrics (the harness starts its own with ``--enable-per-request-metrics``)."""
    interval: Literal["bootstrap", "lifetime_t"] = "bootstrap"
    """Confidence interval of the speedup: 'bootstrap' (hierarchical: lifetimes, then runs) or
    'lifetime_t' (t interval over per-lifetime values; holds its level with few lifetimes, wider).
    With one lifetime per side only 'bootstrap' applies, and its interval ignores lifetime variance."""
    interleave: bool = False
    """Keep the k-th baseline and the k-th candidate engine of a group up together and alternate each
    point's runs between them (baseline, candidate, candidate, baseline, ...), so that a host that slows
    down for minutes slows both sides alike instead of one side's whole lifetime; the speedup's
    bootstrap then resamples those run pairs together. Needs hardware that holds both engines at once
    (the other checks still use one engine at a time)."""
    interleave_settle_s: float = Field(default=1.5, ge=0, le=60)
    """Interleaved: pause between one side's run and the other's. A vLLM worker keeps polling its
    input queue for about a second after its last step (``shm_broadcast.SpinCondition``,
    ``busy_loop_s=1``), which would compete with the other engine's run for the same cores."""

    @model_validator(mode="after")
    def _runs(self) -> "PerfGate":
        if self.min_runs > self.max_runs:
            raise ValueError(f"min_runs ({self.min_runs}) exceeds max_runs ({self.max_runs})")
        return self


class Gates(_Model):
    equivalence: EquivalenceGate = Field(default_factory=EquivalenceGate)
    features: FeaturesGate = Field(default_factory=FeaturesGate)
    coverage: CoverageGate = Field(default_factory=CoverageGate)
    perf: PerfGate = Field(default_factory=PerfGate)


# --------------------------------------------------------------------------- tiers, estimates


class TierSpec(_Model):
    tensor_parallel: list[int] | None = None
    """Subset of the envelope (null = all)."""
    decode_context_parallel: list[int] | None = None
    speculative: list[str] | None = None
    """Speculative config names; 'name:dl' selects one draft length."""
    batch: list[int] | None = None
    context: list[int | Literal["full"]] | None = None
    checks: list[str] | None = None
    """Checks this tier runs (null = all registered)."""
    workloads: list[str] | None = None
    """Perf workloads this tier runs (null = all)."""
    lifetimes_per_side: int = Field(default=1, ge=1)
    """Engine lifetimes per side per engine group (the unit of replication for perf)."""
    eval_limit: int | None = Field(default=None, ge=1)
    """Cap on samples per eval in this tier."""


class Estimates(_Model):
    """Assumptions behind the plan's cost estimate (override per scope)."""

    engine_start_s: float = Field(default=600.0, ge=0)
    """Seconds from launch to healthy."""
    requests_per_point: int = Field(default=64, ge=1)
    """Requests the checks send per config point and side."""
    tokens_per_request: int = Field(default=1024, ge=1)
    decode_tokens_per_s: float = Field(default=2000.0, gt=0)
    """Whole-engine decode throughput assumed when estimating time per point."""


# --------------------------------------------------------------------------- the scope


class Scope(_Model):
    schema_version: Literal[1] = 1
    name: str
    """Suite name (the folder under suites/)."""
    title: str
    description: str = ""
    status: Literal["complete", "partial"] = "complete"
    """'partial' when the public material leaves fields unknown (listed in ``unknown``)."""
    unknown: dict[str, str] = Field(default_factory=dict)
    """Dotted field path -> what is known / why it is missing."""
    notes: list[str] = Field(default_factory=list)
    """Assumptions made where the source material is silent."""
    sources: list[str] = Field(default_factory=list)
    model: ModelSpec
    engine: EngineSpec = Field(default_factory=EngineSpec)
    hardware: HardwareSpec | None = None
    envelope: Envelope | None = None
    fallback: FallbackSpec | None = None
    isolation: IsolationSpec | None = None
    features: list[Feature] = Field(default_factory=list)
    """Serving features that must keep working on the optimized path."""
    evals: list[EvalSpec] = Field(default_factory=list)
    kernels: list[KernelSuite] = Field(default_factory=list)
    path_markers: PathMarkers | None = None
    workloads: list[WorkloadSpec] = Field(default_factory=list)
    claims: list[Claim] = Field(default_factory=list)
    gates: Gates = Field(default_factory=Gates)
    tiers: dict[TierName, TierSpec]
    estimates: Estimates = Field(default_factory=Estimates)

    @model_validator(mode="after")
    def _cross(self) -> "Scope":
        bad_unknown = sorted(k for k in self.unknown if k.split(".")[0] not in type(self).model_fields)
        if bad_unknown:
            raise ValueError(f"'unknown' names fields that are not part of a scope: {bad_unknown}")
        required = ("hardware", "envelope", "fallback", "isolation", "path_markers")
        missing = [f for f in required if getattr(self, f) is None and f not in self.unknown]
        if missing:
            raise ValueError(f"fields {missing} are missing; give them or list them under 'unknown' with what is known")
        if self.unknown and self.status != "partial":
            raise ValueError("a scope with 'unknown' fields must say status: partial")
        if self.status == "partial" and not self.unknown:
            raise ValueError("status: partial needs 'unknown' to list what is missing")
        if set(self.tiers) != set(TIER_ORDER):
            raise ValueError(f"tiers must define exactly {list(TIER_ORDER)}; got {sorted(self.tiers)}")
        _check_unique([e.name for e in self.evals], "evals names")
        _check_unique([w.name for w in self.workloads], "workloads names")
        _check_unique([c.id for c in self.claims], "claims ids")
        _check_unique([k.name for k in self.kernels], "kernels names")
        if self.envelope is not None:
            self._check_tiers(self.envelope)
            for c in self.claims:
                problem = point_outside_envelope(c.point, self.envelope)
                if problem:
                    raise ValueError(f"claim {c.id!r} points outside the envelope: {problem}")
        wl = {w.name for w in self.workloads}
        for tname, t in self.tiers.items():
            if t.workloads:
                bad = sorted(set(t.workloads) - wl)
                if bad:
                    raise ValueError(f"tier {tname!r} names unknown workloads {bad}")
        return self

    def _check_tiers(self, env: Envelope) -> None:
        full_vals = {
            "tensor_parallel": env.tensor_parallel,
            "decode_context_parallel": env.decode_context_parallel,
            "batch": env.batch.sweep,
            "context": env.context.sweep,
        }
        spec_names = {s.name for s in env.speculative}
        prev: dict[str, set[str]] | None = None
        prev_name = None
        for tname in TIER_ORDER:
            t = self.tiers[tname]
            sel: dict[str, set[str]] = {}
            for dim, allv in full_vals.items():
                chosen = getattr(t, dim)
                if chosen is None:
                    chosen = allv
                bad = [v for v in chosen if v not in allv]
                if bad:
                    raise ValueError(f"tier {tname!r}: {dim} values {bad} are not in the envelope ({allv})")
                sel[dim] = {str(v) for v in chosen}
            specs = t.speculative if t.speculative is not None else sorted(spec_names)
            for s in specs:
                base, _, dl = s.partition(":")
                sp = env.spec_by_name(base)
                if sp is None:
                    raise ValueError(
                        f"tier {tname!r}: speculative config {base!r} is not in the envelope ({sorted(spec_names)})"
                    )
                if dl and (not dl.isdigit() or int(dl) not in sp.draft_lengths):
                    raise ValueError(
                        f"tier {tname!r}: draft length {dl!r} is not one of {sp.name}'s {sp.draft_lengths}"
                    )
            sel["speculative"] = set(_expand_spec_names(specs, env))
            sel["checks"] = set(t.checks) if t.checks is not None else {"*"}
            sel["workloads"] = set(t.workloads) if t.workloads is not None else {"*"}
            if prev is not None:
                for dim, vals in sel.items():
                    pv = prev[dim]
                    if "*" in vals:
                        continue
                    if "*" in pv or not pv <= vals:
                        raise ValueError(
                            f"tiers must be nested: {prev_name!r} selects {dim} {sorted(pv - vals) if '*' not in pv else 'all'} "
                            f"that {tname!r} does not"
                        )
            prev, prev_name = sel, tname

    # ---------------------------------------------------------------- helpers

    @property
    def is_complete(self) -> bool:
        return self.status == "complete"

    def missing_report(self) -> list[str]:
        """Lines naming each unknown field and what is known about it."""
        return [f"{k}: {v}" for k, v in sorted(self.unknown.items())]


def _expand_spec_names(names: list[str], env: Envelope) -> list[str]:
    out: list[str] = []
    for s in names:
        base, _, dl = s.partition(":")
        sp = env.spec_by_name(base)
        if sp is None:
            continue
        if sp.method == "none":
            out.append(sp.name)
        elif dl:
            out.append(f"{sp.name}:{dl}")
        else:
            out.extend(f"{sp.name}:{d}" for d in sp.draft_lengths)
    return out


def point_outside_envelope(point: dict[str, Any], env: Envelope) -> str | None:
    """Why a point (dict of dimension values) lies outside the envelope, or None."""
    allowed = {"tp", "dcp", "spec", "draft_length", "acceptance_length", "batch", "context"}
    extra = sorted(set(point) - allowed)
    if extra:
        return f"unknown dimension(s) {extra}; use {sorted(allowed)}"
    if "tp" in point and point["tp"] not in env.tensor_parallel:
        return f"tp={point['tp']} is not in tensor_parallel {env.tensor_parallel}"
    if "dcp" in point and point["dcp"] not in env.decode_context_parallel:
        return f"dcp={point['dcp']} is not in decode_context_parallel {env.decode_context_parallel}"
    if "batch" in point and not env.batch.min <= int(point["batch"]) <= env.batch.max:
        return f"batch={point['batch']} is outside [{env.batch.min}, {env.batch.max}]"
    if "context" in point:
        c = point["context"]
        if c != "full" and not (isinstance(c, int) and 0 < c < env.context.max_model_len):
            return f"context={c} is not below max_model_len {env.context.max_model_len}"
    spec_name = point.get("spec", "none")
    sp = env.spec_by_name(spec_name)
    if sp is None:
        return f"spec={spec_name!r} is not one of {[s.name for s in env.speculative]}"
    if "draft_length" in point:
        if sp.method == "none":
            return f"spec={spec_name!r} takes no draft_length"
        if point["draft_length"] not in sp.draft_lengths:
            return f"draft_length={point['draft_length']} is not in {sp.draft_lengths}"
    if "acceptance_length" in point and sp.synthetic_acceptance_length is not None:
        if point["acceptance_length"] != sp.synthetic_acceptance_length:
            return f"acceptance_length={point['acceptance_length']} differs from the envelope's {sp.synthetic_acceptance_length}"
    return None


def _check_sorted_unique(vals: list[Any], what: str) -> None:
    if len(vals) != len(set(vals)):
        raise ValueError(f"{what} has duplicates: {vals}")
    if list(vals) != sorted(vals):
        raise ValueError(f"{what} must be in increasing order: {vals}")


def _check_unique(vals: list[str], what: str) -> None:
    dup = sorted({v for v in vals if vals.count(v) > 1})
    if dup:
        raise ValueError(f"{what} must be unique; repeated: {dup}")


def _compile(regex: str, what: str) -> None:
    try:
        re.compile(regex)
    except re.error as exc:
        raise ValueError(f"{what} {regex!r} is not a valid regex: {exc}") from None


# --------------------------------------------------------------------------- loading


class LoadedScope(BaseModel):
    """A scope plus where it came from."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    scope: Scope
    path: Path
    text: str
    sha256: str

    @property
    def base_dir(self) -> Path:
        return self.path.parent

    def resolve(self, rel: str) -> Path:
        """A path from the scope, relative to the scope file's folder."""
        p = Path(rel)
        return p if p.is_absolute() else (self.base_dir / p)


def available_suites() -> list[str]:
    return sorted(p.parent.name for p in SUITES_DIR.glob("*/scope.yaml"))


def find_scope(name_or_path: str) -> Path:
    """A suite name (folder under suites/) or a path to a scope file."""
    p = Path(name_or_path)
    if p.suffix in {".yaml", ".yml"} or p.is_file():
        if not p.is_file():
            raise ScopeError(f"scope file {str(p)!r} does not exist.")
        return p
    if p.is_dir() and (p / "scope.yaml").is_file():
        return p / "scope.yaml"
    cand = SUITES_DIR / name_or_path / "scope.yaml"
    if cand.is_file():
        return cand
    names = ", ".join(available_suites()) or "(none)"
    raise ScopeError(
        f"no suite named {name_or_path!r}.",
        hint=f"Available suites: {names}. Or pass a path to a scope.yaml.",
    )


def _line_map(text: str) -> dict[tuple[Any, ...], int]:
    """Map dotted YAML paths (tuples of keys/indices) to 1-based line numbers."""
    out: dict[tuple[Any, ...], int] = {}
    try:
        node = yaml.compose(text)
    except yaml.YAMLError:
        return out

    def walk(n: yaml.Node, path: tuple[Any, ...]) -> None:
        out[path] = n.start_mark.line + 1
        if isinstance(n, yaml.MappingNode):
            for k, v in n.value:
                key = k.value
                out[path + (key,)] = k.start_mark.line + 1
                walk(v, path + (key,))
                out[path + (key,)] = k.start_mark.line + 1
        elif isinstance(n, yaml.SequenceNode):
            for i, v in enumerate(n.value):
                walk(v, path + (i,))

    if node is not None:
        walk(node, ())
    return out


def _loc_line(loc: tuple[Any, ...], lines: dict[tuple[Any, ...], int]) -> int | None:
    # pydantic locs may contain union-branch tags; strip non-path parts by longest known prefix
    path = tuple(x for x in loc if not (isinstance(x, str) and ("[" in x or x.startswith("function-"))))
    for i in range(len(path), -1, -1):
        if path[:i] in lines:
            return lines[path[:i]]
    return None


def parse_scope(text: str, *, source: str = "<scope>") -> Scope:
    """Parse YAML text into a Scope; raise ScopeError naming file, line and field."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark else source
        problem = getattr(exc, "problem", None) or str(exc)
        raise ScopeError(
            f"{where}: malformed YAML: {problem}.",
            hint="Fix the YAML syntax at that line (indentation, quoting, a missing ':').",
        ) from None
    if not isinstance(data, dict):
        raise ScopeError(f"{source}: a scope must be a YAML mapping at the top level, got {type(data).__name__}.")
    try:
        return Scope.model_validate(data)
    except ValidationError as exc:
        lines = _line_map(text)
        msgs = []
        for err in exc.errors():
            loc = tuple(err["loc"])
            dotted = ".".join(str(x) for x in loc) or "(top level)"
            line = _loc_line(loc, lines)
            where = f"{source}:{line}" if line else source
            msg = err["msg"]
            if err["type"] == "extra_forbidden":
                msg = "unknown key (not part of the scope schema; check the spelling)"
            elif err["type"] == "missing":
                msg = "required field is missing"
            msgs.append(f"{where}: {dotted}: {msg}")
        raise ScopeError(
            "invalid scope:\n  " + "\n  ".join(msgs),
            hint="See schemas/scope.schema.json for every field and its type.",
        ) from None


def load_scope(name_or_path: str) -> LoadedScope:
    path = find_scope(name_or_path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ScopeError(f"cannot read scope file {str(path)!r}: {exc}.") from None
    scope = parse_scope(text, source=str(path))
    return LoadedScope(scope=scope, path=path.resolve(), text=text, sha256=hashlib.sha256(text.encode()).hexdigest())


def json_schema() -> dict[str, Any]:
    """The scope's JSON Schema (checked in as schemas/scope.schema.json)."""
    schema = Scope.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = "https://fasttrack.dev/schemas/scope.schema.json"
    return schema
