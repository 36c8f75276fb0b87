"""Read a bundle's tables for the report: through their row models, bounded.

Every table the manifest names a model for is read through it (:mod:`fasttrack.bundle.rowread`): its rows are
the model's fields, each value of the declared type, and a table whose rows do not fit is shown as not readable,
naming the row and the field. A table of a bundle written before typed rows (no model recorded) is read as it is
and labelled so: only there does the report find columns by their names (:mod:`fasttrack.report.fields`, the
legacy path). At most ``max_rows`` rows of a table are read (charts and displays work on this prefix), within the
row bounds of the bundle's own plan and the decoding limits of one bundle.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fasttrack.bundle.errors import BundleError
from fasttrack.bundle.manifest import Manifest
from fasttrack.bundle.rejudge import own_context
from fasttrack.bundle.rowread import DecodeBudget, read_bundle_table
from fasttrack.limits import REPORT_MAX_TABLE_ROWS

#: Rows read from one table at most (charts and displays work on this prefix).
MAX_ROWS = REPORT_MAX_TABLE_ROWS

LEGACY_NOTE = "no row model recorded (an older bundle, or a check no installed package declares): columns found by name"
"""What the report says of a table read by the legacy path."""


@dataclass
class LoadedTable:
    """The rows read from one table, or why it could not be read."""

    path: str
    columns: list[str] = field(default_factory=list)
    rows: list[dict[str, Any]] = field(default_factory=list)
    total_rows: int = 0
    error: str | None = None
    model: str | None = None
    """The row model the rows were read through (``<check>.<table> v<version>``); None: read as it is."""
    legacy: bool = False
    """Read by the legacy path: a bundle written before typed rows records no model for this table."""

    @property
    def truncated(self) -> bool:
        return len(self.rows) < self.total_rows

    @property
    def note(self) -> str:
        return LEGACY_NOTE if self.legacy else ""


def load_tables(root: Path, manifest: Manifest, *, max_rows: int = MAX_ROWS) -> dict[str, dict[str, LoadedTable]]:
    """Every table of every check, ``{check: {table: LoadedTable}}``; errors are kept per table, never raised."""
    ctx = own_context(manifest)
    budget = DecodeBudget()
    out: dict[str, dict[str, LoadedTable]] = {}
    for check, entry in manifest.checks.items():
        out[check] = {}
        for tname, ref in sorted(entry.tables.items()):
            t = LoadedTable(path=ref.path)
            try:
                got, legacy = read_bundle_table(
                    root, manifest, check, tname, budget=budget, ctx=ctx, keep="display", limit=max_rows
                )
            except BundleError as exc:
                t.error = exc.message[:600]
                out[check][tname] = t
                continue
            t.rows = [r.record() for r in got.rows]
            t.total_rows = got.total_rows
            t.columns = list(dict.fromkeys(k for r in t.rows[:50] for k in r)) or list(ref.columns)
            t.model = f"{ref.model} v{ref.version}" if ref.model else None
            t.legacy = legacy or (ref.model is None and check not in _typed_checks())
            out[check][tname] = t
    return out


def _typed_checks() -> set[str]:
    from fasttrack.evidence import declared

    return set(declared())
