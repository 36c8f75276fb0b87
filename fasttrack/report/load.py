"""Build the report's view of one bundle: verify it first, then read only the bundle.

Nothing here looks at live state (engines, the scope file on disk, git): every figure comes
from the bundle's manifest, its Parquet tables (read with pyarrow) and its attestation.
A bundle that fails verification is still read and shown, marked as unverified; a bundle
whose manifest cannot be read yields a page that says why.

This module opens the bundle and reads it (tables, plan points, scope, attested files,
environment); the views are built by :mod:`verification`, :mod:`check_views`,
:mod:`perf_view` and :mod:`eval_view`.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fasttrack.bundle.consistency import pr_link_state
from fasttrack.bundle.dsse import read_envelope
from fasttrack.bundle.errors import BundleError
from fasttrack.bundle.keys import resolve_keys
from fasttrack.bundle.layout import ATTESTATION
from fasttrack.bundle.manifest import Manifest
from fasttrack.bundle.reader import BundleView, open_bundle
from fasttrack.bundle.verify import VerifyResult, verify_bundle
from fasttrack.limits import (
    MANIFEST_MAX_BYTES,
    REPORT_MAX_FILES_LISTED,
    REPORT_MAX_PLAN_POINTS,
    read_capped,
    yaml_problem,
)
from fasttrack.report import fmt
from fasttrack.report.check_views import (
    CHECK_TITLES,
    PlanPoints,
    Tables,
    check_view,
    claims_view,
    coverage_view,
    heatmap_view,
)
from fasttrack.report.eval_view import evals_view
from fasttrack.report.identity import bundle_hash
from fasttrack.report.links import LinkPolicy, quote_path, relative_base
from fasttrack.report.perf_view import perf_rows, perf_view
from fasttrack.report.speedup import speedup_summary
from fasttrack.report.summary import headline_view, tier_caveats
from fasttrack.report.tableread import load_tables as read_tables
from fasttrack.report.verification import verify_view
from fasttrack.report.views import ArtifactView, EngineView, PRView, ReportData

#: Names that callers found here before the views moved to their own modules.
__all__ = ["CHECK_TITLES", "Links", "build_report_data", "default_links", "perf_rows", "verify_view"]

MAX_ARTIFACTS_SHOWN = REPORT_MAX_FILES_LISTED


@dataclass
class Links:
    """How the report links bundle members: a relative base (or None), a rename rule, or
    ``served`` (a server that sets each file's headers answers the links)."""

    base: str | None
    reason: str = ""
    rename: Callable[[str], str] | None = None
    served: bool = False


def default_links(bundle: Path, out_html: Path) -> Links:
    """Links from a report written at ``out_html`` straight into a bundle directory."""
    if bundle.is_dir():
        return Links(base=relative_base(bundle, out_html.parent))
    return Links(base=None, reason="not linked: the bundle is a tarball; extract it to open its files")


# --------------------------------------------------------------------------- entry point


def build_report_data(
    bundle: str | os.PathLike[str],
    *,
    keys: Sequence[Any] = (),
    trust_dir: str | os.PathLike[str] | None = None,
    pr_head: str | None = None,
    trusted_scope: str | os.PathLike[str] | None = None,
    min_tier: str | None = None,
    links: Links | None = None,
    verify_result: VerifyResult | None = None,
    content_hash: str | None = None,
) -> ReportData:
    """Verify ``bundle`` and read everything the report shows from it."""
    path = Path(bundle)
    if not path.exists():
        raise BundleError(f"{path} does not exist; give a bundle directory or .tar.gz")
    trusted = resolve_keys(keys, trust_dir)
    vr = verify_result or verify_bundle(
        path, keys=trusted, pr_head=pr_head, trusted_scope=trusted_scope, min_tier=min_tier
    )
    links = links or Links(base=None, reason="not linked")
    # what the report says of the bundle whether or not its files can be read
    known: dict[str, Any] = {
        "bundle_name": fmt.one_line(path.name, 200),
        "bundle_hash": content_hash or bundle_hash(path),
        "bundle_id": vr.bundle_id or "",
        "verification": verify_view(vr, trusted_keys=len(trusted)),
        "headline": headline_view(vr),
    }

    def unreadable(reason: str) -> ReportData:
        return ReportData(**known, readable=False, unreadable_reason=fmt.one_line(reason, 2000))

    archive = next((it for it in vr.items if it.name == "archive"), None)
    if archive is not None and archive.ok is False:
        # verifying streamed the tarball and refused it: it is never unpacked
        return unreadable(f"the archive is refused, so nothing in it is read: {archive.detail}")
    try:
        with open_bundle(path) as view:
            return _read(view, vr, links, known)
    except BundleError as exc:
        return unreadable(exc.message)


def _read(view: BundleView, vr: VerifyResult, links: Links, known: dict[str, Any]) -> ReportData:
    """The report's data of a readable bundle (``known``: what the report says of any bundle, readable or not)."""
    root, m = view.root, view.manifest
    digests = _subject_digests(root)
    subjects = sorted(digests) if digests is not None else None
    by = {it.name: it for it in vr.items}
    files_ok = by["hashes"].ok is True and by["files"].ok is True and subjects is not None
    signed = by["attestation"].ok is True and by["signature"].ok is True
    if links.base is None:
        policy = LinkPolicy.none(links.reason or "not linked")
    elif not files_ok:
        policy = LinkPolicy.none("not linked: the bundle's files do not match its attestation")
    elif not signed:
        policy = LinkPolicy.none("not linked: the attestation listing these files is not signed by a trusted key")
    else:
        policy = LinkPolicy(base=links.base, members=subjects or (), rename=links.rename, served=links.served)
    tables = load_tables(root, m)
    plan_pts = plan_points(m)
    scope_obj = scope_yaml(m)
    env, engines, hardware = _environment(m)
    pr = None
    if m.pr is not None:
        link, link_detail = pr_link_state(m)
        pr = PRView(
            repository=fmt.one_line(m.pr.repository or "", 200),
            number=str(m.pr.number) if m.pr.number else "",
            base_sha=m.pr.base_sha or "",
            head_sha=m.pr.head_sha,
            diff_sha256=m.pr.diff_sha256 or "",
            isolation=str(getattr(m.pr.isolation, "value", m.pr.isolation)),
            isolation_reason=fmt.one_line(m.pr.isolation_reason, 1000),
            link=link,
            link_detail=fmt.one_line(link_detail, 1000),
        )
    order = m.check_order
    checks = [check_view(n, m.checks[n], tables.get(n, {}), policy) for n in order]
    claims, claims_note = claims_view(m, tables, scope_obj)
    artifacts, art_note = _artifacts(view, subjects, policy)
    if policy.base is None and not art_note:
        art_note = policy.reason
    linkable = sorted(n for n in policy.members if policy.href(n) is not None)
    title = scope_obj.get("title") if isinstance(scope_obj.get("title"), str) else ""
    desc = scope_obj.get("description") if isinstance(scope_obj.get("description"), str) else ""
    return ReportData(
        **known,
        readable=True,
        verdict=m.effective_verdict,
        model=fmt.one_line(m.scope.model, 200),
        tier=fmt.one_line(m.scope.tier, 40),
        scope_title=fmt.one_line(title, 300),
        scope_description=fmt.one_line(desc, 2000),
        scope_sha256=m.scope.sha256,
        shard=m.plan.shard,
        created=fmt.one_line(m.created, 60),
        pr=pr,
        hardware=hardware,
        rehearsal=m.rehearsal,
        rehearsal_reason=fmt.one_line(m.rehearsal_reason or "", 1000),
        gates=[c.gate for c in checks],
        checks=checks,
        heatmap=heatmap_view(m, tables, plan_pts),
        perf=perf_view(m, tables, plan_pts),
        evals=evals_view(m, tables, policy),
        coverage=coverage_view(m, tables, plan_pts, policy),
        claims=claims,
        claims_note=claims_note,
        environment=env,
        engines=engines,
        artifacts=artifacts,
        artifacts_note=art_note,
        check_verdicts={n: m.checks[n].verdict.value for n in order},
        caveats=tier_caveats(m, scope_obj),
        speedup=speedup_summary(m, tables, plan_pts),
        linkable=linkable,
        member_digests={n: (digests or {})[n] for n in linkable if n in (digests or {})},
    )


# --------------------------------------------------------------------------- reading the bundle


def load_tables(root: Path, manifest: Manifest) -> Tables:
    """Every table through its row model, bounded (:func:`fasttrack.report.tableread.load_tables`)."""
    return read_tables(root, manifest)


def plan_points(manifest: Manifest) -> PlanPoints:
    pts = manifest.plan.plan.get("points")
    out: dict[str, dict[str, Any]] = {}
    if isinstance(pts, list):
        for p in pts[:REPORT_MAX_PLAN_POINTS]:
            if isinstance(p, dict) and isinstance(p.get("id"), str):
                out[p["id"]] = p
    return out


def scope_yaml(manifest: Manifest) -> dict[str, Any]:
    """The recorded scope as parsed YAML (read-only: the parse is shared by every bundle recording the
    same text, as a dashboard's bundles of one suite do)."""
    return _scope_doc(manifest.scope.yaml)


@functools.lru_cache(maxsize=16)
def _scope_doc(text: str) -> dict[str, Any]:
    import yaml

    if yaml_problem(text, "the recorded scope") is not None:  # too large, too deep, or a billion laughs
        return {}
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        obj = yaml.load(text, Loader=loader)  # noqa: S506 - a safe loader (C or Python)
    except yaml.YAMLError:
        return {}
    return obj if isinstance(obj, dict) else {}


def _subject_digests(root: Path) -> dict[str, str] | None:
    """Every attested file's sha256 by name, as the attestation lists them (None when it is unreadable)."""
    p = root / ATTESTATION
    try:
        if p.is_symlink():
            return None
        data = read_capped(p, MANIFEST_MAX_BYTES)
        if data is None:
            return None
        st = read_envelope(data).statement()
    except (BundleError, OSError):
        return None
    return {s["name"]: s["digest"]["sha256"].lower() for s in st["subject"]}


def _artifacts(view: BundleView, subjects: list[str] | None, links: LinkPolicy) -> tuple[list[ArtifactView], str]:
    names = subjects if subjects is not None else []
    note = ""
    if subjects is None:
        note = "the attestation is unreadable, so no file is linked"
    out = []
    for n in sorted(names)[:MAX_ARTIFACTS_SHOWN]:
        # never look outside the bundle for a hostile name
        size = view.size(n) if quote_path(n) is not None else None
        href = links.href(n)
        out.append(
            ArtifactView(
                name=fmt.one_line(n, 400), href=href, why_not="" if href else links.why_not(n), size=size, sha256=""
            )
        )
    if len(names) > MAX_ARTIFACTS_SHOWN:
        note = f"showing {MAX_ARTIFACTS_SHOWN} of {len(names)} files"
    return out, note


def _environment(m: Manifest) -> tuple[list[tuple[str, str]], list[EngineView], str]:
    p = m.provenance
    hw = p.hardware
    if hw.kind == "gpu":
        hardware = f"{hw.gpu_count} \u00d7 {hw.gpu_model or 'unknown GPU'}"
    else:
        hardware = f"CPU: {hw.cpu_model or 'unknown'}" + (f" ({hw.cpu_count} logical CPUs)" if hw.cpu_count else "")
    env = [
        ("fasttrack", f"{p.fasttrack_version}" + (f" @ {p.fasttrack_commit}" if p.fasttrack_commit else "")),
        ("vLLM", f"{p.vllm_version or 'unknown'}" + (f" @ {p.vllm_commit}" if p.vllm_commit else "")),
        ("torch", p.torch_version or "unknown"),
        ("CUDA", p.cuda_version or "none"),
        ("driver", p.driver_version or "none"),
        ("Python", p.python_version),
        ("platform", p.platform),
        ("hardware", hardware),
        ("container image", p.container_image_digest or "none"),
        ("installed packages", f"{p.packages_count} distributions, sha256 {p.packages_sha256}"),
    ]
    for k, v in sorted(p.models.items())[:50]:
        env.append((f"model {k}", v))
    for k, v in sorted(p.datasets.items())[:50]:
        env.append((f"dataset {k}", v))
    if p.seeds:
        env.append(("seeds", ", ".join(f"{k}={v}" for k, v in sorted(p.seeds.items())[:50])))
    env = [(fmt.one_line(a, 120), fmt.one_line(b, 600)) for a, b in env]
    engines = [
        EngineView(
            side=e.side,
            group=fmt.one_line(e.group, 120),
            mode=e.mode,
            args=fmt.one_line(" ".join(e.args), 4000),
            env=fmt.one_line(" ".join(f"{k}={v}" for k, v in sorted(e.env.items())), 2000),
            url=fmt.one_line(e.url or "", 200),
        )
        for e in p.engines[:200]
    ]
    return env, engines, fmt.one_line(hardware, 300)
