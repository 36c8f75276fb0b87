"""Demo Llama kernel suite: the demo decode backend's fused ops against float64 references.

On a host with CUDA the default candidate is the CUDA fast path's Triton kernels
(``demo_triton_candidates``, torch and triton only); elsewhere the CPU fast path's ops
(``demo_candidates``, which need vLLM's CPU build). Run it with
``python -m fasttrack.kernels.run --suite suites/demo-llama/kernels``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fasttrack.kernels.tolerance import VLLM_REDUCTION

_HERE = Path(__file__).resolve().parent

SUITE_TOLERANCES = {
    "demo_add_rmsnorm": {"bf16": VLLM_REDUCTION["bf16"], "fp32": VLLM_REDUCTION["fp32"]},
    # bf16: the block's output passes two GEMMs after bf16 roundings; over the standard tier's 40 bf16 cases an
    # in-order composition of the CUDA fast path's block (Triton interpreter) erred by up to 0.025 at outputs near
    # zero, so atol is 3e-2. That was measured while the norm kernel normalized the residual rounded to bf16 (it
    # now normalizes the float32 sum, as the stock op does), so the bound may be tighter on the next GPU run.
    "demo_fused_mlp": {"bf16": {**VLLM_REDUCTION["bf16"], "atol": 3e-2}, "fp32": {"atol": 1e-5, "rtol": 1e-5}},
}


def pytest_configure(config: pytest.Config) -> None:
    if not config.pluginmanager.has_plugin("fasttrack.kernels.plugin"):
        config.pluginmanager.import_plugin("fasttrack.kernels.plugin")


@pytest.fixture(scope="session")
def suite_dir() -> Path:
    return _HERE


@pytest.fixture(scope="session")
def default_candidate() -> str:
    import torch

    return "demo_triton_candidates" if torch.cuda.is_available() else "demo_candidates"


@pytest.fixture(scope="session")
def suite_tolerances() -> dict:
    return SUITE_TOLERANCES
