"""``fasttrack doctor``: can ``fasttrack validate`` run this scope here? A preflight, no engine started.

Each finding is one line: ``ok``, ``problem`` (validate cannot run, or cannot pass, until it is
fixed; the line says how) or ``note`` (worth knowing, not blocking). The checks: Python;
the vLLM version and commit and the torch build of the engine's interpreter; the CUDA runtime
torch was built for against the driver (nvidia-smi); the hardware line: what the scope asks for,
what this host has and how they meet (a CPU scope on a GPU host runs on the GPU under a CUDA
build of vLLM; a GPU scope on another GPU model); the GPUs (model, architecture, count per
node) and the interconnect against the scope's hardware; the nodes an engine spans and how they
would be launched; the model (its builder) and free disk; whether both sides' engines fit the
memory, together when they are up together (:mod:`fasttrack.host.fit`); the engine arguments
against the installed vLLM's own parser; the passability of every tier; and the plan's
estimate. Exit 0 only without a problem.
"""

from __future__ import annotations

import os
import platform
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from fasttrack.checks.base import build_run_plan
from fasttrack.checks.passability import analyze
from fasttrack.engine.argcheck import check_arg_lists
from fasttrack.engine.environment import probe_local_environment
from fasttrack.engine.launchers import default_launcher
from fasttrack.host.fit import cuda_fit, device_fit, engines_run_on, memory_fit
from fasttrack.host.hardware import HostInfo, detect_host, match_hardware
from fasttrack.host.models import builder_path
from fasttrack.modelbase import StrictModel
from fasttrack.planning.plan import Plan
from fasttrack.scope import TIER_ORDER, LoadedScope

Status = Literal["ok", "problem", "note"]

MIN_FREE_DISK_GIB = 5.0
"""Free space the run folder needs beyond the model (logs, profiler traces, the bundle)."""


class Finding(StrictModel):
    status: Status
    topic: str
    found: str
    fix: str | None = None


