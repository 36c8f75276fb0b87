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
    # bf16: the block's output passes two GEMMs after bf16 roundings. Over the standard tier's 40 bf16 cases, an
    # in-order composition of the CUDA fast path's block on the CPU (Triton interpreter, its float32->bf16
    # conversion rounding to nearest as the GPU's does) needs atol 0.0074 at rtol 1.6e-2 with the norm kernel
    # that follows the stock op's roundings; the kernels before it needed 0.0089 (weight multiply after a bf16
    # rounding) and 0.0103 (normalizing the residual rounded to bf16), which failed 9 cases at atol 1e-2 on an
    # H200 where the interpreter fails 2. The GPU can err more than the interpreter, so atol is twice the
    # measured 0.0074; numerics-from-batch still needs atol 0.26 or more in every non-tiny case of 5+ rows.
    "demo_fused_mlp": {"bf16": {**VLLM_REDUCTION["bf16"], "atol": 1.5e-2}, "fp32": {"atol": 1e-5, "rtol": 1e-5}},
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
