"""Checks: one module (or package) per kind of evidence, registered with ``@register``.

To add a check, write ``fasttrack/checks/<name>.py`` with a class decorated by
``fasttrack.checks.base.register`` and add the module name below: that class declares its
name, order (``after``), ``blocked_by``, gate model and passability rule, and the pipeline, the
plan, the passability analysis, the scope's JSON Schema and the bundle read them from the
registry (:func:`fasttrack.checks.base.registry`).
"""

from __future__ import annotations

import importlib

#: Modules that define checks. Adding a check = one module + one line here (the list's order breaks ties
#: between checks whose ``after`` does not order them).
CHECK_MODULES: list[str] = ["isolation", "kernels", "equivalence", "features", "coverage", "evals", "perf"]

_loaded = False


def load_all() -> None:
    """Import every check module once so their ``@register`` decorators run."""
    global _loaded
    if _loaded:
        return
    for mod in CHECK_MODULES:
        importlib.import_module(f"fasttrack.checks.{mod}")
    _loaded = True
