"""A bundle's identity: the sha256 of its content.

The dashboard's cache is keyed by it (never by sizes or times, which an in-place edit can
keep): a tarball's id is the sha256 of its bytes; a directory's is the sha256 over one line
per entry, sorted by path: ``relpath NUL sha256`` for a regular file (the formula of
:func:`fasttrack.bundle.provenance.hash_tree`), ``relpath NUL symlink:SHA256-OF-TARGET`` for a
symbolic link and ``relpath NUL other`` for anything else (links are never followed). Every value
has a fixed form and a path holds no NUL, so two different trees never write the same lines. A directory of
regular files only gets the same id from the digests its verification computed
(:func:`tree_hash`), so a worker names a bundle by the very bytes it verified.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Mapping
from pathlib import Path

from fasttrack.bundle.canonical import sha256_file, sha256_stream
from fasttrack.bundle.scan import tree_sha256


def tree_hash(digests: Mapping[str, str]) -> str:
    """The id of a directory from ``relpath -> value`` (a regular file's value is its sha256)."""
    return tree_sha256(digests)


def bundle_hash(path: Path) -> str:
    """The content id of a bundle tarball or directory (see the module docstring)."""
    p = Path(path)
    if not p.is_dir():
        return sha256_file(p)[0]
    lines: dict[str, str] = {}
    buf = bytearray(1 << 20)
    stack = [(str(p), "")]
    while stack:
        d, prefix = stack.pop()
        with os.scandir(d) as it:
            for e in it:
                rel = prefix + e.name
                st = e.stat(follow_symlinks=False)
                if stat.S_ISDIR(st.st_mode):
                    stack.append((e.path, rel + "/"))
                elif stat.S_ISREG(st.st_mode):
                    with open(e.path, "rb", buffering=0) as f:
                        lines[rel] = sha256_stream(f, buffer=buf)[0]
                elif stat.S_ISLNK(st.st_mode):
                    target = os.fsencode(os.readlink(e.path))
                    lines[rel] = "symlink:" + hashlib.sha256(target).hexdigest()
                else:
                    lines[rel] = "other"
    return tree_hash(lines)
