"""What this host has, and whether it matches a scope's hardware requirement."""

from __future__ import annotations

import platform
import shutil
import subprocess

from pydantic import BaseModel, ConfigDict, Field

from fasttrack.scope import HardwareSpec


class GPU(BaseModel):
    model_config = ConfigDict(extra="forbid")

    index: int
    name: str
    compute_capability: str | None = None
    """E.g. '10.0' (sm_100)."""
    memory_mib: int | None = None


class HostInfo(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    cpu_model: str
    cpu_count: int
    gpus: list[GPU] = Field(default_factory=list)
    driver_version: str | None = None
    source: str
    """How GPUs were detected ('nvidia-smi', 'none')."""

    @property
    def sm_archs(self) -> set[str]:
        return {"sm_" + g.compute_capability.replace(".", "") for g in self.gpus if g.compute_capability}


class HardwareMatch(BaseModel):
    model_config = ConfigDict(extra="forbid")

    ok: bool
    required: str
    found: str
    problems: list[str]


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def detect_host() -> HostInfo:
    import os

    gpus: list[GPU] = []
    driver = None
    source = "none"
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            out = subprocess.run(
                [
                    smi,
                    "--query-gpu=index,name,compute_cap,memory.total,driver_version",
                    "--format=csv,noheader,nounits",
                ],
                capture_output=True,
                text=True,
                timeout=20,
                check=False,
            ).stdout
            for line in out.strip().splitlines():
                f = [x.strip() for x in line.split(",")]
                if len(f) >= 5:
                    gpus.append(
                        GPU(
                            index=int(f[0]),
                            name=f[1],
                            compute_capability=f[2] or None,
                            memory_mib=int(float(f[3])) if f[3].replace(".", "").isdigit() else None,
                        )
                    )
                    driver = f[4]
            source = "nvidia-smi"
        except (OSError, subprocess.SubprocessError, ValueError):
            source = "nvidia-smi (failed)"
    return HostInfo(
        cpu_model=cpu_model(), cpu_count=os.cpu_count() or 1, gpus=gpus, driver_version=driver, source=source
    )


def describe_requirement(hw: HardwareSpec) -> str:
    if hw.device == "cpu":
        return "a CPU host"
    parts = []
    if hw.gpu_counts:
        parts.append(" or ".join(str(c) for c in hw.gpu_counts) + " GPUs")
    fam = " ".join(x for x in [hw.vendor if hw.vendor != "any" else None, hw.gpu_family] if x)
    if fam:
        parts.append(fam)
    if hw.gpu_models:
        parts.append("(" + "/".join(hw.gpu_models) + ")")
    if hw.sm_arch:
        parts.append("with " + "/".join(hw.sm_arch))
    if hw.interconnect and hw.interconnect != "none":
        parts.append(f"in one {hw.interconnect} domain")
    return " ".join(parts)


def describe_host(host: HostInfo) -> str:
    if not host.gpus:
        return f"no GPU ({host.cpu_count} CPU cores: {host.cpu_model})"
    names: dict[str, int] = {}
    for g in host.gpus:
        names[g.name] = names.get(g.name, 0) + 1
    caps = ", ".join(sorted(host.sm_archs)) or "unknown arch"
    return ", ".join(f"{n}x {name}" for name, n in names.items()) + f" ({caps})"


def match_hardware(hw: HardwareSpec, host: HostInfo) -> HardwareMatch:
    problems: list[str] = []
    if hw.device == "gpu":
        if not host.gpus:
            problems.append("no GPU found")
        else:
            if hw.gpu_counts and len(host.gpus) < min(hw.gpu_counts):
                problems.append(
                    f"{len(host.gpus)} GPU(s) found, the scope needs {' or '.join(map(str, hw.gpu_counts))}"
                )
            if hw.sm_arch and not (host.sm_archs & set(hw.sm_arch)):
                problems.append(f"GPU architecture {sorted(host.sm_archs) or 'unknown'} is not {'/'.join(hw.sm_arch)}")
            if (
                hw.gpu_models
                and not any(m.lower() in g.name.lower() for g in host.gpus for m in hw.gpu_models)
                and not hw.sm_arch
            ):
                problems.append(f"GPU model is not one of {hw.gpu_models}")
    return HardwareMatch(
        ok=not problems, required=describe_requirement(hw), found=describe_host(host), problems=problems
    )
