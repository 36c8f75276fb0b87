"""Edit a committed bundle the way an adversarial contributor would, and re-sign it with their own key.

The committed H200 bundles (``examples/h200-run``, ``examples/h200-rerun``) are real FAIL bundles. A contributor
who wants them to pass edits their tables (verdicts, flags, types, columns, rows), sets every check entry and the
bundle verdict to ``pass`` (:func:`claim_pass`), and signs the result with a key of their own (:func:`force_sign`:
no consistency check stops them). :func:`gate` is what the maintainer then runs: ``verify --require-pass``
against the trusted scope, with the contributor's key trusted (a signature only says who wrote a bundle).
"""

from __future__ import annotations

import json
import shutil
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from security_testlib import force_sign

from fasttrack import ROOT
from fasttrack.bundle.keys import SigningKey
from fasttrack.bundle.layout import MANIFEST, table_path
from fasttrack.bundle.verify import VerifyResult, verify_bundle

EXAMPLES = ("h200-run", "h200-rerun")
"""The committed bundles (both FAIL: equivalence, features and perf fail on their rows)."""


def trusted_scope(example: str, folder: Path) -> Path:
    """The scope the committed bundle ran, as the maintainer trusts it: the text it recorded, in a scope file (the
    shipped suite has moved on since, and a scope that differs would fail the gate for that reason alone)."""
    folder.mkdir(parents=True, exist_ok=True)
    with tarfile.open(ROOT / "examples" / example / "bundle.tar.gz") as tf:
        member = tf.extractfile(MANIFEST)
        assert member is not None
        doc = json.loads(member.read())
    path = folder / f"{doc['scope']['model']}.yaml"
    path.write_text(doc["scope"]["yaml"], encoding="utf-8")
    return path


def unpack(example: str, dest: Path) -> Path:
    """A private, unpacked copy of a committed bundle."""
    cache = dest.parent / f".{example}-unpacked"
    if not cache.is_dir():
        cache.mkdir(parents=True)
        with tarfile.open(ROOT / "examples" / example / "bundle.tar.gz") as tf:
            tf.extractall(cache, filter="data")
    shutil.copytree(cache, dest)
    return dest


def manifest(root: Path) -> dict[str, Any]:
    return json.loads((root / MANIFEST).read_bytes())


def write_manifest(root: Path, doc: dict[str, Any]) -> None:
    (root / MANIFEST).write_bytes(json.dumps(doc, indent=2, sort_keys=True).encode())


def read(root: Path, check: str, table: str) -> pa.Table:
    return pq.read_table(root / table_path(check, table))


def put(root: Path, check: str, table: str, data: pa.Table, *, dictionary: bool = True) -> None:
    """Write ``data`` as the table and record its rows and columns in the manifest (a consistent edit)."""
    p = root / table_path(check, table)
    pq.write_table(data, p, use_dictionary=dictionary)
    doc = manifest(root)
    ref = doc["checks"][check]["tables"][table]
    ref["rows"], ref["columns"] = data.num_rows, list(data.column_names)
    write_manifest(root, doc)


def edit_rows(root: Path, check: str, table: str, edit: Callable[[list[dict[str, Any]]], Any]) -> None:
    """Rewrite a table through its rows as dicts (JSON-encoded columns keep their encoding)."""
    t = read(root, check, table)
    rows = t.to_pylist()
    edit(rows)
    fields = {f.name: f for f in t.schema}
    cols = list(dict.fromkeys(k for r in rows for k in r)) if rows else list(fields)
    arrays, schema_fields = [], []
    for c in cols:
        values = [r.get(c) for r in rows]
        try:
            arr = pa.array(values, type=fields[c].type) if c in fields else pa.array(values)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):
            arr = pa.array([None if v is None else json.dumps(v) if not isinstance(v, str) else v for v in values])
        schema_fields.append(pa.field(c, arr.type, metadata=fields[c].metadata if c in fields else None))
        arrays.append(arr)
    put(root, check, table, pa.Table.from_arrays(arrays, schema=pa.schema(schema_fields)))


def claim_pass(root: Path) -> None:
    """Every check entry and the bundle verdict set to pass (what the forger wants the gate to read)."""
    doc = manifest(root)
    for entry in doc["checks"].values():
        if entry["verdict"] != "not_run" or entry["required"]:
            entry["verdict"], entry["failures"] = "pass", []
    doc["verdict"] = "pass"
    write_manifest(root, doc)


def gate(root: Path, key: SigningKey, pub: Path, *, trusted: Path | None) -> tuple[bool, VerifyResult]:
    """Sign ``root`` with the forger's key, then run the maintainer's gate, ``verify --require-pass
    --trusted-scope TRUSTED --min-tier smoke``: (whether it passes, the result)."""
    force_sign(root, key)
    res = verify_bundle(root, keys=[pub], trusted_scope=trusted, min_tier="smoke")
    ok = res.verified and res.verdict == "pass" and res.rejudged_verdict == "pass" and res.shard in (None, "1/1")
    return ok, res


# --------------------------------------------------------------------------- hostile tables (bounded work)


def row_bomb(root: Path, rows: int = 1_000_000) -> None:
    """The perf points table as ``rows`` copies of its first row: a few KB of Parquet (one dictionary entry per
    column, run-length encoded indices)."""
    t = read(root, "perf", "points").slice(0, 1)
    idx = pa.array([0] * rows, type=pa.int32())
    put(root, "perf", "points", t.take(idx))


def text_bomb(root: Path, cell_mb: int = 48) -> None:
    """Every row of the perf points table given one ``cell_mb`` MB statement through one dictionary entry: a few
    hundred KB of Parquet that decodes to gigabytes of text."""
    t = read(root, "perf", "points")
    big = "x" * (cell_mb << 20)
    arr = pa.DictionaryArray.from_arrays(pa.array([0] * t.num_rows, type=pa.int32()), pa.array([big]))
    i = t.column_names.index("statement")
    put(root, "perf", "points", t.set_column(i, pa.field("statement", arr.type), arr))


def wide_text(root: Path, mb: int = 200) -> None:
    """One plain (not dictionary-encoded) cell of ``mb`` MB in the perf points table: the largest table text that
    decompresses within the limits, read whole."""
    t = read(root, "perf", "points")
    vals = ["y" * (mb << 20)] + [None] * (t.num_rows - 1)
    i = t.column_names.index("statement")
    col = pa.array(vals, pa.large_string())
    put(root, "perf", "points", t.set_column(i, pa.field("statement", col.type), col), dictionary=False)


def fill_to_bounds(root: Path) -> int:
    """Every non-empty table repeated up to the most rows the bundle's own plan allows it (the most work a bundle
    within the row bounds asks for); the rows written."""
    from fasttrack.bundle.manifest import load_manifest
    from fasttrack.bundle.rejudge import judging_context
    from fasttrack.evidence import evidence_of

    m = load_manifest((root / MANIFEST).read_bytes())
    ctx = judging_context(m, None)
    total = 0
    for check, entry in m.checks.items():
        ev = evidence_of(check)
        for name in entry.tables:
            spec = ev.table(name) if ev is not None else None
            t = read(root, check, name)
            if spec is None or not t.num_rows:
                continue
            n = spec.max_rows(ctx)
            put(root, check, name, t.take(pa.array([i % t.num_rows for i in range(n)], type=pa.int64())))
            total += n
    return total
