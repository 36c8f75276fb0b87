"""The hardware an engine runs on, as the engine reports it (not the host fasttrack runs on).

A driver that attaches its engines by URL (a Kubernetes driver pod, which has no GPU; ``--baseline-url``) runs
the scope's hardware check against what each engine reports:

* **node reports** (:mod:`fasttrack.engine.node_report`): every node started through the node script
  (LeaderWorkerSet pods, ``srun`` tasks) writes its GPUs, NVLink links, fabric state and clique, and vLLM
  build into ``<run>/engines/<name>.nodes/node<rank>.json`` on the run's shared file system. The driver finds
  that folder next to the profiler folder the engine names on ``/server_info`` (its ``--profiler-config``);
* else **vLLM's own report** on ``/server_info`` (development mode, ``VLLM_SERVER_DEV_MODE=1``): the API server
  host's GPU names and driver (``system_env``), one node only; the GPUs' architecture follows from their
  product names where those are known data-center models (``hardware.capability_from_name``), else is unknown.

An engine that reports neither has unknown hardware: the check cannot pass on it (:func:`fasttrack.host.hardware
.match_nodes` says so). Reports are data from the run's own engines; they are read with a size limit and
parsed, never run.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from fasttrack.engine.cmdline import node_reports_dir
from fasttrack.host.hardware import (
    GPU,
    HardwareMatch,
    HostInfo,
    capability_from_name,
    detect_host,
    match_hardware,
    match_nodes,
    parse_fabric,
    parse_gpu_query,
    parse_nvlink_status,
)

if TYPE_CHECKING:  # pragma: no cover
    from fasttrack.planning.plan import Plan
    from fasttrack.scope import HardwareSpec

MAX_REPORT_BYTES = 1 << 20
"""A node report holds nvidia-smi's GPU query, NVLink status and fabric lines: tens of KB."""
MAX_NODES = 1024


