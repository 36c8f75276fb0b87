"""Verify a bundle (directory or ``.tar.gz``) in one streaming pass over its bytes.

Each property is one named item of the result:

- ``archive``: the tarball is safe to read (only for ``.tar.gz``; see :mod:`safe_tar`).
- ``attestation``: ``attestation.dsse.json`` is a DSSE envelope holding an in-toto
  Statement v1 with the fasttrack predicate.
- ``signature``: at least ``min_signatures`` distinct trusted keys made a signature that
  verifies (copies of one signature under other key ids count once), and no signature
  claiming a trusted key's id is invalid.
- ``hashes``: every subject's sha256 equals the file's.
- ``files``: no subject is missing and no file is outside the subjects.
- ``schema``: ``manifest.json`` validates against the JSON Schema and the models.
- ``predicate``: the signed summary equals the one derived from the manifest.
- ``verdicts``: the bundle verdict follows from the check entries, no check fails without a
  reason, every check the judging scope's tier requires has an entry and is recorded required, no
  check is recorded ``pass`` above what its re-judged rows allow, and the bundle verdict recomputed
  with the judging scope is the recorded one (:mod:`rejudge`).
- ``rows``: every row's verdict, recomputed from its own figures and the judging scope's gate,
  is the recorded one, and every config point of the plan has its rows (each finding names the row).
  The judging scope is the trusted one (``--trusted-scope``), else the bundle's own (``judged_by``
  says which).
- ``tables``: every check table exists where recorded, with the recorded rows and columns, and
  decodes through its row model within the plan's row bound and the decoding limits
  (:mod:`rowread`); no table or listed artifact is missing; no stray table.
- ``hardware``: the recorded hardware is the judging scope's, or the bundle is a rehearsal.
- ``pr_head``: the tested head commit equals ``--pr-head`` and the link to it is proven: the
  isolation row judged exactly the recorded base..head, and every engine served that commit (skipped
  when not given). ``pr_link`` says, also without ``--pr-head``, whether the bundle is PR evidence.
- ``scope``: the scope the bundle recorded asks for at least what the trusted scope asks for
  (``--trusted-scope``: the repository's, at the PR base): every loosening is named
  (:mod:`fasttrack.scope.compare`; skipped when not given).
- ``tier``: the bundle ran at least ``--min-tier`` (skipped when not given).

The pass is :mod:`scan`, the envelope and signatures :mod:`dsse`, the rules behind
``schema``, ``predicate``, ``verdicts``, ``tables`` and ``pr_head`` :mod:`consistency`, and the
re-judging :mod:`rejudge` (the same rules signing checks first, by the bundle's own scope).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fasttrack.bundle.consistency import (
    pr_head_problem,
    pr_link_state,
    predicate_problems,
    schema_problems,
    table_problems,
    verdict_problems,
)
from fasttrack.bundle.dsse import Envelope, check_signatures, read_envelope
from fasttrack.bundle.errors import BundleError
from fasttrack.bundle.keys import PublicKey, resolve_keys
from fasttrack.bundle.layout import ATTESTATION, MANIFEST
from fasttrack.bundle.manifest import Manifest
from fasttrack.bundle.safe_tar import DEFAULT_LIMITS, Limits
from fasttrack.bundle.scan import Contents, bundle_id, scan_dir, scan_tar, tree_sha256
from fasttrack.bundle.trust import identity_names, signer_identities
from fasttrack.limits import MANIFEST_MAX_BYTES
from fasttrack.modelbase import DocModel

#: ``resolve_keys`` lives in :mod:`keys`; it is named here too because callers found it here.
__all__ = ["ITEMS", "VerifyItem", "VerifyResult", "resolve_keys", "verify_bundle"]

ITEMS: tuple[str, ...] = (
    "archive",
    "attestation",
    "signature",
    "hashes",
    "files",
    "schema",
    "predicate",
    "verdicts",
    "rows",
    "tables",
    "hardware",
    "pr_head",
    "scope",
    "tier",
)


class VerifyItem(DocModel):
    """One verified property."""

    name: str
    """The property (see ``ITEMS``)."""
    ok: bool | None
    """True: holds; False: fails; None: not applicable (e.g. no --pr-head given)."""
    detail: str
    """What was found, naming every offending file, key or check."""


class VerifyResult(DocModel):
    """The outcome of verifying one bundle."""

    bundle: str
    """The path that was verified."""
    verified: bool
    """True only when every item holds."""
    verdict: str | None
    """The manifest's verdict (None when the manifest is unreadable); a rehearsal's is ``rehearsal``
    (also for older bundles that recorded ``pass`` with the rehearsal flag)."""
    rehearsal: bool = False
    """Whether the manifest says the run was a rehearsal on hardware the scope does not declare."""
    signers: list[str]
    """Key ids of the distinct trusted keys whose signatures verified (the keys' own ids, not
    the ids the signatures claim)."""
    signatures: list[dict[str, Any]]
    """Every signature on the envelope: keyid (as the envelope claims it: not signed, so only a hint; displays
    name a signature by ``key``, the id of the trusted key that verified it), status (valid/invalid/untrusted),
    key, signer, identity, duplicate, claims_trusted_key."""
    identities: list[str] = []
    """Who signed: the identities of the trusted keys whose signatures verified (see
    :mod:`fasttrack.bundle.trust`)."""
    items: list[VerifyItem]
    """One entry per property, in ``ITEMS`` order."""
    bytes_hashed: int = 0
    """Bytes read and hashed."""
    pr_link: str | None = None
    """Whether the bundle is evidence for a PR: ``none`` (no PR link: not PR evidence), ``proven``,
    ``unproven`` or ``mismatch`` (see :func:`fasttrack.bundle.consistency.pr_link_state`); None when the
    manifest is unreadable."""
    pr_link_detail: str = ""
    """Why, in one sentence."""
    bundle_id: str | None = None
    """The bundle's ID, derived from its content (:func:`fasttrack.bundle.scan.bundle_id`: every file but the
    attestation): the same for the directory and its tarball, before and after signing. None when no file
    could be read (a refused archive)."""
    tier: str | None = None
    """The tier the bundle ran (None when the manifest is unreadable)."""
    shard: str | None = None
    """The part of the tier the bundle covers, ``i/n`` (``1/1``: the whole tier; None when unreadable)."""
    trusted_scope: str | None = None
    """The trusted scope the recorded one was held against (``--trusted-scope``), when given."""
    scope_loosenings: list[str] = []
    """Every way the recorded scope asks for less (or other) evidence than the trusted one, one line each."""
    scope_tightenings: list[str] = []
    """Every way it asks for more."""
    judged_by: str | None = None
    """The scope every row and verdict was re-judged by: the trusted scope, or the bundle's own recorded one
    (said so) when no --trusted-scope was given; None when the bundle could not be re-judged."""
    rejudged_verdict: str | None = None
    """The bundle verdict recomputed from the re-judged checks with the judging scope's requiredness (None when
    the bundle could not be re-judged). ``verify --require-pass`` asks for ``pass`` here and in ``verdict``."""
    legacy_tables: list[str] = []
    """Tables read by the legacy path: a bundle written before typed rows records no row model for them."""
    content_sha256: str | None = None
    """For a directory of regular files: its content id (sha256 over ``relpath NUL sha256`` lines of the
    files this pass read and hashed, sorted), so a caller can name the bundle by the very bytes that were
    verified; None for a tarball or a directory holding anything but regular files."""

    def item(self, name: str) -> VerifyItem:
        for it in self.items:
            if it.name == name:
                return it
        raise KeyError(name)

    @property
    def failures(self) -> list[VerifyItem]:
        return [it for it in self.items if it.ok is False]


_NA = VerifyItem(name="", ok=None, detail="")


def _tier_below(tier: str, min_tier: str) -> bool:
    from fasttrack.scope.compare import tier_below

    return tier_below(tier, min_tier)


#: Loosenings named in the ``scope`` item's detail (the result lists every one).
SCOPE_LINES_SHOWN = 12


@dataclass
class ScopeCheck:
    """The ``scope`` item, and the trusted scope the bundle is then judged by."""

    ok: bool | None
    detail: str
    source: str | None = None
    loosenings: list[str] = field(default_factory=list)
    tightenings: list[str] = field(default_factory=list)
    trusted: tuple[Any, str, dict[str, Any]] | None = None
    """(Scope, 'the trusted scope PATH', its gate sections of checks this process does not know)."""


def _against_trusted_scope(manifest: Manifest, spec: str) -> ScopeCheck:
    """The recorded scope held against the trusted one. A trusted scope that cannot be found or read raises
    ScopeError (an input error); a recorded one that cannot be read fails the item (the bundle is still judged by
    the trusted scope)."""
    from fasttrack.errors import ScopeError
    from fasttrack.scope.compare import compare_scopes, parse_for_comparison, read_trusted_scope, trusted_scope_file

    try:
        recorded, rx = parse_for_comparison(manifest.scope.yaml, source="the bundle's recorded scope")
        name, unreadable = recorded.name, None
    except ScopeError as exc:
        recorded, rx, name, unreadable = None, {}, manifest.scope.model, exc.message
    path = trusted_scope_file(spec, name)
    trusted, tx = parse_for_comparison(read_trusted_scope(path), source=str(path))
    judged_by = (trusted, f"the trusted scope {path}", tx)
    if recorded is None:
        detail = f"the bundle's recorded scope cannot be read, so it cannot be compared: {unreadable}"
        return ScopeCheck(False, detail, str(path), trusted=judged_by)
    cmp = compare_scopes(
        trusted,
        recorded,
        trusted_source=str(path),
        known_checks=list(manifest.checks),
        trusted_extra_gates=tx,
        recorded_extra_gates=rx,
    )
    loose = [c.line() for c in cmp.loosenings]
    tight = [c.line() for c in cmp.tightenings]
    out = ScopeCheck(True, "", str(path), loose, tight, judged_by)
    if loose:
        shown = "; ".join(loose[:SCOPE_LINES_SHOWN]) + (
            f"; and {len(loose) - SCOPE_LINES_SHOWN} more" if len(loose) > SCOPE_LINES_SHOWN else ""
        )
        out.ok, out.detail = (
            False,
            f"the recorded scope loosens the trusted scope {path} in {len(loose)} way(s): {shown}",
        )
    elif tight:
        out.detail = f"the recorded scope asks for more than the trusted scope {path} ({len(tight)} way(s))"
    else:
        out.detail = f"the recorded scope asks for what the trusted scope {path} asks for"
    return out


def signatures_in_words(sigs: Sequence[dict[str, Any]], trusted_ids: set[str]) -> str:
    """The signatures of an envelope, in words that quote only trusted keys' own ids.

    A signature's ``keyid`` is not signed (DSSE signs the payload only), so anyone can
    edit it. A valid signature is named by the trusted key that verified it; an invalid
    one by its key id only when that id is a trusted key's (it claimed that key); every
    other entry is counted, never quoted."""
    parts: list[str] = []
    for s in sigs:
        if s["status"] == "valid":
            parts.append(
                f"key {s['key'][:16]} valid"
                + (f" by {s['identity']}" if s.get("identity") else "")
                + (f" ({s['signer']})" if s["signer"] else "")
                + (" [a copy of a signature already counted]" if s.get("duplicate") else "")
            )
        elif s["status"] == "invalid" and s["keyid"] in trusted_ids:
            parts.append(f"key {s['keyid'][:16]} invalid (a trusted key's id, and the signature does not verify)")
    invalid_other = sum(1 for s in sigs if s["status"] == "invalid" and s["keyid"] not in trusted_ids)
    untrusted = sum(1 for s in sigs if s["status"] == "untrusted")
    if invalid_other:
        parts.append(f"{invalid_other} signature(s) that are not base64")
    if untrusted:
        parts.append(f"{untrusted} signature(s) made by no trusted key")
    return "; ".join(parts)


def verify_bundle(
    path: str | os.PathLike[str],
    *,
    keys: Sequence[str | os.PathLike[str] | PublicKey] = (),
    trust_dir: str | os.PathLike[str] | None = None,
    pr_head: str | None = None,
    min_signatures: int = 1,
    limits: Limits = DEFAULT_LIMITS,
    trusted_scope: str | os.PathLike[str] | None = None,
    min_tier: str | None = None,
) -> VerifyResult:
    """Verify a bundle directory or tarball; see the module docstring for the items.

    ``trusted_scope``: a scope file, a folder of scopes (``NAME.yaml`` or ``NAME/scope.yaml``) or a shipped
    suite's name, to hold the recorded scope against; ``min_tier``: the lowest tier accepted.

    Key files that cannot be read raise :class:`~fasttrack.bundle.errors.KeyFileError`, and a trusted scope that
    cannot be found or read a :class:`~fasttrack.errors.ScopeError`; everything wrong with the bundle itself is
    reported in the result.
    """
    trusted = resolve_keys(keys, trust_dir)
    v = _Verification(Path(path), trusted, identity_names(trusted, trust_dir))
    if not v.read(limits):  # archive (a refused tarball: nothing else is read)
        return v.result()
    v.check_schema()  # first: the later items read the manifest
    v.check_attestation()
    v.check_signature(min_signatures)
    v.check_subjects()  # hashes, files
    if v.manifest is not None:
        v.check_recorded(v.manifest)  # predicate
        v.check_pr_head(v.manifest, pr_head)
        v.check_scope(v.manifest, trusted_scope)
        v.check_rejudged(v.manifest)  # verdicts, rows, tables, hardware: by the trusted scope, else the recorded
        v.check_tier(v.manifest, min_tier)
    else:  # only the options not given hold: the others were not checked
        if pr_head is None:
            v.put("pr_head", None, "no --pr-head given")
        if trusted_scope is None:
            v.put("scope", None, "no --trusted-scope given")
        if min_tier is None:
            v.put("tier", None, "no --min-tier given")
    return v.result()


class _Verification:
    """One bundle being verified: the items found so far, and what later items need from earlier ones (the
    files read, the manifest, the envelope and its statement, the signatures)."""

    def __init__(self, path: Path, trusted: list[PublicKey], names: dict[str, str]) -> None:
        self.path = path
        self.trusted = trusted
        self.names = names
        self.items: dict[str, VerifyItem] = {}
        self.contents = Contents()
        self.manifest: Manifest | None = None
        self.env: Envelope | None = None
        self.statement: dict[str, Any] | None = None
        self.sigs: list[dict[str, Any]] = []
        self.scope_check = ScopeCheck(None, "")
        self.verdict_problems: list[str] = []
        self.table_problems: list[str] = []
        self.rejudged: Any = None

    def put(self, name: str, ok: bool | None, detail: str) -> None:
        self.items[name] = VerifyItem(name=name, ok=ok, detail=detail)

    def read(self, limits: Limits) -> bool:
        """Read and hash every file (the ``archive`` item); False when the tarball is refused."""
        p, contents = self.path, self.contents
        if p.is_dir() and not (p / MANIFEST).exists():
            for inner in ("bundle.tar.gz", "bundle"):
                if (p / inner / MANIFEST).exists() or (p / inner).is_file():
                    raise BundleError(f"{p} is a run folder, not a bundle; verify {p / inner} instead")
        if p.is_dir():
            self.put("archive", None, "a directory, not a tarball")
            scan_dir(p, contents)
        elif p.is_file():
            try:
                scan_tar(p, contents, limits)
            except BundleError as exc:
                self.put("archive", False, exc.message)
                return False
            self.put("archive", True, f"{len(contents.digests)} files, every member a safe regular file within limits")
        else:
            raise BundleError(f"{p} does not exist")
        return True

    def check_schema(self) -> None:
        contents = self.contents
        if MANIFEST in contents.kept:
            self.manifest, sp = schema_problems(contents.kept[MANIFEST])
            version = self.manifest.schema_version if self.manifest else ""
            self.put("schema", not sp, "; ".join(sp) if sp else f"valid {version}")
        elif MANIFEST in contents.digests:
            size = contents.sizes[MANIFEST]
            self.put("schema", False, f"{MANIFEST} is {size} bytes, over the limit of {MANIFEST_MAX_BYTES}")
        else:
            self.put("schema", False, f"{MANIFEST} is missing")

    def check_attestation(self) -> None:
        contents = self.contents
        if ATTESTATION in contents.digests and ATTESTATION not in contents.kept:
            size = contents.sizes[ATTESTATION]
            self.put("attestation", False, f"{ATTESTATION} is {size} bytes, over the limit of {MANIFEST_MAX_BYTES}")
        elif ATTESTATION not in contents.kept:
            self.put("attestation", False, f"{ATTESTATION} is missing")
        else:
            try:
                self.env = read_envelope(contents.kept[ATTESTATION])
                self.statement = self.env.statement()
                self.put("attestation", True, f"in-toto Statement v1 over {len(self.statement['subject'])} files")
            except BundleError as exc:
                self.put("attestation", False, exc.message)
                self.env = None

    def check_signature(self, min_signatures: int) -> None:
        env, trusted = self.env, self.trusted
        if env is None:
            return
        if not trusted:
            self.put("signature", False, "no trusted key given; pass --key PUB or --trust DIR")
            return
        if not env.signatures:
            self.put("signature", False, "the attestation is not signed")
            return
        sigs = self.sigs = check_signatures(env, trusted)
        trusted_ids = {k.keyid for k in trusted}
        for s, who in zip(sigs, signer_identities(env, sigs, trusted, self.names), strict=True):
            s["identity"] = who
            # whether the (unsigned, editable) key id names a trusted key: only then is it ever shown
            s["claims_trusted_key"] = s["keyid"] in trusted_ids
        signer_keys = {s["key"] for s in sigs if s["status"] == "valid"}
        desc = signatures_in_words(sigs, trusted_ids)
        if any(s["status"] == "invalid" for s in sigs):
            self.put("signature", False, f"a signature with a trusted key id does not verify: {desc}")
        elif len(signer_keys) < min_signatures:
            n = len(signer_keys)
            self.put("signature", False, f"{n} distinct trusted key(s) signed, {min_signatures} required: {desc}")
        else:
            self.put("signature", True, desc)

    def check_subjects(self) -> None:
        """The ``hashes`` and ``files`` items: the statement's subjects against the files read."""
        if self.statement is None:
            return
        digests = self.contents.digests
        subjects: dict[str, str] = {}
        dupes = []
        for s in self.statement["subject"]:
            if s["name"] in subjects:
                dupes.append(s["name"])
            subjects[s["name"]] = s["digest"]["sha256"].lower()
        mismatched = sorted(n for n, d in subjects.items() if n in digests and digests[n] != d)
        self.put(
            "hashes",
            not mismatched,
            f"sha256 differs for: {', '.join(mismatched)}" if mismatched else f"{len(subjects)} sha256 digests match",
        )
        missing = sorted(n for n in subjects if n not in digests)
        extra = sorted(n for n in digests if n not in subjects and n != ATTESTATION)
        fp = list(self.contents.problems)
        if ATTESTATION in subjects:
            fp.append(f"{ATTESTATION} must not be a subject of itself")
        if dupes:
            fp.append(f"subjects listed twice: {', '.join(sorted(set(dupes)))}")
        if missing:
            fp.append(f"missing: {', '.join(missing)}")
        if extra:
            fp.append(f"not attested (extra): {', '.join(extra)}")
        self.put("files", not fp, "; ".join(fp) if fp else "every file attested, none missing")

    def check_recorded(self, manifest: Manifest) -> None:
        """The ``predicate`` item, and the manifest's own consistency (verdict from the entries, tables as
        recorded), which :meth:`check_rejudged` completes into the ``verdicts`` and ``tables`` items."""
        if self.statement is not None:
            diff = predicate_problems(manifest, self.statement["predicate"])
            self.put(
                "predicate",
                not diff,
                f"signed summary differs from the manifest in: {', '.join(diff)}"
                if diff
                else "signed summary matches the manifest",
            )
        self.verdict_problems = verdict_problems(manifest)
        self.table_problems = table_problems(manifest, self.contents)

    def check_rejudged(self, manifest: Manifest) -> None:
        """The ``verdicts``, ``rows``, ``tables`` and ``hardware`` items: every table through its row model, every
        verdict recomputed by the judging scope (:mod:`fasttrack.bundle.rejudge`)."""
        from fasttrack.bundle.rejudge import judging_context, rejudge_bundle

        vp, tp = self.verdict_problems, self.table_problems
        ntables = sum(len(e.tables) for e in manifest.checks.values())
        try:
            rj = rejudge_bundle(manifest, self.contents, judging_context(manifest, self.scope_check.trusted))
        except BundleError as exc:
            self.put("verdicts", False, "; ".join([*vp, exc.message]))
            self.put("rows", False, f"not re-judged: {exc.message}")
            self.put("tables", not tp, "; ".join(tp) if tp else f"{ntables} tables as recorded")
            self.put("hardware", False, f"not checked: {exc.message}")
            return
        self.rejudged = rj
        vp, tp = vp + rj.verdicts, tp + rj.tables
        per_check = ", ".join(f"{n}={e.verdict.value}" for n, e in manifest.checks.items())
        self.put(
            "verdicts",
            not vp,
            "; ".join(vp) if vp else f"{manifest.verdict} follows from {per_check}, re-judged by {rj.source}",
        )
        legacy = (
            f"; {len(rj.legacy_tables)} table(s) of an older bundle read by the legacy path" if rj.legacy_tables else ""
        )
        self.put(
            "rows",
            not rj.rows and not rj.tables,
            "; ".join(rj.rows[:20]) + (f"; and {len(rj.rows) - 20} more" if len(rj.rows) > 20 else "")
            if rj.rows
            else "not every table could be read, so not every row was re-judged (see tables)"
            if rj.tables
            else f"{rj.rows_read} row(s) re-judged by {rj.source}{legacy}",
        )
        self.put("tables", not tp, "; ".join(tp) if tp else f"{ntables} tables as recorded, every row fits its model")
        self.put("hardware", *rj.hardware)

    def check_pr_head(self, manifest: Manifest, pr_head: str | None) -> None:
        if pr_head is None:
            self.put("pr_head", None, "no --pr-head given")
        else:
            self.put("pr_head", *pr_head_problem(manifest, pr_head))

    def check_scope(self, manifest: Manifest, trusted_scope: str | os.PathLike[str] | None) -> None:
        if trusted_scope is None:
            self.put("scope", None, "no --trusted-scope given: the bundle is checked against the scope it recorded")
        else:
            self.scope_check = _against_trusted_scope(manifest, str(trusted_scope))
            self.put("scope", self.scope_check.ok, self.scope_check.detail)

    def check_tier(self, manifest: Manifest, min_tier: str | None) -> None:
        tier = manifest.scope.tier
        if min_tier is None:
            self.put("tier", None, "no --min-tier given")
        elif _tier_below(tier, min_tier):
            self.put("tier", False, f"the bundle ran the {tier} tier, below the required {min_tier} tier")
        else:
            self.put("tier", True, f"the bundle ran the {tier} tier (at least {min_tier})")

    def result(self) -> VerifyResult:
        """The result: every item not set is ``not checked`` (an earlier step failed)."""
        for name in ITEMS:
            if name not in self.items:
                self.put(name, False, "not checked: an earlier step failed")
        ordered = [self.items[n] for n in ITEMS]
        manifest, sigs, contents = self.manifest, self.sigs, self.contents
        link, link_detail = pr_link_state(manifest) if manifest else (None, "")
        return VerifyResult(
            tier=manifest.scope.tier if manifest else None,
            shard=manifest.plan.shard if manifest else None,
            trusted_scope=self.scope_check.source,
            scope_loosenings=self.scope_check.loosenings,
            scope_tightenings=self.scope_check.tightenings,
            judged_by=self.rejudged.source if self.rejudged else None,
            rejudged_verdict=self.rejudged.verdict if self.rejudged else None,
            legacy_tables=self.rejudged.legacy_tables if self.rejudged else [],
            pr_link=link,
            pr_link_detail=link_detail,
            bundle=str(self.path),
            verified=all(it.ok is not False for it in ordered),
            verdict=manifest.effective_verdict if manifest else None,
            rehearsal=bool(manifest and manifest.rehearsal),
            signers=sorted({s["key"] for s in sigs if s["status"] == "valid"}),
            signatures=sigs,
            identities=sorted({s["identity"] for s in sigs if s["status"] == "valid" and s.get("identity")}),
            items=ordered,
            bytes_hashed=contents.total,
            bundle_id=bundle_id(contents.digests)
            if contents.digests and self.items.get("archive", _NA).ok is not False
            else None,
            content_sha256=tree_sha256(contents.digests) if self.path.is_dir() and not contents.problems else None,
        )
