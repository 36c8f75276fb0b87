"""Read a result table through its row model, with bounded work whatever the table holds.

A hostile Parquet table can be a few KB and still decode to millions of rows (one dictionary entry repeated)
or to gigabytes of text (a long value repeated, compressed away). Before any row becomes a Python object:

1. the footer's row count must be within what the judging scope's plan could have produced (the table's
   ``max_rows``), and the column chunks' uncompressed size within :data:`~fasttrack.limits.TABLE_DECODED_MAX_BYTES`;
2. the table is read once with every text column kept dictionary-encoded (a value repeated a million times is
   held once), and every column must be of a type the bundle layer writes (no nested Parquet types);
3. each row's text is measured on the Arrow arrays: a cell over :data:`~fasttrack.limits.TABLE_CELL_MAX_BYTES`, or
   more text than the bundle's :class:`DecodeBudget` has left, stops the read;
4. rows then become Python objects in slices of at most :data:`~fasttrack.limits.DECODE_SLICE_BYTES` of text,
   each validated by the model (JSON-encoded cells decoded, their nesting bounded) and either kept whole, kept
   as the few fields a re-judging rule reads, or dropped.

Anything wrong raises :class:`~fasttrack.bundle.errors.BundleError` naming the table, the row and the field.
Tables of bundles written before typed rows (no model recorded) are read *legacy*: columns the model does not
declare are ignored and reported, the rest is validated the same way.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pydantic import ValidationError

from fasttrack.bundle.errors import BundleError
from fasttrack.bundle.manifest import Manifest
from fasttrack.bundle.tables import ENCODING_KEY, JSON_ENCODING
from fasttrack.evidence import evidence_of
from fasttrack.evidence.base import Row, UndeclaredRow
from fasttrack.evidence.expect import RejudgeContext
from fasttrack.limits import (
    BUNDLE_DECODED_MAX_BYTES,
    BUNDLE_DECODED_MAX_ROWS,
    DECODE_SLICE_BYTES,
    KEPT_LIST_ITEMS,
    KEPT_TEXT_CHARS,
    TABLE_CELL_MAX_BYTES,
    TABLE_DECODED_MAX_BYTES,
    TABLE_KEEP_BYTES,
    TABLE_MAX_COLUMNS,
    TABLE_MAX_ROW_GROUPS,
    json_problem,
    read_capped,
)

#: What a kept row holds: every field (``"all"``), every field with long text and long lists cut (``"display"``:
#: what a report shows), the named fields only, or nothing (the row is only validated).
Keep = str | tuple[str, ...] | None


@dataclass
class DecodeBudget:
    """Bytes of text and rows one bundle's tables may still decode (shared by all its tables)."""

    remaining: int = BUNDLE_DECODED_MAX_BYTES
    rows_remaining: int = BUNDLE_DECODED_MAX_ROWS
    used: int = 0
    rows_used: int = 0

    def take(self, n: int, rows: int, where: str) -> None:
        if n > self.remaining:
            raise BundleError(
                f"{where} holds {n:,} bytes of text to decode, more than the {self.remaining:,} bytes this bundle "
                f"has left of the limit of {BUNDLE_DECODED_MAX_BYTES:,} (a table that decodes far beyond its size?)"
            )
        if rows > self.rows_remaining:
            raise BundleError(
                f"{where} holds {rows:,} rows, more than the {self.rows_remaining:,} this bundle has left of the "
                f"limit of {BUNDLE_DECODED_MAX_ROWS:,} rows"
            )
        self.remaining -= n
        self.used += n
        self.rows_remaining -= rows
        self.rows_used += rows


@dataclass
class TableRead:
    """The rows read from one table, and what the read noticed."""

    rows: list[Row] = field(default_factory=list)
    total_rows: int = 0
    ignored_columns: list[str] = field(default_factory=list)
    """Legacy reads: columns the model does not declare (not validated, not shown by their model)."""


_TEXT = (pa.string(), pa.large_string(), pa.binary(), pa.large_binary())


