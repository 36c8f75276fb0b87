"""Typed evidence: every check's result rows as declared models, and the rules that re-judge them.

One module per built-in check (:data:`BUILTIN`) declares its tables' row models and its re-judging rule and
registers them as the registry kind ``evidence`` under the check's name; a check from another package declares
its :class:`~fasttrack.evidence.base.CheckEvidence` on its check class, which registers it the same way.
Writing, verifying, merging and rendering a bundle read a check's evidence only through
:func:`evidence_of` (the registry), never from the checks themselves, so none of them loads a check.

Layer 1: these modules import pydantic, the scope models and the registry only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from fasttrack import registry
from fasttrack.evidence.base import CheckEvidence, Row, RowModelError, validated

BUILTIN: tuple[str, ...] = tuple(
    f"fasttrack.evidence.{m}" for m in ("isolation", "kernels", "equivalence", "features", "coverage", "evals", "perf")
)
"""The built-in checks' evidence modules (imported before the kind ``evidence`` is first read)."""

registry.BUILTIN_MODULES["evidence"] = BUILTIN


def evidence_of(check: str) -> CheckEvidence | None:
    """The evidence declared for ``check``, or None when no installed package declares any."""
    found = registry.entries("evidence").get(check)
    return found if isinstance(found, CheckEvidence) else None


def declared() -> dict[str, CheckEvidence]:
    """Every check's evidence, by check name (built-ins first)."""
    return {k: v for k, v in registry.entries("evidence").items() if isinstance(v, CheckEvidence)}


def typed_rows(
    check: str, table: str, rows: Iterable[Mapping[str, Any] | Row], *, complete: bool = True
) -> list[dict[str, Any]]:
    """One table's rows written through its row model: each validated, then as the Parquet writer takes it
    (``complete``: every field of the model, the ones the check gave first; else only those, validated).

    A check without declared evidence keeps its rows as they are; a table its evidence does not declare, or a
    row that does not fit, is a :class:`~fasttrack.evidence.base.RowModelError` naming it."""
    ev = evidence_of(check)
    if ev is None:
        return [dict(r) if not isinstance(r, Row) else r.record() for r in rows]
    spec = ev.table(table)
    if spec is None:
        raise RowModelError(
            f"check {check!r} wrote a table {table!r} its evidence does not declare "
            f"(declared: {', '.join(t.name for t in ev.tables)})",
            hint="Declare the table (a TableSpec with its row model) in the check's evidence.",
        )
    given = list(rows)
    out = [r.record() for r in validated(spec.model, given, where=f"{check}/{table}")]
    return [_in_order(rec, src, complete) for rec, src in zip(out, given, strict=True)]


def _in_order(record: dict[str, Any], given: Mapping[str, Any] | Row, complete: bool) -> dict[str, Any]:
    """``record``'s columns that the check gave, validated, in its order (the report shows them so), then, when
    ``complete``, the model's other fields."""
    if isinstance(given, Row):
        return record
    first = {k: record[k] for k in given if k in record}
    return (first | {k: v for k, v in record.items() if k not in first}) if complete else first


def typed_tables(
    check: str, tables: Mapping[str, Iterable[Mapping[str, Any] | Row]]
) -> dict[str, list[dict[str, Any]]]:
    """Every table of one check through :func:`typed_rows`: each row validated, with the fields the check gave (the
    bundle's writer adds the model's other fields)."""
    return {name: typed_rows(check, name, rows, complete=False) for name, rows in tables.items()}
