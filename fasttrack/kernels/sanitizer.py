"""compute-sanitizer over a small selection of a suite: memcheck, racecheck, synccheck.

The selection is the suite's tests marked ``sanitize`` (each kernel once, at a small shape):
under the sanitizer a kernel runs tens to thousands of times slower. PyTorch's caching
allocator is switched off for these runs (``PYTORCH_NO_CUDA_MEMORY_CACHING=1``) so that every
tensor is its own allocation and memcheck sees out-of-bounds accesses between tensors.

racecheck inspects shared memory only: a race between kernels on two streams through global
memory is invisible to it (the perturbation harness is the detector for that).
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

TOOLS: tuple[str, ...] = ("memcheck", "racecheck", "synccheck")

_ERRORS = re.compile(r"ERROR SUMMARY:\s*(\d+)\s+error", re.I)
_RACE = re.compile(r"RACECHECK SUMMARY:\s*(\d+)\s+hazards? displayed\s*\((\d+)\s+errors?,\s*(\d+)\s+warnings?\)", re.I)


def find() -> str | None:
    """Path of compute-sanitizer, or None."""
    exe = shutil.which("compute-sanitizer")
    if exe:
        return exe
    for pattern in (
        "/usr/local/cuda/bin/compute-sanitizer",
        "/usr/local/cuda*/bin/compute-sanitizer",
        "/opt/nvidia/*/compute-sanitizer/compute-sanitizer",
    ):
        hits = sorted(glob.glob(pattern))
        if hits:
            return hits[-1]
    return None


def parse(tool: str, output: str) -> dict[str, Any]:
    """Errors (and racecheck hazards) from the sanitizer's summary lines; None when absent."""
    errs = [int(m.group(1)) for m in _ERRORS.finditer(output)]
    res: dict[str, Any] = {"errors": sum(errs) if errs else None, "summaries": len(errs)}
    if tool == "racecheck":
        races = [(int(m.group(1)), int(m.group(2)), int(m.group(3))) for m in _RACE.finditer(output)]
        if races:
            res["hazards"] = sum(r[0] for r in races)
            res["race_errors"] = sum(r[1] for r in races)
            res["race_warnings"] = sum(r[2] for r in races)
            res["errors"] = (res["errors"] or 0) + res["race_errors"]
            res["summaries"] += len(races)
    return res


def not_run_rows(reason: str, tools: tuple[str, ...] = TOOLS) -> list[dict[str, Any]]:
    return [{"tool": t, "status": "not_run", "reason": reason, "verdict": "not_run"} for t in tools]


def run_tool(
    tool: str,
    *,
    exe: str,
    pytest_args: list[str],
    env: dict[str, str],
    cwd: Path,
    timeout_s: float,
    log_path: Path | None = None,
) -> dict[str, Any]:
    """Run the selected tests under one sanitizer tool and summarise what it reported."""
    cmd = [exe, "--tool", tool, "--target-processes", "all", "--print-limit", "50", *pytest_args]
    env = dict(env)
    env["PYTORCH_NO_CUDA_MEMORY_CACHING"] = "1"
    t0 = time.monotonic()
    try:
        proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout_s)
        out = (proc.stdout or "") + (proc.stderr or "")
        rc: int | None = proc.returncode
        timed_out = False
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"").decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        rc, timed_out = None, True
    wall = time.monotonic() - t0
    if log_path is not None:
        log_path.write_text(out, encoding="utf-8")
    parsed = parse(tool, out)
    passed_tests = re.findall(r"(\d+) passed", out)
    row: dict[str, Any] = {
        "tool": tool,
        "command": " ".join(cmd),
        "exit_code": rc,
        "wall_s": round(wall, 1),
        "tests_passed": int(passed_tests[-1]) if passed_tests else 0,
        **parsed,
        "log_tail": out[-2000:],
    }
    if timed_out:
        row.update(status="not_run", verdict="not_run", reason=f"timed out after {timeout_s:.0f} s")
    elif parsed["errors"] is None:
        row.update(
            status="not_run",
            verdict="not_run",
            reason="the sanitizer printed no summary (it may not support this device)",
        )
    else:
        row.update(
            status="ran",
            verdict="pass" if parsed["errors"] == 0 else "fail",
            reason=f"{parsed['errors']} error(s) reported",
        )
    return row


def cuda_available() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:  # torch missing or its CUDA runtime unusable: no CUDA
        return False


def environment_reason() -> str | None:
    """Why the sanitizers cannot run here, or None."""
    if not cuda_available():
        return "no CUDA device on this host"
    if find() is None:
        return "compute-sanitizer is not installed on this host (not on PATH or under /usr/local/cuda*/bin)"
    if os.environ.get("FASTTRACK_KERNEL_NO_SANITIZER"):
        return "disabled by FASTTRACK_KERNEL_NO_SANITIZER"
    return None
