"""A bundle's identity: the sha256 of its content, and a cheap fingerprint to notice change."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from fasttrack.bundle.canonical import sha256_file
from fasttrack.bundle.provenance import hash_tree


def bundle_hash(path: Path) -> str:
    """sha256 of a tarball's bytes, or of a directory's files (``relpath NUL sha256`` lines, sorted)."""
    p = Path(path)
    if p.is_dir():
        return hash_tree(p)
    return sha256_file(p)[0]


def fingerprint(path: Path) -> str:
    """Changes whenever a file of the bundle is added, removed, resized or touched (stat only)."""
    p = Path(path)
    h = hashlib.sha256()
    if p.is_dir():
        entries: list[str] = []
        stack = [(str(p), "")]
        while stack:
            d, prefix = stack.pop()
            try:
                it = os.scandir(d)
            except OSError:
                continue
            with it:
                for e in it:
                    rel = prefix + e.name
                    try:
                        st = e.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    if e.is_dir(follow_symlinks=False):
                        stack.append((e.path, rel + "/"))
                    else:
                        entries.append(f"{rel}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_mode}")
        for line in sorted(entries):
            h.update(line.encode("utf-8", "surrogateescape") + b"\n")
    else:
        st = p.stat()
        h.update(f"file\0{st.st_size}\0{st.st_mtime_ns}".encode())
    return h.hexdigest()
