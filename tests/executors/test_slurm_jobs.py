"""submit / status / resubmit / merge's view of Slurm against stand-in sbatch, scontrol and scancel
(recorded shapes of Slurm 22.05's `sbatch --parsable` and `scontrol -o show job` output)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from fasttrack.errors import FasttrackError
from fasttrack.executors import slurm
from fasttrack.executors.shards import layout
from fasttrack.executors.site import load_site
from fasttrack.executors.slurm_jobs import describe_absent, resubmit, shard_jobs, status, submit, task_states
from fasttrack.pipeline.options import ValidateOptions
from fasttrack.scope import load_scope

SCONTROL = {
    # array 101: task 2 ended, task 1 cancelled while running; 3 still pending (grouped record)
    "101": [
        "JobId=104 ArrayJobId=101 ArrayTaskId=2 JobName=ft-demo-llama-smoke-1n JobState=COMPLETED Reason=None "
        "ExitCode=0:0 NodeList=n1 StdOut={job}/logs/ft-demo-llama-smoke-1n-101_2.out",
        "JobId=101 ArrayJobId=101 ArrayTaskId=1 JobName=ft-demo-llama-smoke-1n JobState=CANCELLED Reason=None "
        "ExitCode=0:15 NodeList=n2 StdOut={job}/logs/ft-demo-llama-smoke-1n-101_1.out",
        "JobId=105 ArrayJobId=101 ArrayTaskId=3 JobName=ft-demo-llama-smoke-1n JobState=PENDING "
        "Reason=Resources ExitCode=0:0 NodeList=(null) StdOut={job}/logs/ft-demo-llama-smoke-1n-%A_%a.out",
    ],
    "102": ["JobId=102 JobName=ft-demo-llama-smoke-merge JobState=PENDING Reason=Dependency ExitCode=0:0"],
    "201": [
        "JobId=201 ArrayJobId=201 ArrayTaskId=1 JobName=ft-demo-llama-smoke-1n JobState=RUNNING Reason=None "
        "ExitCode=0:0 NodeList=n1 StdOut={job}/logs/ft-demo-llama-smoke-1n-201_1.out"
    ],
}


@pytest.fixture()
def fake_slurm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls"
    (tmp_path / "ids").write_text("101\n102\n201\n202\n")
    (bin_dir / "sbatch").write_text(
        f'#!/bin/bash\necho "sbatch $*" >> {calls}\nid=$(head -1 {tmp_path}/ids); sed -i 1d {tmp_path}/ids\n'
        'echo "$id;local"\n'
    )
    (bin_dir / "scancel").write_text(f'#!/bin/bash\necho "scancel $*" >> {calls}\n')
    (tmp_path / "records.json").write_text(json.dumps(SCONTROL))
    (bin_dir / "scontrol").write_text(
        "#!/usr/bin/env python3\nimport json, sys\n"
        f"recs = json.load(open({str(tmp_path / 'records.json')!r}))\n"
        "job = sys.argv[-1]\n"
        "if job not in recs:\n"
        "    print('slurm_load_jobs error: Invalid job id specified', file=sys.stderr)\n"
        "    sys.exit(1)\n"
        f"print('\\n'.join(r.replace('{{job}}', {str(tmp_path / 'job')!r}) for r in recs[job]))\n"
    )
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return calls


@pytest.fixture()
def job_dir(tmp_path: Path) -> Path:
    lay = layout(load_scope("demo-llama"), tier="smoke", shards=3)
    d = tmp_path / "job"
    slurm.write(
        slurm.render(lay, load_site(None), slurm.SlurmOptions(ValidateOptions("demo-llama", "smoke"), job_dir=d)), d
    )
    return d


def test_submit_status_and_absent_shards(fake_slurm: Path, job_dir: Path) -> None:
    ids = submit(job_dir)
    assert ids["arrays"] == {"array-1n.sbatch": "101"} and ids["merge"] == "102"
    assert fake_slurm.read_text().splitlines() == [
        f"sbatch --parsable {job_dir}/array-1n.sbatch",
        f"sbatch --parsable --dependency=afterany:101 {job_dir}/merge.sbatch",
    ]
    with pytest.raises(FasttrackError, match="already submitted"):
        submit(job_dir)
    job = json.loads((job_dir / "fasttrack-job.json").read_text())
    states = task_states(job)
    assert states[1].state == "CANCELLED" and states[1].exit_code == "0:15" and states[1].nodes == "n2"
    assert states[2].log == f"{job_dir}/logs/ft-demo-llama-smoke-1n-101_2.out"
    # a pending task's record names a pattern: the log path is computed
    assert states[3].state == "PENDING" and states[3].log == f"{job_dir}/logs/ft-demo-llama-smoke-1n-101_3.out"
    (job_dir / "logs" / "ft-demo-llama-smoke-1n-101_1.out").write_text(
        "check kernels: running\nslurmstepd: error: *** JOB 101 ON n2 CANCELLED AT 2026-01-01T00:00:00 ***\n"
    )
    note, info = describe_absent(job, states)(job["shards"][0])
    assert note.startswith("wrote no bundle; Slurm job 101_1 ended CANCELLED (exit code 0:15); log ")
    assert "(last line: slurmstepd: error: *** JOB 101 ON n2 CANCELLED" in note and info["job_id"] == "101_1"
    st = status(job_dir)
    assert [s["state"] for s in st["shards"]] == ["CANCELLED", "COMPLETED", "PENDING"]
    assert all(s["bundle"] is None for s in st["shards"])
    assert st["merge"] == {"job_id": "102", "state": "PENDING"}


def test_resubmit_one_shard_and_its_merge(fake_slurm: Path, job_dir: Path) -> None:
    submit(job_dir)
    rec = resubmit(job_dir, [1])
    assert rec["arrays"] == {"array-1n.sbatch": "201"} and rec["merge"] == "202"
    assert fake_slurm.read_text().splitlines()[-2:] == [
        "sbatch --parsable --array=1 array-1n.sbatch",
        f"sbatch --parsable --dependency=afterany:201 {job_dir}/merge.sbatch",
    ]
    job = json.loads((job_dir / "fasttrack-job.json").read_text())
    assert {i: jid for i, (_, jid) in shard_jobs(job).items()} == {1: "201", 2: "101", 3: "101"}
    states = task_states(job)
    assert states[1].job_id == "201_1" and states[1].state == "RUNNING" and states[2].job_id == "101_2"
    assert status(job_dir)["merge"]["job_id"] == "202"
    with pytest.raises(FasttrackError, match="no shard"):
        resubmit(job_dir, [9])


def test_failed_sbatch_cancels_what_was_submitted(fake_slurm: Path, tmp_path: Path) -> None:
    lay = layout(load_scope("kimi-k3"), tier="full")
    d = tmp_path / "job"
    slurm.write(
        slurm.render(lay, load_site(None), slurm.SlurmOptions(ValidateOptions("kimi-k3", "full"), job_dir=d)), d
    )
    (d / "array-4n4g.sbatch").unlink()  # the second array's sbatch fails
    sb = Path(os.environ["PATH"].split(os.pathsep)[0]) / "sbatch"
    sb.write_text(sb.read_text().replace('echo "sbatch $*"', '[ -f "${@: -1}" ] || exit 1; echo "sbatch $*"'))
    with pytest.raises(FasttrackError, match="array-4n4g.sbatch failed"):
        submit(d)
    assert fake_slurm.read_text().splitlines()[-1] == "scancel 101"
    assert json.loads((d / "fasttrack-job.json").read_text())["submitted"] is None


def test_task_note_only_for_jobs_the_scheduler_stopped() -> None:
    from fasttrack.executors.slurm_jobs import task_note

    base = {"job_id": "5_1", "log": "/j/logs/x-5_1.out"}
    assert task_note({**base, "state": "COMPLETED", "exit_code": "0:0"}) is None
    assert task_note({**base, "state": "FAILED", "exit_code": "1:0"}) is None  # a verdict short of pass
    assert task_note({**base, "state": "CANCELLED", "exit_code": "0:15"}) == (
        "Slurm job 5_1 ended CANCELLED (exit code 0:15); log /j/logs/x-5_1.out"
    )
    assert (
        task_note({**base, "state": "TIMEOUT", "exit_code": "0:0"})
        == "Slurm job 5_1 ended TIMEOUT; log /j/logs/x-5_1.out"
    )
    assert "FAILED (exit code 2:0)" in (task_note({**base, "state": "FAILED", "exit_code": "2:0"}) or "")
    assert task_note({}) is None
