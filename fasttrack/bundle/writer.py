"""Write an evidence bundle directory from check results.

Layout (see :mod:`fasttrack.bundle.layout`)::

    manifest.json                       verdict, check entries, scope, plan, PR, provenance
    results/<check>/<table>.parquet     result rows, one file per check table
    artifacts/...                       raw artifacts (per-sample outputs, timings, traces)
    logs/...                            engine logs
    attestation.dsse.json               in-toto Statement over every other file, in DSSE

The attestation is written unsigned unless ``sign_keys`` are given; signatures can be
added later with :func:`fasttrack.bundle.attest.sign_bundle`.

:func:`write_run_bundle` is the bundle step of ``fasttrack validate``: it takes the typed
record of a finished run (:class:`FinishedRun`), writes ``<run>/bundle/`` and
``<run>/bundle.tar.gz`` (the same, packed deterministically), and verifies the tarball once.
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Unpack

from fasttrack import attrs
from fasttrack.bundle.errors import BundleError
from fasttrack.bundle.layout import (
    ARTIFACTS_DIR,
    ATTESTATION,
    LOGS_DIR,
    MANIFEST,
    NAME_RE,
    regular_files,
    table_path,
)
from fasttrack.bundle.manifest import (
    Manifest,
    ManifestFields,
    PlanInfo,
    Provenance,
    ScopeInfo,
    TableRef,
    build_manifest,
    manifest_bytes,
)
from fasttrack.bundle.prlink import PRLink
from fasttrack.bundle.tables import parquet_bytes
from fasttrack.evidence import evidence_of, typed_rows
from fasttrack.evidence.base import RowModelError
from fasttrack.results import CheckResult

if TYPE_CHECKING:  # pragma: no cover
    from fasttrack.bundle.keys import SigningKey
    from fasttrack.bundle.verify import VerifyResult

BUNDLE_DIR = "bundle"
"""The bundle directory inside a run folder."""
BUNDLE_TARBALL = "bundle.tar.gz"
"""The packed bundle inside a run folder."""


def _rel(path: str | os.PathLike[str], *, what: str) -> PurePosixPath:
    p = PurePosixPath(Path(path).as_posix())
    if p.is_absolute() or not p.parts or any(part in ("..", "") for part in p.parts) or str(p) == ".":
        raise BundleError(f"{what} {str(path)!r} must be a relative path inside the run directory, without '..'")
    return p


def _copy_file(src: Path, dst: Path, *, what: str) -> None:
    st = src.lstat()
    if stat.S_ISLNK(st.st_mode):
        raise BundleError(f"{what} {src} is a symbolic link; bundles hold regular files only (copy the target instead)")
    if not stat.S_ISREG(st.st_mode):
        raise BundleError(f"{what} {src} is not a regular file")
    if dst.exists():
        raise BundleError(f"{what} {src} would overwrite {dst}, which is already in the bundle")
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dst, follow_symlinks=False)
    os.chmod(dst, 0o644)


def _copy_tree(src: Path, dst: Path, *, what: str) -> list[str]:
    """Copy every regular file under ``src`` to ``dst``; return the copied paths relative to ``dst``."""
    copied = []
    for rel, path in regular_files(src, what=what, full_paths=True):
        _copy_file(path, dst / rel, what=what)
        copied.append(rel)
    return copied


def _prepare(out_dir: Path, overwrite: bool) -> None:
    if out_dir.exists():
        if not out_dir.is_dir():
            raise BundleError(f"{out_dir} exists and is not a directory; choose another --out")
        if any(out_dir.iterdir()):
            if not overwrite:
                raise BundleError(f"{out_dir} is not empty; choose an empty or new directory (or pass overwrite)")
            if not (out_dir / MANIFEST).exists():
                raise BundleError(f"{out_dir} is not empty and does not look like a bundle; refusing to overwrite it")
            shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)


def _bundle_path_of(rel: PurePosixPath) -> str:
    """Where a run-directory artifact lands in the bundle."""
    if rel.parts[0] in (ARTIFACTS_DIR, LOGS_DIR):
        return rel.as_posix()
    return (PurePosixPath(ARTIFACTS_DIR) / rel).as_posix()


def write_bundle(
    out_dir: str | os.PathLike[str],
    *,
    results: Sequence[CheckResult],
    artifacts_from: str | os.PathLike[str] | None = None,
    logs: Mapping[str, str | os.PathLike[str]] | Sequence[str | os.PathLike[str]] | None = None,
    sign_keys: Sequence[SigningKey] = (),
    overwrite: bool = False,
    **fields: Unpack[ManifestFields],
) -> Manifest:
    """Write the bundle directory ``out_dir`` and return its manifest.

    - ``results``: one :class:`CheckResult` per check; their ``tables`` become Parquet
      files and their ``artifacts`` (paths relative to ``artifacts_from``) are copied.
    - ``artifacts_from``: the run directory. Its ``artifacts/`` and ``logs/`` trees are
      copied whole; listed artifacts outside them land under ``artifacts/``.
    - ``logs``: extra log files, ``{name: path}`` (written to ``logs/<name>``) or paths
      (written to ``logs/<file name>``).
    - ``sign_keys``: Ed25519 private keys (see :mod:`fasttrack.bundle.keys`) to sign with now.
    - ``fields``: the rest of the manifest (:class:`ManifestFields`: scope, plan, provenance, PR link,
      rehearsal, ``created``, ``expected_checks``), as :func:`build_manifest` takes them:
      ``expected_checks`` that have no result are recorded as required ``not_run`` (so the
      verdict is ``incomplete``).

    The verdict is derived from ``results`` only; ``created`` defaults to now (UTC, or
    ``$SOURCE_DATE_EPOCH``).
    """
    from fasttrack.bundle.attest import attest_dir, sign_bundle

    out = Path(out_dir)
    run_dir = Path(artifacts_from) if artifacts_from is not None else None
    if run_dir is not None and not run_dir.is_dir():
        raise BundleError(f"artifacts_from={run_dir} is not a directory")
    _prepare(out, overwrite)
    copied = _copy_run_trees(run_dir, out) if run_dir is not None else set()
    tables = {r.check: _write_tables(r, out) for r in results}
    artifacts = {r.check: _copy_artifacts(r, run_dir, out, copied) for r in results}
    _copy_logs(logs or {}, out, copied)
    manifest = build_manifest(results, tables=tables, artifacts=artifacts, **fields)
    (out / MANIFEST).write_bytes(manifest_bytes(manifest))
    os.chmod(out / MANIFEST, 0o644)
    attest_dir(out)
    for key in sign_keys:
        sign_bundle(out, key)
    assert (out / ATTESTATION).exists()
    return manifest


def _copy_run_trees(run_dir: Path, out: Path) -> set[str]:
    """Copy the run folder's ``artifacts/`` and ``logs/`` trees whole; the bundle paths copied."""
    copied = set()
    for sub in (ARTIFACTS_DIR, LOGS_DIR):
        if (run_dir / sub).is_dir():
            for copied_rel in _copy_tree(run_dir / sub, out / sub, what="artifact"):
                copied.add(f"{sub}/{copied_rel}")
    return copied


