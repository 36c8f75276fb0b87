"""Verify a bundle (directory or ``.tar.gz``) in one streaming pass over its bytes.

Each property is one named item of the result:

- ``archive``: the tarball is safe to read (only for ``.tar.gz``; see :mod:`safe_tar`).
- ``attestation``: ``attestation.dsse.json`` is a DSSE envelope holding an in-toto
  Statement v1 with the fasttrack predicate.
- ``signature``: at least ``min_signatures`` signatures verify against trusted keys, and
  no signature claiming a trusted key's id is invalid.
- ``hashes``: every subject's sha256 equals the file's.
- ``files``: no subject is missing and no file is outside the subjects.
- ``schema``: ``manifest.json`` validates against the JSON Schema and the models.
- ``predicate``: the signed summary equals the one derived from the manifest.
- ``verdicts``: the bundle verdict recomputed from the check entries equals the
  recorded one, and no check fails without a reason.
- ``tables``: every check table exists where recorded, with the recorded rows and
  columns; no table or listed artifact is missing; no stray table.
- ``pr_head``: the tested head commit equals ``--pr-head`` (skipped when not given).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from fasttrack.bundle.attest import Envelope, check_signatures, predicate_of, read_envelope
from fasttrack.bundle.canonical import HASH_BUFFER, sha256_stream
from fasttrack.bundle.errors import BundleError
from fasttrack.bundle.keys import PublicKey, load_public_keys, load_trust_dir
from fasttrack.bundle.layout import ATTESTATION, MANIFEST, RESULTS_DIR, table_path
from fasttrack.bundle.manifest import Manifest, json_schema, load_manifest, recompute_verdict
from fasttrack.bundle.safe_tar import DEFAULT_LIMITS, Limits, iter_members
from fasttrack.bundle.tables import parquet_num_rows
from fasttrack.results import Verdict

ITEMS: tuple[str, ...] = (
    "archive",
    "attestation",
    "signature",
    "hashes",
    "files",
    "schema",
    "predicate",
    "verdicts",
    "tables",
    "pr_head",
)

#: Files kept in memory during the pass (everything else is only hashed).
_KEEP_SUFFIXES = (".parquet",)
_KEEP_LIMIT = 512 * 1024 * 1024


class VerifyItem(BaseModel):
    """One verified property."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    name: str
    """The property (see ``ITEMS``)."""
    ok: bool | None
    """True: holds; False: fails; None: not applicable (e.g. no --pr-head given)."""
    detail: str
    """What was found, naming every offending file, key or check."""


class VerifyResult(BaseModel):
    """The outcome of verifying one bundle."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    bundle: str
    """The path that was verified."""
    verified: bool
    """True only when every item holds."""
    verdict: str | None
    """The manifest's verdict (None when the manifest is unreadable)."""
    signers: list[str]
    """Key ids of the trusted keys whose signatures verified."""
    signatures: list[dict[str, Any]]
    """Every signature on the envelope: keyid, status (valid/invalid/untrusted), signer."""
    items: list[VerifyItem]
    """One entry per property, in ``ITEMS`` order."""
    bytes_hashed: int = 0
    """Bytes read and hashed."""

    def item(self, name: str) -> VerifyItem:
        for it in self.items:
            if it.name == name:
                return it
        raise KeyError(name)

    @property
    def failures(self) -> list[VerifyItem]:
        return [it for it in self.items if it.ok is False]


class _Contents:
    """What one pass over the bundle found."""

    def __init__(self) -> None:
        self.digests: dict[str, str] = {}
        self.sizes: dict[str, int] = {}
        self.kept: dict[str, bytes] = {}
        self.problems: list[str] = []
        self.total = 0


def _keep(name: str) -> bool:
    return name in (MANIFEST, ATTESTATION) or (name.startswith(RESULTS_DIR + "/") and name.endswith(_KEEP_SUFFIXES))


