"""What every part of the scope shares: the schema version, names of tiers and shared
components, the strict model base, and the validators the sections use."""

from __future__ import annotations

import re
from dataclasses import dataclass
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


# --------------------------------------------------------------------------- which way a setting is stricter


Direction = Literal["higher", "lower", "superset", "subset", "equal", "neutral"]
"""Which way a setting is stricter: ``higher``/``lower``: a higher/lower value; ``superset``: a list that keeps
every item (items added are stricter); ``subset``: a list that accepts fewer items (items added are looser);
``equal``: fasttrack cannot tell (any change loosens); ``neutral``: the setting changes nothing about the
evidence (a change is not reported)."""


@dataclass(frozen=True)
class Stricter:
    """Field metadata: which way a setting is stricter (:func:`stricter`)."""

    direction: Direction


def stricter(direction: Direction) -> Stricter:
    """Field metadata saying which way a setting is stricter: ``x: Annotated[float, stricter("lower")] = ...``.
    A setting without it is ``equal``: any change to it loosens the scope."""
    if direction not in ("higher", "lower", "superset", "subset", "equal", "neutral"):
        raise ValueError(f"unknown stricter direction {direction!r}")
    return Stricter(direction)


def stricter_directions(model: type[BaseModel]) -> dict[str, Direction]:
    """The stricter direction of every setting of ``model`` that declares one (see :func:`stricter`)."""
    out: dict[str, Direction] = {}
    for name, info in model.model_fields.items():
        for meta in info.metadata:
            if isinstance(meta, Stricter):
                out[name] = meta.direction
    return out