def _write_tables(r: CheckResult, out: Path) -> dict[str, TableRef]:
    """Write one check's tables as Parquet files, every row through its table's row model (a check without
    declared evidence: as given); their manifest references by table name, naming the model."""
    if not NAME_RE.match(r.check):
        raise BundleError(f"check name {r.check!r} cannot be used in a bundle path; it must match {NAME_RE.pattern}")
    refs = {}
    ev = evidence_of(r.check)
    for tname, rows in r.tables.items():
        if not NAME_RE.match(tname):
            raise BundleError(f"table {tname!r} of check {r.check!r} must match {NAME_RE.pattern}")
        try:
            records = typed_rows(r.check, tname, rows)
        except RowModelError as exc:
            raise BundleError(exc.message, hint=exc.hint) from None
        data, nrows, cols = parquet_bytes(records)
        path = table_path(r.check, tname)
        (out / path).parent.mkdir(parents=True, exist_ok=True)
        (out / path).write_bytes(data)
        os.chmod(out / path, 0o644)
        spec = ev.table(tname) if ev is not None else None
        model = (ev.model_name(tname), spec.version) if ev is not None and spec is not None else (None, None)
        refs[tname] = TableRef(path=path, rows=nrows, columns=cols, model=model[0], version=model[1])
    return refs


