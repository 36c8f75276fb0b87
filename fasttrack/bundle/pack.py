"""Deterministic ``.tar.gz`` packing: the same bundle directory always gives the same bytes.

Members are sorted by path (each directory before its contents), carry mtime 0, uid and
gid 0, empty user and group names, and mode 0644 (files) or 0755 (directories). The gzip
header has mtime 0 and no file name. Member names are the bundle-relative paths (no
leading directory), so they equal the attestation's subject names.
"""

from __future__ import annotations

import gzip
import os
import stat
import tarfile
from pathlib import Path

from fasttrack.bundle.errors import BundleError
from fasttrack.bundle.outfile import commit, exclusive_temp


def _entries(src: Path) -> list[tuple[str, Path, bool]]:
    out: list[tuple[str, Path, bool]] = []
    for dirpath, dirs, files in os.walk(src, followlinks=False):
        d = Path(dirpath)
        for name in dirs + files:
            p = d / name
            rel = p.relative_to(src).as_posix()
            mode = p.lstat().st_mode
            if stat.S_ISLNK(mode):
                raise BundleError(f"cannot pack {src}: {rel} is a symbolic link; bundles hold regular files only")
            if stat.S_ISDIR(mode):
                out.append((rel, p, True))
            elif stat.S_ISREG(mode):
                out.append((rel, p, False))
            else:
                raise BundleError(f"cannot pack {src}: {rel} is not a regular file or directory")
    out.sort(key=lambda e: e[0].split("/"))
    return out


def _info(name: str, *, is_dir: bool, size: int = 0) -> tarfile.TarInfo:
    ti = tarfile.TarInfo(name)
    ti.type = tarfile.DIRTYPE if is_dir else tarfile.REGTYPE
    ti.size = 0 if is_dir else size
    ti.mode = 0o755 if is_dir else 0o644
    ti.mtime = 0
    ti.uid = ti.gid = 0
    ti.uname = ti.gname = ""
    return ti


def pack_bundle(src_dir: str | os.PathLike[str], out_path: str | os.PathLike[str], *, compresslevel: int = 6) -> Path:
    """Pack the bundle directory ``src_dir`` into ``out_path`` (written atomically)."""
    src = Path(src_dir)
    out = Path(out_path)
    if not src.is_dir():
        raise BundleError(f"{src} is not a bundle directory")
    if out.resolve().is_relative_to(src.resolve()):
        raise BundleError(f"the tarball {out} must not be written inside the bundle directory {src}")
    entries = _entries(src)
    out.parent.mkdir(parents=True, exist_ok=True)
    with exclusive_temp(out) as (raw, tmp):  # only over a regular file, through an exclusive temporary file
        with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=compresslevel) as gz:
            with tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT, encoding="utf-8") as tf:
                for rel, p, is_dir in entries:
                    if is_dir:
                        tf.addfile(_info(rel, is_dir=True))
                    else:
                        with open(p, "rb") as f:
                            size = os.fstat(f.fileno()).st_size
                            tf.addfile(_info(rel, is_dir=False, size=size), f)
    os.chmod(tmp, 0o644)
    commit(tmp, out)
    return out
