"""The bundle step of ``fasttrack validate``: turn a finished run into a signed bundle.

The run folder gets ``bundle/`` (the bundle directory) and ``bundle.tar.gz`` (the same,
packed deterministically). Checks may leave provenance for the bundle in ``ctx.shared``:
``seeds`` (name -> int) and ``datasets`` (name -> sha256).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from fasttrack.bundle.errors import BundleError
from fasttrack.bundle.keys import SigningKey, load_private_key
from fasttrack.bundle.manifest import EngineRecord, Hardware, PRLink, plan_info, scope_info
from fasttrack.bundle.pack import pack_bundle
from fasttrack.bundle.provenance import collect_provenance
from fasttrack.bundle.verify import verify_bundle
from fasttrack.bundle.writer import write_bundle
from fasttrack.results import CheckResult

BUNDLE_DIR = "bundle"
BUNDLE_TARBALL = "bundle.tar.gz"

_SECRET_RE = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|(^|_)KEY($|_)|AUTH", re.I)
_SHA_RE = re.compile(r"^[0-9a-fA-F]{7,64}$")


def redact_env(env: dict[str, str] | None) -> dict[str, str]:
    """Engine environment for the manifest, with the values of secret-looking names hidden."""
    return {k: ("<redacted>" if _SECRET_RE.search(k) else str(v)) for k, v in sorted((env or {}).items())}


def load_sign_keys(paths: Sequence[str | Path]) -> list[SigningKey]:
    """Load signing keys (call before a long run, so a bad key fails early)."""
    return [load_private_key(p) for p in paths]


def _engine_records(engines: list[dict[str, Any]]) -> list[EngineRecord]:
    out = []
    for rec in engines:
        if "side" not in rec or "group" not in rec:
            continue
        out.append(
            EngineRecord(
                side=rec["side"],
                group=str(rec["group"]),
                mode="owned" if rec.get("owned", True) else "attached",
                args=[str(a) for a in rec.get("args") or []],
                env=redact_env(rec.get("env")),
                url=rec.get("base_url"),
                lifetime=rec.get("lifetime"),
                log=rec.get("log"),
            )
        )
    return out


def _hardware(host: Any) -> tuple[Hardware | None, str | None]:
    if host is None:
        return None, None
    gpus = list(getattr(host, "gpus", []) or [])
    if gpus:
        names = sorted({g.name for g in gpus})
        return (
            Hardware(
                kind="gpu",
                gpu_model=" + ".join(names),
                gpu_count=len(gpus),
                cpu_model=getattr(host, "cpu_model", None),
                cpu_count=getattr(host, "cpu_count", None),
            ),
            getattr(host, "driver_version", None),
        )
    return (
        Hardware(kind="cpu", cpu_model=getattr(host, "cpu_model", None), cpu_count=getattr(host, "cpu_count", None)),
        getattr(host, "driver_version", None),
    )


def _pr_link(opts: Any, isolation: Any) -> PRLink | None:
    repo, number = getattr(opts, "pr_repository", None), getattr(opts, "pr_number", None)
    if isolation is not None:
        return PRLink(
            repository=repo,
            number=number,
            base_sha=isolation.base_sha,
            head_sha=isolation.head_sha,
            diff_sha256=isolation.diff_sha256,
            isolation=isolation.verdict,
            isolation_reason=isolation.message,
        )
    head = getattr(opts, "head", None)
    if head and _SHA_RE.match(head):
        base = getattr(opts, "base", None)
        return PRLink(
            repository=repo,
            number=number,
            base_sha=base.lower() if base and _SHA_RE.match(base) else None,
            head_sha=head.lower(),
            isolation="not_run",
            isolation_reason="no --repo was given, so the diff was not checked",
        )
    return None


def write_run_bundle(
    *,
    opts: Any,
    ctx: Any,
    loaded: Any,
    plan: Any,
    host: Any,
    rehearsal: bool,
    rehearsal_reason: str | None,
    isolation: Any,
    results: list[CheckResult],
    state: Any,
    log: Callable[[str], None] = print,
) -> Path:
    """Write ``<run>/bundle/`` and ``<run>/bundle.tar.gz`` (signed with ``opts.sign_keys``); return the tarball."""
    run_dir = Path(ctx.run_dir)
    keys = load_sign_keys(getattr(opts, "sign_keys", None) or [])
    hardware, driver = _hardware(host)
    resolved = ctx.shared.get("model")
    models = {}
    if resolved is not None and getattr(resolved, "sha256", None):
        models[loaded.scope.model.id if hasattr(loaded.scope, "model") else "model"] = resolved.sha256
    provenance = collect_provenance(
        engines=_engine_records(list(getattr(state, "engines", []) or [])),
        datasets=dict(ctx.shared.get("datasets") or {}),
        models=models,
        seeds=dict(ctx.shared.get("seeds") or {}),
        hardware=hardware,
        driver_version=driver,
    )
    try:
        scope_path = str(Path(loaded.path).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        scope_path = str(loaded.path)
    scope = scope_info(loaded.text, model=loaded.scope.name, tier=plan.tier, path=scope_path)
    out = run_dir / BUNDLE_DIR
    logs = {}
    if (run_dir / "run-summary.json").is_file():
        logs["run-summary.json"] = run_dir / "run-summary.json"
    manifest = write_bundle(
        out,
        results=results,
        scope=scope,
        plan=plan_info(plan),
        provenance=provenance,
        pr=_pr_link(opts, isolation),
        rehearsal=rehearsal,
        rehearsal_reason=rehearsal_reason,
        artifacts_from=run_dir,
        logs=logs,
        sign_keys=keys,
        overwrite=True,
    )
    tarball = pack_bundle(out, run_dir / BUNDLE_TARBALL)
    if keys:
        res = verify_bundle(tarball, keys=[k.public for k in keys])
        if not res.verified:
            bad = "; ".join(f"{it.name}: {it.detail}" for it in res.failures)
            raise BundleError(f"the bundle just written does not verify ({bad}); this is a bug in fasttrack")
        log(f"bundle: {tarball} (verdict {manifest.verdict}, signed by {', '.join(k.keyid[:16] for k in keys)})")
    else:
        log(
            f"bundle: {tarball} (verdict {manifest.verdict}, unsigned: sign it with `fasttrack sign {tarball} --key KEY`)"
        )
    return tarball
