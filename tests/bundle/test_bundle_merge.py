"""Merging shard bundles: one plan only, every shard once, verdicts recomputed."""

from __future__ import annotations

from pathlib import Path

import pytest
from bundle_testlib import SCOPE_YAML, build, demo_plan, make_provenance, make_results

from fasttrack import bundle as B
from fasttrack.results import CheckResult, Verdict


def shard_plan(i: int, n: int) -> dict:
    return demo_plan(f"{i}/{n}")


def shard_results(i: int, n: int = 3, *, perf: Verdict = Verdict.PASS) -> list[CheckResult]:
    """Shard i's results: every check's rows at that shard's points of the demo plan."""
    return make_results(perf=perf, points=[p["id"] for p in shard_plan(i, n)["points"]])


def make_shards(tmp_path: Path, n: int = 3, *, sign=(), overrides: dict[int, dict] | None = None) -> list[Path]:
    overrides = overrides or {}
    out = []
    for i in range(1, n + 1):
        kw = {"plan": shard_plan(i, n), "shard": f"{i}/{n}"}
        kw.update(overrides.get(i, {}))
        out.append(build(tmp_path / f"shard{i}", results=kw.pop("results", shard_results(i, n)), sign=list(sign), **kw))
    return out


def test_merge_combines_tables_and_verdicts(tmp_path: Path, contrib, keydir: Path) -> None:
    shards = make_shards(tmp_path, sign=[contrib])
    ci = B.load_private_key(keydir / "ci")
    m = B.merge_bundles(shards, tmp_path / "merged", sign_keys=[ci], keys=[keydir / "contrib.pub"])
    assert m.verdict == "pass"
    assert m.plan.shard == "1/1" and [r.shard for r in m.plan.merged_from] == ["1/3", "2/3", "3/3"]
    assert [p["id"] for p in m.plan.plan["points"]] == [p["id"] for p in demo_plan()["points"]]
    assert m.checks["kernels"].verdict is Verdict.PASS and m.checks["kernels"].required
    assert "passed in shard(s) 1/3, 2/3, 3/3" in m.checks["kernels"].reason
    res = B.verify_bundle(tmp_path / "merged", keys=[keydir / "ci.pub"])
    assert res.verified, res.failures
    with B.open_bundle(tmp_path / "merged") as view:
        rows = view.rows("perf", "points")
        per_shard = {f"{i}/3": [r for r in rows if r["shard"] == f"{i}/3"] for i in (1, 2, 3)}
        assert all(per_shard.values()) and sum(map(len, per_shard.values())) == len(rows)
        assert view.path("artifacts/shard-2-of-3/evals/samples.jsonl").is_file()
        assert view.path("logs/shard-3-of-3/g0.baseline.0.log").is_file()
    assert m.checks["evals"].artifacts == [f"artifacts/shard-{i}-of-3/evals/samples.jsonl" for i in (1, 2, 3)]


def test_merge_is_reproducible_and_writes_tarballs(tmp_path: Path, contrib, keydir: Path) -> None:
    shards = make_shards(tmp_path, sign=[contrib])
    tars = [B.pack_bundle(s, tmp_path / f"{s.name}.tar.gz") for s in shards]
    trust = [keydir / "contrib.pub"]
    B.merge_bundles(tars, tmp_path / "m1.tar.gz", sign_keys=[contrib], keys=trust)
    B.merge_bundles(list(reversed(tars)), tmp_path / "m2.tar.gz", sign_keys=[contrib], keys=trust)
    assert (tmp_path / "m1.tar.gz").read_bytes() == (tmp_path / "m2.tar.gz").read_bytes()
    assert B.verify_bundle(tmp_path / "m1.tar.gz", keys=[keydir / "contrib.pub"]).verified


def test_a_failing_shard_fails_the_merge(tmp_path: Path) -> None:
    shards = make_shards(tmp_path, overrides={2: {"results": shard_results(2, perf=Verdict.FAIL)}})

    m = B.merge_bundles(shards, tmp_path / "merged")
    assert m.verdict == "fail"
    assert m.checks["perf"].verdict is Verdict.FAIL and "shard 2/3" in m.checks["perf"].reason
    assert len(m.checks["perf"].failures) == 1 and m.checks["perf"].failures[0].startswith("[shard 2/3] tp1-")


