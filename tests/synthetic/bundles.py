"""Synthetic evidence bundles for rendering tests, template work and the dashboard benchmark.

The figures in these bundles are invented: rows are drawn from a seeded generator, not
measured. They are written with the real bundle layer (Parquet tables, manifest,
in-toto/DSSE attestation, Ed25519 signatures), so verification behaves exactly as for a
real bundle. Their scope title starts with "[synthetic]" and their provenance names the
platform "synthetic", so they cannot pass for evidence.

``payload`` plants a string into every free-text field a contributor controls (reasons,
failures, summaries, gate texts, scope title, PR repository, provenance strings, table
cells and column names, artifact file names); the security tests use it.
"""

from __future__ import annotations

import functools
import json
import os
import random
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import evidence_testlib

from fasttrack.bundle.keys import SigningKey
from fasttrack.bundle.manifest import (
    EngineRecord,
    Hardware,
    PlanInfo,
    Provenance,
    ScopeInfo,
    plan_info,
    scope_info,
)
from fasttrack.bundle.prlink import PRLink
from fasttrack.bundle.writer import write_bundle
from fasttrack.scope import Scope
from synthetic.results import DIFF_SHA256, SHIPPED_CHECKS, Spec, check_results, plant, recorded_name

__all__ = ["PAYLOADS", "SUITES", "Spec", "make_bundle", "payload_text"]

#: Suites whose real plans the synthetic bundles borrow (config points, groups).
SUITES = {"demo-llama": "standard", "kimi-k3": "standard"}
_HW = evidence_testlib.HARDWARE


@functools.lru_cache(maxsize=8)
def _suite(model: str, tier: str | None = None) -> tuple[str, str, dict[str, Any]] | None:
    """(yaml text, tier, plan json) of a suite (its tier in :data:`SUITES`, unless ``tier``), or None when it cannot
    be planned."""
    try:
        from fasttrack.checks.base import build_run_plan
        from fasttrack.scope import load_scope

        loaded = load_scope(model)
        tier = tier or SUITES.get(model, "smoke")
        plan = build_run_plan(loaded.scope, tier=tier, scope_sha256=loaded.sha256)
        return loaded.text, tier, plan.model_dump(mode="json")
    except Exception:  # noqa: BLE001 - any unplannable scope falls back to an invented plan
        return None


def _invented_plan(model: str, rng: random.Random) -> tuple[str, str, dict[str, Any]]:
    batches = [1, 4, 16, 64]
    contexts = [8192, 32768]
    points = [
        {
            "id": f"tp8-dcp1-none-b{b}-ctx{c // 1024}k",
            "group": "tp8-dcp1-none",
            "tp": 8,
            "dcp": 1,
            "spec": "none",
            "batch": b,
            "context": c,
            "full_context": False,
        }
        for b in batches
        for c in contexts
    ]
    yaml_text = (
        "schema_version: 1\n"
        f"name: {json.dumps(model)}\n"
        f"title: {json.dumps('[synthetic] ' + model + ' decode path')}\n"
        "model: {id: synthetic/" + model + "}\n"
    )
    plan = {
        "scope": model,
        "tier": "smoke",
        "shard": "1/1",
        "points": points,
        "groups": [{"id": "tp8-dcp1-none", "points": [p["id"] for p in points]}],
    }
    return yaml_text, "smoke", plan


def _judging_scope(yaml_text: str, tier: str) -> tuple[Scope, str]:
    """The scope the rows are judged by: the recorded one; an invented scope (no envelope) borrows the demo
    scope's smoke tier (its bundles do not verify: their recorded scope cannot be planned)."""
    from fasttrack.errors import ScopeError
    from fasttrack.scope.compare import parse_for_comparison

    try:
        scope, _extra = parse_for_comparison(yaml_text, source="synthetic")
    except ScopeError:
        scope = None
    if scope is None or scope.envelope is None or tier not in scope.tiers:
        return evidence_testlib.suite("demo-llama")[1], "smoke"
    return scope, tier


