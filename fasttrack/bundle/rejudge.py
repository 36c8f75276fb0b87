"""Re-judge a bundle: decode every table through its row model and recompute every verdict from the rows and the
judging scope.

The judging scope is the trusted one when verify is given ``--trusted-scope``, else the scope the bundle
recorded (and every result says which). From it and the tier the bundle ran come, never from the bundle:

- which checks must have an entry and which are required (a check's evidence says: whenever the tier runs it;
  isolation whenever the bundle records a PR link; a shard without config points needs no engine check);
- every row's verdict, recomputed by the check's rule from the row's figures and the scope's gate
  (:mod:`fasttrack.evidence`); a disagreement is a finding naming the row;
- each check's bound (the best verdict its rows allow): a check recorded ``pass`` above its bound is a finding;
- the bundle verdict, recomputed from the checks with the scope's requiredness (a check recorded not required
  that the scope requires counts as required, and is a finding);
- whether the recorded hardware is the scope's, or the bundle is a rehearsal (which is never ``pass``).

A table is read through its model (:mod:`fasttrack.bundle.rowread`) within the row and byte bounds of the plan;
tables of a bundle written before typed rows (no model recorded) are read by the legacy path, which ignores the
columns a model does not declare and is said in every result. A check no installed package declares evidence for
keeps its recorded verdict, and the result says it was not re-judged.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from fasttrack.bundle.errors import BundleError
from fasttrack.bundle.manifest import CheckEntry, Manifest
from fasttrack.bundle.rowread import DecodeBudget, read_table_rows
from fasttrack.bundle.scan import Contents
from fasttrack.evidence import declared, evidence_of
from fasttrack.evidence.base import CheckEvidence, Row
from fasttrack.evidence.expect import RejudgeContext, build_context, recorded_point_ids
from fasttrack.evidence.hardware import recorded_hardware_problems
from fasttrack.results import CheckResult, Verdict, bundle_verdict, overall_verdict

OWN_SCOPE = "the bundle's own recorded scope (no --trusted-scope given)"


@dataclass
class Rejudgement:
    """What re-judging a bundle found, by verify item."""

    source: str
    """The judging scope in words."""
    verdict: str | None = None
    """The bundle verdict recomputed with the judging scope (None when the bundle could not be re-judged)."""
    rows: list[str] = field(default_factory=list)
    tables: list[str] = field(default_factory=list)
    verdicts: list[str] = field(default_factory=list)
    hardware: tuple[bool | None, str] = (None, "not checked")
    notes: list[str] = field(default_factory=list)
    legacy_tables: list[str] = field(default_factory=list)
    """Tables read by the legacy path (an older bundle: no row model recorded)."""
    rows_read: int = 0


def judging_context(manifest: Manifest, trusted: tuple[Any, str, dict[str, Any]] | None) -> RejudgeContext:
    """The context of judging ``manifest``: the trusted scope (``(Scope, source, extra gates)``), else the one the
    bundle recorded. A scope that cannot be read raises :class:`BundleError`."""
    if trusted is not None:
        scope, source, extra = trusted
    else:
        from fasttrack.errors import ScopeError
        from fasttrack.scope.compare import parse_for_comparison

        try:
            scope, extra = parse_for_comparison(manifest.scope.yaml, source="the bundle's recorded scope")
        except ScopeError as exc:
            raise BundleError(
                f"the bundle's recorded scope cannot be read, so nothing can be re-judged: {exc.message}"
            ) from None
        source = OWN_SCOPE
    tier = manifest.scope.tier
    if tier not in scope.tiers:
        raise BundleError(f"{source} has no tier {tier!r}, the tier the bundle ran")
    if scope.envelope is None:
        raise BundleError(f"{source} is incomplete (no envelope), so its plan cannot be built")
    return build_context(
        scope,
        tier,
        source=source,
        recorded_points=recorded_point_ids(manifest.plan.plan),
        shard=manifest.plan.shard,
        pr_link=manifest.pr is not None,
        extra_gates=extra,
    )


def own_context(manifest: Manifest) -> RejudgeContext | None:
    """The context of the bundle's own recorded scope, or None when that scope cannot be planned (readers then
    bound each table by the bundle-wide limits only)."""
    try:
        return judging_context(manifest, None)
    except BundleError:
        return None


def _read_check(
    name: str,
    entry: CheckEntry,
    ev: CheckEvidence,
    contents: Contents,
    ctx: RejudgeContext,
    budget: DecodeBudget,
    out: Rejudgement,
) -> dict[str, list[Row]] | None:
    """Every table of one check through its model (None when one cannot be read: the finding is in ``out``)."""
    rows: dict[str, list[Row]] = {}
    ok = True
    for tname, ref in entry.tables.items():
        spec = ev.table(tname)
        where = f"table {name}/{tname}"
        if spec is None:
            if ref.model is not None:
                out.tables.append(f"{where} is not a table of the {name} check's evidence")
                ok = False
            else:
                out.notes.append(f"{where} (an older bundle's) is not a table this fasttrack reads; ignored")
            continue
        if ref.model is not None and (ref.model != ev.model_name(tname) or (ref.version or 0) > spec.version):
            out.tables.append(
                f"{where} records model {ref.model} v{ref.version}; this fasttrack reads {ev.model_name(tname)} "
                f"up to v{spec.version}"
            )
            ok = False
            continue
        data = contents.kept.get(ref.path)
        if data is None:
            ok = False  # missing or too large: the tables item says which
            continue
        legacy = ref.model is None or (ref.version or 0) < spec.version  # an older bundle's: read by the legacy path
        try:
            got = read_table_rows(
                data, spec.model, where=where, max_rows=spec.max_rows(ctx), budget=budget, keep=spec.keep, legacy=legacy
            )
        except BundleError as exc:
            out.tables.append(exc.message)
            ok = False
            continue
        out.rows_read += got.total_rows
        if legacy:
            out.legacy_tables.append(f"{name}/{tname}")
        rows[tname] = got.rows
    if entry.verdict is Verdict.PASS:
        for spec in ev.tables:
            if spec.required and spec.name not in entry.tables:
                out.tables.append(f"check {name!r} is recorded pass but wrote no table {spec.name}")
                ok = False
    return rows if ok else None


def _judged_verdict(
    name: str, entry: CheckEntry, ev: CheckEvidence | None, rows: Any, ctx: RejudgeContext, out: Rejudgement
) -> str:
    """The check's verdict as re-judging lets it stand (a pass above its rows' bound falls to the bound)."""
    recorded = entry.verdict.value
    if ev is None:
        out.notes.append(f"check {name!r}: no installed package declares its evidence, so its verdict is as recorded")
        return recorded
    if rows is None:
        return "fail" if recorded == "fail" else "not_run"
    try:
        judged = ev.rejudge(rows, ctx.gate(name), ctx)
    except Exception as exc:  # noqa: BLE001 - a rule that breaks on hostile rows fails closed, never crashes verify
        out.rows.append(f"{name}: its rows could not be re-judged ({type(exc).__name__}: {str(exc)[:200]})")
        return "fail" if recorded == "fail" else "not_run"
    older = {t.split("/", 1)[1] for t in out.legacy_tables if t.startswith(f"{name}/")}
    for f in judged.findings:
        if f.table in older and f.recorded_worse:  # judged by a rule that changed since: worse is never a forgery
            out.notes.append(f"{f.line()} (an older bundle's row, judged by an earlier rule: tolerated, it is worse)")
        else:
            out.rows.append(f.line())
    out.notes += [f"{name}: {n}" for n in judged.notes]
    if recorded == "pass" and judged.bound != "pass":
        why = "; ".join(judged.gaps[:3]) or "a row re-judged fails or was not run"
        out.verdicts.append(
            f"check {name!r} is recorded pass, but its rows re-judged allow at best {judged.bound} ({why})"
        )
        return judged.bound
    return recorded


def _required(name: str, entry: CheckEntry, ev: CheckEvidence | None, ctx: RejudgeContext, out: Rejudgement) -> bool:
    if ev is None:
        return entry.required
    want = ev.required(ctx)
    if want and not entry.required:
        out.verdicts.append(f"check {name!r} is recorded not required, but {ctx.source} (tier {ctx.tier}) requires it")
    return want or entry.required


def rejudge_bundle(manifest: Manifest, contents: Contents, ctx: RejudgeContext) -> Rejudgement:
    """Re-judge ``manifest`` and the tables in ``contents`` by ``ctx`` (see the module docstring)."""
    out = Rejudgement(source=ctx.source)
    budget = DecodeBudget()
    results = []
    for name, entry in manifest.checks.items():
        ev = evidence_of(name)
        rows = _read_check(name, entry, ev, contents, ctx, budget, out) if ev is not None else None
        verdict = _judged_verdict(name, entry, ev, rows, ctx, out)
        required = _required(name, entry, ev, ctx, out)
        results.append(CheckResult(check=name, verdict=Verdict(verdict), reason="-", required=required))
    for name, ev in declared().items():
        if name not in manifest.checks and ev.required(ctx):
            out.verdicts.append(f"check {name!r} has no entry, but {ctx.source} (tier {ctx.tier}) requires it")
            results.append(CheckResult.not_run(name, "missing"))
    out.verdict = bundle_verdict(overall_verdict(results), rehearsal=manifest.rehearsal)
    if out.verdict != manifest.effective_verdict:
        listed = ", ".join(f"{r.check}={r.verdict.value}" for r in results if r.required) or "none"
        out.verdicts.append(
            f"the bundle records verdict {manifest.effective_verdict!r}, re-judged by {ctx.source} it is "
            f"{out.verdict!r} (required: {listed})"
        )
    out.hardware = hardware_item(manifest, ctx)
    return out


def hardware_item(manifest: Manifest, ctx: RejudgeContext) -> tuple[bool, str]:
    """Whether the recorded hardware is the judging scope's, or the bundle says it is a rehearsal."""
    hw = manifest.provenance.hardware
    problems = recorded_hardware_problems(
        ctx.scope.hardware, kind=hw.kind, gpu_model=hw.gpu_model, gpu_count=hw.gpu_count
    )
    found = f"{hw.gpu_count} x {hw.gpu_model}" if hw.kind == "gpu" else f"a CPU host ({hw.cpu_model or 'unknown'})"
    if not problems:
        return True, f"recorded {found}, as {ctx.source} asks" + (
            " (a rehearsal all the same)" if manifest.rehearsal else ""
        )
    if manifest.rehearsal:
        return True, f"a rehearsal on {found} ({'; '.join(problems)}): its verdict is never pass"
    return False, (
        f"recorded {found}: {'; '.join(problems)}; a bundle from other hardware than {ctx.source} declares must be "
        "a rehearsal"
    )


def summary_lines(rj: Rejudgement, limit: int = 12) -> Sequence[str]:
    """The first findings of every kind, for a one-paragraph detail."""
    return (rj.verdicts + rj.rows + rj.tables)[:limit]
