"""Result rows to Parquet and back: heterogeneous rows, nested values, deterministic bytes."""

from __future__ import annotations

import enum
import math
from pathlib import Path

import pyarrow.parquet as pq
from hypothesis import given, settings
from hypothesis import strategies as st

from fasttrack.bundle.tables import ENCODING_KEY, parquet_bytes, read_rows, rows_to_arrow


class Color(enum.Enum):
    RED = "red"


def test_heterogeneous_rows_roundtrip(tmp_path: Path) -> None:
    rows = [
        {"point": "b1", "speedup": 1, "ok": True, "detail": {"samples": [1.0, 2.0]}},
        {"point": "b4", "speedup": 1.25, "side": Color.RED, "path": Path("a/b")},
        {"point": "b8", "mixed": 3},
        {"point": "b16", "mixed": "three", "big": 2**80, "blob": b"\x00\x01"},
    ]
    data, n, cols = parquet_bytes(rows)
    assert n == 4
    assert cols == ["point", "speedup", "ok", "detail", "side", "path", "mixed", "big", "blob"]
    back = read_rows(data)
    assert back[0]["detail"] == {"samples": [1.0, 2.0]}
    assert back[0]["speedup"] == 1.0 and back[1]["speedup"] == 1.25
    assert back[1]["side"] == "red" and back[1]["path"] == "a/b"
    assert back[2]["mixed"] == 3 and back[3]["mixed"] == "three"
    assert back[3]["big"] == 2**80
    assert back[3]["blob"] == b"\x00\x01"
    assert back[2]["ok"] is None
    f = tmp_path / "t.parquet"
    f.write_bytes(data)
    schema = pq.read_schema(f)
    assert schema.field("detail").metadata[ENCODING_KEY] == b"json"
    assert str(schema.field("speedup").type) == "double"
    assert str(schema.field("ok").type) == "bool"


def test_nan_and_empty_tables() -> None:
    data, n, _ = parquet_bytes([{"x": float("nan")}, {"x": 1.0}])
    back = read_rows(data)
    assert math.isnan(back[0]["x"]) and back[1]["x"] == 1.0
    data, n, cols = parquet_bytes([])
    assert (n, cols, read_rows(data)) == (0, [], [])
    assert rows_to_arrow([{"a": None}]).schema.field("a").type.__str__() == "null"


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=8),
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6,
)
rows_st = st.lists(st.dictionaries(st.sampled_from(["a", "b", "c", "d"]), values, max_size=4), max_size=6)


@settings(max_examples=150, deadline=None)
@given(rows_st)
def test_same_rows_same_bytes_and_values_survive(rows) -> None:
    a, n, cols = parquet_bytes(rows)
    b, _, _ = parquet_bytes(rows)
    assert a == b
    if not cols:
        return
    assert n == len(rows)
    back = read_rows(a)
    for orig, got in zip(rows, back, strict=False):
        for k in cols:
            v = orig.get(k)
            g = got[k]
            if isinstance(v, bool) or v is None or isinstance(v, str):
                assert g == v
            elif isinstance(v, (int, float)):
                assert g == v or math.isclose(g, v, rel_tol=1e-12)
            else:
                assert g == v
