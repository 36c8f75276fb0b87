"""validate's options, declared once (fasttrack/pipeline/options.py), and the scheduler interface both Slurm and
Kubernetes implement (fasttrack/executors/scheduler.py): the command line they read, the command line every
shard runs, and ``kubectl`` through a stand-in."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest
import typer.main

from fasttrack import registry
from fasttrack.errors import FasttrackError
from fasttrack.executors import k8s
from fasttrack.executors.scheduler import MergeNotes, scheduler
from fasttrack.executors.shards import layout
from fasttrack.executors.site import load_site
from fasttrack.pipeline.options import ValidateOptions, flags_of
from fasttrack.scope import load_scope


def _commands() -> dict[str, Any]:
    """Every click command of ``fasttrack``, by its path (``validate``, ``slurm render``, ...)."""
    from fasttrack.cli import _register_subcommands, app

    _register_subcommands([])
    out: dict[str, Any] = {}

    def walk(cmd: Any, path: str) -> None:
        subs = getattr(cmd, "commands", None)
        if subs:
            for name, sub in subs.items():
                walk(sub, f"{path} {name}".strip())
        else:
            out[path] = cmd

    walk(typer.main.get_command(app), "")
    return out


def test_validate_reads_back_the_command_line_its_options_write() -> None:
    opts = ValidateOptions(
        model="/s/scope.yaml",
        tier="full",
        shard="2/3",
        out=Path("/runs/x"),
        force=True,
        sign_keys=[Path("/k/a"), Path("/k/b")],
        repo=Path("/src/vllm"),
        base="main",
        head="a" * 40,
        pr="vllm-project/vllm#1",
        checks=["kernels", "perf"],
        groups=["tp1-dcp1-none"],
        allow_hardware_mismatch=True,
        baseline_url="http://b:1",
        candidate_url="http://c:2",
        reference_urls={"eager": "http://e:3", "float32": "http://f:4"},
        eval_data={"aime25": Path("/d/aime.jsonl")},
        run_anyway=True,
        launcher="local",
    )
    argv = opts.to_argv()
    assert argv[:4] == ["--model", "/s/scope.yaml", "--tier", "full"] and argv.count("--sign-key") == 2
    validate = _commands()["validate"]
    ctx = validate.make_context("validate", list(argv))
    assert ValidateOptions.from_cli(**ctx.params) == opts
    # the defaults write nothing but the scope and the tier
    assert ValidateOptions("demo-llama").to_argv() == ["--model", "demo-llama", "--tier", "smoke"]
    assert ValidateOptions("m", shard="1/2", out=Path("o")).to_argv(only=("out",)) == ["--out", "o"]


def test_every_command_takes_validates_options_as_validate_declares_them() -> None:
    """``--sign-key``, ``--model``, ``--tier``, ``--repo``, ``--base`` and ``--head`` have validate's names
    everywhere (the kernel tier of ``fasttrack kernels`` is another thing), and every key that signs a bundle is
    repeatable (a calibration record has one signer)."""
    flags = flags_of(ValidateOptions)
    shared = {f.long: f for f in flags.values()}
    seen: dict[str, list[str]] = {}
    for path, cmd in _commands().items():
        for p in cmd.params:
            long = next((o for o in p.opts if o.startswith("--")), None)
            if long in ("--sign-key", "--model", "--tier", "--repo", "--base", "--head") and path != "kernels":
                seen.setdefault(long, []).append(path)
                assert sorted(p.opts) == sorted(shared[long].names), (path, p.opts)
                if long == "--sign-key" and path != "calibrate":
                    assert p.multiple, f"{path}: --sign-key is repeatable"
    assert {"validate", "slurm render", "slurm merge", "k8s render", "k8s merge", "merge"} <= set(seen["--sign-key"])
    assert {"validate", "plan", "doctor", "slurm render", "k8s render"} <= set(seen["--tier"])


def test_the_pr_option_is_checked_where_the_options_are_made() -> None:
    assert ValidateOptions("m", pr="org/vllm#12").pr_repository == "org/vllm"
    assert ValidateOptions("m", pr="org/vllm#12").pr_number == 12
    with pytest.raises(FasttrackError, match="is not of the form OWNER/REPO#NUMBER"):
        ValidateOptions("m", pr="12")
    with pytest.raises(FasttrackError, match="is not of the form NAME=PATH"):
        ValidateOptions.from_cli(model="m", eval_data=["aime25"])


def test_slurm_and_kubernetes_are_the_registered_schedulers() -> None:
    assert registry.names("scheduler") == ["slurm", "kubernetes"]
    for name in ("slurm", "kubernetes"):
        s = scheduler(name)
        assert s.name == name
        for method in ("render", "write", "submit", "status", "describe_absent"):
            assert callable(getattr(s, method)), (name, method)
    with pytest.raises(registry.UnknownComponent, match="unknown scheduler 'pbs'; registered: slurm, kubernetes"):
        scheduler("pbs")


def test_a_kubernetes_signing_key_is_a_file_of_the_sites_secret() -> None:
    with pytest.raises(FasttrackError, match="a signing key is a file of the site's kubernetes.sign_key_secret"):
        k8s.K8sOptions(ValidateOptions("kimi-k3", sign_keys=[Path("/shared/keys/me")]))
    opts = k8s.K8sOptions(ValidateOptions("demo-llama", sign_keys=[Path("/fasttrack-key/key")]))
    with pytest.raises(FasttrackError, match="--sign-key needs kubernetes.sign_key_secret"):
        k8s.render(layout(load_scope("demo-llama"), tier="smoke"), load_site(None), opts)


def _fake_kubectl(bin_dir: Path, jobs: list[dict[str, Any]], calls: Path) -> None:
    bin_dir.mkdir()
    tool = bin_dir / "kubectl"
    tool.write_text(
        "#!/bin/sh\n"
        f'echo "$@" >> {calls}\n'
        'if [ "$1" = apply ]; then echo "job.batch/ft-kimi-k3-full-shards created"; exit 0; fi\n'
        f"cat <<'EOF'\n{json.dumps({'items': jobs})}\nEOF\n"
    )
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)


def test_kubernetes_submits_with_kubectl_apply_and_reads_each_shards_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lay = layout(load_scope("kimi-k3"), tier="full")
    rendered = k8s.render(lay, load_site(None), k8s.K8sOptions(ValidateOptions("kimi-k3")))
    kube = scheduler("kubernetes")
    folder = tmp_path / "manifests"
    kube.write(rendered, folder)
    name = rendered.job["name"]
    where = rendered.job["shard_jobs"]
    multi = next(s for s, w in where.items() if w["completion_index"] is None)
    jobs = [{"metadata": {"name": where[multi]["job"]}, "status": {"failed": 1}}]
    jobs.append({"metadata": {"name": f"{name}-merge"}, "status": {"active": 1}})
    calls = tmp_path / "calls"
    _fake_kubectl(tmp_path / "bin", jobs, calls)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    assert kube.submit(folder)["applied"] == [f"job.batch/{name}-shards created"]
    st = kube.status(folder)
    states = {s["shard"]: s["state"] for s in st["shards"]}
    assert states[multi] == "failed" and st["merge"]["state"] == "running"
    assert sum(v == "not found" for v in states.values()) == len(states) - 1
    assert calls.read_text().splitlines() == [
        f"apply -f {folder}",
        f"get jobs -n default -l fasttrack.dev/job={name} -o json",
    ]


def test_an_indexed_jobs_completion_indexes_are_its_shards_states() -> None:
    from fasttrack.executors.k8s_jobs import job_state

    job = {"status": {"completedIndexes": "0-2,5", "failedIndexes": "3", "active": 1}}
    assert [job_state(job, i) for i in range(7)] == [
        "succeeded",
        "succeeded",
        "succeeded",
        "failed",
        "running",
        "succeeded",
        "running",
    ]
    assert job_state({"status": {}}, None) == "pending"


def test_the_merge_hears_each_scheduler_about_its_absent_shards(tmp_path: Path) -> None:
    (tmp_path / "shards" / "shard-2-of-2").mkdir(parents=True)
    (tmp_path / "shards" / "shard-2-of-2" / "exit-status").write_text("137\n")
    job = {
        "executor": "kubernetes",
        "namespace": "evals",
        "shard_jobs": {"2/2": {"job": "ft-x-shards", "completion_index": 1}},
    }
    notes = scheduler(job["executor"]).describe_absent(job, tmp_path)
    assert isinstance(notes, MergeNotes) and notes.details is None
    note, known = notes.describe_absent({"shard": "2/2", "dir": "shards/shard-2-of-2"})
    assert "exited with status 137" in note and known["exit_status"] == "137"
    slurm = scheduler("slurm").describe_absent({"executor": "slurm", "arrays": [], "shards": []}, tmp_path)
    assert "records no Slurm submission" in slurm.describe_absent({"shard": "1/2", "dir": "shards/shard-1-of-2"})[0]
