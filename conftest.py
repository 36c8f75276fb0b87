"""Repository-wide pytest configuration.

``PENDING`` lists end-to-end test modules of capabilities whose issue is still open:
they are marked ``pending`` and the default test command deselects them
(``bash scripts/test.sh -m pending`` runs them). A module leaves this list when its
capability is finished and its tests pass from a clean clone.
"""

from __future__ import annotations

import pytest

PENDING: dict[str, str] = {
    "tests/perf/test_perf_e2e.py": "perf gate on the demo target: slow-batch always fails at batch 4 (speedup "
    "0.07-0.12), but with one engine lifetime per side a lifetime that runs 2-3x slower throughout (host noise on "
    "shared two-core machines, e.g. 0.35 [0.28, 0.37] at b3 between two lifetimes of the same code) also fails "
    "points the defect does not touch, beyond any sensible margin; it needs baseline and candidate runs "
    "interleaved in time (docs/perf.md)",
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        for prefix, why in PENDING.items():
            if item.nodeid == prefix or item.nodeid.startswith(prefix + "::") or (
                "::" in prefix and item.nodeid.startswith(prefix)
            ):
                item.add_marker(pytest.mark.pending(reason=why))