class DoctorReport(StrictModel):
    scope: str
    tier: str
    findings: list[Finding] = Field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when ``fasttrack validate`` can run the tier here."""
        return not any(f.status == "problem" for f in self.findings)

    def add(self, status: Status, topic: str, found: str, fix: str | None = None) -> None:
        self.findings.append(Finding(status=status, topic=topic, found=found, fix=fix))


def _gib(n: float) -> str:
    return f"{n / 2**30:,.1f} GiB"


def _dir_size(path: Path) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                total += (Path(root) / f).stat().st_size
            except OSError:
                pass
    return total


def _hf_cache_dir(model_id: str) -> Path:
    home = Path(os.environ.get("HF_HOME", Path.home() / ".cache" / "huggingface"))
    hub = Path(os.environ.get("HF_HUB_CACHE", home / "hub"))
    return hub / ("models--" + model_id.replace("/", "--"))


def diagnose(
    loaded: LoadedScope,
    *,
    tier: str = "smoke",
    python: str | None = None,
    host: HostInfo | None = None,
    out_dir: Path | None = None,
    check_args: bool = True,
    progress: Callable[[str], None] | None = None,
    facts: dict[str, Any] | None = None,
) -> DoctorReport:
    """Every finding for running ``tier`` of the scope on this host (see the module docstring). ``host`` and
    ``facts`` (the engine interpreter's versions, :func:`~fasttrack.engine.environment.probe_local_environment`)
    are read here unless given."""
    scope = loaded.scope
    rep = DoctorReport(scope=scope.name, tier=tier)
    say = progress or (lambda _m: None)
    if not scope.is_complete:
        rep.add(
            "problem",
            "scope",
            f"{scope.name} is partial; missing: " + "; ".join(scope.missing_report()),
            f"fill these in suites/{scope.name}/scope.yaml and set status: complete",
        )
        return rep
    assert scope.hardware is not None
    say("reading the engine interpreter's versions")
    facts = facts if facts is not None else probe_local_environment(python=python)
    exe = python or sys.executable
    _check_interpreter(rep, facts, exe)
    host = host or detect_host()
    for topic, fit in cuda_fit(scope.hardware, host, facts):
        rep.add(fit.status, topic, fit.found, fit.fix)
    plan = build_run_plan(scope, tier=tier, scope_sha256=loaded.sha256)
    engine_gpus = sorted({g.gpus for g in plan.groups if g.gpus})
    _check_hardware(rep, scope.hardware, host, facts, engine_gpus)
    _check_nodes(rep, scope.hardware, plan, host, exe, engine_gpus, say)
    out = out_dir or Path.cwd()
    probe = out if out.exists() else Path.cwd()
    free = shutil.disk_usage(probe).free
    model_bytes = _check_model(rep, loaded)
    mem = memory_fit(scope, plan, host, device=engines_run_on(scope.hardware, host, facts), model_bytes=model_bytes)
    rep.add(
        "problem" if not mem.ok else "ok" if mem.checked else "note",
        "memory",
        "; ".join(mem.lines + mem.problems),
        mem.fix,
    )
    _check_disk(rep, free, probe)
    if check_args and facts.get("vllm_version"):
        say("checking the engine arguments against vLLM's parser")
        _check_engine_args(rep, plan, python)
    _check_passability(rep, loaded, tier)
    rep.add("note", "estimate", _estimate(plan))
    return rep


def _check_interpreter(rep: DoctorReport, facts: dict[str, Any], exe: str) -> None:
    """Python, and the vLLM and torch of the engine's interpreter."""
    py = sys.version_info
    rep.add(
        "ok" if py >= (3, 10) else "problem",
        "Python",
        f"{platform.python_version()} ({sys.executable})",
        None if py >= (3, 10) else "use Python 3.10 or later",
    )
    vllm_v, commit = facts.get("vllm_version"), facts.get("vllm_commit")
    if vllm_v:
        dist = facts.get("vllm_distribution") or "vllm"
        rep.add("ok", "vLLM", f"{vllm_v} ({dist}), commit {commit or 'not recorded'}, under {exe}")
    else:
        rep.add("problem", "vLLM", f"not importable by {exe}", "install vLLM into the engine's environment")
    torch_v = facts.get("torch_version")
    rep.add("ok" if torch_v else "problem", "torch", torch_v or "not installed", None if torch_v else "install torch")


def _check_hardware(rep: DoctorReport, hw: Any, host: HostInfo, facts: dict[str, Any], engine_gpus: list[int]) -> None:
    """The hardware line: what the scope asks for, what this host has and how they meet."""
    match = match_hardware(hw, host, engine_gpus=engine_gpus or None)
    for fact in match.facts:
        rep.add("note", "host", fact)
    fit = device_fit(hw, host, match.problems, facts)
    rep.add(fit.status, "hardware", fit.found, fit.fix)


def _check_nodes(
    rep: DoctorReport,
    hw: Any,
    plan: Plan,
    host: HostInfo,
    exe: str,
    engine_gpus: list[int],
    say: Callable[[str], None],
) -> None:
    """The nodes an engine spans and how they would be launched (nothing when every engine has one node)."""
    spans = sorted({g.nodes for g in plan.groups if g.nodes > 1})
    if not spans:
        return
    launcher = default_launcher()
    where = host.allocation or "no batch allocation"
    if launcher.name == "local":
        rep.add(
            "problem",
            "nodes",
            f"engines of the {plan.tier} tier span {', '.join(map(str, spans))} nodes; {where}",
            f"run inside a Slurm allocation of {max(spans)} nodes (salloc -N {max(spans)}); the slurm launcher "
            "starts one node process per host",
        )
    elif shutil.which("srun") is None:
        rep.add("problem", "nodes", f"{where}, but srun is not on PATH", "load Slurm's client tools")
    else:
        rep.add("ok", "nodes", f"engines span up to {max(spans)} nodes; launcher {launcher.name}; {where}")
        say("reading every node's hardware report (srun)")
        for node_status, found, fix in _engine_nodes(hw, exe, max(spans), engine_gpus or None):
            rep.add(node_status, "engine nodes", found, fix)


def _check_model(rep: DoctorReport, loaded: LoadedScope) -> int:
    """Where the model's weights are (built, a local folder, the Hugging Face cache); returns their bytes (0 when
    unknown)."""
    scope = loaded.scope
    builder = builder_path(scope, loaded.base_dir)
    if builder is not None and not builder.is_file():
        rep.add(
            "problem",
            "model",
            f"model.local_builder {scope.model.local_builder!r} does not exist: it resolves to {builder}",
            "paths in a scope are relative to the scope file's folder; fix model.local_builder",
        )
    elif builder is not None:
        from fasttrack.host.models import model_cache_path

        built = model_cache_path(scope.name)
        if built.is_dir():
            model_bytes = _dir_size(built)
            rep.add("ok", "model", f"built in {built} ({_gib(model_bytes)})")
            return model_bytes
        rep.add("note", "model", f"not built yet; validate builds it into {built} on its first run")
    elif Path(scope.model.id).exists():
        model_bytes = _dir_size(Path(scope.model.id))
        rep.add("ok", "model", f"{scope.model.id} ({_gib(model_bytes)})")
        return model_bytes
    else:
        return _check_hf_cache(rep, scope.model.id)
    return 0


def _check_hf_cache(rep: DoctorReport, model_id: str) -> int:
    """A model served by its Hugging Face id: whether the cache holds it; returns its bytes (0 when not)."""
    cached = _hf_cache_dir(model_id)
    if cached.is_dir() and any(cached.glob("snapshots/*/*")):
        model_bytes = _dir_size(cached)
        rep.add("ok", "model", f"{model_id} in the Hugging Face cache {cached} ({_gib(model_bytes)})")
        return model_bytes
    if os.environ.get("HF_HUB_OFFLINE") == "1":
        rep.add(
            "problem",
            "model",
            f"{model_id} is not in the Hugging Face cache and HF_HUB_OFFLINE=1",
            f"download it first: huggingface-cli download {model_id}",
        )
    else:
        rep.add(
            "note",
            "model",
            f"{model_id} is not in the Hugging Face cache ({cached}); vLLM downloads it at the first engine start",
            f"download it first to keep that out of the timings: huggingface-cli download {model_id}",
        )
    return 0


def _check_disk(rep: DoctorReport, free: int, probe: Path) -> None:
    need = MIN_FREE_DISK_GIB * 2**30
    rep.add(
        "ok" if free >= need else "problem",
        "disk",
        f"{_gib(free)} free under {probe}",
        None if free >= need else f"free at least {MIN_FREE_DISK_GIB:.0f} GiB for logs, traces and the bundle",
    )


def _check_engine_args(rep: DoctorReport, plan: Plan, python: str | None) -> None:
    """The plan's engine arguments against the installed vLLM's own parser."""
    res = check_arg_lists(plan.engine_arg_lists(), python=python)
    if res.skipped:
        rep.add("problem", "engine arguments", res.skipped)
    elif res.issues:
        for line in res.lines():
            rep.add("problem", "engine arguments", line, "fix the flag in the scope's engine arguments")
    else:
        rep.add("ok", "engine arguments", f"{len(res.checked)} argument lists accepted by vLLM {res.vllm_version}")


def _check_passability(rep: DoctorReport, loaded: LoadedScope, tier: str) -> None:
    """What every tier requires that it can never run here (a problem for the tier asked for, a note for others)."""
    scope = loaded.scope
    for t in TIER_ORDER:
        pt = analyze(scope, build_run_plan(scope, tier=t), base_dir=loaded.base_dir)
        if pt.ok:
            rep.add("ok", f"passability ({t})", f"every required item of the {t} tier can run")
        else:
            status: Status = "problem" if t == tier else "note"
            for line in pt.lines():
                rep.add(status, f"passability ({t})", line)


def _engine_nodes(
    hw: Any, python: str, nnodes: int, engine_gpus: list[int] | None
) -> list[tuple[Status, str, str | None]]:
    """Inside an allocation: what every node reports (one ``srun`` task per node) against the scope, and whether the
    nodes an engine spans share one NVLink domain (the multi-node NVLink fabric)."""
    from fasttrack.engine.nodes import allocation_reports, host_from_report
    from fasttrack.host.hardware import match_nodes

    reports, err = allocation_reports(python=python, nnodes=nnodes)
    if err:
        return [("problem", err, "run doctor inside the allocation the shard gets (salloc/sbatch -N)")]
    hosts = [host_from_report(r) for r in reports]
    m = match_nodes(hw, {"the allocation": hosts}, engine_gpus=engine_gpus)
    out: list[tuple[Status, str, str | None]] = [("note", f, None) for f in m.facts]
    fix = "ask Slurm for nodes of one NVLink domain (site slurm.placement: --segment, --switches or --constraint)"
    out += [("problem", p, fix if "NVLink domain" in p or "fabric" in p else None) for p in m.problems]
    if m.ok:
        names = ", ".join(h.hostname or "?" for h in hosts)
        one = " in one NVLink domain" if hw.node is not None and hw.node.fabric == "mnnvl" else ""
        out.append(("ok", f"{len(hosts)} node(s) of the allocation ({names}) match the scope{one}", None))
    return out


def _estimate(plan: Plan) -> str:
    e = plan.estimate
    return (
        f"{plan.tier}: {len(plan.points)} config points in {len(plan.groups)} engine groups, {e.engine_starts} "
        f"engine starts, ~{e.gpu_hours:,.1f} GPU-hours, ~{e.node_hours:,.1f} node-hours, ~{e.wall_hours:,.1f} h wall"
    )
