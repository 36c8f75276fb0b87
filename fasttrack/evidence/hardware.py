"""Whether the hardware a bundle recorded is the hardware its judging scope declares.

A run on other hardware is a rehearsal: its bundle must say so (``rehearsal``), and its verdict is never
``pass``. :func:`recorded_hardware_problems` holds the recorded GPUs against the scope the way the host check
of ``validate`` holds a host (:func:`fasttrack.hardware.match_hardware`): the device kind, the GPU model
(``gpu_models``), the SM architecture (``sm_arch``, from the GPU's product name) and enough GPUs for one node.
A CPU scope accepts any host.
"""

from __future__ import annotations

import re

from fasttrack.scope import HardwareSpec

#: Compute capability of NVIDIA data-center GPUs by product name, for reports that name the GPU but not its
#: capability (vLLM's ``/server_info`` lists ``nvidia-smi -L`` names only). Matched as a word of the name;
#: the longest match wins (``GB300`` before ``B300``). Names outside the table stay unknown.
COMPUTE_CAPABILITY_BY_NAME: dict[str, str] = {
    "A100": "8.0",
    "A800": "8.0",
    "A30": "8.0",
    "A10": "8.6",
    "A40": "8.6",
    "L4": "8.9",
    "L40": "8.9",
    "L40S": "8.9",
    "H100": "9.0",
    "H200": "9.0",
    "H800": "9.0",
    "H20": "9.0",
    "GH200": "9.0",
    "B200": "10.0",
    "GB200": "10.0",
    "B300": "10.3",
    "GB300": "10.3",
}


def capability_from_name(name: str) -> str | None:
    """The compute capability of an NVIDIA GPU named ``name`` (``'NVIDIA H200'`` -> ``'9.0'``), or None when
    the name is not in :data:`COMPUTE_CAPABILITY_BY_NAME`."""
    words = set(re.findall(r"[A-Za-z0-9]+", name.upper()))
    hits = [k for k in COMPUTE_CAPABILITY_BY_NAME if k in words]
    return COMPUTE_CAPABILITY_BY_NAME[max(hits, key=len)] if hits else None


def recorded_hardware_problems(
    spec: HardwareSpec | None, *, kind: str, gpu_model: str | None, gpu_count: int
) -> list[str]:
    """What keeps recorded hardware (``kind``, the ``gpu_model`` names joined by `` + ``, ``gpu_count``) from
    matching ``spec`` (empty: it matches)."""
    if spec is None or spec.device == "cpu":
        return []
    if kind != "gpu":
        return [f"the bundle recorded a {kind} host, the scope asks for GPUs"]
    problems = []
    names = [n.strip() for n in (gpu_model or "").split(" + ") if n.strip()]
    if not names:
        problems.append("the bundle recorded no GPU model")
    if spec.gpu_models:
        bad = [n for n in names if not any(m.lower() in n.lower() for m in spec.gpu_models)]
        if bad:
            problems.append(f"GPU model {bad} is not one of {spec.gpu_models}")
    if spec.sm_arch:
        archs = {n: capability_from_name(n) for n in names}
        bad = [n for n, cap in archs.items() if cap is None or "sm_" + cap.replace(".", "") not in spec.sm_arch]
        if bad:
            found = ", ".join(f"{n} ({'sm_' + c.replace('.', '') if c else 'unknown arch'})" for n, c in archs.items())
            problems.append(f"GPU architecture of {found} is not {'/'.join(spec.sm_arch)}")
    need = spec.node.gpus if spec.node is not None else (min(spec.gpu_counts) if spec.gpu_counts else 1)
    if gpu_count < need:
        problems.append(f"{gpu_count} GPU(s) recorded, the scope needs {need} per node")
    return problems