def _marked_title(yaml_text: str, spec: Spec) -> str:
    """Mark the scope title as synthetic (and plant the payload in it)."""
    lines = yaml_text.splitlines()
    for i, ln in enumerate(lines):
        if ln.startswith("title:"):
            raw = ln.split(":", 1)[1].strip()
            try:
                old = json.loads(raw) if raw.startswith('"') else raw.strip("'")
            except ValueError:
                old = raw
            new = old if str(old).startswith("[synthetic]") else f"[synthetic] {old}"
            lines[i] = "title: " + json.dumps(plant(spec, str(new)))
            break
    return "\n".join(lines) + "\n"


def make_bundle(
    out_dir: str | os.PathLike[str],
    spec: Spec,
    *,
    sign_keys: Sequence[SigningKey] = (),
    work_dir: str | os.PathLike[str] | None = None,
) -> Path:
    """Write one synthetic bundle directory at ``out_dir`` and return its path."""
    rng = random.Random(spec.seed)
    suite = _suite(spec.model, spec.tier)
    yaml_text, tier, plan = suite if suite is not None else _invented_plan(spec.model, rng)
    for old, new in spec.scope_swaps.items():
        assert old in yaml_text, f"not in the {spec.model} scope: {old!r}"
        yaml_text = yaml_text.replace(old, new)
    yaml_text = _marked_title(yaml_text, spec)
    out = Path(out_dir)
    if work_dir is None:
        with tempfile.TemporaryDirectory(prefix="fasttrack-synthetic-") as tmp:
            return _write(out, spec, rng, yaml_text, tier, plan, Path(tmp), sign_keys)
    return _write(out, spec, rng, yaml_text, tier, plan, Path(work_dir), sign_keys)


