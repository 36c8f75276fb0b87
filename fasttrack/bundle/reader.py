"""Read a bundle (directory or ``.tar.gz``) for reports, dashboards and reruns.

Reading does not verify; call :func:`fasttrack.bundle.verify.verify_bundle` for that
(first: it streams and hashes a tarball without unpacking it). A tarball is read by
unpacking only what readers use, the manifest, the attestation and the result tables,
into a temporary directory that lives as long as the context manager; artifacts and logs
are checked as the archive streams past and only their sizes are kept (one is unpacked
when :meth:`BundleView.path` asks for it).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fasttrack.bundle.errors import BundleError
from fasttrack.bundle.layout import ATTESTATION, MANIFEST, RESULTS_DIR
from fasttrack.bundle.manifest import Manifest, load_manifest
from fasttrack.limits import MANIFEST_MAX_BYTES, read_capped


def unpacked_for_reading(name: str) -> bool:
    """Whether reading a tarball unpacks the member ``name`` (manifest, attestation, tables)."""
    return name in (MANIFEST, ATTESTATION) or name.startswith(RESULTS_DIR + "/")


@dataclass(frozen=True)
class BundleView:
    """A readable bundle: its directory and parsed manifest.

    ``sizes`` lists every file of a tarball with its size (only the manifest, the
    attestation and the tables are under ``root``); it is None for a bundle directory.
    """

    root: Path
    manifest: Manifest
    sizes: dict[str, int] | None = field(default=None)
    archive: Path | None = field(default=None)
    """The tarball the view reads (None for a bundle directory)."""

    def rows(self, check: str, table: str) -> list[dict[str, Any]]:
        """The rows of one check table, each read through its row model within the bundle's own plan's bounds
        (:mod:`fasttrack.bundle.rowread`)."""
        from fasttrack.bundle.rejudge import own_context
        from fasttrack.bundle.rowread import DecodeBudget, read_bundle_table

        got, _legacy = read_bundle_table(
            self.root, self.manifest, check, table, budget=DecodeBudget(), ctx=own_context(self.manifest)
        )
        return [r.record() for r in got.rows]

    def path(self, rel: str) -> Path:
        """The local path of a bundle file (a file of a tarball that is not unpacked yet is
        unpacked now, alone, in one more pass over the archive)."""
        p = (self.root / rel).resolve()
        if not p.is_relative_to(self.root.resolve()):
            raise BundleError(f"the bundle has no file {rel}")
        if not p.exists() and self.archive is not None and self.sizes is not None and rel in self.sizes:
            from fasttrack.bundle.safe_tar import DEFAULT_LIMITS, _extract

            _extract(self.archive, self.root, DEFAULT_LIMITS, lambda n: n == rel, None)
        if p.is_symlink() or not p.is_file():
            raise BundleError(f"the bundle has no file {rel}")
        return p

    def size(self, rel: str) -> int | None:
        """The size of a bundle file, or None when there is no such regular file."""
        if self.sizes is not None:
            return self.sizes.get(rel)
        p = self.root / rel
        try:
            if p.is_symlink() or not p.resolve().is_relative_to(self.root.resolve()) or not p.is_file():
                return None
            return p.stat().st_size
        except (OSError, ValueError):
            return None


@contextmanager
def open_bundle(path: str | os.PathLike[str]) -> Iterator[BundleView]:
    """Open a bundle directory or tarball for reading."""
    p = Path(path)
    if p.is_dir():
        yield BundleView(root=p, manifest=_manifest(p))
        return
    if not p.is_file():
        raise BundleError(f"{p} does not exist")
    from fasttrack.bundle.safe_tar import extract_bundle

    with tempfile.TemporaryDirectory(prefix="fasttrack-read-") as tmp:
        root = Path(tmp) / "bundle"
        sizes: dict[str, int] = {}
        extract_bundle(p, root, select=unpacked_for_reading, sizes=sizes)
        yield BundleView(root=root, manifest=_manifest(root), sizes=sizes, archive=p)


def _manifest(root: Path) -> Manifest:
    mp = root / MANIFEST
    if mp.is_symlink() or not mp.is_file():
        raise BundleError(f"{root} has no {MANIFEST}; it is not a bundle")
    try:
        data = read_capped(mp, MANIFEST_MAX_BYTES)
    except OSError as exc:
        raise BundleError(f"cannot read {mp}: {exc.strerror}") from None
    if data is None:
        raise BundleError(f"{MANIFEST} is larger than {MANIFEST_MAX_BYTES} bytes (the limit)")
    return load_manifest(data)
