"""Merge the shard bundles of one plan into one bundle.

Shards must agree on everything that makes results comparable: the scope (hash), the
plan (its fingerprint, else its hash) and shard count, the tier, the PR, the rehearsal flag and the provenance
(versions, hardware, package list, dataset and model hashes, seeds; engine records are
per shard and are concatenated). Every shard ``1/n .. n/n`` must be present exactly once,
or be named absent with why (``absent``: e.g. the scheduler's job id, state and log of a
shard that wrote no bundle); every check then counts as not run in an absent shard, so the
merged bundle cannot pass and says which shard is missing and why.

Per check, the merged entry is ``fail`` if any shard failed it; else ``not_run`` if a
shard that required it did not run it; else ``pass`` if some shard passed it; else
``not_run``. A shard that has no work for a check should record it as ``not_run`` with
``required=False`` so it does not hold the merged verdict back. Tables are concatenated
with a ``shard`` column; artifacts and logs move under ``artifacts/shard-i-of-n/`` and
``logs/shard-i-of-n/``. The bundle verdict is then recomputed as for any bundle.
"""

from __future__ import annotations

import datetime as _dt
import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from fasttrack.bundle.canonical import canonical_json, sha256_file, sha256_json, to_jsonable
from fasttrack.bundle.errors import BundleError, MergeError
from fasttrack.bundle.keys import PublicKey, SigningKey
from fasttrack.bundle.layout import ARTIFACTS_DIR, LOGS_DIR, MANIFEST
from fasttrack.bundle.manifest import Manifest, PlanInfo, Provenance, ShardRef, load_manifest, parse_shard
from fasttrack.bundle.prlink import PRLink
from fasttrack.bundle.rejudge import own_context
from fasttrack.bundle.rowread import DecodeBudget, read_bundle_table
from fasttrack.results import ISOLATION, CheckResult, Verdict, ordered_checks, recorded_check_order

#: Provenance fields that may differ between shards.
_PER_SHARD_PROVENANCE = {"engines"}
#: Provenance maps (name -> hash or seed) that each shard fills with what it used (a shard
#: without engines records no model, a shard has only its own engine groups' seeds): they
#: must agree where they overlap; the merged bundle holds their union.
_UNION_PROVENANCE = ("datasets", "models", "seeds")


def _label_dir(shard: str) -> str:
    i, n = parse_shard(shard)
    return f"shard-{i}-of-{n}"


def _open_shard(path: Path, stack: ExitStack) -> Path:
    if path.is_dir():
        return path
    if path.is_file():
        from fasttrack.bundle.safe_tar import extract_bundle

        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="fasttrack-shard-")))
        extract_bundle(path, tmp / "b")
        return tmp / "b"
    raise MergeError(f"shard bundle {path} does not exist")


def _check_integrity(
    path: Path,
    root: Path,
    *,
    keys: Sequence[str | os.PathLike[str] | PublicKey],
    trust_dir: str | os.PathLike[str] | None,
) -> None:
    from fasttrack.bundle.verify import verify_bundle

    need_sig = bool(keys) or trust_dir is not None
    res = verify_bundle(root, keys=keys, trust_dir=trust_dir)
    bad = [it for it in res.items if it.ok is False and (need_sig or it.name != "signature")]
    if bad:
        raise MergeError(f"shard bundle {path} does not verify: " + "; ".join(f"{it.name}: {it.detail}" for it in bad))


def _compare(manifests: list[tuple[Path, Manifest]]) -> None:
    def facts(m: Manifest) -> dict[str, Any]:
        prov = m.provenance.model_dump(mode="json")
        return {
            "schema_version": m.schema_version,
            "scope.sha256": m.scope.sha256,
            "scope.model": m.scope.model,
            "scope.tier": m.scope.tier,
            "plan": m.plan.fingerprint or m.plan.sha256,
            "shard count": parse_shard(m.plan.shard)[1],
            # the PR link without its isolation reason: that names each shard's own engines' builds
            "pr": None if m.pr is None else m.pr.model_dump(mode="json", exclude={"isolation_reason"}),
            "rehearsal": m.rehearsal,
            **{
                f"provenance.{k}": v
                for k, v in prov.items()
                if k not in _PER_SHARD_PROVENANCE and k not in _UNION_PROVENANCE
            },
        }

    ref_path, ref = manifests[0]
    ref_facts = facts(ref)
    problems = []
    for path, m in manifests[1:]:
        f = facts(m)
        for k, v in ref_facts.items():
            if f.get(k) != v:
                problems.append(
                    f"{k}: {ref_path} ({ref.plan.shard}) has {_short(v)}, "
                    f"{path} ({m.plan.shard}) has {_short(f.get(k))}"
                )
    for field in _UNION_PROVENANCE:
        seen: dict[str, tuple[Any, Path, str]] = {}
        for path, m in manifests:
            for k, v in getattr(m.provenance, field).items():
                if k in seen and seen[k][0] != v:
                    first_v, first_path, first_shard = seen[k]
                    problems.append(
                        f"provenance.{field}[{k!r}]: {first_path} ({first_shard}) has {_short(first_v)}, "
                        f"{path} ({m.plan.shard}) has {_short(v)}"
                    )
                seen.setdefault(k, (v, path, m.plan.shard))
    if problems:
        raise MergeError(
            "the shard bundles are not of one plan run and cannot be merged: "
            + "; ".join(problems[:10])
            + (f"; and {len(problems) - 10} more" if len(problems) > 10 else "")
        )


