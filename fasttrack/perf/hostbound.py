"""Whether a perf point's decode step is bound by the host or by the GPU.

A decode step reads every weight once, so it cannot take less than the weights' size over the card's memory
bandwidth. Where the measured step time is far above that floor, the step is mostly the host's work
(scheduling, Python, launches): a kernel that got a few percent faster or slower changes the step by less than
the host's noise, and the point cannot show it. The rule: a point is **host-bound** when streaming its weights
takes less than half of its step (``stream_share < 0.5``); each perf row says so, with the figures.

Measured (H100, vLLM 0.26.0): the ~1B demo model streams its 2 GB in 0.6 ms of a 1.35 ms step (share 0.44:
host-bound); the ~8B shape streams 14.6 GB in 4.4 ms of a 6.1 ms step (0.72: GPU-bound).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

HOST_BOUND_SHARE = 0.5
"""Below this share of the step spent streaming the weights, a point is host-bound."""

#: Peak memory bandwidth (GB/s) of NVIDIA data-center GPUs by the vendor's datasheets, matched on the name
#: ``nvidia-smi`` reports; the first pattern that matches wins (qualified names first).
BANDWIDTH_GBS: tuple[tuple[str, float], ...] = (
    (r"\bGB300\b", 8000.0),
    (r"\bGB200\b", 8000.0),
    (r"\bB300\b", 8000.0),
    (r"\bB200\b", 8000.0),
    (r"\bGH200\b", 4000.0),
    (r"\bH200\b", 4800.0),
    (r"\bH100\b.*\bNVL\b", 3900.0),
    (r"\bH100\b.*\bPCIe\b", 2000.0),
    (r"\bH100\b", 3350.0),
    (r"\bH800\b", 3350.0),
    (r"\bA100\b.*\b80GB\b.*\bPCIe\b", 1935.0),
    (r"\bA100\b.*\b80GB\b", 2039.0),
    (r"\bA100\b", 1555.0),
    (r"\bL40S\b", 864.0),
    (r"\bL4\b", 300.0),
)


def memory_bandwidth_gbs(device: str | None) -> float | None:
    """The card's peak memory bandwidth in GB/s by its name (None: a CPU or an unknown card)."""
    if not device:
        return None
    for pattern, gbs in BANDWIDTH_GBS:
        if re.search(pattern, device):
            return gbs
    return None


def weights_bytes(model_dir: str | Path | None) -> int | None:
    """The size of a local model's weight files (safetensors, else PyTorch bins); None when not a local folder."""
    if not model_dir:
        return None
    d = Path(model_dir)
    if not d.is_dir():
        return None
    files = list(d.glob("*.safetensors")) or list(d.glob("*.bin"))
    total = sum(f.stat().st_size for f in files if f.is_file())
    return total or None


def host_bound_fields(
    *, step_ms: float | None, weights: int | None, bandwidth_gbs: float | None, tp: int = 1
) -> dict[str, Any]:
    """The row's figures: the step, the weights' streaming time per GPU, its share of the step, and the label
    (None where a figure is missing: a CPU host, an unknown card, an attached engine's model)."""
    if not step_ms or step_ms <= 0 or not weights or not bandwidth_gbs:
        why = (
            "no GPU memory bandwidth for this host"
            if not bandwidth_gbs
            else "the model's weights were not read"
            if not weights
            else "no step time"
        )
        return {"host_bound": None, "host_bound_note": f"not judged: {why}"}
    stream_ms = weights / max(tp, 1) / (bandwidth_gbs * 1e9) * 1e3
    share = stream_ms / step_ms
    bound = share < HOST_BOUND_SHARE
    note = (
        f"streaming the weights ({weights / max(tp, 1) / 1e9:.2f} GB per GPU at {bandwidth_gbs / 1e3:.2f} TB/s) takes "
        f"{stream_ms:.2f} ms of the {step_ms:.2f} ms step ({share:.0%})"
    )
    if bound:
        note = (
            f"host-bound: {note}; the step is mostly the host's work, so a kernel effect smaller than this point's "
            "interval cannot be seen here"
        )
    else:
        note = f"GPU-bound: {note}"
    return {
        "host_bound": bound,
        "step_ms": step_ms,
        "weights_stream_ms": stream_ms,
        "stream_share": share,
        "host_bound_note": note,
    }
