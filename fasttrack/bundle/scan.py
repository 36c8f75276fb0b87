"""One pass over a bundle's bytes (directory or ``.tar.gz``): every file hashed, the
manifest, the attestation and the result tables kept in memory for the rules."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from pathlib import Path

from fasttrack.bundle.canonical import HASH_BUFFER, sha256_stream
from fasttrack.bundle.layout import ATTESTATION, MANIFEST, RESULTS_DIR
from fasttrack.bundle.safe_tar import Limits, iter_members
from fasttrack.limits import MANIFEST_MAX_BYTES, TABLE_KEEP_BYTES, TABLES_KEEP_TOTAL_BYTES

#: Files kept in memory during the pass (everything else is only hashed).
KEEP_SUFFIXES = (".parquet",)
#: Bytes of one table kept at most (limits: ``TABLE_KEEP_BYTES``; the manifest and the
#: attestation: ``MANIFEST_MAX_BYTES``), and of all tables together.
KEEP_LIMIT = TABLE_KEEP_BYTES
KEEP_TOTAL = TABLES_KEEP_TOTAL_BYTES


class Contents:
    """What one pass over the bundle found."""

    def __init__(self) -> None:
        self.digests: dict[str, str] = {}
        """Bundle-relative path -> hex sha256 (empty when the pass did not hash it)."""
        self.sizes: dict[str, int] = {}
        self.kept: dict[str, bytes] = {}
        """The bytes of the manifest, the attestation and the result tables (within the limits)."""
        self.tables_kept = 0
        """Bytes of the result tables in ``kept``."""
        self.problems: list[str] = []
        """Members that are not regular files."""
        self.total = 0
        """Bytes read."""


def tree_sha256(digests: Mapping[str, str]) -> str:
    """sha256 over ``relpath NUL sha256 NL`` per file, sorted by path: a directory's content id (see
    :mod:`fasttrack.report.identity`) from the digests one pass computed."""
    h = hashlib.sha256()
    for rel in sorted(digests):
        h.update(f"{rel}\0{digests[rel]}\n".encode("utf-8", "surrogateescape"))
    return h.hexdigest()


def bundle_id(digests: Mapping[str, str]) -> str:
    """A bundle's ID: :func:`tree_sha256` over every file but the attestation, so the ID is derived from the
    content alone. A directory and the tarball packed from it have the same ID, and so does the bundle before
    and after a signature is added (signatures live in the attestation and sign this same content). Verifying
    computes it from the bytes it hashed (``VerifyResult.bundle_id``); the report, the PR comment, the
    dashboard, ``verify`` and ``validate`` all show this one ID."""
    return tree_sha256({k: v for k, v in digests.items() if k != ATTESTATION})


def kept_in_memory(name: str) -> bool:
    return name in (MANIFEST, ATTESTATION) or (name.startswith(RESULTS_DIR + "/") and name.endswith(KEEP_SUFFIXES))


def _keep(name: str, size: int, contents: Contents) -> bool:
    """Whether the pass keeps ``name`` (of ``size`` bytes) in memory, within the limits."""
    if name in (MANIFEST, ATTESTATION):
        return size <= MANIFEST_MAX_BYTES
    if not kept_in_memory(name) or size > KEEP_LIMIT:
        return False
    if contents.tables_kept + size > KEEP_TOTAL:
        return False
    contents.tables_kept += size
    return True


def scan_dir(root: Path, contents: Contents, *, hash_all: bool = True) -> None:
    """Read a bundle directory; ``hash_all=False`` hashes only the kept files."""
    buf = bytearray(HASH_BUFFER)
    stack = [root]
    while stack:
        d = stack.pop()
        with os.scandir(d) as it:
            for entry in it:
                rel = Path(entry.path).relative_to(root).as_posix()
                if entry.is_symlink():
                    contents.problems.append(f"{rel} is a symbolic link")
                elif entry.is_dir(follow_symlinks=False):
                    stack.append(Path(entry.path))
                elif entry.is_file(follow_symlinks=False):
                    if _keep(rel, entry.stat().st_size, contents):
                        with open(entry.path, "rb") as f:
                            data = f.read()
                        digest, size = hashlib.sha256(data).hexdigest(), len(data)
                        contents.kept[rel] = data
                    elif hash_all:
                        with open(entry.path, "rb", buffering=0) as f:
                            digest, size = sha256_stream(f, buffer=buf)
                    else:
                        digest, size = "", entry.stat().st_size
                    contents.digests[rel] = digest
                    contents.sizes[rel] = size
                    contents.total += size
                else:
                    contents.problems.append(f"{rel} is not a regular file")


def scan_tar(path: Path, contents: Contents, limits: Limits) -> None:
    """Read a bundle tarball in one streaming pass (unsafe members raise :class:`BundleError`)."""
    buf = bytearray(HASH_BUFFER)
    for m in iter_members(path, limits=limits):
        if m.is_dir:
            continue
        assert m.stream is not None
        if _keep(m.name, m.size, contents):
            data = m.stream.read()
            digest, size = hashlib.sha256(data).hexdigest(), len(data)
            contents.kept[m.name] = data
        else:
            digest, size = sha256_stream(m.stream, buffer=buf)
        contents.digests[m.name] = digest
        contents.sizes[m.name] = size
        contents.total += size
