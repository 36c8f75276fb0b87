"""`fasttrack image`: the engine image of a PR head, tested without a container runtime (none runs here).

What is tested: the build folder (the Containerfile, the PR's checkout at the head holding the merge base, this
fasttrack's source), how the kernels are built (precompiled unless the PR changes compiled sources), the builder's
commands, the digest read back from what the builder writes (a stand-in docker/podman on PATH), the record the
renderers read, and the jobs rendered from it: every Slurm shard and Kubernetes pod pins the digest and runs
validate with the PR's --repo/--base/--head. What is not run here: a real image build and push."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from git_testlib import commit, git, init_repo, write

from fasttrack import ROOT
from fasttrack.errors import FasttrackError
from fasttrack.executors.image import CONTAINERFILE, VLLM_SRC, ImageBuild, ImageRequest, build_image, plan_image

BASE_IMAGE = "vllm/vllm-openai@sha256:" + "ab" * 32
DIGEST = "sha256:" + "cd" * 32
FT = [sys.executable, "-m", "fasttrack"]


@pytest.fixture
def pr_repo(tmp_path: Path) -> tuple[Path, str, str]:
    """A vLLM-shaped repository: main, and a PR branch with a Python-only change and one commit more on main."""
    repo = tmp_path / "vllm"
    init_repo(repo, {"vllm/__init__.py": "", "csrc/ops.cu": "// kernels\n", "setup.py": "# setup\n"})
    git(repo, "checkout", "-q", "-b", "pr")
    write(repo, "vllm/model_executor/models/kimi_k3/fast.py", "FAST = 1\n")
    head = commit(repo, "fast path")
    git(repo, "checkout", "-q", "main")
    write(repo, "README.md", "later on main\n")
    commit(repo, "main moves on")
    return repo, "main", head


def _fake_builder(tmp_path: Path, name: str) -> Path:
    """A stand-in builder that logs its argv and writes the digest files docker buildx / podman write."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    fake = bin_dir / name
    fake.write_text(
        "#!/usr/bin/env python3\n"
        "import json, sys\n"
        f"open({str(tmp_path / 'calls')!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n"
        "a = sys.argv[1:]\n"
        f"d = {DIGEST!r}\n"
        "for flag, write in (('--metadata-file', lambda p: json.dump({'containerimage.digest': d}, open(p, 'w'))),\n"
        "                    ('--iidfile', lambda p: open(p, 'w').write('sha256:' + 'ee' * 32)),\n"
        "                    ('--digestfile', lambda p: open(p, 'w').write(d))):\n"
        "    if flag in a: write(a[a.index(flag) + 1])\n"
    )
    fake.chmod(0o755)
    return bin_dir


def test_a_python_only_pr_builds_on_precompiled_kernels_of_its_merge_base(pr_repo, tmp_path: Path) -> None:
    repo, base, head = pr_repo
    merge_base = git(repo, "merge-base", "main", head)
    rec = build_image(
        ImageRequest(repo=repo, base=base, head="pr", base_image=BASE_IMAGE, out=tmp_path / "b"), dry_run=True
    )
    assert rec["head"] == head and rec["base"] == merge_base and rec["repo"] == VLLM_SRC
    assert rec["precompiled"] is True and "merge base's precompiled kernels" in rec["precompiled_reason"]
    (cmd,) = rec["commands"]
    assert cmd[:3] == ["docker", "buildx", "build"] and "--load" in cmd and rec["image"] is None
    args = dict(cmd[i + 1].split("=", 1) for i, a in enumerate(cmd) if a == "--build-arg")
    assert args["BASE_IMAGE"] == BASE_IMAGE and args["VLLM_HEAD"] == head and args["VLLM_MERGE_BASE"] == merge_base
    assert args["PRECOMPILED"] == "1" and args["LM_EVAL_SPEC"].startswith("lm-eval")
    # every build argument is declared in the Containerfile, and the base image is only ever that argument
    declared = set(re.findall(r"^ARG (\w+)", CONTAINERFILE, re.M))
    assert set(args) <= declared and "FROM ${BASE_IMAGE}" in CONTAINERFILE
    # the context: the PR's checkout at the head, holding the merge base, clean (what validate --repo reads)
    ctx = tmp_path / "b" / "context"
    assert git(ctx / "vllm", "rev-parse", "HEAD") == head
    assert git(ctx / "vllm", "cat-file", "-t", merge_base) == "commit"
    assert git(ctx / "vllm", "diff", "--name-only", merge_base, head) == "vllm/model_executor/models/kimi_k3/fast.py"
    assert git(ctx / "vllm", "status", "--porcelain") == ""
    assert (ctx / "fasttrack" / "pyproject.toml").is_file() and (
        ctx / "fasttrack" / "fasttrack" / "cli" / "__init__.py"
    ).is_file()
    assert not list((ctx / "fasttrack").rglob("__pycache__"))
    assert (tmp_path / "b" / "Containerfile").read_text() == CONTAINERFILE


