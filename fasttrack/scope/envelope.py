"""The envelope: the parallel sizes, decode batches, context lengths and speculative
configurations the optimized path supports, and whether a config point lies inside it."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from fasttrack.scope.common import SLUG_MAX, SLUG_PATTERN, ScopeModel, check_sorted_unique

#: Bounds of the envelope's dimensions (the shipped scopes: batches up to 64, contexts up to 262,144 tokens,
#: draft lengths up to 7, parallel sizes up to 16).
MAX_BATCH = 65_536
MAX_CONTEXT = 16 * 1024 * 1024
MAX_DRAFT = 64
MAX_PARALLEL = 4096


class BatchRange(ScopeModel):
    min: int = Field(ge=1, le=MAX_BATCH)
    """Smallest decode batch the optimized path serves."""
    max: int = Field(ge=1, le=MAX_BATCH)
    """Largest decode batch the optimized path serves."""
    sweep: list[int] = Field(max_length=256)
    """Batch sizes the plan measures (each inside [min, max])."""

    @model_validator(mode="after")
    def _sane(self) -> "BatchRange":
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) is larger than max ({self.max})")
        check_sorted_unique(self.sweep, "sweep")
        out = [b for b in self.sweep if not self.min <= b <= self.max]
        if out:
            raise ValueError(f"sweep values {out} lie outside [{self.min}, {self.max}]")
        return self


class ContextRange(ScopeModel):
    max_model_len: int = Field(ge=16, le=MAX_CONTEXT)
    """The engine's ``--max-model-len``: the full context."""
    sweep: list[int | Literal["full"]] = Field(max_length=256)
    """Context lengths (prompt tokens) the plan measures; 'full' = max_model_len - max_tokens."""

    @model_validator(mode="after")
    def _sane(self) -> "ContextRange":
        nums = [c for c in self.sweep if c != "full"]
        check_sorted_unique(nums, "sweep")
        if len(self.sweep) != len(set(map(str, self.sweep))):
            raise ValueError("sweep has duplicates")
        too_long = [c for c in nums if c >= self.max_model_len]
        if too_long:
            raise ValueError(f"context lengths {too_long} are not below max_model_len ({self.max_model_len})")
        if any(c < 1 for c in nums):
            raise ValueError("context lengths must be positive")
        return self


class SpecDecodeSpec(ScopeModel):
    name: str = Field(pattern=SLUG_PATTERN, max_length=SLUG_MAX)
    """Label used in config point ids, e.g. 'none' or 'dspark'."""
    method: str
    """'none' for no speculation, else the vLLM speculative method."""
    draft_lengths: list[int] = Field(default_factory=list, max_length=64)
    """Draft lengths (num_speculative_tokens) inside the envelope; empty for 'none'."""
    synthetic_acceptance_length: float | None = Field(default=None, ge=1, le=MAX_DRAFT + 1)
    """Acceptance length forced for synthetic benchmarking, if any: the engine runs vLLM's synthetic
    rejection sampler (``speculative_config.rejection_sample_method: synthetic`` with this
    ``synthetic_acceptance_length``), which accepts draft tokens at rates calibrated to this mean
    acceptance length whatever the target model says. Outputs then differ from plain decoding; such a
    group measures speed at a fixed acceptance, not correctness."""
    config: dict[str, Any] = Field(default_factory=dict)
    """Further ``--speculative-config`` keys, passed as given (e.g. ``model`` for a draft model, or
    ``prompt_lookup_max`` / ``prompt_lookup_min`` for n-gram drafting)."""

    @model_validator(mode="after")
    def _sane(self) -> "SpecDecodeSpec":
        if self.method == "none":
            if self.draft_lengths:
                raise ValueError("method 'none' takes no draft_lengths")
        else:
            if not self.draft_lengths:
                raise ValueError(f"speculative method {self.method!r} needs draft_lengths")
            check_sorted_unique(self.draft_lengths, "draft_lengths")
            if self.draft_lengths[0] < 1 or self.draft_lengths[-1] > MAX_DRAFT:
                raise ValueError(f"draft_lengths must lie in [1, {MAX_DRAFT}]: {self.draft_lengths}")
            al = self.synthetic_acceptance_length
            if al is not None and not 1 <= al <= self.draft_lengths[0] + 1:
                raise ValueError(
                    f"synthetic_acceptance_length {al} must lie in [1, draft length + 1] for every draft length "
                    f"(the shortest is {self.draft_lengths[0]})"
                )
        reserved = sorted(
            set(self.config)
            & {"method", "num_speculative_tokens", "rejection_sample_method", "synthetic_acceptance_length"}
        )
        if reserved:
            raise ValueError(f"config keys {reserved} come from method, draft_lengths and synthetic_acceptance_length")
        return self

    def engine_config(self, draft_length: int) -> dict[str, Any]:
        """vLLM's ``--speculative-config`` for one draft length (synthetic acceptance included)."""
        cfg: dict[str, Any] = {"method": self.method, "num_speculative_tokens": draft_length, **self.config}
        if self.synthetic_acceptance_length is not None:
            cfg["rejection_sample_method"] = "synthetic"
            cfg["synthetic_acceptance_length"] = self.synthetic_acceptance_length
        return cfg


class Envelope(ScopeModel):
    tensor_parallel: list[int] = Field(max_length=64)
    """Tensor-parallel sizes the optimization supports."""
    decode_context_parallel: list[int] = Field(default_factory=lambda: [1], max_length=64)
    """Decode-context-parallel sizes (1 = off)."""
    batch: BatchRange
    context: ContextRange
    speculative: list[SpecDecodeSpec] = Field(default_factory=lambda: [SpecDecodeSpec(name="none", method="none")])
    """Speculative-decoding configurations ('none' included when plain decode is supported)."""

    @model_validator(mode="after")
    def _sane(self) -> "Envelope":
        check_sorted_unique(self.tensor_parallel, "tensor_parallel")
        check_sorted_unique(self.decode_context_parallel, "decode_context_parallel")
        for dim in ("tensor_parallel", "decode_context_parallel"):
            if any(not 1 <= t <= MAX_PARALLEL for t in getattr(self, dim)):
                raise ValueError(f"{dim} sizes must lie in [1, {MAX_PARALLEL}]: {getattr(self, dim)}")
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


def expand_spec_names(names: list[str], env: Envelope) -> list[str]:
    """Speculative config names (``name`` or ``name:draft_length``) as point labels, one per draft length."""
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
            return (
                f"acceptance_length={point['acceptance_length']} differs from the envelope's "
                f"{sp.synthetic_acceptance_length}"
            )
    return None