def _scan_dir(root: Path, contents: _Contents, *, hash_all: bool = True) -> None:
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
                    if _keep(rel) and entry.stat().st_size <= _KEEP_LIMIT:
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


def _scan_tar(path: Path, contents: _Contents, limits: Limits) -> None:
    buf = bytearray(HASH_BUFFER)
    for m in iter_members(path, limits=limits):
        if m.is_dir:
            continue
        assert m.stream is not None
        if _keep(m.name) and m.size <= _KEEP_LIMIT:
            data = m.stream.read()
            digest, size = hashlib.sha256(data).hexdigest(), len(data)
            contents.kept[m.name] = data
        else:
            digest, size = sha256_stream(m.stream, buffer=buf)
        contents.digests[m.name] = digest
        contents.sizes[m.name] = size
        contents.total += size


@functools.lru_cache(maxsize=1)
def _schema_validator() -> Any:
    import jsonschema

    schema = json_schema()
    cls = jsonschema.validators.validator_for(schema)
    return cls(schema)


def _schema_problems(data: bytes) -> tuple[Manifest | None, list[str]]:
    try:
        obj = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        return None, [f"{MANIFEST} is not valid JSON: {exc}"]
    errors = sorted(_schema_validator().iter_errors(obj), key=lambda e: list(map(str, e.absolute_path)))
    problems = [f"{'/'.join(map(str, e.absolute_path)) or '(root)'}: {e.message[:300]}" for e in errors[:10]]
    if problems:
        return None, problems
    try:
        return load_manifest(obj), []
    except BundleError as exc:
        return None, [exc.message]


def _verdict_problems(manifest: Manifest, contents: _Contents) -> tuple[list[str], list[str]]:
    """Problems and notes from recomputing verdicts."""
    problems, notes = [], []
    recomputed = recompute_verdict(manifest.checks)
    if recomputed != manifest.verdict:
        required = [f"{n}={e.verdict.value}" for n, e in manifest.checks.items() if e.required]
        problems.append(
            f"manifest verdict is {manifest.verdict!r} but the check entries give {recomputed!r} "
            f"(required checks: {', '.join(required) or 'none'})"
        )
    for name, e in manifest.checks.items():
        if e.verdict is Verdict.FAIL and not e.reason.strip():
            problems.append(f"check {name!r} failed without a reason")
    return problems, notes


def _table_problems(manifest: Manifest, contents: _Contents) -> list[str]:
    problems = []
    recorded = set()
    for check, entry in manifest.checks.items():
        for tname, ref in entry.tables.items():
            expected = table_path(check, tname)
            recorded.add(ref.path)
            if ref.path != expected:
                problems.append(f"table {check}/{tname} is recorded at {ref.path}, expected {expected}")
                continue
            data = contents.kept.get(ref.path)
            if data is None:
                if ref.path not in contents.digests:
                    problems.append(f"table {ref.path} is missing")
                else:
                    problems.append(f"table {ref.path} is too large to check ({contents.sizes[ref.path]} bytes)")
                continue
            try:
                rows, cols = parquet_num_rows(data)
            except BundleError as exc:
                problems.append(f"table {ref.path}: {exc.message}")
                continue
            if rows != ref.rows:
                problems.append(f"table {ref.path} has {rows} rows, the manifest says {ref.rows}")
            if ref.columns and cols != ref.columns:
                problems.append(f"table {ref.path} has columns {cols}, the manifest says {ref.columns}")
        for a in entry.artifacts:
            if a not in contents.digests and not any(n.startswith(a.rstrip("/") + "/") for n in contents.digests):
                problems.append(f"artifact {a} of check {check!r} is missing")
    for name in contents.digests:
        if name.startswith(RESULTS_DIR + "/") and name not in recorded:
            problems.append(f"{name} is not a table of any check entry")
    return problems


