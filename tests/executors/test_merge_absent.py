"""The merge step of a scheduled run: shard bundles present are merged, a shard without one is named
absent with what the scheduler knows (job, state, log), and the merged verdict cannot be pass."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bundle"))

from bundle_testlib import build_shard, make_results, shard_points  # noqa: E402  (needs the path above)

from fasttrack import bundle as B  # noqa: E402
from fasttrack.bundle.errors import MergeError  # noqa: E402
from fasttrack.executors.collect import MERGE_SUMMARY, merge_job, save_job  # noqa: E402
from fasttrack.results import Verdict  # noqa: E402


def _shard(tmp_path: Path, i: int, n: int, **kw) -> Path:
    """Shard i of n of the demo scope's plan, with rows of its own points (every row is re-judged by it)."""
    return build_shard(tmp_path / f"s{i}", i, n, **kw)


def test_merge_bundles_names_absent_shards(tmp_path: Path, contrib) -> None:
    s1, s3 = _shard(tmp_path, 1, 3, sign=[contrib]), _shard(tmp_path, 3, 3, sign=[contrib])
    note = "wrote no bundle; Slurm job 41_2 ended CANCELLED; log /jobs/logs/x-41_2.out"
    m = B.merge_bundles([s1, s3], tmp_path / "merged", absent={"2/3": note}, sign_keys=[contrib], keys=[contrib.public])
    assert m.verdict == "incomplete"
    assert [r.shard for r in m.plan.merged_from] == ["1/3", "3/3"]
    for name, entry in m.checks.items():
        assert entry.verdict is Verdict.NOT_RUN, name
        assert f"shard 2/3: {note}" in entry.reason
        assert entry.summary["shards"]["2/3"] == {"absent": note}
    assert B.verify_bundle(tmp_path / "merged", keys=[contrib.public]).verified
    # without the note the gap is an error, never silent
    with pytest.raises(MergeError, match="2/3 of 3 are missing"):
        B.merge_bundles([s1, s3], tmp_path / "merged2")
    with pytest.raises(MergeError, match="named absent but given"):
        B.merge_bundles([s1, s3], tmp_path / "merged3", absent={"1/3": "x", "2/3": "y"})


def test_a_failed_check_stays_failed_next_to_an_absent_shard(tmp_path: Path) -> None:
    s1 = _shard(tmp_path, 1, 2, perf=Verdict.FAIL)
    m = B.merge_bundles([s1], tmp_path / "merged", absent={"2/2": "never ran"})
    assert m.verdict == "fail" and m.checks["perf"].verdict is Verdict.FAIL


def _job_dir(tmp_path: Path, n: int, present: list[int], sign=()) -> Path:
    job_dir = tmp_path / "job"
    shards = []
    for i in range(1, n + 1):
        d = f"shards/shard-{i}-of-{n}"
        shards.append({"shard": f"{i}/{n}", "dir": d})
        if i in present:
            run = job_dir / d
            run.mkdir(parents=True)
            B.pack_bundle(_shard(tmp_path, i, n, sign=list(sign)), run / "bundle.tar.gz")
    job_dir.mkdir(exist_ok=True)
    save_job(job_dir, {"executor": "test", "shards": shards})
    return job_dir


def test_merge_job_merges_present_shards_and_describes_the_rest(tmp_path: Path, contrib) -> None:
    job_dir = _job_dir(tmp_path, 3, present=[1, 3], sign=[contrib])
    # a shard whose bundle is damaged counts as absent too, with the reason
    bad = job_dir / "shards/shard-3-of-3/bundle.tar.gz"
    bad.write_bytes(bad.read_bytes()[:200])
    asked = []

    def describe(shard):
        asked.append(shard["shard"])
        return f"Slurm job 7_{shard['shard'][0]} ended FAILED", {"job_id": f"7_{shard['shard'][0]}"}

    out = merge_job(job_dir, describe_absent=describe, sign_keys=[contrib], log=lambda m: None)
    assert asked == ["2/3", "3/3"]
    assert out.verdict == "incomplete" and out.signed
    assert set(out.absent) == {"2/3", "3/3"} and "shard-3-of-3/bundle.tar.gz does not verify" in out.absent["3/3"]
    m = B.verify_bundle(out.merged, keys=[contrib.public])
    assert m.verified and m.verdict == "incomplete"
    summary = json.loads((job_dir / "merged" / MERGE_SUMMARY).read_text())
    assert [s["absent"] is None for s in summary["shards"]] == [True, False, False]
    assert summary["shards"][1]["scheduler"] == {"job_id": "7_2"}


def test_merge_job_with_no_bundle_at_all_says_so(tmp_path: Path) -> None:
    job_dir = _job_dir(tmp_path, 2, present=[])
    out = merge_job(job_dir, describe_absent=lambda s: ("never ran", {}), log=lambda m: None)
    assert out.merged is None and out.error == "no shard wrote a bundle; nothing to merge"


def test_shards_with_different_engines_merge_their_models_and_seeds(tmp_path: Path) -> None:
    """An engine-less shard records no model and no seeds, and each shard seeds only its own engine groups:
    the maps must agree where they overlap, and the merged bundle holds their union."""
    from bundle_testlib import make_provenance

    base = make_provenance()
    p1 = base.model_copy(update={"models": {"m": "a" * 64}, "seeds": {"engine/g1/baseline": 0}})
    p2 = base.model_copy(update={"models": {}, "seeds": {"engine/g2/baseline": 0}})
    m = B.merge_bundles(
        [_shard(tmp_path, 1, 2, provenance=p1), _shard(tmp_path, 2, 2, provenance=p2)], tmp_path / "merged"
    )
    assert m.provenance.models == {"m": "a" * 64}
    assert m.provenance.seeds == {"engine/g1/baseline": 0, "engine/g2/baseline": 0}
    p2bad = base.model_copy(update={"models": {"m": "b" * 64}})
    with pytest.raises(MergeError, match=r"provenance.models\['m'\]"):
        B.merge_bundles(
            [_shard(tmp_path / "x", 1, 2, provenance=p1), _shard(tmp_path / "x", 2, 2, provenance=p2bad)],
            tmp_path / "m2",
        )


def test_a_present_shard_whose_job_did_not_complete_is_named_with_it(tmp_path: Path) -> None:
    """A partial bundle (e.g. written on SIGTERM) carries its own reasons; the merge adds what the scheduler
    says about its job where a check did not run there."""
    res = [
        r
        if r.check != "perf"
        else r.model_copy(update={"verdict": Verdict.NOT_RUN, "reason": "terminated by signal 15"})
        for r in make_results(points=shard_points(1, 2))
    ]
    s1, s2 = _shard(tmp_path, 1, 2, results=res), _shard(tmp_path, 2, 2)
    note = "Slurm job 5_1 ended CANCELLED (exit code 0:15); log /jobs/logs/x-5_1.out"
    m = B.merge_bundles([s1, s2], tmp_path / "merged", notes={"1/2": note})
    assert m.verdict == "incomplete"
    assert m.checks["perf"].reason == f"did not run in shard 1/2: terminated by signal 15 [{note}]"
    assert note not in m.checks["equivalence"].reason  # passed there: nothing to explain