def _write(
    out: Path,
    spec: Spec,
    rng: random.Random,
    yaml_text: str,
    tier: str,
    plan: dict[str, Any],
    run: Path,
    sign_keys: Sequence[SigningKey],
) -> Path:
    results = check_results(spec, *_judging_scope(yaml_text, tier), rng)
    for r in results:
        for a in r.artifacts:
            f = run / a
            f.parent.mkdir(parents=True, exist_ok=True)
            f.write_text(plant(spec, f"synthetic notes for {r.check}\n"))
    logs_dir = run / "logs"
    logs_dir.mkdir(parents=True, exist_ok=True)
    (logs_dir / "candidate-engine.log").write_text(plant(spec, "INFO synthetic engine log line\n"))
    if spec.payload:
        safe_name = spec.payload.replace("/", "_").replace("\x00", "")[:120]
        (run / "artifacts" / "evals").mkdir(parents=True, exist_ok=True)
        (run / "artifacts" / "evals" / f"{safe_name}.txt").write_text(spec.payload)
        (run / "artifacts" / "evals" / "javascript:alert(1).html").write_text(f"<script>{spec.payload}</script>")
    hw = _HW.get(
        spec.model, Hardware(kind="gpu", gpu_model="NVIDIA H200", gpu_count=8, cpu_model="synthetic CPU", cpu_count=64)
    )
    if spec.payload:
        hw = hw.model_copy(
            update={"gpu_model": plant(spec, hw.gpu_model or "GPU"), "cpu_model": plant(spec, hw.cpu_model or "CPU")}
        )
    prov = Provenance(
        fasttrack_version=plant(spec, "0.1.0"),
        fasttrack_commit=None,
        vllm_version=plant(spec, "0.32.0"),
        torch_version="2.13.0",
        cuda_version=None if hw.kind == "cpu" else "13.0",
        driver_version=None,
        python_version="3.11",
        platform=plant(spec, "synthetic"),
        hardware=hw,
        packages_sha256="0" * 64,
        packages_count=194,
        models={plant(spec, spec.model): "1" * 64},
        datasets={plant(spec, "aime25"): "2" * 64},
        seeds={"global": spec.seed, **({spec.payload: 1} if spec.payload else {})},
        engines=[
            EngineRecord(
                side=s,
                group="g0",
                mode="owned",
                args=[plant(spec, "--max-num-seqs"), "64"],
                env={"VLLM_FLAG": plant(spec, "1")},
                url=plant(spec, "http://127.0.0.1:8000"),
                vllm_version=plant(spec, "0.32.0"),
                vllm_commit=spec.head_sha if spec.served_commit == "head" else spec.served_commit,
                vllm_commit_source="vllm/_version.py" if spec.served_commit else "not recorded by this build",
            )
            for s in ("baseline", "candidate")
        ],
    )
    pr: PRLink | None = PRLink(
        repository=plant(spec, spec.repository),
        number=spec.pr_number,
        base_sha=spec.base_sha,
        head_sha=spec.head_sha,
        diff_sha256=DIFF_SHA256,
        isolation=spec.isolation,  # type: ignore[arg-type]
        isolation_reason=plant(
            spec,
            {
                "pass": "every changed path is owned by the scope",
                "fail": "vllm/model_executor/layers/fused_moe/layer.py is a shared component",
                "review": "vllm/envs.py changed outside the owned paths; a maintainer must look",
                "not_run": "no repository given",
            }[spec.isolation],
        ),
    )
    if not spec.pr_link:
        pr = None
    si: ScopeInfo = scope_info(yaml_text, model=spec.model, tier=tier, path=None)
    pi: PlanInfo = plan_info(plan)
    write_bundle(
        out,
        results=results,
        scope=si,
        plan=pi,
        provenance=prov,
        pr=pr,
        rehearsal=spec.rehearsal,
        rehearsal_reason=(
            plant(spec, "host has 2 CPUs; the scope declares NVIDIA GB300 x16") if spec.rehearsal else None
        ),
        created=spec.created,
        artifacts_from=run,
        expected_checks=[recorded_name(spec, c) for c in SHIPPED_CHECKS],
        overwrite=True,
    )
    if sign_keys:
        _sign(out, sign_keys)
    return out


def _sign(root: Path, keys: Sequence[SigningKey]) -> None:
    """Sign through the regular path; a bundle it refuses (an invented scope nothing can re-judge, checks under
    other names) is signed anyway, as any contributor can sign anything with their own key."""
    from fasttrack.bundle.attest import sign_bundle
    from fasttrack.bundle.errors import BundleError

    try:
        for k in keys:
            sign_bundle(root, k)
    except BundleError:
        _force_sign(root, keys)


def _force_sign(root: Path, keys: Sequence[SigningKey]) -> None:
    """Sign a bundle that signing refuses (its checks under other names: the scope's checks have no entry), as a
    contributor can: the envelope code without the consistency checks."""
    from fasttrack.bundle.attest import attest_dir
    from fasttrack.bundle.dsse import add_signature, envelope_bytes
    from fasttrack.bundle.layout import ATTESTATION

    env = attest_dir(root)
    for k in keys:
        env = add_signature(env, k)
    (root / ATTESTATION).write_bytes(envelope_bytes(env))


PAYLOADS = (
    "<script>window.__pwned=1;document.title='PWNED'</script>",
    '"><img src=x onerror="window.__pwned=2;document.title=\'PWNED\'">',
    "javascript:window.__pwned=3",
    '<a href="javascript:window.__pwned=4">click</a>',
    "'><svg onload=window.__pwned=5>",
    "</style><script>window.__pwned=6</script>",
    "[x](javascript:window.__pwned=7) @maintainers https://evil.example/x www.evil.example",
    "{{ 7*7 }}${7*7}<iframe src=javascript:window.__pwned=8>",
)


def payload_text() -> str:
    """All planted payloads in one string."""
    return " ".join(PAYLOADS)