def _pr_problem(manifest: Manifest, pr_head: str) -> tuple[bool, str]:
    want = pr_head.strip().lower()
    if len(want) < 7 or any(c not in "0123456789abcdef" for c in want):
        return False, f"--pr-head {pr_head!r} is not a commit SHA (at least 7 hex digits)"
    if manifest.pr is None:
        return False, f"the bundle records no PR, expected head {want}"
    have = manifest.pr.head_sha.lower()
    if have.startswith(want) or want.startswith(have):
        return True, f"tested head {have} matches {want}"
    return False, f"the bundle tested head {have}, expected {want}"


def resolve_keys(
    keys: Iterable[str | os.PathLike[str] | PublicKey] = (), trust_dir: str | os.PathLike[str] | None = None
) -> list[PublicKey]:
    """Public keys from key files, already-loaded keys and/or a trust directory."""
    out: list[PublicKey] = []
    for k in keys:
        out.extend([k] if isinstance(k, PublicKey) else load_public_keys(k))
    if trust_dir is not None:
        out.extend(load_trust_dir(trust_dir))
    return out


def verify_bundle(
    path: str | os.PathLike[str],
    *,
    keys: Sequence[str | os.PathLike[str] | PublicKey] = (),
    trust_dir: str | os.PathLike[str] | None = None,
    pr_head: str | None = None,
    min_signatures: int = 1,
    limits: Limits = DEFAULT_LIMITS,
) -> VerifyResult:
    """Verify a bundle directory or tarball; see the module docstring for the items.

    Key files that cannot be read raise :class:`~fasttrack.bundle.errors.KeyFileError`;
    everything wrong with the bundle itself is reported in the result.
    """
    p = Path(path)
    trusted = resolve_keys(keys, trust_dir)
    items: dict[str, VerifyItem] = {}

    def put(name: str, ok: bool | None, detail: str) -> None:
        items[name] = VerifyItem(name=name, ok=ok, detail=detail)

    def finish(manifest: Manifest | None, sigs: list[dict[str, Any]], total: int) -> VerifyResult:
        for name in ITEMS:
            if name not in items:
                put(name, False, "not checked: an earlier step failed")
        ordered = [items[n] for n in ITEMS]
        return VerifyResult(
            bundle=str(p),
            verified=all(it.ok is not False for it in ordered),
            verdict=manifest.verdict if manifest else None,
            signers=sorted({s["keyid"] for s in sigs if s["status"] == "valid"}),
            signatures=sigs,
            items=ordered,
            bytes_hashed=total,
        )

    contents = _Contents()
    if p.is_dir() and not (p / MANIFEST).exists():
        for inner in ("bundle.tar.gz", "bundle"):
            if (p / inner / MANIFEST).exists() or (p / inner).is_file():
                raise BundleError(f"{p} is a run folder, not a bundle; verify {p / inner} instead")
    if p.is_dir():
        put("archive", None, "a directory, not a tarball")
        _scan_dir(p, contents)
    elif p.is_file():
        try:
            _scan_tar(p, contents, limits)
        except BundleError as exc:
            put("archive", False, exc.message)
            return finish(None, [], contents.total)
        put("archive", True, f"{len(contents.digests)} files, every member a safe regular file within limits")
    else:
        raise BundleError(f"{p} does not exist")

    # manifest and schema first (other items need it)
    manifest: Manifest | None = None
    if MANIFEST in contents.kept:
        manifest, sp = _schema_problems(contents.kept[MANIFEST])
        put("schema", not sp, "; ".join(sp) if sp else f"valid {manifest.schema_version if manifest else ''}")
    else:
        put("schema", False, f"{MANIFEST} is missing")

    # attestation
    env: Envelope | None = None
    statement: dict[str, Any] | None = None
    if ATTESTATION not in contents.kept:
        put("attestation", False, f"{ATTESTATION} is missing")
    else:
        try:
            env = read_envelope(contents.kept[ATTESTATION])
            statement = env.statement()
            put("attestation", True, f"in-toto Statement v1 over {len(statement['subject'])} files")
        except BundleError as exc:
            put("attestation", False, exc.message)
            env = None

    # signatures
    sigs: list[dict[str, Any]] = []
    if env is not None:
        if not trusted:
            put("signature", False, "no trusted key given; pass --key PUB or --trust DIR")
        elif not env.signatures:
            put("signature", False, "the attestation is not signed")
        else:
            sigs = check_signatures(env, trusted)
            valid = [s for s in sigs if s["status"] == "valid"]
            invalid = [s for s in sigs if s["status"] == "invalid"]
            desc = "; ".join(
                f"{s['keyid'][:16]} {s['status']}" + (f" by {s['signer']}" if s["signer"] else "") for s in sigs
            )
            if invalid:
                put("signature", False, f"a signature with a trusted key id does not verify: {desc}")
            elif len(valid) < min_signatures:
                put(
                    "signature",
                    False,
                    f"{len(valid)} valid signature(s) from trusted keys, {min_signatures} required: {desc}",
                )
            else:
                put("signature", True, desc)

    # hashes and files
    if statement is not None:
        subjects: dict[str, str] = {}
        dupes = []
        for s in statement["subject"]:
            if s["name"] in subjects:
                dupes.append(s["name"])
            subjects[s["name"]] = s["digest"]["sha256"].lower()
        mismatched = sorted(n for n, d in subjects.items() if n in contents.digests and contents.digests[n] != d)
        put(
            "hashes",
            not mismatched,
            f"sha256 differs for: {', '.join(mismatched)}" if mismatched else f"{len(subjects)} sha256 digests match",
        )
        missing = sorted(n for n in subjects if n not in contents.digests)
        extra = sorted(n for n in contents.digests if n not in subjects and n != ATTESTATION)
        fp = list(contents.problems)
        if ATTESTATION in subjects:
            fp.append(f"{ATTESTATION} must not be a subject of itself")
        if dupes:
            fp.append(f"subjects listed twice: {', '.join(sorted(set(dupes)))}")
        if missing:
            fp.append(f"missing: {', '.join(missing)}")
        if extra:
            fp.append(f"not attested (extra): {', '.join(extra)}")
        put("files", not fp, "; ".join(fp) if fp else "every file attested, none missing")

    if manifest is not None:
        if statement is not None:
            want = predicate_of(manifest)
            got = statement["predicate"]
            diff = sorted(k for k in set(want) | set(got) if want.get(k) != got.get(k))
            put(
                "predicate",
                not diff,
                f"signed summary differs from the manifest in: {', '.join(diff)}"
                if diff
                else "signed summary matches the manifest",
            )
        vp, notes = _verdict_problems(manifest, contents)
        per_check = ", ".join(f"{n}={e.verdict.value}" for n, e in manifest.checks.items())
        put(
            "verdicts",
            not vp,
            "; ".join(vp)
            if vp
            else f"{manifest.verdict} follows from {per_check}" + (f" ({'; '.join(notes)})" if notes else ""),
        )
        tp = _table_problems(manifest, contents)
        ntables = sum(len(e.tables) for e in manifest.checks.values())
        put("tables", not tp, "; ".join(tp) if tp else f"{ntables} tables as recorded")
        if pr_head is None:
            put("pr_head", None, "no --pr-head given")
        else:
            ok, detail = _pr_problem(manifest, pr_head)
            put("pr_head", ok, detail)
    elif pr_head is None:
        put("pr_head", None, "no --pr-head given")

    return finish(manifest, sigs, contents.total)


def consistency_problems(root: Path) -> list[str]:
    """Problems that make a bundle directory unfit to sign (schema, verdicts, tables)."""
    contents = _Contents()
    _scan_dir(root, contents, hash_all=False)
    if contents.problems:
        return contents.problems
    if MANIFEST not in contents.kept:
        return [f"{MANIFEST} is missing"]
    manifest, problems = _schema_problems(contents.kept[MANIFEST])
    if manifest is None:
        return problems
    vp, _ = _verdict_problems(manifest, contents)
    return vp + _table_problems(manifest, contents)