@dataclass
class EngineHardware:
    """What one engine reported: one :class:`HostInfo` per node it runs on, and where that came from."""

    side: str
    url: str
    source: str
    """``node reports (<folder>)``, ``/server_info (API server host only)``, or why nothing was reported."""
    hosts: list[HostInfo] = field(default_factory=list)
    vllm: list[dict[str, Any]] = field(default_factory=list)
    """The vLLM build each node reported (version, commit, where the commit was read)."""
    image_digests: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    """Reports that could not be read (a missing node, a malformed file)."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "side": self.side,
            "url": self.url,
            "source": self.source,
            "nodes": [h.model_dump(mode="json") for h in self.hosts],
            "vllm": self.vllm,
            "image_digests": self.image_digests,
            "problems": self.problems,
        }


def host_from_report(rep: dict[str, Any]) -> HostInfo:
    """A node report (``node_report.collect``) as a :class:`HostInfo` (nvidia-smi's texts parsed here)."""
    gpus: list[GPU] = []
    driver = None
    query = rep.get("gpu_query")
    if isinstance(query, str) and query.strip():
        gpus, driver = parse_gpu_query(query)
        nvl = rep.get("nvlink_status")
        links = parse_nvlink_status(nvl) if isinstance(nvl, str) else {}
        fab = rep.get("fabric")
        fabric = parse_fabric(fab) if isinstance(fab, str) else {}
        for g in gpus:
            g.nvlink_active = links.get(g.index, 0) if links else None
            g.fabric_state, g.fabric_clique = fabric.get(g.index, (None, None))
    cpus = rep.get("cpu_count")
    return HostInfo(
        cpu_model=str(rep.get("cpu_model") or "unknown")[:200],
        cpu_count=cpus if isinstance(cpus, int) and cpus > 0 else 1,
        gpus=gpus,
        driver_version=driver,
        source="node report" + ("" if rep.get("nvidia_smi") else " (no nvidia-smi on the node)"),
        hostname=str(rep.get("hostname") or "")[:255] or None,
    )


def host_from_system_env(sysenv: dict[str, Any]) -> HostInfo:
    """vLLM's ``/server_info`` ``system_env`` (``vllm.collect_env``) as a :class:`HostInfo` of the API server's
    host: GPU names from ``nvidia-smi -L``, the driver. The architecture is not reported: it is taken from the
    GPU's product name where :func:`fasttrack.host.hardware.capability_from_name` knows it, else left unknown."""
    gpus = []
    models = sysenv.get("nvidia_gpu_models")
    if isinstance(models, str) and sysenv.get("is_cuda_available") is not False:
        for line in models.splitlines():
            m = re.match(r"^\s*GPU (\d+):\s*(.+?)\s*$", line)
            if m:
                name = m.group(2)[:200]
                gpus.append(GPU(index=int(m.group(1)), name=name, compute_capability=capability_from_name(name)))
    cpu = sysenv.get("cpu_info") if isinstance(sysenv.get("cpu_info"), str) else ""
    count = re.search(r"^\s*CPU\(s\):\s*(\d+)", cpu or "", re.M)
    model = re.search(r"^\s*Model name:\s*(.+)$", cpu or "", re.M)
    driver = sysenv.get("nvidia_driver_version")
    return HostInfo(
        cpu_model=model.group(1).strip()[:200] if model else "unknown",
        cpu_count=int(count.group(1)) if count else 1,
        gpus=gpus,
        driver_version=driver if isinstance(driver, str) and gpus else None,
        source="/server_info",
    )


def read_reports(folder: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """The node reports in ``folder`` (by rank) and the problems reading them."""
    reports: dict[int, dict[str, Any]] = {}
    problems: list[str] = []
    for p in sorted(folder.glob("node*.json"))[:MAX_NODES]:
        m = re.fullmatch(r"node(\d+)\.json", p.name)
        if not m:
            continue
        try:
            if p.stat().st_size > MAX_REPORT_BYTES:
                problems.append(f"{p.name}: larger than {MAX_REPORT_BYTES} bytes")
                continue
            rep = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            problems.append(f"{p.name}: {exc}")
            continue
        if isinstance(rep, dict):
            reports[int(m.group(1))] = rep
        else:
            problems.append(f"{p.name}: not a JSON object")
    ranks = sorted(reports)
    missing = [r for r in range(ranks[-1] + 1) if r not in reports] if ranks else []
    if missing:
        problems.append(f"no report from node rank(s) {missing}")
    return [reports[r] for r in ranks], problems


def server_info(url: str, *, timeout: float = 60.0) -> dict[str, Any] | None:
    """vLLM's ``/server_info`` (JSON config), or None when the engine does not serve it."""
    try:
        r = httpx.get(url.rstrip("/") + "/server_info", params={"config_format": "json"}, timeout=timeout)
        data = r.json() if r.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def engine_hardware(side: str, url: str, *, nodes: int | None = None, timeout: float = 60.0) -> EngineHardware:
    """What the engine at ``url`` reports about its hardware (see the module docstring); ``nodes``: how many nodes
    the engine should span (a report short of it is a problem)."""
    info = server_info(url, timeout=timeout)
    if info is None:
        return EngineHardware(side, url, "nothing: the engine serves no /server_info (VLLM_SERVER_DEV_MODE=1)")
    prof = ((info.get("vllm_config") or {}).get("profiler_config") or {}) if isinstance(info, dict) else {}
    folder = prof.get("torch_profiler_dir") if isinstance(prof, dict) else None
    reports_dir = node_reports_dir(folder) if isinstance(folder, str) and folder else None
    if reports_dir is not None and reports_dir.is_dir():
        reports, problems = read_reports(reports_dir)
        if reports:
            hw = EngineHardware(side, url, f"node reports ({reports_dir})", problems=problems)
            for rep in reports:
                hw.hosts.append(host_from_report(rep))
                v = rep.get("vllm")
                hw.vllm.append(v if isinstance(v, dict) else {})
                if isinstance(rep.get("image_digest"), str):
                    hw.image_digests.append(rep["image_digest"])
            if nodes is not None and len(reports) < nodes:
                hw.problems.append(f"{len(reports)} node report(s), the engine spans {nodes} nodes")
            return hw
    sysenv = info.get("system_env")
    if isinstance(sysenv, dict):
        hw = EngineHardware(
            side, url, "/server_info (the API server's host only)", hosts=[host_from_system_env(sysenv)]
        )
        if nodes is not None and nodes > 1:
            hw.problems.append(f"the engine spans {nodes} nodes and only its API server's host reported")
        return hw
    return EngineHardware(side, url, "nothing: /server_info names no node reports and no system_env")


def with_node_reports(env: Any, reports: list[dict[str, Any]]) -> Any:
    """An attached engine's :class:`~fasttrack.engine.environment.EngineEnvironment` with what its nodes reported:
    the vLLM build (a commit only when every node reports the same one), node 0's host, devices and driver."""
    builds: list[dict[str, Any]] = [r["vllm"] if isinstance(r.get("vllm"), dict) else {} for r in reports]
    commits = {b.get("commit") for b in builds}
    first: dict[str, Any] = builds[0] if builds else {}
    update: dict[str, Any] = {"notes": [*env.notes, f"hardware and vLLM build from {len(reports)} node report(s)"]}
    if first.get("version"):
        update["vllm_version"] = str(first["version"])[:100]
    if len(commits) == 1 and isinstance(first.get("commit"), str):
        update["vllm_commit"] = first["commit"][:64]
        update["vllm_commit_source"] = f"node reports ({len(reports)} node(s)): {str(first.get('commit_source'))[:300]}"
    elif len(commits) > 1:
        update["vllm_commit_source"] = f"the engine's nodes report different vLLM commits: {sorted(map(str, commits))}"
    else:
        update["vllm_commit_source"] = f"node reports: {str(first.get('commit_source'))[:300]}"
    host = host_from_report(reports[0]) if reports else None
    if host is not None:
        update["hostname"] = host.hostname
        if host.gpus:
            from fasttrack.engine.environment import DeviceInfo

            g0 = host.gpus[0]
            update["device"] = DeviceInfo(
                kind="cuda",
                count=len(host.gpus),
                names=[g.name for g in host.gpus],
                detail={"compute_capability": g0.compute_capability, "source": "node report"},
            )
            update["driver_version"] = host.driver_version
    return env.model_copy(update=update)


def attached_hardware(
    hw: HardwareSpec,
    plan: Plan,
    attached: dict[str, str],
    engine_gpus: list[int] | None,
    *,
    references: Mapping[str, str] | None = None,
    log: Callable[[str], None] = print,
) -> tuple[HostInfo, HardwareMatch]:
    """The host a run records and its hardware match when engines are attached (side -> URL): every attached
    engine's reported nodes, and this host too when the other side starts here. On a GPU scope an engine that
    reports nothing, or a node short, fails the match; on a CPU scope (any host) that is only said.

    ``references``: attached reference variants (name -> URL, ``--reference-url``), checked like the baseline they
    stand beside (its nodes); the host recorded is a side's (the first attached one's), else this host's."""
    engines: dict[str, list[HostInfo]] = {}
    notes: list[str] = []
    targets = [(side, f"the {side} engine", side, url) for side, url in attached.items()]
    targets += [
        ("baseline", f"the reference variant {name} engine", f"reference variant {name}", url)
        for name, url in (references or {}).items()
    ]
    for nodes_of, label, who, url in targets:
        nodes = max((g.side_nodes.get(nodes_of, g.nodes) for g in plan.groups), default=1)
        rep = engine_hardware(who, url, nodes=nodes)
        log(f"{who} engine at {url}: hardware from {rep.source}")
        if rep.hosts or hw.device == "gpu":
            engines[label] = rep.hosts
        notes += [f"{label}: {p}" for p in rep.problems]
    match = match_nodes(hw, engines, engine_gpus=engine_gpus)
    host = next((engines[f"the {side} engine"][0] for side in attached if engines.get(f"the {side} engine")), None)
    if len(attached) < 2:  # the other side starts here: this host too
        here = detect_host()
        mine = match_hardware(hw, here, engine_gpus=engine_gpus)
        match = match.model_copy(
            update={
                "ok": match.ok and mine.ok,
                "problems": match.problems + [f"this host: {p}" for p in mine.problems],
                "facts": match.facts + [f"this host: {f}" for f in mine.facts],
                "found": f"{match.found}; this host: {mine.found}",
            }
        )
        host = host or here
    if notes and hw.device == "gpu":
        match = match.model_copy(update={"ok": False, "problems": match.problems + notes})
    elif notes:
        match = match.model_copy(update={"facts": match.facts + notes})
    return host or detect_host(), match


def allocation_reports(
    *, python: str, nnodes: int, env: dict[str, str] | None = None, timeout: float = 300.0
) -> tuple[list[dict[str, Any]], str | None]:
    """Every node's report in this Slurm allocation (one ``srun`` task per node runs ``node_report.py`` under the
    engine's interpreter, with the launcher's ``FASTTRACK_SRUN_ARGS``), by rank; or the reason there are none."""
    import os
    import shlex
    import subprocess

    from fasttrack.engine.cmdline import NODE_MAIN
    from fasttrack.engine.node_report import from_lines

    env = dict(os.environ) if env is None else env
    argv = ["srun", f"--nodes={nnodes}", f"--ntasks={nnodes}", "--ntasks-per-node=1", "--overlap"]
    script = NODE_MAIN.with_name("node_report.py")
    argv += [*shlex.split(env.get("FASTTRACK_SRUN_ARGS", "")), python, str(script), "--lines"]
    try:
        res = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return [], f"srun could not run the node report: {exc}"
    reports = from_lines(res.stdout)
    if res.returncode != 0 or len(reports) < nnodes:
        return reports, (
            f"srun's node reports: {len(reports)} of {nnodes} node(s) answered (exit {res.returncode}): "
            + (res.stderr.strip()[-300:] or "no output")
        )
    return reports, None
