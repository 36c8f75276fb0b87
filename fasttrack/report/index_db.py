"""The dashboard's SQLite index: one row per bundle (keyed by its content hash) and one per
place a bundle was found (keyed by path, naming the content hash found there).

A rebuild hashes every bundle's content (never trusting sizes or times, which an edit in
place can keep), and only content hashes not yet in the index are verified, read and rendered. The index also
records the trust configuration and the renderer version: when either changes, every
bundle is read again (verification depends on the keys, the pages on the templates).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from fasttrack.bundle.outfile import check_target
from fasttrack.errors import FasttrackError
from fasttrack.report.records import BundleRecord

SCHEMA_VERSION = "2"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS bundles (
    id TEXT PRIMARY KEY,
    record TEXT NOT NULL,
    verified INTEGER NOT NULL,
    verdict TEXT NOT NULL,
    model TEXT NOT NULL,
    repository TEXT NOT NULL,
    pr_number INTEGER,
    head_sha TEXT NOT NULL,
    created TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS bundles_head ON bundles (head_sha, model);
CREATE TABLE IF NOT EXISTS sources (
    path TEXT PRIMARY KEY,
    bundle_id TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS sources_bundle ON sources (bundle_id);
CREATE TABLE IF NOT EXISTS perf (
    bundle_id TEXT NOT NULL,
    point TEXT NOT NULL,
    metric TEXT NOT NULL,
    speedup REAL NOT NULL,
    ci_low REAL,
    ci_high REAL,
    verdict TEXT
);
CREATE INDEX IF NOT EXISTS perf_bundle ON perf (bundle_id);
"""


class Index:
    """A thin wrapper over the SQLite file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            check_target(path)  # the index file is a regular file or absent: never a FIFO, a device or a link
            self.db = sqlite3.connect(str(path), timeout=30)
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=NORMAL")
            self.db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            if self.meta("schema_version") not in (None, SCHEMA_VERSION):  # an older layout: start afresh
                for t in ("bundles", "sources", "perf"):
                    self.db.execute(f"DROP TABLE IF EXISTS {t}")  # noqa: S608 - fixed table names
                self.db.execute("DELETE FROM meta")
            self.db.executescript(_SCHEMA)
        except (sqlite3.Error, OSError) as exc:
            raise FasttrackError(
                f"cannot open the dashboard index {path}: {exc}",
                hint="Give --cache a file path in a writable folder (or leave it out: SITE/index.sqlite).",
            ) from None
        self.set_meta("schema_version", SCHEMA_VERSION)
        self.db.commit()

    def close(self) -> None:
        self.db.close()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        with self.db:
            yield self.db

    # meta
    def meta(self, key: str) -> str | None:
        row = self.db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    def set_meta(self, key: str, value: str) -> None:
        self.db.execute(
            "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            (key, value),
        )

    def clear(self) -> None:
        with self.db:
            for t in ("bundles", "sources", "perf"):
                self.db.execute(f"DELETE FROM {t}")  # noqa: S608 - fixed table names

    # sources
    def sources(self) -> dict[str, str]:
        """path -> bundle id."""
        return {p: b for p, b in self.db.execute("SELECT path, bundle_id FROM sources")}

    def put_source(self, path: str, bundle_id: str) -> None:
        self.db.execute(
            "INSERT INTO sources (path, bundle_id) VALUES (?, ?) "
            "ON CONFLICT(path) DO UPDATE SET bundle_id = excluded.bundle_id",
            (path, bundle_id),
        )

    def drop_source(self, path: str) -> None:
        self.db.execute("DELETE FROM sources WHERE path = ?", (path,))

    # bundles
    def ids(self) -> set[str]:
        return {r for (r,) in self.db.execute("SELECT id FROM bundles")}

    def has(self, bundle_id: str) -> bool:
        return self.db.execute("SELECT 1 FROM bundles WHERE id = ?", (bundle_id,)).fetchone() is not None

    def put(self, rec: BundleRecord) -> None:
        self.db.execute(
            "INSERT INTO bundles (id, record, verified, verdict, model, repository, pr_number, head_sha, created) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(id) DO UPDATE SET record = excluded.record, "
            "verified = excluded.verified, verdict = excluded.verdict, model = excluded.model, "
            "repository = excluded.repository, pr_number = excluded.pr_number, head_sha = excluded.head_sha, "
            "created = excluded.created",
            (
                rec.id,
                rec.model_dump_json(),
                int(rec.verified),
                rec.verdict,
                rec.model,
                rec.repository,
                rec.pr_number,
                rec.head_sha,
                rec.created,
            ),
        )
        self.db.execute("DELETE FROM perf WHERE bundle_id = ?", (rec.id,))
        self.db.executemany(
            "INSERT INTO perf (bundle_id, point, metric, speedup, ci_low, ci_high, verdict) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            [(rec.id, p.point, p.metric, p.speedup, p.ci_low, p.ci_high, p.verdict) for p in rec.perf],
        )

    def drop(self, bundle_id: str) -> None:
        self.db.execute("DELETE FROM bundles WHERE id = ?", (bundle_id,))
        self.db.execute("DELETE FROM perf WHERE bundle_id = ?", (bundle_id,))

    def record(self, bundle_id: str) -> BundleRecord | None:
        row = self.db.execute("SELECT record FROM bundles WHERE id = ?", (bundle_id,)).fetchone()
        return BundleRecord.model_validate_json(row[0]) if row else None

    def find(self, short_id: str) -> BundleRecord | None:
        """The bundle whose id starts with ``short_id`` (hex only)."""
        if not short_id or any(c not in "0123456789abcdef" for c in short_id):
            return None
        row = self.db.execute(
            "SELECT record FROM bundles WHERE id >= ? AND id < ? LIMIT 1", (short_id, short_id + "g")
        ).fetchone()
        return BundleRecord.model_validate_json(row[0]) if row else None

    def records(self) -> list[BundleRecord]:
        return [
            BundleRecord.model_validate_json(r) for (r,) in self.db.execute("SELECT record FROM bundles ORDER BY id")
        ]

    def source_of(self, bundle_id: str) -> str | None:
        row = self.db.execute(
            "SELECT path FROM sources WHERE bundle_id = ? ORDER BY path LIMIT 1", (bundle_id,)
        ).fetchone()
        return row[0] if row else None

    def orphans(self) -> list[str]:
        """Bundle ids no source path points to any more."""
        return [r for (r,) in self.db.execute("SELECT id FROM bundles WHERE id NOT IN (SELECT bundle_id FROM sources)")]


def dumps(obj: object) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
