"""``fasttrack reproduce``: rerun chosen checks of a bundle with its recorded settings.

The bundle is verified first (signature, hashes). Its recorded scope text, tier and
shard drive a fresh ``validate`` run of the chosen checks on this host; the new
results are then compared with the recorded ones. Agreement per check:

- the verdicts are equal;
- row by row, in every table both runs have, rows with the same key (config point,
  workload, eval, ...) have the same verdict;
- where a recorded row carries a confidence interval of its statistic (a perf
  speedup's ``ci_low``/``ci_high``, an eval's difference interval), the new estimate
  lies inside the recorded interval: the recorded tolerance of that figure;
- the check's own rule holds where it defines one (``Check.agrees(recorded, new)``).

Numeric summary figures are listed next to these with their relative difference, for a
reviewer to judge.

The recorded scope comes from whoever made the bundle, and the rerun starts engines on this
host, so it is checked before anything runs (:func:`check_recorded_scope`): it loads within the
scope limits and its names are slugs; its engine environment passes the allow-list of
:mod:`fasttrack.engine.untrusted` and its engine arguments load no code, unless its model and
engine settings are exactly those of the shipped suite of its name (``--trust-bundle-env`` lifts
both, for a user who read them); its model builder is one a shipped suite uses; and every
path it names resolves under the suites folder it runs from (``suites/``, or a copy of it with
the recorded scope in a folder of a fixed name), which holds shipped files only.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeGuard

from fasttrack import ROOT
from fasttrack.errors import FasttrackError
from fasttrack.modelbase import StrictModel

if TYPE_CHECKING:  # pragma: no cover
    from fasttrack.bundle.manifest import CheckEntry
    from fasttrack.checks.base import Check
    from fasttrack.results import CheckResult


class CheckAgreement(StrictModel):
    check: str
    recorded_verdict: str
    new_verdict: str
    agrees: bool
    detail: str
    figures: dict[str, dict[str, Any]] = {}
    """Numeric summary figures: {name: {recorded, new, rel_diff}}."""
    row_disagreements: list[str] = []
    rows_compared: int = 0


class ReproduceResult(StrictModel):
    bundle: str
    verified: bool
    run_dir: str
    agreements: list[CheckAgreement]

    @property
    def all_agree(self) -> bool:
        return bool(self.agreements) and all(a.agrees for a in self.agreements)


def _numeric(d: dict[str, Any], prefix: str = "") -> dict[str, float]:
    out: dict[str, float] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, bool):
            continue
        if isinstance(v, (int, float)):
            out[key] = float(v)
        elif isinstance(v, dict) and len(out) < 200:
            out.update(_numeric(v, key + "."))
    return out


_KEY_FIELDS = ("eval", "workload", "point", "batch", "feature", "test", "schema", "situation", "side", "metric")
"""Fields that identify a result row across runs (whichever of them a table has)."""
_INTERVALS = (
    ("speedup", "ci_low", "ci_high"),
    ("score_difference", "score_ci_low", "score_ci_high"),
    ("agreement_difference", "agreement_ci_low", "agreement_ci_high"),
)
"""(estimate, lower bound, upper bound) column triples recorded next to a statistic."""


def _row_key(row: dict[str, Any]) -> tuple | None:
    key = tuple((k, str(row[k])) for k in _KEY_FIELDS if row.get(k) is not None)
    return key or None


def _number(v: object) -> TypeGuard[float]:
    """A real number (not a bool, not NaN)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v == v


def _verdict(row: dict[str, Any]) -> str | None:
    """A row's own verdict: its ``verdict`` field, else its ``passed`` flag."""
    if row.get("verdict") is not None:
        return str(row["verdict"])
    if isinstance(row.get("passed"), bool):
        return "pass" if row["passed"] else "fail"
    return None


def _fmt_key(key: tuple) -> str:
    return ", ".join(f"{k}={v}" for k, v in key)