def _columns_ok(schema: pa.Schema, where: str) -> list[str]:
    """The text columns of ``schema``; a column of a type the bundle layer never writes is an error."""
    text = []
    for f in schema:
        t = f.type
        if t in _TEXT or (pa.types.is_dictionary(t) and t.value_type in _TEXT):
            text.append(f.name)
        elif not (pa.types.is_null(t) or pa.types.is_boolean(t) or pa.types.is_integer(t) or pa.types.is_floating(t)):
            raise BundleError(f"{where}: column {f.name!r} is of type {t}, which no bundle table holds")
    return text


def _open(data: bytes, where: str, max_rows: int) -> pq.ParquetFile:
    """The Parquet file, its footer checked: row count and uncompressed size within the limits."""
    try:
        pf = pq.ParquetFile(pa.BufferReader(data))
        meta = pf.metadata
        n, ncols = meta.num_rows, meta.num_columns
        if ncols > TABLE_MAX_COLUMNS:
            raise BundleError(f"{where} has {ncols:,} columns, over the limit of {TABLE_MAX_COLUMNS}")
        if meta.num_row_groups > TABLE_MAX_ROW_GROUPS:
            raise BundleError(
                f"{where} has {meta.num_row_groups:,} row groups, over the limit of {TABLE_MAX_ROW_GROUPS}"
            )
        size = sum(
            meta.row_group(g).column(c).total_uncompressed_size
            for g in range(meta.num_row_groups)
            for c in range(ncols)
        )
    except (pa.ArrowException, OSError, ValueError, UnicodeDecodeError) as exc:
        raise BundleError(f"{where} is not a readable Parquet file: {type(exc).__name__}: {str(exc)[:300]}") from None
    if n > max_rows:
        raise BundleError(
            f"{where} has {n:,} rows, more than the {max_rows:,} the judging scope's plan could produce (with headroom)"
        )
    if size > TABLE_DECODED_MAX_BYTES:
        raise BundleError(f"{where} decompresses to {size:,} bytes, over the limit of {TABLE_DECODED_MAX_BYTES:,}")
    return pf


def _read_arrow(data: bytes, where: str, max_rows: int) -> tuple[pa.Table, list[str], set[str]]:
    """The table with text columns dictionary-encoded, its text columns and its JSON-encoded columns."""
    pf = _open(data, where, max_rows)
    schema = pf.schema_arrow
    text = _columns_ok(schema, where)
    json_cols = {f.name for f in schema if f.metadata and f.metadata.get(ENCODING_KEY) == JSON_ENCODING}
    meta = pf.metadata
    # columns stored through a dictionary stay dictionary-encoded (a value repeated a million times is held once);
    # a plain column is held as it decompresses, which the footer bounded
    encoded = [
        name
        for c, name in enumerate(schema.names)
        if name in text and any(meta.row_group(g).column(c).has_dictionary_page for g in range(meta.num_row_groups))
    ]
    try:
        pf = pq.ParquetFile(pa.BufferReader(data), read_dictionary=encoded)
        table = pf.read(use_threads=False)
    except (pa.ArrowException, OSError, ValueError, UnicodeDecodeError) as exc:
        raise BundleError(f"{where} cannot be decoded: {type(exc).__name__}: {str(exc)[:300]}") from None
    if table.num_rows != pf.metadata.num_rows or table.num_rows > max_rows:
        raise BundleError(f"{where}: its pages hold {table.num_rows:,} rows, its footer says {pf.metadata.num_rows:,}")
    return table, text, json_cols


