"""Checks: one module (or package) per kind of evidence, registered with ``@register`` (kind ``check``).

A check's class declares its name, title, order (``after``/``before``), ``blocked_by``, cost, gate model,
evidence and passability rule (:mod:`fasttrack.checks.base`); the pipeline, the plan and its cost, the
passability analysis, the scope's JSON Schema and the bundle read them from the registry
(:func:`fasttrack.checks.base.registered_checks`). A shipped check's module is named below; another
package's check is a module of its own, named in that package's ``fasttrack`` entry-point group.
"""

from __future__ import annotations

from fasttrack import registry

BUILTIN_CHECK_MODULES: tuple[str, ...] = tuple(
    f"fasttrack.checks.{m}" for m in ("isolation", "kernels", "equivalence", "features", "coverage", "evals", "perf")
)
"""The shipped checks' modules, imported before the registry's kind ``check`` is first read (their order breaks
ties between checks whose ``after``/``before`` do not order them)."""
registry.BUILTIN_MODULES["check"] = BUILTIN_CHECK_MODULES
