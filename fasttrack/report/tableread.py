"""Read a bundle's Parquet tables with pyarrow, bounded.

A contributor's table can be huge (raw samples) or hostile; the report reads at most
``max_rows`` rows from record batches, never the whole file, and decodes the columns the
bundle layer stored as JSON text.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from fasttrack.bundle.tables import ENCODING_KEY, JSON_ENCODING
from fasttrack.limits import REPORT_MAX_TABLE_ROWS, json_problem

#: Rows read from one table at most (charts and displays work on this prefix).
MAX_ROWS = REPORT_MAX_TABLE_ROWS


@dataclass
class LoadedTable:
    """The rows read from one table, or why it could not be read."""

    path: str
    columns: list[str] = field(default_factory=list)
    rows: list[dict[str, Any]] = field(default_factory=list)
    total_rows: int = 0
    error: str | None = None

    @property
    def truncated(self) -> bool:
        return len(self.rows) < self.total_rows


def _decode(f: pa.Field, value: Any) -> Any:
    if value is None:
        return None
    if f.metadata and f.metadata.get(ENCODING_KEY) == JSON_ENCODING and isinstance(value, str):
        if json_problem(value, "a cell") is not None:  # nested too deeply to parse: shown as its text
            return value
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def read_table(root: Path, rel: str, *, max_rows: int = MAX_ROWS) -> LoadedTable:
    """Read up to ``max_rows`` rows of ``root/rel``; errors are returned, not raised.

    Single-threaded: a bundle's tables are small and many, and pyarrow's thread pool costs more
    than it saves on them (the dashboard already reads bundles in parallel processes)."""
    out = LoadedTable(path=rel)
    p = root / rel
    try:
        rp = p.resolve()
        if not rp.is_relative_to(root.resolve()) or not rp.is_file():
            out.error = "the file is not in the bundle"
            return out
        pf = pq.ParquetFile(str(rp))
        out.total_rows = pf.metadata.num_rows
        fields = list(pf.schema_arrow)
        out.columns = [f.name for f in fields]
        json_cols = [f for f in fields if f.metadata and f.metadata.get(ENCODING_KEY) == JSON_ENCODING]
        if out.total_rows <= max_rows:
            batches = [pf.read(use_threads=False)]
        else:
            batches, left = [], max_rows
            for batch in pf.iter_batches(batch_size=min(max(left, 1), 4096), use_threads=False):
                if left <= 0:
                    break
                batches.append(batch.slice(0, left) if batch.num_rows > left else batch)
                left -= batch.num_rows
        for batch in batches:
            rows = batch.to_pylist()
            for f in json_cols:
                for row in rows:
                    row[f.name] = _decode(f, row.get(f.name))
            out.rows.extend(rows)
    except (pa.ArrowException, OSError, ValueError) as exc:
        out.error = f"unreadable Parquet: {str(exc)[:300]}"
        out.rows = []
    return out
