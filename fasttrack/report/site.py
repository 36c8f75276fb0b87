"""``fasttrack dashboard build``: a static, hostable site over a directory of bundles.

Layout of the site::

    index.html              every bundle by model and PR, review queue, PR heads with
                            several bundles, filter and search
    index.json              the same records for tools (and the page's filter)
    index.sqlite            the incremental index (see :mod:`fasttrack.report.index_db`)
    reports/<id>.html       one report per bundle (id = first 16 hex digits of its content hash)
    compare/<group>.html    independent bundles for one PR head and model, side by side
    bundles/<id>/<file>     attested files of verified bundles (``--artifacts copy``);
                            files whose type is not on the inert allow-list
                            (:data:`fasttrack.report.links.INERT_TYPES`) get a ``.txt``
                            suffix, so any static server and any browser shows them as text

Every page is rendered from the bundles only, after verifying each one.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from fasttrack.bundle import outfile
from fasttrack.bundle.errors import BundleError
from fasttrack.bundle.layout import ATTESTATION, MANIFEST
from fasttrack.errors import FasttrackError
from fasttrack.report.identity import bundle_hash
from fasttrack.report.index_db import Index
from fasttrack.report.links import quote_path, served_name
from fasttrack.report.records import BundleRecord, record_from
from fasttrack.report.render import renderer_version, write_text
from fasttrack.report.site_pages import write_index

ArtifactMode = Literal["copy", "serve", "none"]
INDEX_DB = "index.sqlite"


@dataclass
class BuildStats:
    """What one build did."""

    site: Path
    bundles: int
    read: int
    """Bundles verified, read and rendered in this build."""
    reused: int
    """Bundles taken from the index unchanged."""
    removed: int
    seconds: float
    errors: list[str]


# --------------------------------------------------------------------------- discovery


def discover(bundles_dir: Path) -> list[tuple[str, Path]]:
    """Bundles under ``bundles_dir``: directories holding a manifest or attestation, and
    ``.tar.gz``/``.tgz`` files. Hidden entries and symbolic links are skipped."""
    if not bundles_dir.is_dir():
        raise FasttrackError(
            f"--bundles {bundles_dir} is not a directory",
            hint="Point it at a folder of bundle directories or .tar.gz files.",
        )
    found: list[tuple[str, Path]] = []
    stack = [bundles_dir]
    while stack:
        d = stack.pop()
        try:
            entries = sorted(os.scandir(d), key=lambda e: e.name)
        except OSError:
            continue
        for e in entries:
            if e.name.startswith(".") or e.is_symlink():
                continue
            p = Path(e.path)
            if e.is_dir(follow_symlinks=False):
                if (p / MANIFEST).is_file() or (p / ATTESTATION).is_file():
                    found.append((p.relative_to(bundles_dir).as_posix(), p))
                else:
                    stack.append(p)
            elif e.is_file(follow_symlinks=False) and (e.name.endswith(".tar.gz") or e.name.endswith(".tgz")):
                found.append((p.relative_to(bundles_dir).as_posix(), p))
    return sorted(found)


# --------------------------------------------------------------------------- one bundle (worker)

_worker_keys: list[Any] = []


def _init_worker(key_paths: Sequence[str], trust_dir: str | None) -> None:
    from fasttrack.bundle.verify import resolve_keys

    global _worker_keys
    _worker_keys = resolve_keys(key_paths, trust_dir)


@dataclass
class _Job:
    rel: str
    path: str
    site: str
    artifacts: str
    known: frozenset[str]


def hash_bundle(item: tuple[str, str]) -> tuple[str, str | None, str | None]:
    """``(rel, content id, None)`` of one found bundle, or ``(rel, None, error)``."""
    rel, path = item
    try:
        return rel, bundle_hash(Path(path)), None
    except OSError as exc:
        return rel, None, f"{rel}: cannot read: {exc}"


def _copy_to(stream: Any, dst: Path) -> None:
    """Copy ``stream`` into the site file ``dst`` (only over a regular file, through an exclusive temporary file)."""
    with outfile.exclusive_temp(dst) as (f, tmp):
        shutil.copyfileobj(stream, f, 1 << 20)
    outfile.commit(tmp, dst)


def _copy_members(path: Path, members: Sequence[str], dest: Path) -> None:
    wanted = {m for m in members if quote_path(m) is not None}
    made: set[Path] = set()

    def folder(dst: Path) -> None:
        if dst.parent not in made:
            dst.parent.mkdir(parents=True, exist_ok=True)
            made.add(dst.parent)

    if path.is_dir():
        root = path.resolve()
        inside: dict[Path, bool] = {}  # folder -> resolves under root (links followed), asked once per folder
        for m in sorted(wanted):
            src = root / m
            try:
                st = os.lstat(src)
            except OSError:
                continue
            if src.parent not in inside:
                inside[src.parent] = src.parent.resolve().is_relative_to(root)
            if not stat.S_ISREG(st.st_mode) or not inside[src.parent]:
                continue
            dst = dest / served_name(m)
            folder(dst)
            with open(src, "rb") as fin:
                _copy_to(fin, dst)
    else:
        from fasttrack.bundle.safe_tar import iter_members

        for mem in iter_members(path):
            if mem.is_dir or mem.name not in wanted or mem.stream is None:
                continue
            dst = dest / served_name(mem.name)
            folder(dst)
            _copy_to(mem.stream, dst)


def process_bundle(job: _Job) -> tuple[str, str, str | None, str | None]:
    """:func:`_process_bundle`, and a bundle that breaks it in any way rejected with the reason: one hostile or
    broken bundle never stops the dashboard (it is listed as rejected, the others are built)."""
    try:
        return _process_bundle(job)
    except Exception as exc:  # noqa: BLE001 - rejected, named, and the build goes on
        return job.rel, "", None, f"{job.rel}: rejected ({type(exc).__name__}: {str(exc)[:300]})"


def _process_bundle(job: _Job) -> tuple[str, str, str | None, str | None]:
    """Verify, read and render one bundle: ``(rel, id, record json | None, error)``.

    The id is the content hash of what was verified: a tarball's bytes, hashed before it is verified;
    a directory's tree hash, from the digests its verification computed (so an edit between the two
    cannot leave a record under the id of other bytes). When that id is already indexed (``job.known``)
    nothing is rendered.
    """
    from fasttrack.bundle.verify import verify_bundle
    from fasttrack.report.load import Links, build_report_data
    from fasttrack.report.report import report_html

    path = Path(job.path)
    try:
        h = "" if path.is_dir() else bundle_hash(path)
    except OSError as exc:
        return job.rel, "", None, f"{job.rel}: cannot read: {exc}"
    if h and h in job.known:
        return job.rel, h, None, None
    try:
        vr = verify_bundle(path, keys=_worker_keys)
        h = h or vr.content_sha256 or bundle_hash(path)
    except BundleError as exc:
        return job.rel, h, None, f"{job.rel}: {exc.message}"
    except OSError as exc:
        return job.rel, h, None, f"{job.rel}: cannot read: {exc}"
    if h in job.known:
        return job.rel, h, None, None
    short = h[:16]
    site = Path(job.site)
    if job.artifacts == "copy":
        links = Links(base=f"../bundles/{short}", rename=served_name)
    elif job.artifacts == "serve":  # dashboard serve sets each file's headers itself
        links = Links(base=f"../bundles/{short}", served=True)
    else:
        links = Links(base=None, reason="not linked: this site was built without the bundles' files")
    try:
        data = build_report_data(path, keys=_worker_keys, links=links, verify_result=vr, content_hash=h)
    except BundleError as exc:
        return job.rel, h, None, f"{job.rel}: {exc.message}"
    except Exception as exc:  # noqa: BLE001 - one hostile or broken bundle must not stop the whole dashboard
        return job.rel, h, None, f"{job.rel}: could not be read ({type(exc).__name__}: {str(exc)[:300]})"
    write_text(site / "reports" / f"{short}.html", report_html(data, back_href="../index.html"))
    dest = site / "bundles" / short
    if dest.exists():
        shutil.rmtree(dest)
    if job.artifacts == "copy" and data.linkable:
        try:
            _copy_members(path, data.linkable, dest)
        except (BundleError, OSError) as exc:
            return job.rel, h, None, f"{job.rel}: cannot copy its files: {exc}"
    rec = record_from(
        data,
        bundle_id=h,
        rel_path=job.rel,
        is_tar=not path.is_dir(),
        report=f"reports/{short}.html",
        members=data.linkable,
    )
    return job.rel, h, rec.model_dump_json(), None


# --------------------------------------------------------------------------- build


def build_site(
    bundles_dir: str | os.PathLike[str],
    site_dir: str | os.PathLike[str],
    *,
    keys: Sequence[str | os.PathLike[str]] = (),
    trust_dir: str | os.PathLike[str] | None = None,
    cache: str | os.PathLike[str] | None = None,
    artifacts: ArtifactMode = "copy",
    jobs: int | None = None,
    force: bool = False,
    log: Callable[[str], None] | None = None,
) -> BuildStats:
    """Build (or update) the dashboard site; only new or changed bundles are read."""
    from fasttrack.bundle.verify import resolve_keys

    t0 = time.perf_counter()
    bdir, site = Path(bundles_dir).resolve(), Path(site_dir).resolve()
    if site == bdir or bdir.is_relative_to(site):
        raise FasttrackError(f"the site folder {site} must not contain the bundles folder {bdir}")
    key_paths = [str(Path(k)) for k in keys]
    trusted = resolve_keys(key_paths, trust_dir)  # raises a clear error for unreadable key files
    site.mkdir(parents=True, exist_ok=True)
    index = Index(Path(cache) if cache else site / INDEX_DB)
    errors: list[str] = []
    try:
        config = json.dumps(
            {
                "keys": sorted(k.keyid for k in trusted),
                "artifacts": artifacts,
                "site": str(site),
                "renderer": renderer_version(),
            },
            sort_keys=True,
        )
        if force or index.meta("config") != config:
            index.clear()
            for sub in ("reports", "bundles", "compare"):
                if (site / sub).is_dir():
                    shutil.rmtree(site / sub)
        found = discover(bdir)
        sources = index.sources()
        on_disk = _reports_on_disk(site)
        known = frozenset(i for i in index.ids() if i[:16] in on_disk)
        with _Workers(key_paths, str(trust_dir) if trust_dir else None, jobs, len(found)) as workers:
            hashes, unreadable = _hash_found(workers, found, known, errors)
            todo, reused = _jobs_to_read(index, found, hashes, known, site, artifacts)
            with index.transaction():  # records go into the index as the workers finish them
                read, unchanged = _index_read_bundles(index, workers, todo, errors)
                stale = set(sources) - {rel for rel, _ in found}
                removed = _drop_stale(index, site, stale | unreadable)
                index.set_meta("config", config)
        reused += unchanged
        ids = sorted(index.ids())
        # the pages hold the records and the errors only: with the same of both they are left as they are
        stamp = hashlib.sha256(json.dumps([config, ids, errors]).encode()).hexdigest()
        if index.meta("pages") != stamp or not (site / "index.html").is_file() or read or removed:
            write_index(site, index.records(), errors=errors)
            with index.transaction():
                index.set_meta("pages", stamp)
        if log:
            took = time.perf_counter() - t0
            log(f"{len(ids)} bundles: {read} read, {reused} unchanged, {removed} removed ({took:.1f} s)")
        seconds = time.perf_counter() - t0
        return BuildStats(site, len(ids), read=read, reused=reused, removed=removed, seconds=seconds, errors=errors)
    finally:
        index.close()


def _hash_found(
    workers: _Workers, found: list[tuple[str, Path]], known: frozenset[str], errors: list[str]
) -> tuple[dict[str, str], set[str]]:
    """Every found bundle's content hash (``rel -> hash``) and the ones that could not be read, when anything is
    indexed already (on a first build nothing is hashed twice: the workers hash what they read)."""
    # every found bundle is looked up by its content: sizes and times say nothing (an edit in place can keep both)
    hashes: dict[str, str] = {}
    unreadable: set[str] = set()
    if known:
        for rel, h, err in workers.map(hash_bundle, [(rel, str(p)) for rel, p in found]):
            if err or h is None:
                errors.append(err or f"{rel}: cannot read")
                unreadable.add(rel)
            else:
                hashes[rel] = h
    return hashes, unreadable


def _jobs_to_read(
    index: Index,
    found: list[tuple[str, Path]],
    hashes: dict[str, str],
    known: frozenset[str],
    site: Path,
    artifacts: ArtifactMode,
) -> tuple[list[_Job], int]:
    """The bundles to verify and render, and how many are reused as indexed (their sources recorded here)."""
    todo: list[_Job] = []
    reused = 0
    for rel, p in found:
        h = hashes.get(rel)
        if h is not None and h in known:
            reused += 1
            index.put_source(rel, h)
        elif not known or h is not None:
            todo.append(_Job(rel=rel, path=str(p), site=str(site), artifacts=artifacts, known=known))
    return todo, reused


def _index_read_bundles(index: Index, workers: _Workers, todo: list[_Job], errors: list[str]) -> tuple[int, int]:
    """Read ``todo`` in the workers and index each record as it comes: ``(read, found already indexed)``."""
    read = unchanged = 0
    for rel, h, rec_json, err in workers.map(process_bundle, todo):
        if err:
            errors.append(err)
            index.drop_source(rel)
            continue
        if rec_json is not None:
            index.put(BundleRecord.model_validate_json(rec_json))
            read += 1
        else:
            unchanged += 1
        index.put_source(rel, h)
    return read, unchanged


def _drop_stale(index: Index, site: Path, stale: set[str]) -> int:
    """Forget the sources no longer found or now unreadable (an old record must not stay listed), then every record
    no source holds, with its report and files; returns how many records went."""
    for rel in stale:
        index.drop_source(rel)
    removed = 0
    for bid in index.orphans():
        index.drop(bid)
        removed += 1
        (site / "reports" / f"{bid[:16]}.html").unlink(missing_ok=True)
        shutil.rmtree(site / "bundles" / bid[:16], ignore_errors=True)
    return removed


def _reports_on_disk(site: Path) -> set[str]:
    """Ids (first 16 hex digits) whose report page exists."""
    reports = site / "reports"
    return {p.stem for p in reports.glob("*.html")} if reports.is_dir() else set()


class _Workers:
    """The build's worker processes (verification and rendering run there), or this process for small jobs."""

    def __init__(self, key_paths: list[str], trust_dir: str | None, jobs: int | None, size: int) -> None:
        self.n = jobs if jobs is not None else min(os.cpu_count() or 1, 8)
        self.args = (key_paths, trust_dir)
        self.pool: ProcessPoolExecutor | None = None
        if self.n > 1 and size >= 4:
            self.pool = ProcessPoolExecutor(max_workers=self.n, initializer=_init_worker, initargs=self.args)
        else:
            _init_worker(*self.args)

    def __enter__(self) -> "_Workers":
        return self

    def __exit__(self, *exc: object) -> None:
        if self.pool is not None:
            self.pool.shutdown()

    def map(self, fn: Callable[[Any], Any], items: Sequence[Any]) -> Iterator[Any]:
        """``fn`` over ``items`` in order, as the results come (small chunks: no worker idles at the end)."""
        if not items:
            return iter(())
        if self.pool is None or len(items) < 4:
            if self.pool is not None:
                _init_worker(*self.args)
            return (fn(x) for x in items)
        return self.pool.map(fn, items, chunksize=max(1, min(16, len(items) // (8 * self.n) or 1)))