def _short(v: Any) -> str:
    s = repr(v)
    return s if len(s) <= 80 else s[:77] + "..."


def _merge_values(values: list[Any]) -> Any:
    """Combine one plan field across shards: equal values stay, lists are concatenated
    (without duplicates), numbers are summed (totals such as estimates), objects merge
    key by key; anything else keeps the first shard's value."""
    first = values[0]
    if all(v == first for v in values):
        return first
    if all(isinstance(v, list) for v in values):
        seen, out = set(), []
        for v in values:
            for item in v:
                key = canonical_json(item, pretty=False)
                if key not in seen:
                    seen.add(key)
                    out.append(item)
        return out
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        total = sum(values)
        return round(total, 6) if isinstance(total, float) else total
    if all(isinstance(v, dict) for v in values):
        keys = list(dict.fromkeys(k for v in values for k in v))
        return {k: _merge_values([v[k] for v in values if k in v]) for k in keys}
    return first


def _merge_plans(plans: list[dict[str, Any]]) -> dict[str, Any]:
    """The plan of a merged bundle: every shard's points and groups, shard ``1/1``."""
    merged = _merge_values(plans)
    if "shard" in merged:
        merged["shard"] = "1/1"
    return merged


def _merge_check(
    name: str,
    per_shard: list[tuple[str, Any]],
    absent: Mapping[str, str] | None = None,
    notes: Mapping[str, str] | None = None,
) -> tuple[Verdict, str, bool]:
    """Merged (verdict, reason, required) of one check from ``[(shard, entry|None)]``."""
    absent = absent or {}
    notes = notes or {}

    def why(s: str, reason: str) -> str:
        return f"{reason} [{notes[s]}]" if s in notes else reason

    required = any(e is None or e.required for _, e in per_shard)
    failed = [(s, e) for s, e in per_shard if e is not None and e.verdict is Verdict.FAIL]
    missing_req = [(s, e) for s, e in per_shard if e is None or (e.required and e.verdict is Verdict.NOT_RUN)]
    passed = [s for s, e in per_shard if e is not None and e.verdict is Verdict.PASS]
    idle = [s for s, e in per_shard if e is not None and not e.required and e.verdict is Verdict.NOT_RUN]
    if failed:
        return Verdict.FAIL, "failed in " + "; ".join(f"shard {s}: {why(s, e.reason)}" for s, e in failed), required
    if missing_req:
        return (
            Verdict.NOT_RUN,
            "did not run in "
            + "; ".join(
                f"shard {s}: " + (why(s, e.reason) if e is not None else absent.get(s, "absent from that shard bundle"))
                for s, e in missing_req
            ),
            required,
        )
    if passed:
        reason = f"passed in shard(s) {', '.join(passed)}"
        if idle:
            reason += f"; not needed in shard(s) {', '.join(idle)}"
        return Verdict.PASS, reason, required
    reasons = "; ".join(f"shard {s}: {e.reason}" for s, e in per_shard if e is not None)
    return Verdict.NOT_RUN, f"ran in no shard ({reasons})", required


