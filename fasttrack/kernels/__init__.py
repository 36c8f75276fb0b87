"""The kernel tier: numerics, determinism, race hunting and speed of light for kernel suites.

Kernel suites are pytest modules under ``suites/<model>/kernels/``. They run under plain
pytest + torch (+ triton) on the host that has the device, through
``python -m fasttrack.kernels.run``, and write their rows as JSON that the ``kernels``
check reads back.

Every module in this package except :mod:`fasttrack.kernels.cli` imports only the standard
library, torch, triton, numpy and pytest, so it runs on a GPU host that has none of
fasttrack's other dependencies (pydantic, vllm, ...).
"""

from __future__ import annotations

#: Version of the rows document written by the runner (``schema`` key).
ROWS_SCHEMA = "fasttrack.kernels.rows/1"
