"""``fasttrack reproduce``: rerun chosen checks of a bundle with its recorded settings.

The bundle is verified first (signature, hashes). Its recorded scope text, tier and
shard drive a fresh ``validate`` run of the chosen checks on this host; the new
results are then compared with the recorded ones. Agreement per check:

- the verdicts are equal, and
- the check's own rule holds where it defines one (``Check.agrees(recorded, new)``,
  e.g. a perf speedup inside the recorded interval); otherwise numeric summary
  figures are listed with their relative difference for a reviewer to judge.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

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


def _scope_file(name: str, text: str, sha: str | None, tmp: Path) -> Path:
    """Use the local suite when it is byte-identical; else a copy of it with the recorded text."""
    import hashlib

    local = ROOT / "suites" / name
    if (local / "scope.yaml").is_file():
        if hashlib.sha256((local / "scope.yaml").read_bytes()).hexdigest() == hashlib.sha256(text.encode()).hexdigest():
            return local / "scope.yaml"
        shutil.copytree(local, tmp / name)
    else:
        (tmp / name).mkdir(parents=True)
    p = tmp / name / "scope.yaml"
    p.write_text(text, encoding="utf-8")
    return p


def reproduce(bundle: Path, *, checks: list[str], out: Path, keys: list[Path] | None = None, trust: Path | None = None,
              allow_unverified: bool = False, force: bool = False, log=print) -> ReproduceResult:
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
    reg = registry()
    with tempfile.TemporaryDirectory(prefix="fasttrack-repro-") as tmpd:
        scope_path = _scope_file(m.scope.model, m.scope.yaml, getattr(m.scope, "sha256", None), Path(tmpd))
        opts = ValidateOptions(model=str(scope_path), tier=m.scope.tier, shard=m.plan.shard, out=out, checks=checks,
                               allow_hardware_mismatch=True, force=force)
        outcome = run_validate(opts, log=log)
    new = {r.check: r for r in outcome.results}
    agreements = []
    for name in checks:
        rec = m.checks[name]
        res = new[name]
        same = rec.verdict.value == res.verdict.value
        detail = "verdicts agree" if same else f"verdict {rec.verdict.value} recorded, {res.verdict.value} now"
        ok = same
        hook = getattr(reg.get(name), "agrees", None)
        if callable(hook) and same:
            try:
                verdict, why = hook(rec.summary, res)
                ok = ok and verdict
                detail = why
            except Exception as exc:  # noqa: BLE001
                ok, detail = False, f"agreement rule raised {type(exc).__name__}: {exc}"
        a, b = _numeric(rec.summary), _numeric(res.summary)
        figs = {}
        for k in sorted(set(a) & set(b))[:50]:
            den = abs(a[k]) if a[k] else 1.0
            figs[k] = {"recorded": a[k], "new": b[k], "rel_diff": round((b[k] - a[k]) / den, 4)}
        agreements.append(CheckAgreement(check=name, recorded_verdict=rec.verdict.value, new_verdict=res.verdict.value,
                                         agrees=ok, detail=detail, figures=figs))
    return ReproduceResult(bundle=str(bundle), verified=ver.verified, run_dir=str(outcome.run_dir), agreements=agreements)