def merge_bundles(
    shards: Sequence[str | os.PathLike[str]],
    out: str | os.PathLike[str],
    *,
    sign_keys: Sequence[SigningKey] = (),
    keys: Sequence[str | os.PathLike[str] | PublicKey] = (),
    trust_dir: str | os.PathLike[str] | None = None,
    created: str | None = None,
    absent: Mapping[str, str] | None = None,
    notes: Mapping[str, str] | None = None,
) -> Manifest:
    """Merge shard bundles (directories or tarballs) into ``out`` (a directory, or a
    ``.tar.gz`` when the name ends so) and sign it with ``sign_keys``.

    With ``keys``/``trust_dir`` every shard must also carry a trusted signature; without,
    shards are checked for integrity (hashes, files, schema, verdicts, tables) only, and the
    merged bundle is not signed: signing (``sign_keys``) needs a trust set every shard verifies
    against, so a signature never vouches for shards nobody trusted (unsigned ones, or ones signed
    by unknown keys).
    ``created`` defaults to the latest shard's time, so merging is reproducible.
    ``absent`` maps shards (``"i/n"``) that wrote no bundle to why; they count as not run.
    ``notes`` maps shards that are present to what the scheduler says about them (e.g. the job was
    cancelled, and its log), added to their reasons where a check did not run or failed there.
    """
    from fasttrack.bundle.pack import pack_bundle
    from fasttrack.bundle.writer import write_bundle

    if not shards:
        raise MergeError("no shard bundles given")
    if sign_keys and not keys and trust_dir is None:
        raise MergeError(
            "merge signs the merged bundle only after every shard verified against a trust set, and none was "
            "given: pass --key PUB (repeatable; e.g. the signing key's own .pub when one key signed the shards) "
            "or --trusted-keys DIR"
        )
    out_path = Path(out)
    as_tar = out_path.name.endswith((".tar.gz", ".tgz"))
    with ExitStack() as stack:
        opened = _open_shards(shards, stack, keys=keys, trust_dir=trust_dir)
        _compare([(p, m) for p, _, m in opened])
        absent = dict(absent or {})
        ordered = _every_shard(opened, absent)
        staging = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="fasttrack-merge-")))
        for _, root, m in ordered:
            sub = _label_dir(m.plan.shard)
            for top in (ARTIFACTS_DIR, LOGS_DIR):
                if (root / top).is_dir():
                    shutil.copytree(root / top, staging / top / sub)
        names = ordered_checks(
            (c for _, _, m in ordered for c in m.checks), recorded_check_order(ordered[0][2].plan.plan)
        )
        budget = DecodeBudget()  # one merged bundle: its rows together within one bundle's decoding limits
        results = [_merged_result(name, ordered, absent, notes, budget) for name in names]
        first = ordered[0][2]
        target = out_path
        if as_tar:
            target = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="fasttrack-merged-"))) / "bundle"
        try:
            manifest = write_bundle(
                target,
                results=results,
                scope=first.scope,
                plan=_merged_plan(ordered),
                provenance=_merged_provenance(ordered),
                pr=_merged_pr(first.pr, results),
                rehearsal=first.rehearsal,
                rehearsal_reason=first.rehearsal_reason,
                created=created or max((m.created for _, _, m in ordered), key=_dt.datetime.fromisoformat),
                artifacts_from=staging,
                expected_checks=(),
                sign_keys=sign_keys,
            )
        except BundleError as exc:
            raise MergeError(f"cannot write the merged bundle: {exc.message}") from None
        if as_tar:
            pack_bundle(target, out_path)
        return manifest


_Shard = tuple[Path, Path, Manifest]
"""An opened shard bundle: as given, the folder it was read from, its manifest."""


def _open_shards(
    shards: Sequence[str | os.PathLike[str]],
    stack: ExitStack,
    *,
    keys: Sequence[str | os.PathLike[str] | PublicKey],
    trust_dir: str | os.PathLike[str] | None,
) -> list[_Shard]:
    """Verify and open every shard bundle (a tarball is verified before it is unpacked); merged bundles refused."""
    opened = []
    for s in shards:
        sp = Path(s)
        if not sp.exists():
            raise MergeError(f"shard bundle {sp} does not exist")
        _check_integrity(sp, sp, keys=keys, trust_dir=trust_dir)
        root = _open_shard(sp, stack)
        m = load_manifest((root / MANIFEST).read_bytes())
        if m.plan.merged_from:
            raise MergeError(f"{sp} is already a merged bundle; merge the original shard bundles instead")
        opened.append((sp, root, m))
    return opened


