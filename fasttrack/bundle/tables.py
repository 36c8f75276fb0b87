"""Result rows <-> Parquet, deterministically.

Rows are dicts whose keys may differ from row to row. Columns appear in the order their
keys are first seen; a missing key is a null. Each column gets the narrowest type that
holds every value (bool, int64, float64, string, binary); anything else (nested dicts and
lists, or a mix of types) is stored as canonical JSON text and the column's field
metadata says ``fasttrack.encoding: json`` so :func:`read_rows` decodes it again.

The same rows always give the same bytes: no timestamps are written, compression and
page settings are fixed, and the writer's ``created_by`` string depends only on the
pyarrow version (which the manifest's provenance records).

Compression is Snappy, Parquet's most widely read codec: a bundle holds many small tables, and
reading one compressed with zstd took about twice as long (0.51 against 0.30 ms a table on the
synthetic bundles; a dashboard reads about fifteen a bundle), for files of about the same size
(a tarball gzips them again anyway). Tables written with zstd by older versions still read.
"""

from __future__ import annotations

import enum
import io
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import BaseModel

from fasttrack.bundle.canonical import to_jsonable
from fasttrack.bundle.errors import BundleError
from fasttrack.limits import json_problem

ENCODING_KEY = b"fasttrack.encoding"
JSON_ENCODING = b"json"

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1

#: Fixed writer options (part of the determinism contract).
WRITE_OPTIONS: dict[str, Any] = {
    "compression": "snappy",
    "use_dictionary": True,
    "write_statistics": True,
    "version": "2.6",
    "data_page_version": "1.0",
    "row_group_size": 1 << 20,
    "store_schema": True,
}


