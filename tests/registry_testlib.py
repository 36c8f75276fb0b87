"""Loading an outside package's fasttrack module in a test, as its entry point would be loaded, and forgetting
everything it registered afterwards (the toy plugin of ``tests/checks/toy_plugin``)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

from fasttrack import ROOT, registry

TOY_PLUGIN = ROOT / "tests" / "checks" / "toy_plugin"
"""The toy plugin package: ``fasttrack_toy.py`` (a check and a serving feature) and its ``pyproject.toml``."""


def _registered() -> dict[str, set[str]]:
    return {kind: set(registry.entries(kind, outside=False)) for kind in registry.KINDS}


@contextmanager
def plugin_loaded(module: str = "fasttrack_toy", path: Path = TOY_PLUGIN) -> Iterator[ModuleType]:
    """Import ``module`` from ``path`` through :func:`fasttrack.registry.load_plugin` (its parts name the source
    ``module (test)``); afterwards unregister every part it added, of every kind, and forget the module."""
    before = _registered()
    sys.path.insert(0, str(path))
    try:
        mod = registry.load_plugin(module, source=f"{module} (test)")
        yield mod
    finally:
        sys.path.remove(str(path))
        for kind, names in _registered().items():
            for name in names - before[kind]:
                registry.unregister(kind, name)
        sys.modules.pop(module, None)