def _every_shard(opened: list[_Shard], absent: Mapping[str, str]) -> list[_Shard]:
    """The shards in plan order, once each; every shard of the plan is given or named ``absent``."""
    by_index: dict[int, _Shard] = {}
    n = parse_shard(opened[0][2].plan.shard)[1]
    for sp, root, m in opened:
        i, _ = parse_shard(m.plan.shard)
        if i in by_index:
            raise MergeError(f"shard {m.plan.shard} is given twice: {by_index[i][0]} and {sp}")
        by_index[i] = (sp, root, m)
    for label in absent:
        ai, an = parse_shard(label)
        if an != n or ai in by_index:
            raise MergeError(f"shard {label} is named absent but " + ("given" if an == n else f"the plan has {n}"))
    missing = [f"{i}/{n}" for i in range(1, n + 1) if i not in by_index and f"{i}/{n}" not in absent]
    if missing:
        given = sorted((m.plan.shard for _, _, m in opened), key=lambda x: parse_shard(x)[0])
        raise MergeError(
            f"shards {', '.join(missing)} of {n} are missing (given: {', '.join(given)}); "
            "a merged bundle needs every shard of the plan"
        )
    return [by_index[i] for i in range(1, n + 1) if i in by_index]


def _merged_pr(pr: PRLink | None, results: list[CheckResult]) -> PRLink | None:
    """The shards' PR link (one, as compared), with the merged isolation row's reason (every shard's engines)."""
    iso = next((r for r in results if r.check == ISOLATION), None)
    if pr is None or iso is None:
        return pr
    return pr.model_copy(update={"isolation_reason": iso.reason})


def _merged_result(
    name: str,
    ordered: list[_Shard],
    absent: Mapping[str, str],
    notes: Mapping[str, str] | None,
    budget: DecodeBudget,
) -> CheckResult:
    """One check's merged result: its verdict by :func:`_merge_check`, its shards' tables concatenated (each row
    read through its model within its shard's bounds, with its ``shard``) and their artifacts under each shard's
    folder."""
    per = [(m.plan.shard, m.checks.get(name)) for _, _, m in ordered]
    gone = sorted(absent, key=lambda x: parse_shard(x)[0])
    verdict, reason, required = _merge_check(
        name, sorted(per + [(s, None) for s in gone], key=lambda x: parse_shard(x[0])[0]), absent, notes
    )
    tables: dict[str, list[dict[str, Any]]] = {}
    for (_, root, m), (label, e) in zip(ordered, per, strict=True):
        if e is None:
            continue
        ctx = own_context(m)
        for tname in e.tables:
            try:
                got, _legacy = read_bundle_table(root, m, name, tname, budget=budget, ctx=ctx)
            except BundleError as exc:
                raise MergeError(f"shard {label}: {exc.message}") from None
            tables.setdefault(tname, []).extend({**r.record(), "shard": r.shard or label} for r in got.rows)
    artifacts = []
    for label, e in per:
        if e is None:
            continue
        for a in e.artifacts:
            top, _, rest = a.partition("/")
            artifacts.append(f"{top}/{_label_dir(label)}/{rest}")
    return CheckResult(
        check=name,
        title=next((e.title for _, e in per if e is not None and e.title), None),
        view=next((e.view for _, e in per if e is not None and e.view), None),
        verdict=verdict,
        reason=reason,
        required=required,
        gate=next((e.gate for _, e in per if e is not None and e.gate is not None), None),
        summary={
            "shards": {label: to_jsonable(e.summary) for label, e in per if e is not None}
            | {s: {"absent": absent[s]} for s in gone}
        },
        failures=[f"[shard {label}] {f}" for label, e in per if e is not None for f in e.failures],
        tables=tables,
        artifacts=artifacts,
    )


def _merged_plan(ordered: list[_Shard]) -> PlanInfo:
    """The merged bundle's plan: every shard's plan merged (:func:`_merge_plans`), shard ``1/1``, with the
    shards it was merged from."""
    merged_plan = _merge_plans([m.plan.plan for _, _, m in ordered])
    return PlanInfo(
        plan=merged_plan,
        sha256=sha256_json(merged_plan),
        fingerprint=ordered[0][2].plan.fingerprint,
        shard="1/1",
        merged_from=[
            ShardRef(
                shard=m.plan.shard,
                manifest_sha256=sha256_file(root / MANIFEST)[0],
                plan_sha256=m.plan.sha256,
                created=m.created,
            )
            for _, root, m in ordered
        ],
    )


def _merged_provenance(ordered: list[_Shard]) -> Provenance:
    """The first shard's provenance with every shard's engines (each marked with its shard) and the union of
    the shards' datasets, models and seeds."""
    engines = [rec.model_copy(update={"shard": m.plan.shard}) for _, _, m in ordered for rec in m.provenance.engines]
    union = {f: {k: v for _, _, m in ordered for k, v in getattr(m.provenance, f).items()} for f in _UNION_PROVENANCE}
    return ordered[0][2].provenance.model_copy(update={"engines": engines, **union})
