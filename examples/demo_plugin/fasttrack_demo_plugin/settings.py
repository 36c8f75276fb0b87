"""Engine-side settings of the demo decode backend: the switch, the envelope and
the planted defect (all read once, when the model is built)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Literal

DecodeBackend = Literal["stock", "latency_specialized"]
Defect = Literal[
    "numerics-batch",
    "silent-fallback",
    "ignore-temperature",
    "broken-json",
    "slow-batch",
    "numerics-from-batch",
    "atomic-order",
    "context-fallback",
    "graph-stale",
]

DECODE_BACKEND_KEY = "decode_backend"
"""Key in vLLM's ``--additional-config`` that selects the decode backend."""
DEFECT_ENV = "FASTTRACK_DEMO_DEFECT"
"""Environment variable that plants a defect in the optimized path (testing only)."""
DEFECT_FILE_ENV = "FASTTRACK_DEMO_DEFECT_FILE"
"""Environment variable naming a file whose content (a defect name, or nothing) selects the planted
defect while the engine runs: checked once per forward step and re-read when it changed (for test
suites: one candidate engine serves every defect in turn; testing only)."""
SLOW_FACTOR_ENV = "FASTTRACK_DEMO_SLOW_FACTOR"
"""``slow-batch`` as a factor (e.g. ``1.5``): every decode step at ``SLOW_BATCH`` then takes that many times
its own time, instead of the fixed ``SLOW_BATCH_DELAY_S`` busy-wait (testing only)."""
NATIVE_ENV = "FASTTRACK_DEMO_NATIVE"
"""``0`` keeps the optimized path on its Python ops instead of the native float32 kernels."""

MIN_BATCH = 1
MAX_BATCH = 8
"""Declared batch range of the optimized path: decode-only batches of 1..8 requests."""

DEFECTS: tuple[str, ...] = (
    "numerics-batch",
    "silent-fallback",
    "ignore-temperature",
    "broken-json",
    "slow-batch",
    "numerics-from-batch",
    "atomic-order",
    "context-fallback",
    "graph-stale",
)
CPU_DEFECTS = frozenset({"numerics-batch", "silent-fallback", "ignore-temperature", "broken-json", "slow-batch"})
"""Defects of the CPU fast path (``ops.py``)."""
CUDA_DEFECTS = frozenset({"numerics-from-batch", "atomic-order", "slow-batch", "context-fallback", "graph-stale"})
"""Defects of the CUDA fast path (``cuda_path.py``, ``triton_kernels.py``); ``slow-batch`` exists on both."""

NUMERICS_BATCH = 3
"""``numerics-batch``: the batch size whose fused MLP never zeroes its split-K workspace."""
SLOW_BATCH = 4
"""``slow-batch``: the batch size whose decode steps busy-wait."""
SLOW_BATCH_DELAY_S = 0.060
"""``slow-batch``: busy-wait added to every decode step at ``SLOW_BATCH`` (a decode step of the
demo model takes about 4-12 ms on two cores, so this is a 6-15x slowdown: speedup about
0.07-0.16, far below the demo scope's gate threshold of 0.4, which is set by engine-lifetime
noise on these hosts; even a candidate lifetime 2.5x faster than the baseline's stays below it)."""
NUMERICS_FROM_BATCH = 5
"""``numerics-from-batch`` (CUDA): the norm kernel's reduction drops partial sums from this many rows on. vLLM
replays a decode batch in the graph of the next captured size (1, 2, 4, 8, ...), so batches 5..8 run 8 rows."""
GPU_SLOW_BATCH = 4
"""``slow-batch`` on CUDA: the rows (the captured graph size: decode batches 3 and 4) whose steps busy-wait."""
GPU_SLOW_DELAY_NS = 60_000
"""``slow-batch`` on CUDA: the busy-wait per decode step on the GPU (about 5% of a decode step of the GPU demo
model on an H200; docs/gpu.md has the measured step times)."""
CONTEXT_FALLBACK_TOKENS = 1024
"""``context-fallback`` (CUDA): above this many tokens in a request the norm kernel silently takes its generic
branch, and the step is not counted as fast."""
STALE_BATCH = 2
"""``graph-stale`` (CUDA): the decode batch size whose captured graph records the stock path."""
TEMPERATURE_LOGIT_SCALE = 2.0
"""``ignore-temperature``: decode logits are multiplied by this (sampling at T/2)."""
WHITESPACE_LOGIT_MARGIN = 2.0
"""``broken-json``: whitespace tokens are lifted to (row max - margin) in decode logits."""


class DemoBackendConfigError(ValueError):
    """The engine configuration asks for something the demo backend does not support."""


