"""Shared builders for bundle tests: a small run folder, check results, keys."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import evidence_testlib
import pytest

from fasttrack import bundle as B
from fasttrack.bundle.manifest import EngineRecord, Hardware, Provenance
from fasttrack.results import LEGACY_CHECK_ORDER, CheckResult, Verdict

CREATED = "2025-01-02T03:04:05+00:00"
HEAD = "0123456789abcdef0123456789abcdef01234567"
BASE = "fedcba9876543210fedcba9876543210fedcba98"
DIFF = "2" * 64
SCOPE, TIER = "demo-llama", "smoke"
"""The shipped scope and tier these bundles record (their rows are judged by it)."""
SCOPE_YAML = evidence_testlib.suite(SCOPE)[0]
#: Why :func:`build`'s rehearsal bundles are rehearsals.
REHEARSAL_REASON = "host has 2 CPUs; the scope declares NVIDIA GB300 x16"


def make_results(*, perf: Verdict = Verdict.PASS, points: list[str] | None = None) -> list[CheckResult]:
    """Every check's result but isolation's for the demo scope's smoke tier: rows that fit their models and
    re-judge to what they record (``perf``: FAIL makes one perf point slow; ``points``: a shard's only)."""
    res = evidence_testlib.results(SCOPE, TIER, fail=("perf",) if perf is Verdict.FAIL else (), points=points)
    # the evals check lists its samples file (make_run_dir writes it)
    return [
        r.model_copy(update={"artifacts": ["artifacts/evals/samples.jsonl"]}) if r.check == "evals" else r for r in res
    ]


def isolation_result(*, head: str = HEAD, base: str = BASE, diff: str = DIFF) -> CheckResult:
    """A passing isolation row over base..head, as a run with --repo records it."""
    return CheckResult(
        check="isolation",
        verdict=Verdict.PASS,
        reason=f"{base[:12]}..{head[:12]}: all 1 changed path(s) are owned by the optimization",
        summary={"pr_link": True, "base_sha": base, "head_sha": head, "diff_sha256": diff, "head_binding": "proven"},
        tables={"changed": [evidence_testlib.isolation_row(evidence_testlib.suite(SCOPE)[1], "owned")]},
    )


def make_provenance(*, vllm_commit: str | None = HEAD) -> Provenance:
    return Provenance(
        fasttrack_version="0.1.0",
        fasttrack_commit="abc1234",
        vllm_version="0.32.0",
        torch_version="2.13.0+cpu",
        python_version="3.11.7",
        platform="Linux x86_64",
        hardware=Hardware(kind="cpu", cpu_model="Test CPU", cpu_count=2),
        packages_sha256="0" * 64,
        models={"demo-llama": "1" * 64},
        seeds={"global": 0},
        engines=[
            EngineRecord(
                side="baseline", group="g0", mode="owned", args=["--max-model-len", "2048"], vllm_commit=vllm_commit
            )
        ],
    )


def demo_plan(shard: str | None = None) -> dict[str, Any]:
    """The demo scope's smoke plan (of ``shard``), as a bundle records it."""
    from fasttrack.checks.base import build_run_plan

    plan = build_run_plan(evidence_testlib.suite(SCOPE)[1], tier=TIER, shard=shard).model_dump(mode="json")
    return {**plan, "fingerprint": "f" * 64}


def shard_points(i: int, n: int) -> list[str]:
    """The config points of shard ``i`` of ``n`` of the demo scope's smoke plan."""
    return [p["id"] for p in demo_plan(shard=f"{i}/{n}")["points"]]


def build_shard(out: Path, i: int, n: int, *, perf: Verdict = Verdict.PASS, **kw: Any) -> Path:
    """Shard ``i`` of ``n`` of a PR run: the shard's plan and rows of its points only (``results`` overrides
    them; ``perf``: FAIL makes one of its perf points slow)."""
    kw.setdefault("results", make_results(perf=perf, points=shard_points(i, n)))
    return build(out, shard=f"{i}/{n}", plan=demo_plan(shard=f"{i}/{n}"), **kw)


def make_run_dir(root: Path) -> Path:
    run = root / "run"
    (run / "artifacts" / "evals").mkdir(parents=True)
    (run / "artifacts" / "evals" / "samples.jsonl").write_text('{"q": 1, "a": "x"}\n{"q": 2, "a": "y"}\n')
    (run / "logs").mkdir()
    (run / "logs" / "g0.baseline.0.log").write_text("INFO engine started\n" * 50)
    return run


def build(
    out: Path,
    *,
    results: list[CheckResult] | None = None,
    sign: list[B.SigningKey] = (),
    shard: str = "1/1",
    plan: dict | None = None,
    scope_yaml: str = SCOPE_YAML,
    provenance: Provenance | None = None,
    head: str = HEAD,
    rehearsal: bool = False,
    isolation_reason: str = "owned paths only",
) -> Path:
    """A bundle of a PR run: a passing isolation row over BASE..head is added when ``results`` has none.

    ``rehearsal``: the run was a rehearsal on hardware the scope does not declare (:data:`REHEARSAL_REASON`)."""
    run = make_run_dir(out.parent / f"{out.name}-src")
    results = list(results if results is not None else make_results())
    if not any(r.check == "isolation" for r in results):
        results.insert(0, isolation_result(head=head))
    B.write_bundle(
        out,
        results=results,
        scope=B.scope_info(scope_yaml, model=SCOPE, tier=TIER),
        plan=B.plan_info(plan or demo_plan(), shard=shard),
        provenance=provenance or make_provenance(vllm_commit=head),
        pr=B.PRLink(
            repository="org/repo",
            number=7,
            base_sha=BASE,
            head_sha=head,
            diff_sha256=DIFF,
            isolation="pass",
            isolation_reason=isolation_reason,
        ),
        rehearsal=rehearsal,
        rehearsal_reason=REHEARSAL_REASON if rehearsal else None,
        created=CREATED,
        artifacts_from=run,
        expected_checks=LEGACY_CHECK_ORDER,  # the shipped checks, as a run of them expects them
        sign_keys=list(sign),
    )
    return out


@pytest.fixture(scope="session")
def keydir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("keys")
    B.generate_keypair(d, name="contrib", comment="contrib@test")
    B.generate_keypair(d, name="ci", comment="ci@test")
    B.generate_keypair(d, name="mallory", comment="mallory@test")
    return d


@pytest.fixture(scope="session")
def contrib(keydir: Path) -> B.SigningKey:
    return B.load_private_key(keydir / "contrib")


@pytest.fixture(scope="session")
def mallory(keydir: Path) -> B.SigningKey:
    return B.load_private_key(keydir / "mallory")


@pytest.fixture()
def signed_dir(tmp_path: Path, contrib: B.SigningKey) -> Path:
    return build(tmp_path / "bundle", sign=[contrib])
