"""The rendered Slurm job for kimi-k3's full tier: arrays by node count, node counts and time limits from
the plan, the shard index from the array task, the merge job after every array (no cluster needed)."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from fasttrack import ROOT
from fasttrack.checks.base import build_run_plan
from fasttrack.errors import FasttrackError
from fasttrack.executors import slurm
from fasttrack.executors.shards import layout
from fasttrack.executors.site import load_site
from fasttrack.pipeline.options import ValidateOptions
from fasttrack.scope import load_scope


@pytest.fixture(scope="module")
def k3():
    loaded = load_scope("kimi-k3")
    return loaded, layout(loaded, tier="full")


def _sbatch(text: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        m = re.match(r"#SBATCH --([\w-]+)(?:=(.*))?$", line)
        if m:
            out.setdefault(m.group(1), []).append(m.group(2) or "")
    return out


def _indices(spec: str) -> list[int]:
    out: list[int] = []
    for part in spec.split(","):
        a, _, b = part.partition("-")
        out += list(range(int(a), int(b) + 1)) if b else [int(a)]
    return out


def test_one_shard_per_engine_group_and_arrays_by_node_count(k3, tmp_path: Path) -> None:
    loaded, lay = k3
    full = build_run_plan(loaded.scope, tier="full", scope_sha256=loaded.sha256)
    assert lay.count == len(full.groups) == 36
    nodes_of = {g.id: g.nodes for g in full.groups}
    per_node = {g.id: g.gpus_per_node for g in full.groups}
    rendered = slurm.render(
        lay, load_site(None), slurm.SlurmOptions(ValidateOptions("kimi-k3", "full"), job_dir=tmp_path)
    )
    seen: list[int] = []
    for script in rendered.arrays:
        opts = _sbatch(script.text)
        shards = _indices(opts["array"][0])
        seen += shards
        nodes = int(opts["nodes"][0])
        for i in shards:
            # the shard's plan (what `validate --shard i/36` runs) needs exactly this many nodes of this many GPUs
            plan = build_run_plan(loaded.scope, tier="full", shard=f"{i}/36", scope_sha256=loaded.sha256)
            assert [g.id for g in plan.groups] == list(lay.shard(i).groups)
            assert {nodes_of[g.id] for g in plan.groups} == {nodes}, (script.name, i)
            assert {per_node[g.id] for g in plan.groups} == {int(opts["gpus-per-node"][0])}
        assert opts["ntasks-per-node"] == ["1"]
        assert 'SHARD="${SLURM_ARRAY_TASK_ID:' in script.text
        assert (
            '--shard "$SHARD/36"' in script.text
            and "exec fasttrack validate --model kimi-k3 --tier full" in script.text
        )
        # time limit: the longest shard's estimate x 1.5 + 30 min, in Slurm's D-HH:MM:SS
        longest = max(build_run_plan(loaded.scope, tier="full", shard=f"{i}/36").estimate.wall_hours for i in shards)
        d, hms = opts["time"][0].split("-")
        h, m, _ = (int(x) for x in hms.split(":"))
        minutes = int(d) * 1440 + h * 60 + m
        assert minutes == pytest.approx(longest * 60 * 1.5 + 30, abs=1.01)
    assert sorted(seen) == list(range(1, 37)), "every shard in exactly one array"
    # K3 on GB300 trays of 4: TP8 engines span 2 nodes, TP16 engines 4; separate arrays, not a heterogeneous job
    shapes = sorted(
        (int(_sbatch(s.text)["nodes"][0]), int(_sbatch(s.text)["gpus-per-node"][0])) for s in rendered.arrays
    )
    assert shapes == [(2, 4), (4, 4)]
    assert not any("hetjob" in s.text or "packjob" in s.text for s in rendered.arrays)


def test_merge_job_depends_on_every_array_with_afterany(k3, tmp_path: Path) -> None:
    _, lay = k3
    rendered = slurm.render(
        lay, load_site(None), slurm.SlurmOptions(ValidateOptions("kimi-k3", "full"), job_dir=tmp_path)
    )
    sub = rendered.submit_sh
    for script in rendered.arrays:
        assert f"sbatch --parsable {script.name}" in sub
    assert '--dependency="$dep" merge.sbatch' in sub and "dep=\"afterany$(printf ':%s'" in sub
    merge = rendered.merge.text
    assert f"exec fasttrack slurm merge {tmp_path}" in merge
    assert "--gpus-per-node" not in merge and "--array" not in merge


def test_submit_script_chains_real_job_ids(k3, tmp_path: Path) -> None:
    """submit.sh run against a stand-in sbatch: every array first, then the merge with afterany on all their ids."""
    _, lay = k3
    rendered = slurm.render(
        lay, load_site(None), slurm.SlurmOptions(ValidateOptions("kimi-k3", "full"), job_dir=tmp_path)
    )
    slurm.write(rendered, tmp_path)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls"
    fake = bin_dir / "sbatch"
    fake.write_text(f'#!/bin/bash\necho "$*" >> {calls}\necho "$(( $(wc -l < {calls}) + 100 ));cluster"\n')
    fake.chmod(0o755)
    res = subprocess.run(
        ["bash", str(tmp_path / "submit.sh")],
        capture_output=True,
        text=True,
        env={"PATH": f"{bin_dir}:/usr/bin:/bin"},
    )
    assert res.returncode == 0, res.stderr
    lines = calls.read_text().splitlines()
    assert lines == [
        "--parsable array-2n4g.sbatch",
        "--parsable array-4n4g.sbatch",
        "--parsable --dependency=afterany:101:102 merge.sbatch",
    ]


def test_site_profile_lines_container_and_signing(tmp_path: Path, k3) -> None:
    _, lay = k3
    site_file = tmp_path / "site.yaml"
    site_file.write_text(
        "fasttrack: /shared/venv/bin/fasttrack\n"
        "setup: ['module load cuda/12.9']\n"
        "env: {HF_HOME: /shared/hf}\n"
        "slurm:\n  partition: gb300\n  account: infer\n  sbatch: ['--exclusive', '--constraint=nvl72']\n"
        "  container_image: nvcr.io#org/fasttrack-eval:0.1.0\n  container_mounts: ['/shared:/shared']\n"
        "  max_time_min: 120\n"
    )
    site = load_site(site_file)
    opts = slurm.SlurmOptions(
        ValidateOptions("kimi-k3", "full", sign_keys=[Path("/shared/keys/me")]), job_dir=tmp_path, gpus_per_node=4
    )
    text = slurm.render(lay, site, opts).arrays[0].text
    o = _sbatch(text)
    assert o["partition"] == ["gb300"] and o["account"] == ["infer"]
    assert o["exclusive"] == [""] and o["constraint"] == ["nvl72"]
    assert o["container-image"] == ["nvcr.io#org/fasttrack-eval:0.1.0"] and o["container-mounts"] == ["/shared:/shared"]
    assert o["time"] == ["0-02:00:00"] and "WARNING: that exceeds the site's max_time_min (120)" in text
    assert "export HF_HOME=/shared/hf" in text and "module load cuda/12.9" in text
    # the multi-node launcher's node tasks run in the same image
    line = next(ln for ln in text.splitlines() if ln.startswith("export FASTTRACK_SRUN_ARGS="))
    value = shlex.split(line.split("=", 1)[1])[0]
    assert shlex.split(value) == [
        "--container-image=nvcr.io#org/fasttrack-eval:0.1.0",
        "--container-mounts=/shared:/shared",
    ]
    assert "exec /shared/venv/bin/fasttrack validate" in text and "--sign-key /shared/keys/me" in text


def test_site_profile_rejects_unknown_keys(tmp_path: Path) -> None:
    from fasttrack.errors import FasttrackError

    p = tmp_path / "site.yaml"
    p.write_text("slurm:\n  partitoin: gpu\n")
    with pytest.raises(FasttrackError, match="slurm.partitoin"):
        load_site(p)


def test_cli_dry_run_prints_every_script(tmp_path: Path) -> None:
    res = subprocess.run(
        [sys.executable, "-m", "fasttrack", "slurm", "--dry-run", "--model", "kimi-k3", "--tier", "full"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert res.returncode == 0, res.stderr
    names = re.findall(r"^# ==> (\S+) <==$", res.stdout, re.M)
    assert names == ["array-2n4g.sbatch", "array-4n4g.sbatch", "merge.sbatch", "submit.sh", "fasttrack-job.json"]
    job = json.loads(res.stdout.split("# ==> fasttrack-job.json <==\n", 1)[1])
    assert job["shard_count"] == 36 and job["tier"] == "full" and len(job["shards"]) == 36
    assert not (tmp_path / "runs").exists(), "--dry-run writes nothing"
    assert "36 shard(s) in 2 array(s)" in res.stderr


def test_unknown_shard_count_is_a_user_error() -> None:
    res = subprocess.run(
        [sys.executable, "-m", "fasttrack", "slurm", "--dry-run", "--model", "kimi-k3", "--shards", "zero"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert res.returncode == 2 and "--shards 'zero'" in res.stderr and "Traceback" not in res.stderr


def test_engines_spanning_nodes_ask_for_one_nvlink_domain(k3, tmp_path: Path) -> None:
    """K3's engines span GB300 trays over the multi-node NVLink fabric: each array asks Slurm for nodes of one
    block (topology/block: one block per NVL72 rack) unless the site says how its domains are modelled."""
    _, lay = k3
    opts = slurm.SlurmOptions(ValidateOptions("kimi-k3", "full"), job_dir=tmp_path)
    for script in slurm.render(lay, load_site(None), opts).arrays:
        o = _sbatch(script.text)
        assert o["segment"] == o["nodes"], script.name
    site_file = tmp_path / "site.yaml"
    for placement, want in (
        ("{mode: switches, switches_wait: '2:00:00'}", ("switches", "1@2:00:00")),
        ("{mode: constraint, domains: [nvl-a, nvl-b]}", ("constraint", "[nvl-a|nvl-b]")),
    ):
        site_file.write_text(f"slurm:\n  placement: {placement}\n")
        o = _sbatch(slurm.render(lay, load_site(site_file), opts).arrays[0].text)
        assert o[want[0]] == [want[1]] and "segment" not in o
    site_file.write_text("slurm:\n  placement: {mode: none}\n")
    text = slurm.render(lay, load_site(site_file), opts).arrays[0].text
    assert "--segment" not in text and "# placement: none" in text
    site_file.write_text("slurm:\n  placement: {mode: constraint}\n")
    with pytest.raises(FasttrackError, match="placement.domains"):
        slurm.render(lay, load_site(site_file), opts)
    # single-node engines (the demo) need no placement
    demo = layout(load_scope("demo-llama"), tier="smoke", shards=2)
    text = slurm.render(
        demo, load_site(None), slurm.SlurmOptions(ValidateOptions("demo-llama", "smoke"), job_dir=tmp_path)
    )
    assert "placement" not in text.arrays[0].text


def test_arrays_are_throttled_and_the_merge_job_has_its_own_settings(k3, tmp_path: Path) -> None:
    _, lay = k3
    site_file = tmp_path / "site.yaml"
    site_file.write_text(
        "slurm:\n  partition: gb300\n  account: infer\n  sbatch: ['--exclusive']\n  max_parallel: 3\n"
        "  merge: {partition: cpu, sbatch: ['--mem=8G'], time_min: 45}\n"
    )
    site = load_site(site_file)
    rendered = slurm.render(lay, site, slurm.SlurmOptions(ValidateOptions("kimi-k3", "full"), job_dir=tmp_path))
    for script in rendered.arrays:
        o = _sbatch(script.text)
        assert o["array"][0].endswith("%3") and o["exclusive"] == [""] and o["partition"] == ["gb300"]
    m = _sbatch(rendered.merge.text)
    assert m["partition"] == ["cpu"] and m["account"] == ["infer"] and m["mem"] == ["8G"]
    assert "exclusive" not in m and m["time"] == ["0-00:45:00"]
    # --max-parallel wins over the site's
    text = slurm.render(
        lay, site, slurm.SlurmOptions(ValidateOptions("kimi-k3", "full"), job_dir=tmp_path, max_parallel=5)
    )
    assert _sbatch(text.arrays[0].text)["array"][0].endswith("%5")
    # an older profile's merge keys still mean the merge job's
    site_file.write_text("slurm:\n  sbatch: ['--exclusive']\n  merge_sbatch: ['--mem=4G']\n  merge_time_min: 20\n")
    m = _sbatch(
        slurm.render(
            lay, load_site(site_file), slurm.SlurmOptions(ValidateOptions("kimi-k3", "full"), job_dir=tmp_path)
        ).merge.text
    )
    assert m["mem"] == ["4G"] and "exclusive" not in m and m["time"] == ["0-00:20:00"]


def test_every_shard_validates_the_pr_head(k3, tmp_path: Path) -> None:
    _, lay = k3
    head = "a" * 40
    pr = ValidateOptions("kimi-k3", "full", repo=Path("/shared/vllm"), base="b" * 40, head=head)
    rendered = slurm.render(lay, load_site(None), slurm.SlurmOptions(pr, job_dir=tmp_path))
    for script in rendered.arrays:
        line = next(ln for ln in script.text.splitlines() if ln.startswith("exec fasttrack validate"))
        argv = shlex.split(line)
        assert argv[argv.index("--repo") + 1] == "/shared/vllm" and argv[argv.index("--head") + 1] == head
        assert argv[argv.index("--base") + 1] == "b" * 40
    assert rendered.job["pr"] == {"repo": "/shared/vllm", "base": "b" * 40, "head": head}
    res = subprocess.run(
        [sys.executable, "-m", "fasttrack", "slurm", "--dry-run", "--model", "kimi-k3", "--repo", "/x"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert res.returncode == 2 and "need --head" in res.stderr
