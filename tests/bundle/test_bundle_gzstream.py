"""The threaded gzip reader: same bytes as gzip, every corruption reported, bounded memory."""

from __future__ import annotations

import gzip
import io
import os
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fasttrack.bundle.gzstream import GzipStream, GzipStreamError

DATA = os.urandom(300_000) + b"\0" * 2_000_000 + b"abc" * 50_000
COMP = gzip.compress(DATA, mtime=0)


def read_all(comp: bytes, *, bufsize: int = 77_777, **kw) -> bytes:
    with GzipStream(io.BytesIO(comp), **kw) as g:
        out = bytearray()
        buf = bytearray(bufsize)
        while n := g.readinto(buf):
            out += buf[:n]
        return bytes(out)


def test_roundtrip_and_multi_member_and_padding() -> None:
    assert read_all(COMP) == DATA
    assert read_all(COMP, chunk=7, piece=13, bufsize=1000) == DATA
    assert read_all(COMP + COMP) == DATA + DATA
    assert read_all(COMP + b"\0" * 100) == DATA


@pytest.mark.parametrize(
    "bad,match",
    [
        (COMP[:-3], "truncated"),
        (COMP[:100], "truncated"),
        (COMP + b"junk", "after the end"),
        (b"", "empty"),
        (b"plain text", "not gzip"),
        (COMP[:-1] + bytes([COMP[-1] ^ 1]), "length check"),
        (COMP[:-5] + bytes([COMP[-5] ^ 1]) + COMP[-4:], "data check"),
    ],
)
def test_corruption_is_reported(bad: bytes, match: str) -> None:
    with pytest.raises(GzipStreamError, match=match):
        read_all(bad)


def test_seek_forward_only() -> None:
    with GzipStream(io.BytesIO(COMP)) as g:
        g.seek(10)
        assert g.read(5) == DATA[10:15]
        g.seek(1_000_000)
        assert g.read(3) == DATA[1_000_000:1_000_003] and g.tell() == 1_000_003
        with pytest.raises(OSError, match="forward"):
            g.seek(0)


def test_bomb_stays_bounded_and_close_stops_the_thread() -> None:
    bomb = gzip.compress(b"\0" * (200 * 1024 * 1024), mtime=0)
    before = threading.active_count()
    g = GzipStream(io.BytesIO(bomb), piece=1 << 16, depth=2)
    assert g.read(10) == b"\0" * 10
    g.close()
    assert threading.active_count() == before


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=5000), st.integers(1, 64), st.integers(1, 64))
def test_matches_gzip_for_any_input(data: bytes, chunk: int, piece: int) -> None:
    assert read_all(gzip.compress(data, mtime=0), chunk=chunk, piece=piece, bufsize=97) == data
