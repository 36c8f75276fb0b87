"""The consistency rules: what a bundle's files must say about each other.

Signing refuses a bundle that breaks them (:func:`consistency_problems`) and verifying
reports each one as an item. Every rule reads only what one pass over the bundle found
(:class:`~fasttrack.bundle.scan.Contents`) and the parsed manifest.

- schema: ``manifest.json`` validates against the JSON Schema and the models.
- predicate: the signed summary is derived from the manifest, nothing else.
- verdicts: the bundle verdict follows from the check entries and the rehearsal flag; no check
  fails without a reason. Whether the entries follow from the rows is re-judging's business
  (:mod:`fasttrack.bundle.rejudge`: every row through its model, every verdict recomputed).
- tables: every check table exists where recorded, with the recorded rows and columns; every
  listed artifact exists; no stray table.
- PR head: the tested head commit matches the one asked for, and the link is proven
  (:func:`pr_link_state`): an isolation row judged exactly the recorded base..head, and every
  engine reported serving that commit.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from fasttrack.bundle.errors import BundleError
from fasttrack.bundle.layout import MANIFEST, RESULTS_DIR, table_path
from fasttrack.bundle.manifest import Manifest, json_schema, load_manifest, recompute_verdict
from fasttrack.bundle.scan import Contents, scan_dir
from fasttrack.bundle.tables import parquet_num_rows
from fasttrack.limits import MANIFEST_MAX_BYTES, json_problem
from fasttrack.results import ISOLATION, NOT_PR_EVIDENCE, Verdict, head_binding


def predicate_of(manifest: Manifest) -> dict[str, Any]:
    """The summary a signature vouches for (derived from the manifest, nothing else)."""
    return {
        "schema_version": manifest.schema_version,
        "verdict": manifest.verdict,
        "checks": {name: e.verdict.value for name, e in manifest.checks.items()},
        "model": manifest.scope.model,
        "tier": manifest.scope.tier,
        "scope_sha256": manifest.scope.sha256,
        "plan_sha256": manifest.plan.sha256,
        "shard": manifest.plan.shard,
        "pr": None
        if manifest.pr is None
        else {"repository": manifest.pr.repository, "number": manifest.pr.number, "head_sha": manifest.pr.head_sha},
        "rehearsal": manifest.rehearsal,
        "created": manifest.created,
    }


def _inlined(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with every local ``$ref`` replaced by what it names (the manifest's models do not
    recurse), or ``schema`` itself when they do: the same rules, checked without a lookup per
    reference (about a quarter faster on a manifest)."""
    defs = schema.get("$defs", {})

    def inline(node: Any, depth: int) -> Any:
        if depth > 32:
            raise RecursionError
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/") and ref[8:] in defs:
                target = inline(defs[ref[8:]], depth + 1)
                rest = {k: inline(v, depth) for k, v in node.items() if k != "$ref"}
                return {"allOf": [target, rest]} if rest else target
            return {k: inline(v, depth) for k, v in node.items()}
        if isinstance(node, list):
            return [inline(x, depth) for x in node]
        return node

    try:
        return inline({k: v for k, v in schema.items() if k != "$defs"}, 0)
    except RecursionError:
        return schema


@functools.lru_cache(maxsize=1)
def _schema_validator() -> Any:
    import jsonschema

    schema = json_schema()
    cls = jsonschema.validators.validator_for(schema)
    return cls(_inlined(schema))


def schema_problems(data: bytes) -> tuple[Manifest | None, list[str]]:
    """The parsed manifest (None when it is unusable) and what is wrong with its bytes."""
    problem = json_problem(data, MANIFEST, max_bytes=MANIFEST_MAX_BYTES)
    if problem:
        return None, [problem]
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


def predicate_problems(manifest: Manifest, signed: dict[str, Any]) -> list[str]:
    """Keys where the signed summary differs from the one derived from the manifest."""
    want = predicate_of(manifest)
    return sorted(k for k in set(want) | set(signed) if want.get(k) != signed.get(k))


def verdict_problems(manifest: Manifest) -> list[str]:
    """The recorded bundle verdict must follow from the check entries; failures need a reason."""
    problems = []
    recomputed = recompute_verdict(manifest.checks, rehearsal=manifest.rehearsal)
    # an older bundle recorded ``pass`` for a passing rehearsal: it reads as ``rehearsal`` (still consistent)
    if recomputed != manifest.effective_verdict:
        required = [f"{n}={e.verdict.value}" for n, e in manifest.checks.items() if e.required]
        problems.append(
            f"manifest verdict is {manifest.verdict!r} but the check entries give {recomputed!r} "
            f"(required checks: {', '.join(required) or 'none'})"
        )
    for name, e in manifest.checks.items():
        if e.verdict is Verdict.FAIL and not e.reason.strip():
            problems.append(f"check {name!r} failed without a reason")
    return problems


def table_problems(manifest: Manifest, contents: Contents) -> list[str]:
    """Every recorded table where it belongs, with its rows and columns; artifacts present; no stray table."""
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


#: Hex digits of a full commit SHA (SHA-1, SHA-256 object format).
FULL_SHA_LENGTHS = (40, 64)


def tier_argument(value: str | None, option: str = "--min-tier") -> str | None:
    """A tier given on the command line, checked: smoke, standard or full (an input error, exit 2, otherwise)."""
    from fasttrack.scope.common import TIER_ORDER

    if value is not None and value not in TIER_ORDER:
        raise BundleError(f"{option} {value[:40]!r} is not a tier; use one of {', '.join(TIER_ORDER)}")
    return value