def _scalar(value: Any) -> Any:
    """Normalise one cell: models and enums to plain values, numpy scalars to Python ones."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, Path):
        return value.as_posix()
    if hasattr(value, "item") and not isinstance(value, (bytes, str, list, dict)) and type(value).__module__ == "numpy":
        return value.item()
    if hasattr(value, "isoformat") and not isinstance(value, (str, bytes)):
        return value.isoformat()
    return value


def _kind(values: list[Any]) -> str:
    kinds = set()
    for v in values:
        if v is None:
            continue
        if isinstance(v, bool):
            kinds.add("bool")
        elif isinstance(v, int):
            kinds.add("int" if _INT64_MIN <= v <= _INT64_MAX else "json")
        elif isinstance(v, float):
            kinds.add("float")
        elif isinstance(v, str):
            kinds.add("str")
        elif isinstance(v, (bytes, bytearray)):
            kinds.add("bytes")
        else:
            kinds.add("json")
    if not kinds:
        return "null"
    if kinds == {"int", "float"}:
        return "float"
    if len(kinds) == 1:
        return kinds.pop()
    return "json"


def _json_cell(v: Any) -> str | None:
    if v is None:
        return None
    if isinstance(v, (bytes, bytearray)):
        v = bytes(v).hex()
    return json.dumps(to_jsonable(v), sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def rows_to_arrow(rows: Sequence[Mapping[str, Any]]) -> pa.Table:
    """Build an Arrow table from heterogeneous dict rows (see the module docstring)."""
    columns: dict[str, list[Any]] = {}
    for i, row in enumerate(rows):
        if isinstance(row, BaseModel):
            row = row.model_dump(mode="json")
        if not isinstance(row, Mapping):
            raise BundleError(
                f"result row {i} is a {type(row).__name__}, not a dict; rows must be mappings of column to value"
            )
        for key in row:
            if not isinstance(key, str):
                raise BundleError(f"result row {i} has a non-string column name {key!r}")
            if key not in columns:
                columns[key] = [None] * i
        for key, col in columns.items():
            col.append(_scalar(row.get(key)))
    fields, arrays = [], []
    for name, values in columns.items():
        kind = _kind(values)
        meta = None
        if kind == "bool":
            typ = pa.bool_()
        elif kind == "int":
            typ = pa.int64()
        elif kind == "float":
            typ = pa.float64()
            values = [None if v is None else float(v) for v in values]
        elif kind == "str":
            typ = pa.string()
        elif kind == "bytes":
            typ = pa.binary()
            values = [None if v is None else bytes(v) for v in values]
        elif kind == "null":
            typ = pa.null()
        else:
            typ = pa.string()
            meta = {ENCODING_KEY: JSON_ENCODING}
            values = [_json_cell(v) for v in values]
        fields.append(pa.field(name, typ, nullable=True, metadata=meta))
        arrays.append(pa.array(values, type=typ))
    schema = pa.schema(fields)
    if not fields:
        return pa.Table.from_batches([], schema=schema)
    return pa.Table.from_arrays(arrays, schema=schema)


def parquet_bytes(rows: Sequence[Mapping[str, Any]]) -> tuple[bytes, int, list[str]]:
    """Parquet file bytes for ``rows``, the row count and the column names."""
    table = rows_to_arrow(rows)
    sink = io.BytesIO()
    pq.write_table(table, sink, **WRITE_OPTIONS)
    return sink.getvalue(), table.num_rows, list(table.column_names)


def _decode(field: pa.Field, value: Any) -> Any:
    if value is None:
        return None
    if field.metadata and field.metadata.get(ENCODING_KEY) == JSON_ENCODING:
        problem = json_problem(value, f"a cell of column {field.name!r}") if isinstance(value, (str, bytes)) else None
        if problem:
            raise BundleError(problem)
        try:
            return json.loads(value)
        except (TypeError, ValueError) as exc:
            raise BundleError(f"a cell of column {field.name!r} is not the JSON its column says: {exc}") from None
    return value


def read_rows(source: Path | bytes) -> list[dict[str, Any]]:
    """Rows of a bundle table as dicts (JSON-encoded columns decoded again).

    An unreadable file or cell raises :class:`BundleError`."""
    try:
        table = pq.read_table(pa.BufferReader(source) if isinstance(source, (bytes, bytearray)) else str(source))
    except (pa.ArrowException, OSError, ValueError, UnicodeDecodeError) as exc:
        raise BundleError(f"not a readable Parquet file: {type(exc).__name__}: {str(exc)[:300]}") from None
    fields = list(table.schema)
    out = []
    for row in table.to_pylist():
        out.append({f.name: _decode(f, row[f.name]) for f in fields})
    return out


def read_columns(source: Path | bytes, columns: Sequence[str]) -> list[dict[str, Any]]:
    """The rows of a bundle table, holding only those of ``columns`` the table has (decoded as
    :func:`read_rows` decodes them; the other columns are never read)."""
    try:
        f = pq.ParquetFile(pa.BufferReader(source) if isinstance(source, (bytes, bytearray)) else str(source))
        have = [c for c in columns if c in f.schema_arrow.names]
        table = f.read(columns=have, use_threads=False)
    except (pa.ArrowException, OSError, ValueError, UnicodeDecodeError) as exc:
        raise BundleError(f"not a readable Parquet file: {type(exc).__name__}: {str(exc)[:300]}") from None
    fields = list(table.schema)
    return [{fl.name: _decode(fl, row[fl.name]) for fl in fields} for row in table.to_pylist()]


def parquet_num_rows(source: Path | bytes) -> tuple[int, list[str]]:
    """Row count and column names from the Parquet footer (no data pages are read)."""
    try:
        f = pq.ParquetFile(pa.BufferReader(source) if isinstance(source, (bytes, bytearray)) else str(source))
        return f.metadata.num_rows, list(f.schema_arrow.names)
    except (pa.ArrowException, OSError, ValueError, UnicodeDecodeError) as exc:
        # a corrupted footer can surface as any of these (e.g. undecodable column names)
        raise BundleError(f"not a readable Parquet file: {type(exc).__name__}: {exc}") from exc
