"""Repository-wide pytest configuration.

``PENDING`` lists end-to-end test modules of capabilities whose issue is still open:
they are marked ``pending`` and the default test command deselects them
(``bash scripts/test.sh -m pending`` runs them). A module leaves this list when its
capability is finished and its tests pass from a clean clone.
"""

from __future__ import annotations

import pytest

PENDING: dict[str, str] = {
    "tests/perf/test_perf_e2e.py": "perf gate on the demo target: slow-batch fails at exactly batch 4 in most runs "
    "(4 of 5 fresh runs at margin 0.5), but one engine lifetime can run about 2x slower than another on shared "
    "two-core hosts (speedup 0.52 [0.48, 0.56] at b1 between two lifetimes of the same code), beyond the demo's "
    "margin, so with one lifetime per side the test still fails now and then",
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        for prefix, why in PENDING.items():
            if item.nodeid == prefix or item.nodeid.startswith(prefix + "::") or (
                "::" in prefix and item.nodeid.startswith(prefix)
            ):
                item.add_marker(pytest.mark.pending(reason=why))