def _row_text(table: pa.Table, text: Sequence[str], where: str) -> list[int]:
    """Bytes of text in each row (dictionary values counted per row that uses them); a cell over the limit stops it."""
    sizes = pa.array([0] * table.num_rows, type=pa.int64())
    for name in text:
        col = table.column(name).combine_chunks()
        if pa.types.is_dictionary(col.type):
            lengths = pc.take(pc.binary_length(col.dictionary), col.indices)
        else:
            lengths = pc.binary_length(col)
        lengths = pc.fill_null(pc.cast(lengths, pa.int64()), 0)
        biggest = pc.max(lengths).as_py() or 0
        if biggest > TABLE_CELL_MAX_BYTES:
            raise BundleError(
                f"{where}: a cell of column {name!r} holds {biggest:,} bytes, over {TABLE_CELL_MAX_BYTES:,}"
            )
        sizes = pc.add(sizes, lengths)
    return sizes.to_pylist()


def _slices(sizes: list[int]) -> list[tuple[int, int]]:
    """(start, length) slices of rows of at most DECODE_SLICE_BYTES of text each (a bigger row alone)."""
    out, start, acc = [], 0, 0
    for i, n in enumerate(sizes):
        if i > start and acc + n > DECODE_SLICE_BYTES:
            out.append((start, i - start))
            start, acc = i, 0
        acc += n
    if start < len(sizes):
        out.append((start, len(sizes) - start))
    return out


def _decoded(row: dict[str, Any], json_cols: set[str], where: str, i: int) -> dict[str, Any]:
    for name in json_cols:
        v = row.get(name)
        if v is None:
            continue
        problem = json_problem(v, f"{where} row {i} column {name!r}") if isinstance(v, (str, bytes)) else None
        if problem:
            raise BundleError(problem)
        try:
            row[name] = json.loads(v)
        except (TypeError, ValueError) as exc:
            raise BundleError(f"{where} row {i}: column {name!r} is not the JSON its column says: {exc}") from None
    return row


def _validate(model: type[Row], row: dict[str, Any], where: str, i: int) -> Row:
    try:
        return model.model_validate(row)
    except ValidationError as exc:
        errs = exc.errors(include_url=False)
        first = errs[0]
        loc = ".".join(str(p) for p in first.get("loc", ())) or "(row)"
        shown = repr(first.get("input"))[:80] if first.get("type") != "missing" else "missing"
        more = f" (and {len(errs) - 1} more)" if len(errs) > 1 else ""
        raise BundleError(
            f"{where} row {i}: field {loc!r} does not fit {model.__name__}: {first.get('msg')} (got {shown}){more}"
        ) from None


def _cut(v: Any) -> Any:
    if isinstance(v, str):
        return v[:KEPT_TEXT_CHARS]
    if isinstance(v, list):
        return [_cut(x) for x in v[:KEPT_LIST_ITEMS]]
    if isinstance(v, dict):
        return {k: _cut(x) for k, x in list(v.items())[:KEPT_LIST_ITEMS]}
    return v


def _display(model: type[Row], row: Row) -> Row:
    """A validated row with every long text and long list cut (what the report shows of it)."""
    values = {n: _cut(getattr(row, n)) for n in model.model_fields}
    values.update({k: _cut(v) for k, v in (row.model_extra or {}).items()})
    return model.model_construct(**values)


def _slim(model: type[Row], row: Row, keep: tuple[str, ...]) -> Row:
    """A validated row holding only ``keep`` and its key fields (long text cut to KEPT_TEXT_CHARS)."""
    names = set(keep) | set(model.KEY) | {"shard"}
    values: dict[str, Any] = {}
    for n in names:
        v = getattr(row, n, None)
        values[n] = v[:KEPT_TEXT_CHARS] if isinstance(v, str) else v
    return model.model_construct(_fields_set=None, **values)