def compare_rows(
    recorded: dict[str, list[dict[str, Any]]], new: dict[str, list[dict[str, Any]]]
) -> tuple[list[str], int]:
    """Row-level disagreements between the recorded and the new tables of one check.

    Returns (problems, rows compared). Rows are matched by their key fields; a row
    only one side has is not a disagreement (the rerun may be a subset)."""
    problems: list[str] = []
    compared = 0
    for table in sorted(set(recorded) & set(new)):
        old_rows: dict[tuple, dict[str, Any]] = {}
        for r in recorded[table]:
            k = _row_key(r)
            if k is not None and _verdict(r) is not None:
                old_rows.setdefault(k, r)
        for r in new[table]:
            k = _row_key(r)
            if k is None or k not in old_rows:
                continue
            old = old_rows[k]
            compared += 1
            if _verdict(old) != _verdict(r):
                problems.append(f"{table} [{_fmt_key(k)}]: verdict {_verdict(old)} recorded, {_verdict(r)} now")
                continue
            for est, lo, hi in _INTERVALS:
                a, b, x = old.get(lo), old.get(hi), r.get(est)
                if _number(a) and _number(b) and _number(x):
                    if not a <= x <= b:
                        problems.append(
                            f"{table} [{_fmt_key(k)}]: {est} {x:.4g} now, outside the recorded interval "
                            f"[{a:.4g}, {b:.4g}]"
                        )
    return problems, compared


def _recorded_tables(view: Any, check: str) -> dict[str, list[dict[str, Any]]]:
    entry = view.manifest.checks.get(check)
    return {t: view.rows(check, t) for t in (entry.tables if entry else {})}


_SUITE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


def _scope_file(name: str, text: str, sha: str | None, tmp: Path, scope_name: str) -> tuple[Path, Path | None]:
    """The scope to rerun and the folder its relative paths start from: the local suite when it is
    byte-identical; else the recorded text, written to ``tmp/scope/scope.yaml``, whose relative paths start
    from the local suite named like the recorded scope (``scope_name``, a checked slug) when there is one
    (its data, kernels and model builder).

    ``name`` (the manifest's record of the scope) and ``scope_name`` come from the bundle: they are only
    ever compared with the names of the suites under ``suites/``, never used as path components."""
    import hashlib

    suites = ROOT / "suites"
    known = {p.name: p for p in suites.iterdir() if p.is_dir()} if suites.is_dir() else {}

    def local_suite(n: str) -> Path | None:
        if not (_SUITE_NAME.match(n) and ".." not in n):
            return None
        found = known.get(n)
        return found if found is not None and (found / "scope.yaml").is_file() else None

    local = local_suite(name)
    if local is not None:
        if hashlib.sha256((local / "scope.yaml").read_bytes()).hexdigest() == hashlib.sha256(text.encode()).hexdigest():
            return local / "scope.yaml", None
    target = tmp / "scope"
    target.mkdir()
    p = target / "scope.yaml"
    p.write_text(text, encoding="utf-8")
    return p, local_suite(scope_name)


def _suite_builders() -> set[str]:
    """The ``model.local_builder`` of every shipped suite (the only builders a recorded scope may run)."""
    from fasttrack.scope import load_scope

    out = set()
    for f in sorted((ROOT / "suites").glob("*/scope.yaml")):
        try:
            b = load_scope(str(f)).scope.model.local_builder
        except FasttrackError:
            continue
        if b:
            out.add(b)
    return out


def _as_shipped(scope: Any) -> bool:
    """Whether the scope's model and engine settings are exactly those of the shipped suite of its name
    (which the user trusts already: e.g. a suite whose model needs ``--trust-remote-code``)."""
    from fasttrack.scope import load_scope

    local = ROOT / "suites" / scope.name / "scope.yaml"
    if not local.is_file():
        return False
    try:
        shipped = load_scope(str(local)).scope
    except FasttrackError:
        return False
    return (
        shipped.model == scope.model
        and shipped.engine == scope.engine
        and shipped.fallback == scope.fallback
        and shipped.gates.equivalence.reference == scope.gates.equivalence.reference  # its variants' arguments
    )