def test_a_pr_changing_compiled_sources_compiles_its_kernels(pr_repo, tmp_path: Path) -> None:
    repo, base, _ = pr_repo
    git(repo, "checkout", "-q", "pr")
    write(repo, "csrc/ops.cu", "// changed kernels\n")
    head = commit(repo, "kernel change")
    plan = plan_image(ImageRequest(repo=repo, base=base, head=head, base_image=BASE_IMAGE, out=tmp_path / "b"))
    assert plan.precompiled is False and plan.kernel_paths == ["csrc/ops.cu"]
    assert "csrc/ops.cu" in plan.precompiled_reason and plan.build_args["PRECOMPILED"] == "0"
    with pytest.raises(FasttrackError, match="precompiled kernels would be the merge base's"):
        plan_image(ImageRequest(repo=repo, base=base, head=head, base_image=BASE_IMAGE, precompiled="yes"))


def test_the_base_image_must_be_pinned_by_digest(pr_repo, tmp_path: Path) -> None:
    repo, base, head = pr_repo
    res = subprocess.run(
        [*FT, "image", "--repo", str(repo), "--base", base, "--head", head, "--base-image", "vllm/vllm-openai:v0.32.0"]
        + ["-o", str(tmp_path / "b"), "--dry-run"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert res.returncode == 2 and "not pinned by digest" in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "b").exists()


@pytest.mark.parametrize("builder", ["docker", "podman"])
def test_a_build_prints_the_digest_and_the_jobs_pin_it_with_the_pr_head(pr_repo, tmp_path: Path, builder: str) -> None:
    repo, base, head = pr_repo
    bin_dir = _fake_builder(tmp_path, builder)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "PYTHONPATH": str(ROOT), "HOME": str(tmp_path)}
    out = tmp_path / "b"
    res = subprocess.run(
        [*FT, "image", "--repo", str(repo), "--base", base, "--head", head, "--base-image", BASE_IMAGE]
        + ["--tag", "registry.example/ft-pr:1", "--builder", builder, "--push", "-o", str(out)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
    )
    assert res.returncode == 0, res.stderr
    printed = json.loads(res.stdout.strip().splitlines()[-1])
    assert printed == {"image": f"registry.example/ft-pr:1@{DIGEST}", "digest": DIGEST}
    calls = [json.loads(ln) for ln in (tmp_path / "calls").read_text().splitlines()]
    assert ("--push" in calls[0]) if builder == "docker" else calls[1][:2] == ["push", "--digestfile"]
    build = ImageBuild.load(out / "image.json")
    assert (build.image, build.repo, build.head) == (printed["image"], VLLM_SRC, head)

    # Slurm: every shard runs in the pinned image and validates the PR head
    job = tmp_path / "job"
    res = subprocess.run(
        [*FT, "slurm", "render", "--model", "demo-llama", "--shards", "2", "--image-build", str(out / "image.json")]
        + ["-o", str(job)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert res.returncode == 0, res.stderr
    text = (job / "array-1n.sbatch").read_text()
    assert f"#SBATCH --container-image=registry.example/ft-pr:1@{DIGEST}" in text
    assert f"export FASTTRACK_IMAGE_DIGEST={DIGEST}" in text
    assert f"--repo {VLLM_SRC} --base {build.base} --head {head}" in text
    assert json.loads((job / "fasttrack-job.json").read_text())["pr"]["head"] == head


def test_a_dry_run_record_is_not_an_image(pr_repo, tmp_path: Path) -> None:
    repo, base, head = pr_repo
    build_image(ImageRequest(repo=repo, base=base, head=head, base_image=BASE_IMAGE, out=tmp_path / "b"), dry_run=True)
    with pytest.raises(FasttrackError, match="names no image pinned by digest"):
        ImageBuild.load(tmp_path / "b" / "image.json")
