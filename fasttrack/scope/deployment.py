"""What is served and where: the model, each side's engine arguments and environment, and
the hardware the optimization targets."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from fasttrack.scope.common import ScopeModel

HOST_SAFETY_ENV: dict[str, str] = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}
"""The host's GPU safety settings (NVLink multicast off: it can take shared GPUs down) and their safe
values. Every engine fasttrack starts gets the host's value of each unchanged, or the safe value where the
host sets none (:mod:`fasttrack.engine.cmdline`); a scope's ``env`` may neither set nor clear them."""


def _no_host_safety_env(env: dict[str, str]) -> dict[str, str]:
    taken = [k for k in HOST_SAFETY_ENV if k in env]
    if taken:
        raise ValueError(
            f"{', '.join(taken)} {'is a host safety setting' if len(taken) == 1 else 'are host safety settings'} "
            "(NVLink multicast can take shared GPUs down), which a scope can neither set nor clear: every engine "
            "gets the host's value unchanged, or "
            + ", ".join(f"{k}={HOST_SAFETY_ENV[k]}" for k in taken)
            + " where the host sets none. Remove it from this env"
        )
    return env


#: GPUs one engine may use at most (the largest shipped scope uses 16).
MAX_GPUS = 65_536


class ModelSpec(ScopeModel):
    id: str
    """Model id or local path served by vLLM (``--model``)."""
    revision: str | None = None
    """Model revision or content hash, when pinned."""
    served_name: str | None = None
    """Name the server exposes (``--served-model-name``); defaults to ``id``."""
    local_builder: str | None = Field(default=None, max_length=256)
    """For locally built models: the builder script (relative to the scope file's folder). The model is
    built into the fasttrack cache ($FASTTRACK_CACHE, default ~/.cache/fasttrack) and served from there."""


class SideSpec(ScopeModel):
    args: list[str] = Field(default_factory=list)
    """Extra vLLM server arguments for this side, as a free list (any switch can be expressed)."""
    env: dict[str, str] = Field(default_factory=dict)
    """Extra environment variables for this side's engine (not the host's GPU safety settings:
    ``NCCL_NVLS_ENABLE``, ``TORCH_SYMM_MEM_DISABLE_MULTICAST``, ``NVSHMEM_DISABLE_NVLS``)."""

    _env = field_validator("env")(_no_host_safety_env)


#: Core numbers of ``engine.cpu_pinning.cores`` lie below this (a CPU list is expanded core by core).
MAX_CPU_ID = 65536


class CpuPinning(ScopeModel):
    """How engines that are up together (interleaved perf pairs) share this host's CPU cores."""

    mode: Literal["split", "off"] = "split"
    """``split``: each engine of a pair gets its own half of the cores (``fasttrack.engine.pinning``); its
    processes inherit that CPU affinity mask, and a CPU engine binds its compute threads inside it. ``off``:
    both engines may use every core."""
    cores: str | None = Field(default=None, max_length=256)
    """The cores to split, as a CPU list (``"0-31,64-95"``; core numbers below 65536); null: every core the
    harness may use."""
    alternate: Literal["lifetimes", "blocks", "runs", "off"] = "lifetimes"
    """``lifetimes``: the halves swap sides on every engine lifetime (lifetime 0: baseline on the first half);
    ``blocks``: also between the A B B A blocks of runs within a lifetime, every thread of both engines moved
    (for hosts with one memory node, where moving costs nothing); ``runs``: before every run the engine about
    to run moves to the measuring half and the other one off it, so both runs of a pair use the same cores (the
    measuring half alternates between blocks; one memory node too); ``off``: the baseline always on the first."""

    @field_validator("cores")
    @classmethod
    def _cpu_list(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"\d+(-\d+)?(,\d+(-\d+)?)*", v.replace(" ", "")):
            raise ValueError(f"{v!r} is not a CPU list such as '0-31,64-95'")
        if v is not None and any(int(n) >= MAX_CPU_ID for n in re.findall(r"\d+", v)):
            raise ValueError(f"{v!r} names a core number of {MAX_CPU_ID} or more")
        return v