def check_recorded_scope(text: str, *, source: str, trust_bundle_env: bool = False) -> Any:
    """Parse a bundle's recorded scope and refuse what would run code or pick a path on this host.

    Raises :class:`~fasttrack.errors.ScopeError` (a malformed scope, a name that is not a slug, a
    bound crossed) or :class:`~fasttrack.errors.FasttrackError` naming every refused item."""
    from fasttrack.engine.untrusted import arg_problems, env_problems
    from fasttrack.scope.loading import parse_scope

    scope = parse_scope(text, source=source)
    problems: list[str] = []
    if not trust_bundle_env and not _as_shipped(scope):
        e = scope.engine
        envs = {"engine.env": e.env, "engine.baseline.env": e.baseline.env, "engine.candidate.env": e.candidate.env}
        args: dict[str, list[str]] = {
            "engine.common_args": e.common_args,
            "engine.baseline.args": e.baseline.args,
            "engine.candidate.args": e.candidate.args,
            **{f"engine.point_args.{k}": v for k, v in e.point_args.items()},
        }
        if scope.fallback is not None:
            args["fallback.unsupported_deployment_args"] = scope.fallback.unsupported_deployment_args
        ref = scope.gates.equivalence.reference
        for name, extra in (ref.variants if ref is not None else {}).items():
            args[f"gates.equivalence.reference.variants.{name}"] = extra
        problems += env_problems(envs) + arg_problems(args)
    builder = scope.model.local_builder
    if builder and builder not in _suite_builders():
        problems.append(
            f"model.local_builder {builder[:120]!r}: not the builder of a shipped suite (it would run as Python)"
        )
    if problems:
        raise FasttrackError(
            f"the scope recorded in {source} asks for what reproduce does not run from a bundle: "
            + "; ".join(problems[:20])
            + (f"; and {len(problems) - 20} more" if len(problems) > 20 else "")
            + ".",
            hint="The allowed engine variables are VLLM_* and HF_* settings that load no code and name no path, "
            "and device settings such as CUDA_VISIBLE_DEVICES (docs/security.md lists them). After reading the "
            "recorded scope (fasttrack report shows it), --trust-bundle-env hands its engine environment and "
            "arguments to the engines as recorded.",
        )
    return scope


def _scope_paths(scope: Any) -> list[tuple[str, str]]:
    """(field, path) for every path a scope names relative to its own folder."""
    out: list[tuple[str, str]] = []
    for i, ev in enumerate(scope.evals):
        if ev.data:
            out.append((f"evals[{i}].data", ev.data))
    for i, w in enumerate(scope.workloads):
        for f in ("prompts", "trace"):
            if getattr(w, f):
                out.append((f"workloads[{i}].{f}", getattr(w, f)))
    cal = scope.gates.perf.calibration
    if cal is not None:
        out.append(("gates.perf.calibration.record", cal.record))
        out.extend((f"gates.perf.calibration.keys[{i}]", k) for i, k in enumerate(cal.keys))
    for i, k in enumerate(scope.kernels):
        out.append((f"kernels[{i}].path", k.path))
        for f in ("candidate", "example_candidate"):
            v = getattr(k, f)
            if v and ("/" in v or "\\" in v or v.endswith(".py")):  # a file; a dotted name is a module
                out.append((f"kernels[{i}].{f}", str(Path(k.path) / v)))
    return out


def check_scope_paths(scope: Any, scope_dir: Path, root: Path | None = None) -> None:
    """Every path the recorded scope names, relative to ``scope_dir`` (its file's folder), resolves (symbolic
    links followed) under ``root`` (default: ``scope_dir``): the suites folder it runs from, which holds
    shipped files only. No absolute path, no ``..`` that climbs out, no link that leads out."""
    base = (root or scope_dir).resolve()
    here = scope_dir.resolve()
    bad = []
    for field, rel in _scope_paths(scope):
        p = Path(rel)
        resolved = (here / p).resolve()
        if p.is_absolute() or not resolved.is_relative_to(base):
            bad.append(f"{field} {rel[:120]!r} resolves to {resolved}")
    if bad:
        raise FasttrackError(
            f"the scope recorded in the bundle names paths outside the suites folder {base}: " + "; ".join(bad) + ".",
            hint="A recorded scope may only name files of the shipped suites, relative to the scope file.",
        )


