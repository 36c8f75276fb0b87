"""Where things live inside a bundle (directory or tarball; the paths are the same)."""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path

from fasttrack.bundle.errors import BundleError

#: The manifest: verdict, check entries, scope, plan, PR link, provenance.
MANIFEST = "manifest.json"
#: The DSSE envelope holding the in-toto Statement; the only file that is not a subject.
ATTESTATION = "attestation.dsse.json"
#: Parquet result rows: ``results/<check>/<table>.parquet``.
RESULTS_DIR = "results"
#: Raw artifacts (per-sample eval outputs, per-request timings, trace excerpts).
ARTIFACTS_DIR = "artifacts"
#: Engine logs.
LOGS_DIR = "logs"

#: Allowed characters of check and table names (they become path components).
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


def table_path(check: str, table: str) -> str:
    """The bundle-relative path of one check table."""
    return f"{RESULTS_DIR}/{check}/{table}.parquet"


def regular_files(root: Path, *, what: str, full_paths: bool = False) -> Iterator[tuple[str, Path]]:
    """Every regular file under ``root``, folders and names in sorted order, as (POSIX path relative to
    ``root``, path). A symbolic link (to a file or a folder) or a special file raises :class:`BundleError`
    naming it as ``what`` and its relative path (its whole path with ``full_paths``): bundles hold regular
    files only."""
    for dirpath, dirs, names in os.walk(root, followlinks=False):
        dirs.sort()
        d = Path(dirpath)
        for name in [*dirs, *sorted(names)]:
            p = d / name
            rel = p.relative_to(root).as_posix()
            shown = p if full_paths else rel
            mode = p.lstat().st_mode
            if stat.S_ISLNK(mode):
                raise BundleError(f"{what} {shown} is a symbolic link; bundles hold regular files only")
            if name in dirs:
                continue
            if not stat.S_ISREG(mode):
                raise BundleError(f"{what} {shown} is not a regular file")
            yield rel, p
