"""Repository-wide pytest configuration.

``PENDING`` lists end-to-end test modules of capabilities whose issue is still open:
they are marked ``pending`` and the default test command deselects them
(``bash scripts/test.sh -m pending`` runs them). A module leaves this list when its
capability is finished and its tests pass from a clean clone.
"""

from __future__ import annotations

import pytest

PENDING: dict[str, str] = {}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        for prefix, why in PENDING.items():
            if (
                item.nodeid == prefix
                or item.nodeid.startswith(prefix + "::")
                or ("::" in prefix and item.nodeid.startswith(prefix))
            ):
                item.add_marker(pytest.mark.pending(reason=why))
