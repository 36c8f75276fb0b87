"""What this host has, and whether it matches a scope's hardware requirement.

The host check compares, and names what it found for each:

* the device kind (a GPU scope needs GPUs);
* the GPU model (``gpu_models``, a substring of the driver's product name) **and** the SM
  architecture (``sm_arch``): both must hold when both are given;
* the GPUs per node: the scope's node model (``hardware.node.gpus``), or without one the
  smallest GPU count of one deployment (``gpu_counts``);
* the interconnect the scope asks for: NVLink links active on every GPU (``nvlink``,
  ``nvlink-multicast``), and the multi-node NVLink fabric (``node.fabric: mnnvl``: the
  GPUs' fabric state is ``Completed``) when an engine spans nodes;
* the nodes an engine needs: more than this host offers needs an allocation of that many
  nodes (a Slurm allocation's node count is read from its environment).
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
from collections.abc import Mapping

from pydantic import Field

from fasttrack.evidence.hardware import COMPUTE_CAPABILITY_BY_NAME, capability_from_name
from fasttrack.modelbase import DocModel, StrictModel
from fasttrack.scope import HardwareSpec

#: The GPU capability table lives in :mod:`fasttrack.evidence.hardware` (verifying holds a bundle's recorded GPUs
#: against a scope by it); it is named here too because callers found it here.
__all__ = ["COMPUTE_CAPABILITY_BY_NAME", "capability_from_name"]


class GPU(StrictModel):
    index: int
    name: str
    compute_capability: str | None = None
    """E.g. '10.0' (sm_100)."""
    memory_mib: int | None = None
    nvlink_active: int | None = None
    """Active NVLink links of this GPU (None: not read)."""
    fabric_state: str | None = None
    """Multi-node NVLink fabric state from ``nvidia-smi -q`` ('Completed', 'Not Supported', ...)."""
    fabric_clique: str | None = None
    """Fabric cluster UUID / clique id: GPUs of one NVLink domain share it."""


class HostInfo(DocModel):
    cpu_model: str
    cpu_count: int
    gpus: list[GPU] = Field(default_factory=list)
    driver_version: str | None = None
    source: str
    """How GPUs were detected ('nvidia-smi', 'none')."""
    hostname: str | None = None
    allocation_nodes: int | None = None
    """Nodes of the batch allocation this runs in (Slurm: SLURM_JOB_NUM_NODES); None outside one."""
    allocation: str | None = None
    """Which allocation ('slurm job 123: 4 nodes'), when there is one."""
    memory_total_mib: int | None = None
    """Host memory (MemTotal of /proc/meminfo); None where it was not read."""
    memory_available_mib: int | None = None
    """Host memory available to new processes (MemAvailable) when the host was read."""

    @property
    def sm_archs(self) -> set[str]:
        return {"sm_" + g.compute_capability.replace(".", "") for g in self.gpus if g.compute_capability}


class HardwareMatch(StrictModel):
    ok: bool
    required: str
    found: str
    problems: list[str]
    facts: list[str] = Field(default_factory=list)
    """What was found, one line per aspect (GPU model, architecture, count, interconnect, nodes)."""


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _smi(smi: str, *args: str) -> str:
    try:
        return subprocess.run(
            [smi, *args], capture_output=True, text=True, timeout=30, check=False, stdin=subprocess.DEVNULL
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


_QUERY_FIELDS = ("index", "name", "compute_cap", "memory.total", "driver_version")


def _mib(value: str) -> int | None:
    """'143771 MiB' or '143771' -> 143771 (None when it is not a number, e.g. '[N/A]')."""
    num = value.split()[0] if value.split() else ""
    try:
        return int(float(num))
    except ValueError:
        return None


def parse_gpu_query(out: str) -> tuple[list[GPU], str | None]:
    """GPUs and the driver version from ``nvidia-smi --query-gpu=...`` for the fields of
    ``index,name,compute_cap,memory.total,driver_version``, as ``--format=csv`` (a header names the
    columns, values carry units: ``NVIDIA H200, 9.0, 143771 MiB, 580.159.04``) or
    ``--format=csv,noheader,nounits`` (the columns in that order). Without an ``index`` column the rows'
    order is the index."""
    gpus: list[GPU] = []
    driver = None
    lines = [line for line in out.strip().splitlines() if line.strip()]
    cols = list(_QUERY_FIELDS)
    if lines and not lines[0].split(",")[0].strip().isdigit() and "name" in lines[0]:
        cols = [c.strip().split(" ")[0] for c in lines.pop(0).split(",")]  # 'memory.total [MiB]' -> 'memory.total'
    for line in lines:
        row = dict(zip(cols, (x.strip() for x in line.split(",")), strict=False))
        if "name" not in row or ("index" in row and not row["index"].isdigit()):
            continue
        cap = row.get("compute_cap") or None
        gpus.append(
            GPU(
                index=int(row["index"]) if "index" in row else len(gpus),
                name=row["name"],
                compute_capability=cap if cap and cap[0].isdigit() else None,
                memory_mib=_mib(row.get("memory.total", "")),
            )
        )
        driver = row.get("driver_version") or driver
    return gpus, driver


def host_memory(meminfo: str) -> tuple[int | None, int | None]:
    """(MemTotal, MemAvailable) in MiB from the text of ``/proc/meminfo``."""
    vals: dict[str, int] = {}
    for line in meminfo.splitlines():
        m = re.match(r"^(MemTotal|MemAvailable):\s+(\d+)\s*kB", line)
        if m:
            vals[m.group(1)] = int(m.group(2)) // 1024
    return vals.get("MemTotal"), vals.get("MemAvailable")


def parse_nvlink_status(out: str) -> dict[int, int]:
    """Active NVLink links per GPU index from ``nvidia-smi nvlink --status``."""
    links: dict[int, int] = {}
    gpu: int | None = None
    for line in out.splitlines():
        m = re.match(r"\s*GPU (\d+):", line)
        if m:
            gpu = int(m.group(1))
            links.setdefault(gpu, 0)
            continue
        m = re.match(r"\s*Link \d+:\s*(.*)$", line)
        if m and gpu is not None and "inactive" not in m.group(1).lower() and re.search(r"\d", m.group(1)):
            links[gpu] += 1
    return links


def parse_fabric(out: str) -> dict[int, tuple[str | None, str | None]]:
    """Fabric (state, cluster UUID or clique id) per GPU, in ``nvidia-smi -q`` order."""
    result: dict[int, tuple[str | None, str | None]] = {}
    idx = -1
    in_fabric = False
    state: str | None = None
    clique: str | None = None
    for line in out.splitlines():
        if re.match(r"^GPU [0-9A-Fa-f]{4,}:", line):
            if idx >= 0:
                result[idx] = (state, clique)
            idx += 1
            state, clique, in_fabric = None, None, False
            continue
        stripped = line.strip()
        if re.match(r"^Fabric\s*$", stripped):
            in_fabric = True
            continue
        if in_fabric:
            m = re.match(r"^(State|ClusterUUID|Cluster UUID|CliqueId|Clique ID)\s*:\s*(.*)$", stripped)
            if m:
                key, val = m.group(1).replace(" ", "").lower(), m.group(2).strip()
                if key == "state":
                    state = val
                elif key == "clusteruuid" or clique is None:
                    clique = val
                continue
            if stripped and ":" not in stripped:
                in_fabric = False
            elif re.match(r"^[A-Z][A-Za-z ]+$", stripped):
                in_fabric = False
    if idx >= 0:
        result[idx] = (state, clique)
    return result


def allocation_from_env(env: Mapping[str, str]) -> tuple[int | None, str | None]:
    """Nodes of the Slurm allocation this process runs in, and a description."""
    n = env.get("SLURM_JOB_NUM_NODES") or env.get("SLURM_NNODES")
    if n and n.isdigit():
        job = env.get("SLURM_JOB_ID", "?")
        return int(n), f"slurm job {job}: {n} node(s) ({env.get('SLURM_JOB_NODELIST', '?')})"
    return None, None


def detect_host() -> HostInfo:
    gpus: list[GPU] = []
    driver = None
    source = "none"
    smi = shutil.which("nvidia-smi")
    if smi:
        out = _smi(
            smi, "--query-gpu=index,name,compute_cap,memory.total,driver_version", "--format=csv,noheader,nounits"
        )
        try:
            gpus, driver = parse_gpu_query(out)
            source = "nvidia-smi"
        except ValueError:
            source = "nvidia-smi (failed)"
        if gpus:
            links = parse_nvlink_status(_smi(smi, "nvlink", "--status"))
            fabric = parse_fabric(_smi(smi, "-q"))
            for g in gpus:
                g.nvlink_active = links.get(g.index, 0) if links else None
                g.fabric_state, g.fabric_clique = fabric.get(g.index, (None, None))
    nodes, alloc = allocation_from_env(os.environ)
    try:
        with open("/proc/meminfo", encoding="utf-8") as fh:
            mem_total, mem_avail = host_memory(fh.read())
    except OSError:
        mem_total, mem_avail = None, None
    return HostInfo(
        cpu_model=cpu_model(),
        cpu_count=os.cpu_count() or 1,
        gpus=gpus,
        driver_version=driver,
        source=source,
        hostname=platform.node() or None,
        allocation_nodes=nodes,
        allocation=alloc,
        memory_total_mib=mem_total,
        memory_available_mib=mem_avail,
    )


def describe_requirement(hw: HardwareSpec) -> str:
    if hw.device == "cpu":
        return "a CPU host"
    parts = []
    if hw.gpu_counts:
        parts.append(" or ".join(str(c) for c in hw.gpu_counts) + (" GPU" if hw.gpu_counts == [1] else " GPUs"))
    fam = " ".join(x for x in [hw.vendor if hw.vendor != "any" else None, hw.gpu_family] if x)
    if fam:
        parts.append(fam)
    if hw.gpu_models:
        parts.append("(" + "/".join(hw.gpu_models) + ")")
    if hw.sm_arch:
        parts.append("with " + "/".join(hw.sm_arch))
    if hw.interconnect and hw.interconnect != "none":
        parts.append(f"in one {hw.interconnect} domain")
    if hw.node is not None:
        fabric = " joined by the multi-node NVLink fabric" if hw.node.fabric == "mnnvl" else ""
        parts.append(f"on nodes of {hw.node.gpus} GPUs{fabric}")
    return " ".join(parts)


def describe_host(host: HostInfo) -> str:
    if not host.gpus:
        return f"no GPU ({host.cpu_count} CPU cores: {host.cpu_model})"
    names: dict[str, int] = {}
    for g in host.gpus:
        names[g.name] = names.get(g.name, 0) + 1
    caps = ", ".join(sorted(host.sm_archs)) or "unknown arch"
    return ", ".join(f"{n}x {name}" for name, n in names.items()) + f" ({caps})"


def _interconnect(hw: HardwareSpec, host: HostInfo, engines: list[int], problems: list[str], facts: list[str]) -> None:
    links = [g.nvlink_active for g in host.gpus]
    if any(v is None for v in links):
        nvlink_desc = "NVLink status not readable"
    else:
        nvlink_desc = f"NVLink links active per GPU: {', '.join(str(v) for v in links)}"
    facts.append(f"interconnect: {nvlink_desc}")
    if hw.interconnect in ("nvlink", "nvlink-multicast") and len(host.gpus) > 1:
        if any(v is None for v in links):
            problems.append(f"the scope needs {hw.interconnect}, and the NVLink status could not be read")
        elif any(not v for v in links):
            idle = [g.index for g in host.gpus if not g.nvlink_active]
            problems.append(f"the scope needs {hw.interconnect}; GPU(s) {idle} have no active NVLink link")
    node = hw.node
    spans_nodes = any(hw.nodes_for(c) > 1 for c in engines)
    if node is not None and node.fabric == "mnnvl" and spans_nodes:
        states = sorted({g.fabric_state or "unknown" for g in host.gpus})
        cliques = sorted({g.fabric_clique for g in host.gpus if g.fabric_clique})
        facts.append(
            f"multi-node NVLink fabric: state {'/'.join(states)}" + (f", cluster {cliques[0]}" if cliques else "")
        )
        if states != ["Completed"]:
            problems.append(
                f"engines span nodes over the multi-node NVLink fabric, and this host's fabric state is "
                f"{'/'.join(states)} (needs Completed: IMEX/fabric manager up, GPUs in one NVLink domain)"
            )


def match_hardware(hw: HardwareSpec, host: HostInfo, *, engine_gpus: list[int] | None = None) -> HardwareMatch:
    """Whether ``host`` (and its allocation) can run the scope's engines; ``engine_gpus``: the GPUs of
    each engine the run starts (a tier's plan), default the scope's ``gpu_counts``."""
    engines = sorted(set(engine_gpus if engine_gpus is not None else hw.gpu_counts))
    problems: list[str] = []
    facts: list[str] = []
    if hw.device == "gpu":
        if not host.gpus:
            problems.append("no GPU found")
            how = "no nvidia-smi on this host" if host.source == "none" else f"{host.source} lists none"
            facts.append(f"GPUs: none ({how}); {host.cpu_count} CPU cores ({host.cpu_model})")
        else:
            names = sorted({g.name for g in host.gpus})
            facts.append(f"GPU model: {', '.join(names)}")
            facts.append(f"GPU architecture: {', '.join(sorted(host.sm_archs)) or 'unknown'}")
            if hw.gpu_models:
                bad = [g.name for g in host.gpus if not any(m.lower() in g.name.lower() for m in hw.gpu_models)]
                if bad:
                    problems.append(f"GPU model {sorted(set(bad))} is not one of {hw.gpu_models}")
            if hw.sm_arch and not (host.sm_archs and host.sm_archs <= set(hw.sm_arch)):
                problems.append(f"GPU architecture {sorted(host.sm_archs) or 'unknown'} is not {'/'.join(hw.sm_arch)}")
            per_node = hw.node.gpus if hw.node is not None else (min(hw.gpu_counts) if hw.gpu_counts else 1)
            facts.append(f"GPUs on this host: {len(host.gpus)}")
            if len(host.gpus) < per_node:
                need = (
                    f"nodes of {per_node} GPUs"
                    if hw.node is not None
                    else f"{' or '.join(map(str, hw.gpu_counts)) or per_node} GPUs"
                )
                problems.append(f"{len(host.gpus)} GPU(s) found, the scope needs {need}")
            _interconnect(hw, host, engines, problems, facts)
        _nodes(hw, host, engines, problems, facts)
    else:
        facts.append(f"CPU: {host.cpu_count} cores ({host.cpu_model})")
    return HardwareMatch(
        ok=not problems, required=describe_requirement(hw), found=describe_host(host), problems=problems, facts=facts
    )


def _nodes(hw: HardwareSpec, host: HostInfo, engines: list[int], problems: list[str], facts: list[str]) -> None:
    if hw.node is None or not engines:
        return
    most = max(hw.nodes_for(c) for c in engines)
    if most <= 1:
        return
    have = host.allocation_nodes
    facts.append(f"nodes: {host.allocation}" if host.allocation else "nodes: this host only (no batch allocation)")
    if have is None:
        problems.append(
            f"engines span up to {most} nodes of {hw.node.gpus} GPUs; run inside an allocation of "
            f"{most} nodes (e.g. salloc -N {most}) so the launcher can start one node process per host"
        )
    elif have is not None and have < most:
        problems.append(f"the largest engine spans {most} nodes; the allocation has {have}")


def one_domain_problem(hosts: list[HostInfo]) -> tuple[str, str | None]:
    """(fact, problem): whether the GPUs of ``hosts`` lie in one NVLink domain (one fabric clique / cluster UUID,
    every GPU's fabric state ``Completed``)."""
    cliques = sorted({g.fabric_clique or "unknown" for h in hosts for g in h.gpus})
    states = sorted({g.fabric_state or "unknown" for h in hosts for g in h.gpus})
    fact = f"NVLink domain across {len(hosts)} node(s): clique(s) {', '.join(cliques) or 'none'}; state(s) " + (
        "/".join(states) or "none"
    )
    if not any(h.gpus for h in hosts):
        return fact, "no node reported a GPU, so their NVLink domain is unknown"
    if "unknown" in cliques or len(cliques) != 1:
        return fact, f"the nodes are not in one NVLink domain (fabric cliques {', '.join(cliques)})"
    if states != ["Completed"]:
        return fact, f"the multi-node NVLink fabric is not up on every node (states {'/'.join(states)})"
    return fact, None


def match_nodes(
    hw: HardwareSpec, engines: dict[str, list[HostInfo]], *, engine_gpus: list[int] | None = None
) -> HardwareMatch:
    """Whether the nodes each engine reports (label -> one :class:`HostInfo` per node) can run the scope's engines:
    every node as :func:`match_hardware` checks a host (the engine's reported nodes standing for the allocation),
    and the nodes of an engine that spans them over the multi-node NVLink fabric in one NVLink domain."""
    problems: list[str] = []
    facts: list[str] = []
    found: list[str] = []
    for label, hosts in engines.items():
        if not hosts:
            if hw.device == "gpu":
                problems.append(f"{label}: reported no hardware")
            else:
                facts.append(f"{label}: reported no hardware (a CPU scope runs on any host)")
            continue
        found.append(f"{label}: " + "; ".join(describe_host(h) for h in hosts))
        for i, host in enumerate(hosts):
            where = f"{label} node {i}" + (f" ({host.hostname})" if host.hostname else "")
            alloc = host.model_copy(
                update={"allocation_nodes": len(hosts), "allocation": f"{label}: {len(hosts)} reported node(s)"}
            )
            m = match_hardware(hw, alloc, engine_gpus=engine_gpus)
            problems += [f"{where}: {p}" for p in m.problems]
            if i == 0:
                facts += [f"{label}: {f}" for f in m.facts]
        node = hw.node
        if hw.device == "gpu" and node is not None and node.fabric == "mnnvl" and len(hosts) > 1:
            fact, problem = one_domain_problem(hosts)
            facts.append(f"{label}: {fact}")
            if problem:
                problems.append(f"{label}: {problem}")
    return HardwareMatch(
        ok=not problems,
        required=describe_requirement(hw),
        found="; ".join(found) or "no engine reported its hardware",
        problems=problems,
        facts=facts,
    )
