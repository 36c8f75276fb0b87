"""What every part of the scope shares: the schema version, names of tiers and shared
components, the strict model base, and the validators the sections use."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from fasttrack import ROOT

SCOPE_SCHEMA_VERSION = 1
SUITES_DIR = ROOT / "suites"

#: A name that may become a path component (a cache folder, an artifact folder, a log file): letters and
#: digits, single ``.``, ``_`` or ``-`` between them; no ``/``, no ``..``, no leading dot (the schema's pattern).
SLUG_PATTERN = r"^[A-Za-z0-9]+([._-][A-Za-z0-9]+)*$"
SLUG_MAX = 64

TierName = Literal["smoke", "standard", "full"]
TIER_ORDER: tuple[TierName, ...] = ("smoke", "standard", "full")

FallbackSituation = Literal[
    "prefill", "mixed_prefill_decode", "batch_above_range", "out_of_envelope_request", "unsupported_deployment"
]
SharedComponent = Literal["input_preparation", "sampling", "kv_cache_management"]

#: Default locations of the components a fast-track change must not touch, in vLLM's tree.
DEFAULT_SHARED_COMPONENTS: dict[SharedComponent, list[str]] = {
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


class ScopeModel(BaseModel):
    """Base of every scope section: unknown keys are rejected; field docstrings become the
    JSON Schema's descriptions."""

    model_config = ConfigDict(extra="forbid", frozen=False, use_attribute_docstrings=True, allow_inf_nan=False)
    """``allow_inf_nan=False``: no float of a scope is NaN or infinite (every count, time and probability
    also has bounds of its own, chosen from the shipped scopes' values with room)."""


def check_sorted_unique(vals: list[Any], what: str) -> None:
    """Raise ValueError unless ``vals`` is strictly increasing."""
    if len(vals) != len(set(vals)):
        raise ValueError(f"{what} has duplicates: {vals}")
    if list(vals) != sorted(vals):
        raise ValueError(f"{what} must be in increasing order: {vals}")


def check_unique(vals: list[str], what: str) -> None:
    """Raise ValueError naming the repeated values of ``vals``."""
    dup = sorted({v for v in vals if vals.count(v) > 1})
    if dup:
        raise ValueError(f"{what} must be unique; repeated: {dup}")


def check_regex(regex: str, what: str) -> None:
    """Raise ValueError when ``regex`` does not compile."""
    try:
        re.compile(regex)
    except re.error as exc:
        raise ValueError(f"{what} {regex!r} is not a valid regex: {exc}") from None