class EngineSpec(ScopeModel):
    common_args: list[str] = Field(default_factory=list)
    """Server arguments both sides share."""
    env: dict[str, str] = Field(default_factory=dict)
    """Environment both sides share (not the host's GPU safety settings: ``NCCL_NVLS_ENABLE``,
    ``TORCH_SYMM_MEM_DISABLE_MULTICAST``, ``NVSHMEM_DISABLE_NVLS``)."""
    baseline: SideSpec = Field(default_factory=SideSpec)
    """The stock path."""
    candidate: SideSpec = Field(default_factory=SideSpec)
    """The optimized path (for K3: adds the ``decode_backend: latency_specialized`` setting)."""
    point_args: dict[str, list[str]] = Field(default_factory=dict)
    """How a config point's engine-level dimensions become arguments. Keys: ``tensor_parallel``,
    ``decode_context_parallel``, ``speculative``, ``max_model_len``; values are argument lists with
    ``{tp}``, ``{dcp}``, ``{method}``, ``{draft_length}``, ``{max_model_len}`` placeholders."""
    startup_timeout_s: float = Field(default=900.0, gt=0, le=86_400)
    """How long to wait for ``/health`` before declaring the start failed."""
    cpu_pinning: CpuPinning = Field(default_factory=CpuPinning)
    """CPU cores of engines that are up together (interleaved perf): disjoint halves by default."""

    _env = field_validator("env")(_no_host_safety_env)

    @field_validator("point_args")
    @classmethod
    def _known_point_args(cls, v: dict[str, list[str]]) -> dict[str, list[str]]:
        allowed = {"tensor_parallel", "decode_context_parallel", "speculative", "max_model_len"}
        bad = sorted(set(v) - allowed)
        if bad:
            raise ValueError(f"unknown point_args key(s) {bad}; allowed: {sorted(allowed)}")
        return v


class NodeSpec(ScopeModel):
    """The hosts (nodes) an engine runs on: GPUs per host and the NVLink domain they belong to."""

    gpus: int = Field(ge=1, le=1024)
    """GPUs one node (host) exposes, e.g. 4 for a GB300 NVL72 compute tray. On CPU scopes: the engine
    ranks one node runs (a CPU rehearsal of a multi-node layout uses 1)."""
    nvlink_domain: int | None = Field(default=None, ge=1, le=65_536)
    """GPUs in one NVLink domain (72 for a GB300 NVL72 rack); null when NVLink does not reach beyond a node.
    An engine that spans nodes must fit in one domain."""
    fabric: Literal["mnnvl", "network"] | None = None
    """What joins the nodes of one engine: ``mnnvl`` (the multi-node NVLink fabric of an NVL72 rack,
    checked on each host) or ``network`` (no NVLink between hosts). Null: engines never span nodes."""
    name: str | None = None
    """What one node is, e.g. 'GB300 NVL72 compute tray'."""


class HardwareSpec(ScopeModel):
    device: Literal["gpu", "cpu"]
    """Device kind the optimization targets."""
    vendor: Literal["nvidia", "amd", "intel", "any"] | None = None
    gpu_family: str | None = None
    """E.g. 'blackwell'."""
    sm_arch: list[str] = Field(default_factory=list)
    """Compute capabilities, e.g. ['sm_100', 'sm_103']. A host passes when its GPUs have one of them and,
    where ``gpu_models`` is given too, are one of those models."""
    gpu_models: list[str] = Field(default_factory=list)
    """Product names that satisfy the scope, e.g. ['GB300'] (matched as substrings of the driver's name)."""
    gpu_counts: list[int] = Field(default_factory=list, max_length=64)
    """Numbers of GPUs one deployment uses (one engine)."""
    interconnect: Literal["none", "pcie", "nvlink", "nvlink-multicast"] | None = None
    """Interconnect requirement between the GPUs of one node (``nvlink-multicast``: NVLink with NVLS
    multicast, NVSwitch-based systems)."""
    node: NodeSpec | None = None
    """The node model: GPUs per host and the NVLink domain. Null: one engine runs on one host."""

    @model_validator(mode="after")
    def _sane(self) -> "HardwareSpec":
        if any(not 1 <= c <= MAX_GPUS for c in self.gpu_counts):
            raise ValueError(f"gpu_counts must lie in [1, {MAX_GPUS}]")
        for arch in self.sm_arch:
            if not re.fullmatch(r"sm_\d{2,3}[a-z]?", arch):
                raise ValueError(f"sm_arch entry {arch!r} is not of the form 'sm_100'")
        if self.node is not None:
            for c in self.gpu_counts:
                problem = self.layout_problem(c)
                if problem:
                    raise ValueError(f"gpu_counts {c}: {problem}")
        return self

    def nodes_for(self, ranks: int) -> int:
        """Nodes one engine of ``ranks`` GPUs (tensor-parallel ranks) spans: 1 without a node model."""
        if self.node is None or ranks <= self.node.gpus:
            return 1
        return -(-ranks // self.node.gpus)

    def layout_problem(self, ranks: int) -> str | None:
        """Why an engine of ``ranks`` GPUs cannot be laid out on this node model, or None."""
        if self.node is None or ranks <= self.node.gpus:
            return None
        per = self.node.gpus
        if ranks % per:
            return f"{ranks} ranks do not split evenly over nodes of {per} GPUs"
        if self.node.fabric is None:
            return f"{ranks} ranks need {ranks // per} nodes of {per}, and the node model allows no multi-node engine"
        dom = self.node.nvlink_domain
        if self.node.fabric == "mnnvl" and dom is not None and ranks > dom:
            return f"{ranks} GPUs do not fit in one NVLink domain of {dom}"
        return None