def pr_head_argument(value: str | None, option: str = "--pr-head") -> str | None:
    """A PR head given on the command line, checked: 7 to 64 hex digits (a commit SHA, possibly abbreviated).

    Anything else is an input error (exit 2) naming the option and what it takes, before any bundle is read."""
    if value is None:
        return None
    want = value.strip().lower()
    if len(want) < 7 or len(want) > max(FULL_SHA_LENGTHS) or any(c not in "0123456789abcdef" for c in want):
        raise BundleError(
            f"{option} {value[:80]!r} is not a commit SHA: it takes 7 to 64 hex digits, the PR head commit "
            "the bundle must have tested (e.g. the output of `git rev-parse HEAD` in the PR's checkout)"
        )
    return want


def pr_head_problem(manifest: Manifest, pr_head: str) -> tuple[bool, str]:
    """Whether the bundle tested ``pr_head``, and the detail.

    The recorded head must be a full commit SHA: an abbreviated one could stand for many
    commits, so it matches nothing. ``pr_head`` may abbreviate the recorded SHA (at least 7
    hex digits); it never matches by being longer than what the bundle records.
    """
    want = pr_head.strip().lower()
    if len(want) < 7 or len(want) > max(FULL_SHA_LENGTHS) or any(c not in "0123456789abcdef" for c in want):
        return False, f"--pr-head {pr_head[:80]!r} is not a commit SHA (7 to 64 hex digits)"
    if manifest.pr is None:
        return False, f"the bundle records no PR, expected head {want}"
    have = manifest.pr.head_sha.lower()
    if len(have) not in FULL_SHA_LENGTHS:
        return False, (
            f"the bundle records an abbreviated head SHA {have} ({len(have)} hex digits), which cannot be "
            f"matched against {want}; a bundle must record the full commit SHA it tested"
        )
    if have == want:
        matched = f"tested head {have} matches {want}"
    elif have.startswith(want):
        matched = f"tested head {have} matches the abbreviated --pr-head {want}"
    else:
        return False, f"the bundle tested head {have}, expected {want}"
    state, detail = pr_link_state(manifest)
    if state != "proven":
        return False, f"{matched}, but the link to that head is {state}, not verified: {detail}"
    return True, f"{matched}; {detail}"


def pr_link_state(manifest: Manifest) -> tuple[str, str]:
    """Whether the bundle is evidence for the PR it records: ``none`` (no PR link: not PR evidence),
    ``proven`` (a required isolation row judged the diff over exactly the recorded base..head, and every
    engine reported serving the head commit; the row's verdict, pass or fail, is the bundle verdict's
    business), ``mismatch`` (an engine served another commit), ``unproven`` (anything else: the diff not
    checked, a commit that could not be read, no engine ran), with the detail."""
    pr = manifest.pr
    if pr is None:
        return "none", NOT_PR_EVIDENCE
    iso = manifest.checks.get(ISOLATION)
    if iso is None:
        return "unproven", "the bundle has no isolation row, so the diff base..head was not checked"
    shards = iso.summary.get("shards")  # a merged bundle: every shard's row must have checked the range
    summaries = (
        list(shards.values()) if "diff_sha256" not in iso.summary and isinstance(shards, dict) else [iso.summary]
    )
    want = {"base_sha": pr.base_sha, "head_sha": pr.head_sha, "diff_sha256": pr.diff_sha256}
    for summary in summaries or [{}]:
        got = {k: summary.get(k) if isinstance(summary, dict) else None for k in want}
        if not got["diff_sha256"]:
            return (
                "unproven",
                f"the diff base..head was not checked (isolation {iso.verdict.value}: {iso.reason[:300]})",
            )
        differ = [k for k in want if str(got[k] or "").lower() != str(want[k] or "").lower()]
        if differ:
            return "unproven", "the isolation row checked another range than the PR link records (" + ", ".join(
                f"{k}: {got[k]} vs {want[k]}" for k in differ
            ) + ")"
    engines = manifest.provenance.engines
    builds = [(f"{e.group}/{e.side}#{(e.lifetime or 0) + 1}", e.vllm_commit) for e in engines]
    state, detail = head_binding(pr.head_sha, builds)
    if state == "mismatch":
        return "mismatch", detail
    if iso.verdict is Verdict.NOT_RUN or not iso.required:
        return "unproven", f"the isolation row is {iso.verdict.value} and required={iso.required}: {iso.reason[:300]}"
    checked = f"isolation {iso.verdict.value} over exactly {pr.base_sha}..{pr.head_sha}"
    if state == "unproven":
        return "unproven", f"{checked}, but {detail}"
    return "proven", f"{checked}; {detail}"


def consistency_problems(root: Path) -> list[str]:
    """Problems that make a bundle directory unfit to sign (schema, verdicts, tables, and re-judging by the
    bundle's own scope: rows, hardware)."""
    contents = Contents()
    scan_dir(root, contents, hash_all=False)
    if contents.problems:
        return contents.problems
    if MANIFEST not in contents.kept:
        return [f"{MANIFEST} is missing"]
    manifest, problems = schema_problems(contents.kept[MANIFEST])
    if manifest is None:
        return problems
    from fasttrack.bundle.rejudge import judging_context, rejudge_bundle

    problems = verdict_problems(manifest) + table_problems(manifest, contents)
    try:
        rj = rejudge_bundle(manifest, contents, judging_context(manifest, None))
    except BundleError as exc:
        return [*problems, exc.message]
    hardware_ok, hardware = rj.hardware
    return problems + rj.verdicts + rj.rows + rj.tables + ([] if hardware_ok else [hardware])