def read_table_rows(
    data: bytes,
    model: type[Row],
    *,
    where: str,
    max_rows: int,
    budget: DecodeBudget,
    keep: Keep = "all",
    legacy: bool = False,
    limit: int | None = None,
    on_row: Callable[[Row], None] | None = None,
) -> TableRead:
    """Decode ``data`` (a Parquet table) through ``model``; see the module docstring. ``limit``: decode only the
    first so many rows (the report's view); ``on_row``: called with every validated row."""
    table, text, json_cols = _read_arrow(data, where, max_rows)
    out = TableRead(total_rows=table.num_rows)
    declared = {f.alias or n for n, f in model.model_fields.items()}
    extra = [c for c in table.column_names if c not in declared]
    if extra and model.model_config.get("extra") != "allow":
        if not legacy:
            raise BundleError(f"{where}: column(s) {', '.join(extra[:8])} are not fields of {model.__name__}")
        out.ignored_columns = extra
        table = table.drop_columns(extra)
        text = [t for t in text if t not in extra]
    if not legacy and table.num_rows:
        missing = [c for c in declared if c not in table.column_names and c != "shard"]
        if missing:
            raise BundleError(f"{where}: field(s) {', '.join(sorted(missing)[:8])} of {model.__name__} have no column")
    if limit is not None and table.num_rows > limit:
        table = table.slice(0, limit)
    try:
        sizes = _row_text(table, text, where)
    except (pa.ArrowException, ValueError, TypeError, OverflowError) as exc:
        raise BundleError(f"{where} cannot be measured: {type(exc).__name__}: {str(exc)[:200]}") from None
    budget.take(sum(sizes), table.num_rows, where)
    for start, length in _slices(sizes):
        try:
            pylist = table.slice(start, length).to_pylist()
        except (pa.ArrowException, ValueError, TypeError, OverflowError) as exc:
            raise BundleError(
                f"{where} rows {start}-{start + length - 1} cannot be decoded: {type(exc).__name__}: {str(exc)[:200]}"
            ) from None
        for j, row in enumerate(pylist):
            i = start + j
            r = _validate(model, _decoded(row, json_cols, where, i), where, i)
            if on_row is not None:
                on_row(r)
            if keep == "all":
                out.rows.append(r)
            elif keep == "display":
                out.rows.append(_display(model, r))
            elif keep:
                out.rows.append(_slim(model, r, tuple(keep)))
    return out


def read_bundle_table(
    root: Path,
    manifest: Manifest,
    check: str,
    table: str,
    *,
    budget: DecodeBudget,
    ctx: RejudgeContext | None,
    keep: Keep = "all",
    limit: int | None = None,
) -> tuple[TableRead, bool]:
    """One table of an unpacked bundle through its row model (a check or table nobody declares: as it is),
    within the row bound of ``ctx``'s plan (None: the bundle's limit), and whether it was read by the legacy
    path. Raises :class:`BundleError` naming what is wrong."""
    entry = manifest.checks.get(check)
    if entry is None or table not in entry.tables:
        raise BundleError(f"the bundle has no table {check}/{table}")
    ref = entry.tables[table]
    where = f"table {check}/{table}"
    p = root / ref.path
    try:
        if p.is_symlink() or not p.resolve().is_relative_to(root.resolve()):
            raise BundleError(f"{where} is not a file in the bundle")
        data = read_capped(p, TABLE_KEEP_BYTES)
    except OSError as exc:
        raise BundleError(f"{where} cannot be read: {exc.strerror}") from None
    if data is None:
        raise BundleError(f"{where} is larger than {TABLE_KEEP_BYTES:,} bytes (the limit)")
    ev = evidence_of(check)
    spec = ev.table(table) if ev is not None else None
    if ev is not None and spec is not None:
        if ref.model is not None and (ref.model != ev.model_name(table) or (ref.version or 0) > spec.version):
            raise BundleError(f"{where} records model {ref.model} v{ref.version}, not {ev.model_name(table)}")
        model: type[Row] = spec.model
        max_rows = spec.max_rows(ctx) if ctx is not None else BUNDLE_DECODED_MAX_ROWS
        legacy = ref.model is None or (ref.version or 0) < spec.version
    else:
        model, max_rows, legacy = UndeclaredRow, BUNDLE_DECODED_MAX_ROWS, True
    got = read_table_rows(
        data, model, where=where, max_rows=max_rows, budget=budget, keep=keep, legacy=legacy, limit=limit
    )
    return got, legacy and model is not UndeclaredRow