def _copy_artifacts(r: CheckResult, run_dir: Path | None, out: Path, copied: set[str]) -> list[str]:
    """Copy the artifacts one check lists (unless already copied; ``copied`` grows); their bundle paths."""
    listed = []
    for a in r.artifacts:
        rel = _rel(a, what=f"artifact of check {r.check!r}")
        if run_dir is None:
            raise BundleError(f"check {r.check!r} lists artifact {a!r} but no artifacts_from (run directory) was given")
        src = run_dir / rel
        if not src.exists() and not src.is_symlink():
            raise BundleError(f"check {r.check!r} lists artifact {a!r}, but {src} does not exist")
        dest = _bundle_path_of(rel)
        if src.is_dir() and not src.is_symlink():
            if dest not in copied and not any(c.startswith(dest + "/") for c in copied):
                for sub in _copy_tree(src, out / dest, what="artifact"):
                    copied.add(f"{dest}/{sub}")
        elif dest not in copied:
            _copy_file(src, out / dest, what="artifact")
            copied.add(dest)
        listed.append(dest)
    return listed


def _copy_logs(
    logs: Mapping[str, str | os.PathLike[str]] | Sequence[str | os.PathLike[str]], out: Path, copied: set[str]
) -> None:
    """Copy the extra log files into ``logs/`` (by name, or by file name)."""
    items = logs.items() if isinstance(logs, Mapping) else ((Path(p).name, p) for p in logs)
    for name, log_src in items:
        log_rel = _rel(name, what="log name")
        dest = f"{LOGS_DIR}/{log_rel.as_posix()}"
        if dest in copied:
            raise BundleError(f"two logs would be written to {dest}; give them distinct names")
        _copy_file(Path(log_src), out / dest, what="log")
        copied.add(dest)


@dataclass(frozen=True)
class FinishedRun:
    """The typed record of a finished (or cut short) ``fasttrack validate`` run, as the bundle needs it."""

    run_dir: Path
    """The run folder: its ``artifacts/`` and ``logs/`` go into the bundle."""
    results: Sequence[CheckResult]
    scope: ScopeInfo
    plan: PlanInfo
    provenance: Provenance
    pr: PRLink | None = None
    rehearsal: bool = False
    rehearsal_reason: str | None = None
    logs: Mapping[str, Path] = field(default_factory=dict)
    """Extra log files by name (e.g. the run summary)."""
    expected_checks: Sequence[str] = ()
    """The run's registered checks: each must have a result (else it is recorded ``not_run``)."""


@dataclass(frozen=True)
class WrittenBundle:
    """A run's bundle on disk, and its one verification."""

    directory: Path
    tarball: Path
    manifest: Manifest
    verification: VerifyResult
    """The tarball verified against the signing keys' public halves (and the PR head, when given)."""


def write_run_bundle(
    run: FinishedRun,
    *,
    sign_keys: Sequence[SigningKey] = (),
    pr_head: str | None = None,
    log: Callable[[str], None] = print,
) -> WrittenBundle:
    """Write ``<run>/bundle/`` and ``<run>/bundle.tar.gz`` (signed with ``sign_keys``) and verify the tarball.

    A signed bundle that does not verify right after it was written (its PR link aside: a link that is
    unproven or a mismatch is said in the log and in the bundle) is a bug and raises
    :class:`~fasttrack.bundle.errors.BundleError`."""
    from fasttrack.bundle.pack import pack_bundle
    from fasttrack.bundle.verify import verify_bundle

    out = run.run_dir / BUNDLE_DIR
    manifest = write_bundle(
        out,
        **attrs(
            run, "results", "scope", "plan", "provenance", "pr", "rehearsal", "rehearsal_reason", "expected_checks"
        ),
        artifacts_from=run.run_dir,
        logs=dict(run.logs),
        sign_keys=sign_keys,
        overwrite=True,
    )
    tarball = pack_bundle(out, run.run_dir / BUNDLE_TARBALL)
    verification = verify_bundle(tarball, keys=[k.public for k in sign_keys], pr_head=pr_head)
    if sign_keys:
        # the PR link may be unproven (a build that reports no commit) or a mismatch (the verdict then fails):
        # the bundle says so; every other property must verify
        failures = [it for it in verification.failures if it.name != "pr_head"]
        if failures:
            bad = "; ".join(f"{it.name}: {it.detail}" for it in failures)
            raise BundleError(f"the bundle just written does not verify ({bad}); this is a bug in fasttrack")
        if not verification.verified:
            log(f"bundle: the PR link is {verification.pr_link}: {verification.pr_link_detail}")
        log(f"bundle: {tarball} (verdict {manifest.verdict}, signed by {', '.join(k.keyid[:16] for k in sign_keys)})")
    else:
        hint = f"sign it with `fasttrack sign {tarball} --key KEY`"
        log(f"bundle: {tarball} (verdict {manifest.verdict}, unsigned: {hint})")
    return WrittenBundle(directory=out, tarball=tarball, manifest=manifest, verification=verification)
