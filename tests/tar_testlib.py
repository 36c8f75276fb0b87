"""Hostile archives made by code: tar members of any name and type, packed as gzip tarballs."""

from __future__ import annotations

import gzip
import io
import tarfile
from pathlib import Path

Member = tuple[tarfile.TarInfo, bytes | None]


def reg(name: str, data: bytes = b"x") -> tuple[tarfile.TarInfo, bytes]:
    """A regular file member."""
    ti = tarfile.TarInfo(name)
    ti.size = len(data)
    return ti, data


def special(name: str, typ: bytes, linkname: str = "") -> tuple[tarfile.TarInfo, None]:
    """A member of type ``typ`` (link, device, FIFO...) without data."""
    ti = tarfile.TarInfo(name)
    ti.type = typ
    ti.linkname = linkname
    return ti, None


def tgz_bytes(members: list[Member], *, level: int = 6) -> bytes:
    """``members`` as a PAX-format tarball, gzipped (no timestamp in the gzip header)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for ti, data in members:
            tf.addfile(ti, io.BytesIO(data) if data is not None else None)
    return gzip.compress(buf.getvalue(), compresslevel=level, mtime=0)


def hostile_tgz(path: Path, members: list[Member], *, level: int = 6) -> Path:
    """:func:`tgz_bytes` written to ``path``."""
    path.write_bytes(tgz_bytes(members, level=level))
    return path