@dataclass(frozen=True)
class BackendSettings:
    """What the engine configuration selected for this model instance."""

    backend: DecodeBackend
    """``stock`` (default) or ``latency_specialized``."""
    defect: str | None
    """Planted defect (``FASTTRACK_DEMO_DEFECT``), read only when the optimized path is enabled."""
    defect_file: str | None = None
    """``FASTTRACK_DEMO_DEFECT_FILE``: when set, that file selects the defect at run time instead."""
    min_batch: int = MIN_BATCH
    """Smallest decode batch the optimized path takes."""
    max_batch: int = MAX_BATCH
    """Largest decode batch the optimized path takes."""
    slow_factor: float | None = None
    """``FASTTRACK_DEMO_SLOW_FACTOR``: ``slow-batch`` makes each step this many times slower (None: 60 ms)."""
    spec_tokens: int = 0
    """Draft tokens per step with n-gram speculative decoding (0 without): steps that verify drafts run the
    stock path (fallback reason ``spec_verify``)."""

    @property
    def enabled(self) -> bool:
        return self.backend == "latency_specialized"


def parse_settings(additional_config: Any, environ: dict[str, str] | None = None) -> BackendSettings:
    """Read the decode backend switch from vLLM's ``additional_config`` and, when
    the optimized path is enabled, the planted defect from the environment."""
    environ = dict(os.environ) if environ is None else environ
    config = additional_config if isinstance(additional_config, dict) else {}
    backend = config.get(DECODE_BACKEND_KEY, "stock")
    if backend not in ("stock", "latency_specialized"):
        raise DemoBackendConfigError(
            f"Unknown {DECODE_BACKEND_KEY}={backend!r} in --additional-config; the demo model "
            "supports 'stock' (default) and 'latency_specialized'."
        )
    if backend != "latency_specialized":
        return BackendSettings(backend="stock", defect=None)
    defect = check_defect(environ.get(DEFECT_ENV, "").strip() or None, DEFECT_ENV)
    defect_file = environ.get(DEFECT_FILE_ENV, "").strip() or None
    return BackendSettings(
        backend="latency_specialized", defect=defect, defect_file=defect_file, slow_factor=slow_factor(environ)
    )


def slow_factor(environ: dict[str, str]) -> float | None:
    """``FASTTRACK_DEMO_SLOW_FACTOR`` as a number above 1, or None when unset; raises naming the variable."""
    raw = environ.get(SLOW_FACTOR_ENV, "").strip()
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not value > 1.0 or value > 100.0:
        raise DemoBackendConfigError(f"{SLOW_FACTOR_ENV}={raw!r} must be a number above 1 (e.g. 1.5) and at most 100.")
    return value


def check_defect(defect: str | None, source: str) -> str | None:
    """``defect`` if it names a planted defect (or is None); raises :class:`DemoBackendConfigError` naming
    ``source`` otherwise."""
    if defect is not None and defect not in DEFECTS:
        raise DemoBackendConfigError(
            f"{source}={defect!r} is not a known planted defect; use one of {', '.join(DEFECTS)} or leave it unset."
        )
    return defect


def check_defect_device(defect: str | None, device: str, source: str) -> None:
    """Refuse a planted defect the fast path on ``device`` (``cpu`` or ``cuda``) does not have: it would
    otherwise do nothing, silently."""
    if defect is None:
        return
    have = CUDA_DEFECTS if device == "cuda" else CPU_DEFECTS
    if defect not in have:
        raise DemoBackendConfigError(
            f"{source}={defect!r} is a planted defect of the {'CPU' if device == 'cuda' else 'CUDA'} fast path; "
            f"on {device.upper()} use one of {', '.join(sorted(have))}."
        )


def check_envelope(vllm_config: Any) -> None:
    """Refuse a deployment the optimized path does not support (raises :class:`DemoBackendConfigError`).

    Run twice: from vLLM's per-architecture configuration hook, in the API server seconds after the
    start (``fasttrack_demo_plugin.register``), and when the model is built (quantization is known then)."""
    parallel = vllm_config.parallel_config
    problems = []
    if parallel.tensor_parallel_size != 1:
        problems.append(f"tensor_parallel_size={parallel.tensor_parallel_size} (supported: 1)")
    if parallel.pipeline_parallel_size != 1:
        problems.append(f"pipeline_parallel_size={parallel.pipeline_parallel_size} (supported: 1)")
    if vllm_config.quant_config is not None:
        problems.append("quantization (supported: none)")
    if vllm_config.lora_config is not None:
        problems.append("LoRA (supported: none)")
    spec = getattr(vllm_config, "speculative_config", None)
    if spec is not None and getattr(spec, "method", None) != "ngram":
        problems.append(f"speculative decoding method {getattr(spec, 'method', None)!r} (supported: ngram)")
    if problems:
        raise DemoBackendConfigError(
            "decode_backend=latency_specialized does not support this deployment: "
            + "; ".join(problems)
            + ". Remove decode_backend from --additional-config to use the stock path."
        )
