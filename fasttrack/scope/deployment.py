"""What is served and where: the model, each side's engine arguments and environment, and
the hardware the optimization targets."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from fasttrack.scope.common import ScopeModel


class ModelSpec(ScopeModel):
    id: str
    """Model id or local path served by vLLM (``--model``)."""
    revision: str | None = None
    """Model revision or content hash, when pinned."""
    served_name: str | None = None
    """Name the server exposes (``--served-model-name``); defaults to ``id``."""
    local_builder: str | None = None
    """For locally built models: the builder script (relative to the repo root). The model is
    built into the fasttrack cache ($FASTTRACK_CACHE, default ~/.cache/fasttrack) and served from there."""


class SideSpec(ScopeModel):
    args: list[str] = Field(default_factory=list)
    """Extra vLLM server arguments for this side, as a free list (any switch can be expressed)."""
    env: dict[str, str] = Field(default_factory=dict)
    """Extra environment variables for this side's engine."""


class EngineSpec(ScopeModel):
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


class HardwareSpec(ScopeModel):
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
