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
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path
from typing import Any, TypeGuard

from pydantic import BaseModel, ConfigDict

from fasttrack import ROOT
from fasttrack.errors import FasttrackError


class CheckAgreement(BaseModel):
    model_config = ConfigDict(extra="forbid")

    check: str
    recorded_verdict: str
    new_verdict: str
    agrees: bool
    detail: str
    figures: dict[str, dict[str, Any]] = {}
    """Numeric summary figures: {name: {recorded, new, rel_diff}}."""
    row_disagreements: list[str] = []
    rows_compared: int = 0


class ReproduceResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

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


def _scope_file(name: str, text: str, sha: str | None, tmp: Path) -> tuple[Path, Path | None]:
    """The scope to rerun and the folder its relative paths start from: the local suite when it is
    byte-identical; else the recorded text, written to ``tmp/scope/scope.yaml``, whose relative paths start
    from the local suite of that name when there is one (its data, kernels and model builder).

    ``name`` comes from the bundle: it is only ever compared with the names of the suites
    under ``suites/``, never used as a path component; the copy lives at the fixed path
    ``tmp/scope/scope.yaml``."""
    import hashlib

    suites = ROOT / "suites"
    local: Path | None = None
    if _SUITE_NAME.match(name) and ".." not in name:
        known = {p.name: p for p in suites.iterdir() if p.is_dir()} if suites.is_dir() else {}
        local = known.get(name)
    if local is not None and (local / "scope.yaml").is_file():
        if hashlib.sha256((local / "scope.yaml").read_bytes()).hexdigest() == hashlib.sha256(text.encode()).hexdigest():
            return local / "scope.yaml", None
    else:
        local = None
    target = tmp / "scope"
    target.mkdir()
    p = target / "scope.yaml"
    p.write_text(text, encoding="utf-8")
    return p, local


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
    log=print,
) -> ReproduceResult:
    from fasttrack.bundle import open_bundle, verify_bundle
    from fasttrack.checks.base import registry
    from fasttrack.pipeline import ValidateOptions, run_validate

    if not checks:
        raise FasttrackError("reproduce needs --checks NAMES (comma-separated).")
    ver = verify_bundle(bundle, keys=keys or (), trust_dir=trust)
    if not ver.verified and not allow_unverified:
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
    reg = registry()
    with tempfile.TemporaryDirectory(prefix="fasttrack-repro-") as tmpd:
        scope_path, scope_base = _scope_file(m.scope.model, m.scope.yaml, getattr(m.scope, "sha256", None), Path(tmpd))
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
        )
        outcome = run_validate(opts, log=log)
    new = {r.check: r for r in outcome.results}
    agreements = []
    for name in checks:
        rec = m.checks[name]
        res = new[name]
        same = rec.verdict.value == res.verdict.value
        problems, compared = compare_rows(recorded_tables[name], res.tables)
        ok = same and not problems
        if not same:
            detail = f"verdict {rec.verdict.value} recorded, {res.verdict.value} now"
        elif problems:
            detail = f"verdicts agree, but {len(problems)} of {compared} row(s) do not: " + "; ".join(problems[:3])
        else:
            detail = f"verdicts agree; {compared} row(s) agree within the recorded intervals"
        cls = reg.get(name)
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
        agreements.append(
            CheckAgreement(
                check=name,
                recorded_verdict=rec.verdict.value,
                new_verdict=res.verdict.value,
                agrees=ok,
                detail=detail,
                figures=figs,
                row_disagreements=problems,
                rows_compared=compared,
            )
        )
    return ReproduceResult(
        bundle=str(bundle), verified=ver.verified, run_dir=str(outcome.run_dir), agreements=agreements
    )
