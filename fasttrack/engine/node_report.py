"""What one engine node reports about itself: its GPUs, NVLink, fabric, and the vLLM build it serves.

Run by path under the engine's interpreter (the standard library only, like ``node_main.py``, which writes the
report before vLLM starts): ``python node_report.py [RANK]`` prints the report as JSON; ``node_main`` writes it to
``$FASTTRACK_NODE_REPORTS/node<rank>.json`` (:data:`fasttrack.engine.cmdline.NODE_REPORTS_ENV`, a folder on the
run's shared file system). A driver that attaches the engine by URL, or runs on another host than the engine's
nodes, checks the scope's hardware against these reports instead of its own host
(:mod:`fasttrack.engine.nodes`): a Kubernetes driver pod needs no GPU, and every node of a multi-node engine is
checked, not only the first.

The report holds ``nvidia-smi``'s own output (the GPU query, ``nvlink --status``, the fabric lines of ``-q``);
the driver parses it with :mod:`fasttrack.host.hardware`'s parsers, as it parses its own host's.
"""

from __future__ import annotations

import os
import sys

# Run by its path, Python puts this folder first on sys.path, where engine modules named like the
# standard library's (trace, logs...) would shadow it: take it off (as node_main does).
_HERE = os.path.dirname(os.path.realpath(__file__))
sys.path[:] = [p for p in sys.path if os.path.realpath(p or os.getcwd()) != _HERE]

import importlib.util  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import socket  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

REPORT_VERSION = 1
GPU_QUERY = "index,name,compute_cap,memory.total,driver_version"
MAX_TEXT = 200_000
"""Characters kept of each command's output (``nvidia-smi -q`` of 8 GPUs is about 100 KB)."""


def _run(argv: list[str]) -> str | None:
    try:
        res = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return None
    return res.stdout[:MAX_TEXT] if res.returncode == 0 else None


def _fabric_lines(text: str | None) -> str | None:
    """The GPU headers and the ``Fabric`` sections of ``nvidia-smi -q`` (the rest is not needed)."""
    if text is None:
        return None
    keep: list[str] = []
    in_fabric = False
    for line in text.splitlines():
        stripped = line.strip()
        if re.match(r"^GPU [0-9A-Fa-f]{4,}:", line):
            keep.append(line)
            in_fabric = False
        elif re.match(r"^Fabric\s*$", stripped):
            keep.append(line)
            in_fabric = True
        elif in_fabric and re.match(r"^(State|Status|ClusterUUID|Cluster UUID|CliqueId|Clique ID)\s*:", stripped):
            keep.append(line)
        elif in_fabric and stripped and ":" not in stripped:
            in_fabric = False
    return "\n".join(keep)


def vllm_build() -> dict[str, Any]:
    """The installed vLLM's version and commit: ``vllm/_version.py``'s commit, else ``git rev-parse HEAD`` of a
    clean source checkout (an editable install, as ``fasttrack image`` builds), else none, saying why."""
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        return {"version": None, "commit": None, "commit_source": "vllm is not importable here"}
    pkg = os.path.realpath(list(spec.submodule_search_locations)[0])
    out: dict[str, Any] = {"version": None, "commit": None, "commit_source": None}
    ns: dict[str, Any] = {}
    try:
        with open(os.path.join(pkg, "_version.py"), encoding="utf-8") as fh:
            exec(fh.read(), ns)  # noqa: S102 - the installed vLLM's own version file
    except (OSError, SyntaxError):
        ns = {}
    out["version"] = ns.get("__version__")
    commit = ns.get("__commit_id__") or ns.get("commit_id")
    if isinstance(commit, str) and re.fullmatch(r"g?[0-9a-fA-F]{7,40}", commit):
        out["commit"], out["commit_source"] = commit.lstrip("g"), "vllm/_version.py"
        return out
    head = _run(["git", "-C", pkg, "rev-parse", "--show-toplevel", "HEAD"])
    parts = head.split() if head else []
    if len(parts) == 2 and os.path.realpath(os.path.join(parts[0], "vllm")) == pkg:
        dirty = _run(["git", "-C", parts[0], "status", "--porcelain", "--untracked-files=no"])
        if dirty == "":
            out["commit"], out["commit_source"] = parts[1], f"git rev-parse HEAD in {parts[0]}"
        else:
            out["commit_source"] = f"the checkout {parts[0]} has changes to tracked files: HEAD is not what runs"
    else:
        out["commit_source"] = "vllm/_version.py has no commit and vllm is not a git checkout"
    return out