def test_missing_shards_are_named(tmp_path: Path) -> None:
    shards = make_shards(tmp_path, n=4)
    with pytest.raises(B.MergeError, match=r"shards 2/4, 4/4 of 4 are missing"):
        B.merge_bundles([shards[0], shards[2]], tmp_path / "merged")
    assert not (tmp_path / "merged").exists()


def test_duplicate_shard_is_refused(tmp_path: Path) -> None:
    shards = make_shards(tmp_path, n=2)
    with pytest.raises(B.MergeError, match="shard 1/2 is given twice"):
        B.merge_bundles([shards[0], shards[0], shards[1]], tmp_path / "merged")


def test_mismatched_scope_is_refused(tmp_path: Path) -> None:
    other = SCOPE_YAML + "# the same scope, other bytes\n"
    shards = make_shards(tmp_path, n=2, overrides={2: {"scope_yaml": other}})
    with pytest.raises(B.MergeError, match="scope.sha256"):
        B.merge_bundles(shards, tmp_path / "merged")


def test_mismatched_plan_is_refused(tmp_path: Path) -> None:
    shards = make_shards(tmp_path, n=2, overrides={2: {"plan": {**shard_plan(2, 2), "fingerprint": "e" * 64}}})
    with pytest.raises(B.MergeError, match="plan:"):
        B.merge_bundles(shards, tmp_path / "merged")


def test_mismatched_versions_are_refused(tmp_path: Path) -> None:
    prov = make_provenance().model_copy(update={"vllm_version": "0.33.0"})
    shards = make_shards(tmp_path, n=2, overrides={2: {"provenance": prov}})
    with pytest.raises(B.MergeError, match="provenance.vllm_version.*0.32.0.*0.33.0"):
        B.merge_bundles(shards, tmp_path / "merged")


def test_mismatched_pr_head_is_refused(tmp_path: Path) -> None:
    shards = make_shards(tmp_path, n=2, overrides={2: {"head": "1" * 40}})
    with pytest.raises(B.MergeError, match="pr"):
        B.merge_bundles(shards, tmp_path / "merged")


def test_shards_whose_isolation_reasons_name_their_own_engines_merge(tmp_path: Path) -> None:
    """Each shard's isolation reason says what its own engines served (a shard without engines: none); the PR
    link is still one, and the merged link carries the merged isolation row's reason."""
    shards = make_shards(
        tmp_path,
        n=2,
        overrides={
            1: {"isolation_reason": "owned paths only; PR head unproven: the commit of 2 engine(s) could not be read"},
            2: {"isolation_reason": "owned paths only; PR head unproven: no engine ran"},
        },
    )
    m = B.merge_bundles(shards, tmp_path / "merged")
    assert m.pr is not None and m.pr.isolation == "pass"
    assert m.pr.isolation_reason == m.checks["isolation"].reason


def test_tampered_shard_is_refused(tmp_path: Path) -> None:
    shards = make_shards(tmp_path, n=2)
    (shards[1] / "logs" / "g0.baseline.0.log").write_text("edited\n")
    with pytest.raises(B.MergeError, match="does not verify.*hashes"):
        B.merge_bundles(shards, tmp_path / "merged")


def test_unsigned_shards_refused_when_keys_required(tmp_path: Path, keydir: Path) -> None:
    shards = make_shards(tmp_path, n=2)
    with pytest.raises(B.MergeError, match="signature"):
        B.merge_bundles(shards, tmp_path / "merged", keys=[keydir / "contrib.pub"])


def test_merged_bundle_cannot_be_merged_again(tmp_path: Path) -> None:
    shards = make_shards(tmp_path, n=2)
    B.merge_bundles(shards, tmp_path / "merged")
    with pytest.raises(B.MergeError, match="already a merged bundle"):
        B.merge_bundles([tmp_path / "merged"], tmp_path / "again")


def test_a_check_idle_in_some_shards_passes_where_it_ran() -> None:
    """A shard that records a check not run and not required (it held none of the check's work) does not keep
    the merged check from passing where it ran."""
    from fasttrack.bundle.merge import _merge_check

    ran = CheckResult(check="perf", verdict=Verdict.PASS, reason="ok")
    idle = CheckResult.not_run("perf", "no engine group in this shard", required=False)
    entries = [("1/3", B.manifest.check_entry(ran)), ("2/3", B.manifest.check_entry(idle))]
    verdict, reason, required = _merge_check("perf", entries)
    assert verdict is Verdict.PASS and required and "not needed in shard(s) 2/3" in reason
