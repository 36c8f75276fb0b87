"""Where things live inside a bundle (directory or tarball; the paths are the same)."""

from __future__ import annotations

import re

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