def collect(rank: int) -> dict[str, Any]:
    """This node's report (see the module docstring)."""
    smi = shutil.which("nvidia-smi")
    query = _run([smi, f"--query-gpu={GPU_QUERY}", "--format=csv,noheader,nounits"]) if smi else None
    return {
        "report_version": REPORT_VERSION,
        "rank": rank,
        "hostname": socket.gethostname(),
        "time": time.time(),
        "cpu_count": os.cpu_count(),
        "cpu_model": platform.processor() or platform.machine(),
        "nvidia_smi": smi is not None,
        "gpu_query": query,
        "nvlink_status": _run([smi, "nvlink", "--status"]) if smi and query else None,
        "fabric": _fabric_lines(_run([smi, "-q"])) if smi and query else None,
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "image_digest": os.environ.get("FASTTRACK_IMAGE_DIGEST"),
        "slurm_job": os.environ.get("SLURM_JOB_ID"),
        "vllm": vllm_build(),
    }


def write(folder: str, rank: int) -> str:
    """Write this node's report to ``folder/node<rank>.json`` (atomically); return its path."""
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"node{rank}.json")
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(collect(rank), fh)
    os.replace(tmp, path)
    return path


def rank_from_args(argv: list[str], default: int = 0) -> int:
    """The ``--node-rank`` among vLLM's arguments (``default`` without one)."""
    for i, a in enumerate(argv):
        val = argv[i + 1] if a == "--node-rank" and i + 1 < len(argv) else a.partition("=")[2]
        if a.startswith("--node-rank") and val.isdigit():
            return int(val)
    return default


CHUNK = 400
"""Characters of the report per output line with ``--lines``: ``srun`` forwards the tasks' output in pieces, and a
long line of one task can be cut by another's."""


def as_lines(report: dict[str, Any]) -> list[str]:
    """The report as short lines ``fasttrack-node-report RANK I/N BASE64`` (reassembled by :func:`from_lines`)."""
    import base64

    data = base64.b64encode(json.dumps(report).encode()).decode()
    parts = [data[i : i + CHUNK] for i in range(0, len(data), CHUNK)] or [""]
    return [f"fasttrack-node-report {report['rank']} {i + 1}/{len(parts)} {p}" for i, p in enumerate(parts)]


def from_lines(text: str) -> list[dict[str, Any]]:
    """The reports in ``text`` (lines of :func:`as_lines`, among any others), by rank; incomplete ones left out."""
    import base64

    parts: dict[int, dict[int, str]] = {}
    total: dict[int, int] = {}
    for line in text.splitlines():
        m = re.fullmatch(r"fasttrack-node-report (\d+) (\d+)/(\d+) ([A-Za-z0-9+/=]*)", line.strip())
        if m:
            rank, i, n = int(m.group(1)), int(m.group(2)), int(m.group(3))
            parts.setdefault(rank, {})[i] = m.group(4)
            total[rank] = n
    out = []
    for rank in sorted(parts):
        if len(parts[rank]) != total[rank]:
            continue
        try:
            rep = json.loads(base64.b64decode("".join(parts[rank][i] for i in range(1, total[rank] + 1))))
        except ValueError:
            continue
        if isinstance(rep, dict):
            out.append(rep)
    return out


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--lines"]
    r = int(args[0]) if args and args[0].isdigit() else int(os.environ.get("SLURM_NODEID", "0"))
    if "--lines" in sys.argv[1:]:
        sys.stdout.write("".join(line + "\n" for line in as_lines(collect(r))))
    else:
        sys.stdout.write(json.dumps(collect(r)) + "\n")