def reproduce(
    bundle: Path,
    *,
    checks: list[str],
    out: Path,
    keys: list[Path] | None = None,
    trust: Path | None = None,
    allow_unverified: bool = False,
    force: bool = False,
    baseline_url: str | None = None,
    candidate_url: str | None = None,
    reference_urls: dict[str, str] | None = None,
    trust_bundle_env: bool = False,
    log=print,
) -> ReproduceResult:
    from fasttrack.bundle import open_bundle, verify_bundle
    from fasttrack.checks.base import registered_checks
    from fasttrack.pipeline import ValidateOptions, run_validate

    if not checks:
        raise FasttrackError("reproduce needs --checks NAMES (comma-separated).")
    ver = verify_bundle(bundle, keys=keys or (), trust_dir=trust)
    if not ver.verified and not allow_unverified:
        if ver.judged_by is None:  # its recorded scope could not be judged by: a refusal of it says why first
            _refuse_recorded_scope(bundle)
        bad = "; ".join(f"{i.name}: {i.detail}" for i in ver.items if i.ok is False)
        raise FasttrackError(
            f"bundle {str(bundle)!r} did not verify ({bad}).",
            hint="Pass the signer's key with --key or --trust DIR, or --allow-unverified to rerun anyway.",
        )
    with open_bundle(bundle) as view:
        m = view.manifest
        missing = [c for c in checks if c not in m.checks]
        if missing:
            raise FasttrackError(f"the bundle has no check(s) {missing}.", hint=f"It has: {', '.join(m.checks)}.")
        recorded_tables = {c: _recorded_tables(view, c) for c in checks}
    recorded = check_recorded_scope(
        m.scope.yaml, source=f"bundle {str(bundle)!r} (manifest scope.yaml)", trust_bundle_env=trust_bundle_env
    )
    with tempfile.TemporaryDirectory(prefix="fasttrack-repro-") as tmpd:
        scope_path, scope_base = _scope_file(
            m.scope.model, m.scope.yaml, getattr(m.scope, "sha256", None), Path(tmpd), recorded.name
        )
        check_scope_paths(recorded, scope_base or scope_path.parent, ROOT / "suites")
        opts = ValidateOptions(
            model=str(scope_path),
            scope_base_dir=scope_base,
            tier=m.scope.tier,
            shard=m.plan.shard,
            out=out,
            checks=checks,
            allow_hardware_mismatch=True,
            force=force,
            baseline_url=baseline_url,
            candidate_url=candidate_url,
            reference_urls=dict(reference_urls or {}),
        )
        outcome = run_validate(opts, log=log)
    new = {r.check: r for r in outcome.results}
    reg = registered_checks()
    agreements = [_agreement(name, m.checks[name], new[name], recorded_tables[name], reg.get(name)) for name in checks]
    return ReproduceResult(
        bundle=str(bundle), verified=ver.verified, run_dir=str(outcome.run_dir), agreements=agreements
    )


def _refuse_recorded_scope(bundle: Path) -> None:
    """Raise the refusal of the bundle's recorded scope, if reproduce refuses it (nothing when the manifest cannot
    be read: verification says so)."""
    from fasttrack.bundle import open_bundle
    from fasttrack.bundle.errors import BundleError

    try:
        with open_bundle(bundle) as view:
            text = view.manifest.scope.yaml
    except BundleError:
        return
    check_recorded_scope(text, source=f"bundle {str(bundle)!r} (manifest scope.yaml)")


def _agreement(
    name: str,
    rec: CheckEntry,
    res: CheckResult,
    recorded_rows: dict[str, list[dict[str, Any]]],
    cls: type[Check] | None,
) -> CheckAgreement:
    """Whether a rerun of one check agrees with its recorded entry: the same verdict and rows within the recorded
    intervals, or the check's own rule (:meth:`~fasttrack.checks.base.Check.agrees`); the summaries' figures
    side by side."""
    same = rec.verdict.value == res.verdict.value
    problems, compared = compare_rows(recorded_rows, res.tables)
    ok = same and not problems
    if not same:
        detail = f"verdict {rec.verdict.value} recorded, {res.verdict.value} now"
    elif problems:
        detail = f"verdicts agree, but {len(problems)} of {compared} row(s) do not: " + "; ".join(problems[:3])
    else:
        detail = f"verdicts agree; {compared} row(s) agree within the recorded intervals"
    if cls is not None and same:
        try:
            rule = cls.agrees(rec.summary, res)
        except Exception as exc:  # noqa: BLE001 - a check's own rule failing is a disagreement, not a crash
            ok, detail = False, f"agreement rule raised {type(exc).__name__}: {exc}"
        else:
            if rule is not None:
                ok, detail = ok and rule[0], rule[1]
    a, b = _numeric(rec.summary), _numeric(res.summary)
    figs = {}
    for k in sorted(set(a) & set(b))[:50]:
        den = abs(a[k]) if a[k] else 1.0
        figs[k] = {"recorded": a[k], "new": b[k], "rel_diff": round((b[k] - a[k]) / den, 4)}
    return CheckAgreement(
        check=name,
        recorded_verdict=rec.verdict.value,
        new_verdict=res.verdict.value,
        agrees=ok,
        detail=detail,
        figures=figs,
        row_disagreements=problems,
        rows_compared=compared,
    )
