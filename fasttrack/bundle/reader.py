"""Read a bundle (directory or ``.tar.gz``) for reports and dashboards.

Reading does not verify; call :func:`fasttrack.bundle.verify.verify_bundle` for that.
Tarballs are extracted safely into a temporary directory that lives as long as the
context manager.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fasttrack.bundle.errors import BundleError
from fasttrack.bundle.layout import MANIFEST
from fasttrack.bundle.manifest import Manifest, load_manifest
from fasttrack.bundle.tables import read_rows


@dataclass(frozen=True)
class BundleView:
    """A readable bundle: its directory and parsed manifest."""

    root: Path
    manifest: Manifest

    def rows(self, check: str, table: str) -> list[dict[str, Any]]:
        """The rows of one check table."""
        entry = self.manifest.checks.get(check)
        if entry is None or table not in entry.tables:
            raise BundleError(f"the bundle has no table {check}/{table}")
        return read_rows(self.root / entry.tables[table].path)

    def path(self, rel: str) -> Path:
        """The local path of a bundle file (e.g. an artifact or log)."""
        p = (self.root / rel).resolve()
        if not p.is_relative_to(self.root.resolve()) or not p.is_file():
            raise BundleError(f"the bundle has no file {rel}")
        return p


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
        extract_bundle(p, root)
        yield BundleView(root=root, manifest=_manifest(root))


def _manifest(root: Path) -> Manifest:
    mp = root / MANIFEST
    if not mp.is_file():
        raise BundleError(f"{root} has no {MANIFEST}; it is not a bundle")
    return load_manifest(mp.read_bytes())
