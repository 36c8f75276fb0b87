"""``fasttrack image``: the engine image of a PR head, for the cluster runs that validate it.

The image is the PR under test, not stock vLLM:

* the base image, pinned by digest (``vllm/vllm-openai@sha256:...``: its CUDA, torch and system libraries);
* the PR's vLLM at the head commit, installed editable from ``/opt/vllm-src``, a checkout holding the head and
  the merge base (two commits, fetched shallow), so ``validate --repo /opt/vllm-src --base <merge base> --head
  <head>`` checks the diff inside the cluster and the engines' provenance reads the commit they served
  (``git rev-parse HEAD`` of that clean checkout). When the diff touches no compiled source (``csrc/``, CMake,
  ``setup.py``, C++/CUDA files) the kernels come precompiled: vLLM's ``VLLM_USE_PRECOMPILED=1`` with
  ``VLLM_PRECOMPILED_WHEEL_COMMIT`` at the merge base (the kernels the PR did not change); otherwise they are
  compiled from the head;
* this fasttrack (the source tree it runs from) and lm-eval, at the version ``pyproject.toml`` pins.

The build runs ``docker buildx build`` (``--metadata-file``: the pushed manifest's digest) or ``podman build``
(``--iidfile``; ``podman push --digestfile``). It prints the digest and writes ``image.json``: the pinned
reference, the base image, the PR's refs and commits, how the kernels were built. ``fasttrack slurm`` and
``fasttrack k8s render`` take that record (``--image-build``) and pin the digest in every job, with the PR's
``--repo/--base/--head``. ``--dry-run`` writes the build folder and prints the commands without running them.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import shutil
import subprocess
import tomllib
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from fasttrack import ROOT, __version__
from fasttrack.change.diff import glob_match, resolve_refs
from fasttrack.errors import FasttrackError

VLLM_SRC = "/opt/vllm-src"
"""Where the PR's checkout lies in the image (``validate --repo``)."""
RECORD = "image.json"
KERNEL_SOURCES = (
    "csrc/**",
    "cmake/**",
    "CMakeLists.txt",
    "setup.py",
    "requirements/build.txt",
    "**/*.cu",
    "**/*.cuh",
    "**/*.cpp",
    "**/*.cc",
    "**/*.h",
    "**/*.hpp",
)
"""Paths whose change needs the kernels compiled from the head (precompiled kernels are the merge base's)."""
_PINNED = re.compile(r"^[a-z0-9][a-z0-9._/:-]*(?::[\w][\w.-]{0,127})?@sha256:[0-9a-f]{64}$")
_TAG = re.compile(r"^[a-z0-9][a-z0-9._/:-]*(?::[\w][\w.-]{0,127})?$")
FASTTRACK_FILES = ("pyproject.toml", "setup.py", "README.md", "fasttrack", "suites", "templates", "schemas", "examples")

CONTAINERFILE = """\
# The engine image of a PR head, written by `fasttrack image` (fasttrack/executors/image.py).
# Every value comes in as a build argument; the base image is pinned by digest.
ARG BASE_IMAGE
FROM ${BASE_IMAGE}
ARG BASE_IMAGE
ARG VLLM_HEAD
ARG VLLM_MERGE_BASE
ARG PRECOMPILED=1
ARG LM_EVAL_SPEC
ARG FASTTRACK_VERSION
LABEL org.opencontainers.image.title="fasttrack-pr" \\
      org.opencontainers.image.base.name="${BASE_IMAGE}" \\
      org.opencontainers.image.revision="${VLLM_HEAD}" \\
      dev.fasttrack.vllm-merge-base="${VLLM_MERGE_BASE}" \\
      dev.fasttrack.precompiled="${PRECOMPILED}" \\
      dev.fasttrack.version="${FASTTRACK_VERSION}"
COPY vllm /opt/vllm-src
WORKDIR /opt/vllm-src
# the PR's vLLM, editable: precompiled kernels of the merge base, or compiled from the head
RUN test "$(git rev-parse HEAD)" = "${VLLM_HEAD}" \\
 && if [ "${PRECOMPILED}" = "1" ]; then \\
      VLLM_USE_PRECOMPILED=1 VLLM_PRECOMPILED_WHEEL_COMMIT="${VLLM_MERGE_BASE}" \\
        python3 -m pip install --no-cache-dir --editable . ; \\
    else \\
      python3 use_existing_torch.py \\
      && python3 -m pip install --no-cache-dir -r requirements/build.txt \\
      && python3 -m pip install --no-cache-dir --no-build-isolation --editable . ; \\
    fi \\
 && test -z "$(git status --porcelain --untracked-files=no)" \\
 && python3 -c "import os, vllm; p = os.path.realpath(vllm.__file__); assert p.startswith('/opt/vllm-src/'), p"
COPY fasttrack /opt/fasttrack
RUN python3 -m pip install --no-cache-dir /opt/fasttrack "${LM_EVAL_SPEC}" \\
 && python3 -c "import os, vllm; assert os.path.realpath(vllm.__file__).startswith('/opt/vllm-src/')" \\
 && fasttrack --version
ENV PYTHONUNBUFFERED=1 \\
    FASTTRACK_VLLM_SRC=/opt/vllm-src
WORKDIR /work
ENTRYPOINT []
CMD ["fasttrack", "--help"]
"""


@dataclass
class ImageRequest:
    repo: Path
    base: str
    head: str
    base_image: str
    """The base image, pinned by digest (``name@sha256:...``)."""
    tag: str | None = None
    """Where the image goes (``registry/name:tag``); default ``fasttrack-pr:<head, 12 digits>``."""
    builder: Literal["docker", "podman"] = "docker"
    push: bool = False
    precompiled: Literal["auto", "yes", "no"] = "auto"
    out: Path = Path("runs/image")


@dataclass
class ImagePlan:
    """What a build of ``request`` does: the commits, how the kernels are built and why, the commands."""

    tag: str
    base_image: str
    repo: str
    base_ref: str
    head_ref: str
    merge_base: str
    head: str
    precompiled: bool
    precompiled_reason: str
    kernel_paths: list[str]
    build_args: dict[str, str]
    commands: list[list[str]] = field(default_factory=list)

    def record(self, *, digest: str | None, pushed: bool, builder: str) -> dict[str, Any]:
        """``image.json``: what the renderers read (``--image-build``)."""
        return {
            "image": f"{self.tag}@{digest}" if digest else None,
            "tag": self.tag,
            "digest": digest,
            "pushed": pushed,
            "builder": builder,
            "base_image": self.base_image,
            "repo": VLLM_SRC,
            "source_repo": self.repo,
            "base": self.merge_base,
            "base_ref": self.base_ref,
            "head": self.head,
            "head_ref": self.head_ref,
            "precompiled": self.precompiled,
            "precompiled_reason": self.precompiled_reason,
            "kernel_paths": self.kernel_paths,
            "fasttrack_version": __version__,
            "containerfile_sha256": hashlib.sha256(CONTAINERFILE.encode()).hexdigest(),
        }


def _git(repo: Path, *args: str) -> str:
    res = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise FasttrackError(f"git {' '.join(args)} failed in {repo}: {res.stderr.strip()}")
    return res.stdout


def lm_eval_spec() -> str:
    """lm-eval as pyproject.toml pins it for GPU hosts (the image's evals)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for req in project["optional-dependencies"]["gpu"]:
        if req.replace(" ", "").lower().startswith("lm-eval"):
            return str(req)
    raise FasttrackError("pyproject.toml's gpu extra names no lm-eval.")


def plan_image(req: ImageRequest) -> ImagePlan:
    """Resolve the PR's commits, decide how the kernels are built, and write down the build commands."""
    if not _PINNED.match(req.base_image):
        raise FasttrackError(
            f"--base-image {req.base_image!r} is not pinned by digest (name@sha256:<64 hex digits>).",
            hint="Find the digest of the release you build on, e.g. `docker buildx imagetools inspect "
            "vllm/vllm-openai:v0.32.0` (its Digest line), and pass vllm/vllm-openai@sha256:....",
        )
    base_sha, head_sha = resolve_refs(req.repo, req.base, req.head)
    mb = subprocess.run(
        ["git", "-C", str(req.repo), "merge-base", base_sha, head_sha], capture_output=True, text=True, check=False
    )
    merge_base = mb.stdout.strip() if mb.returncode == 0 and mb.stdout.strip() else base_sha
    changed = [p for p in _git(req.repo, "diff", "--name-only", "-z", merge_base, head_sha).split("\0") if p]
    kernels = sorted(p for p in changed if any(glob_match(p, g) for g in KERNEL_SOURCES))
    if req.precompiled == "yes" and kernels:
        raise FasttrackError(
            f"--precompiled yes, but the PR changes compiled sources ({', '.join(kernels[:5])}): precompiled kernels "
            "would be the merge base's, not the PR's.",
            hint="Leave --precompiled at auto (the kernels are then compiled from the head).",
        )
    precompiled = req.precompiled == "yes" or (req.precompiled == "auto" and not kernels)
    reason = (
        f"the PR changes compiled sources ({', '.join(kernels[:5])}{', ...' if len(kernels) > 5 else ''}): "
        "kernels compiled from the head"
        if kernels
        else "--precompiled no: kernels compiled from the head"
        if not precompiled
        else f"the PR changes no compiled source: the merge base's precompiled kernels ({merge_base[:12]})"
    )
    tag = req.tag or f"fasttrack-pr:{head_sha[:12]}"
    if not _TAG.match(tag) or "@" in tag:
        raise FasttrackError(f"--tag {tag!r} is not an image name with an optional tag (registry/name:tag).")
    args = {
        "BASE_IMAGE": req.base_image,
        "VLLM_HEAD": head_sha,
        "VLLM_MERGE_BASE": merge_base,
        "PRECOMPILED": "1" if precompiled else "0",
        "LM_EVAL_SPEC": lm_eval_spec(),
        "FASTTRACK_VERSION": __version__,
    }
    plan = ImagePlan(
        tag=tag,
        base_image=req.base_image,
        repo=str(Path(req.repo).resolve()),
        base_ref=req.base,
        head_ref=req.head,
        merge_base=merge_base,
        head=head_sha,
        precompiled=precompiled,
        precompiled_reason=reason,
        kernel_paths=kernels,
        build_args=args,
    )
    plan.commands = build_commands(plan, req)
    return plan


def build_commands(plan: ImagePlan, req: ImageRequest) -> list[list[str]]:
    """The builder's commands, run in order (the build folder is ``req.out``, its context ``req.out/context``)."""
    out = Path(req.out).resolve()
    bargs = [a for k, v in plan.build_args.items() for a in ("--build-arg", f"{k}={v}")]
    files = ["--file", str(out / "Containerfile"), "--tag", plan.tag]
    if req.builder == "docker":
        tail = ["--push"] if req.push else ["--load"]
        return [["docker", "buildx", "build", *files, *bargs, "--metadata-file", str(out / "metadata.json"), *tail,
                 str(out / "context")]]  # fmt: skip
    cmds = [["podman", "build", *files, *bargs, "--iidfile", str(out / "iid"), str(out / "context")]]
    if req.push:
        cmds.append(["podman", "push", "--digestfile", str(out / "digest"), plan.tag])
    return cmds


def write_context(plan: ImagePlan, req: ImageRequest) -> Path:
    """The build folder: ``Containerfile``, and ``context/`` with ``vllm/`` (the head and the merge base, fetched
    shallow from the PR's repository) and ``fasttrack/`` (this source tree)."""
    out = Path(req.out).resolve()
    ctx = out / "context"
    if ctx.exists():
        shutil.rmtree(ctx)
    ctx.mkdir(parents=True)
    (out / "Containerfile").write_text(CONTAINERFILE)
    vllm = ctx / "vllm"
    _git(ctx, "init", "--quiet", str(vllm))
    src = Path(plan.repo).resolve().as_uri()
    _git(vllm, "fetch", "--quiet", "--no-tags", "--depth=1", src, plan.merge_base, plan.head)
    _git(vllm, "checkout", "--quiet", "--detach", plan.head)
    if not (ROOT / "pyproject.toml").is_file() or not (ROOT / "fasttrack").is_dir():
        raise FasttrackError(
            f"fasttrack image copies this fasttrack's source tree into the image, and {ROOT} is not one "
            "(an installed wheel).",
            hint="Run it from a source checkout of fasttrack.",
        )
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", ".venv", "runs")
    for name in FASTTRACK_FILES:
        srcp = ROOT / name
        dst = ctx / "fasttrack" / name
        if srcp.is_dir():
            shutil.copytree(srcp, dst, ignore=ignore, symlinks=True)
        elif srcp.is_file():
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(srcp, dst)
    return out


def _digest(req: ImageRequest) -> str | None:
    out = Path(req.out).resolve()
    if req.builder == "docker":
        try:
            meta = json.loads((out / "metadata.json").read_text())
        except (OSError, ValueError):
            return None
        d = meta.get("containerimage.digest")
    else:
        f = out / ("digest" if req.push else "iid")
        d = f.read_text().strip() if f.is_file() else None
    return d if isinstance(d, str) and re.fullmatch(r"sha256:[0-9a-f]{64}", d) else None


Runner = Callable[[list[str]], int]


def build_image(req: ImageRequest, *, dry_run: bool = False, run: Runner | None = None) -> dict[str, Any]:
    """Plan, write the build folder, build (unless ``dry_run``), and write ``image.json``; return its record."""
    plan = plan_image(req)
    out = write_context(plan, req)
    if dry_run:
        rec = plan.record(digest=None, pushed=False, builder=req.builder) | {"dry_run": True, "commands": plan.commands}
        (out / RECORD).write_text(json.dumps(rec, indent=2) + "\n")
        return rec
    runner = run or (lambda argv: subprocess.run(argv, check=False).returncode)
    if shutil.which(plan.commands[0][0]) is None and run is None:
        raise FasttrackError(
            f"{plan.commands[0][0]} is not on PATH: the image cannot be built on this host.",
            hint=f"Build it where images are built: fasttrack image ... --builder {req.builder}; or --dry-run to "
            "write the build folder and print the commands.",
        )
    for argv in plan.commands:
        rc = runner(argv)
        if rc != 0:
            raise FasttrackError(f"the image build failed (exit {rc}): {shlex.join(argv)}")
    digest = _digest(req)
    if digest is None:
        raise FasttrackError(
            f"the build finished but left no image digest in {out} (metadata.json, iid or digest).",
            hint="With docker, use a buildx builder that writes --metadata-file; with podman, --push for a registry "
            "digest.",
        )
    rec = plan.record(digest=digest, pushed=req.push, builder=req.builder)
    (out / RECORD).write_text(json.dumps(rec, indent=2) + "\n")
    return rec


@dataclass(frozen=True)
class ImageBuild:
    """``image.json`` as the renderers read it: the pinned image and the PR it holds."""

    image: str
    repo: str
    base: str
    head: str

    @classmethod
    def load(cls, path: Path) -> "ImageBuild":
        try:
            rec = json.loads(Path(path).read_text())
        except (OSError, ValueError) as exc:
            raise FasttrackError(f"cannot read the image record {str(path)!r}: {exc}.") from None
        image = rec.get("image") if isinstance(rec, dict) else None
        if not isinstance(image, str) or not _PINNED.match(image):
            raise FasttrackError(
                f"the image record {str(path)!r} names no image pinned by digest (a dry run, or a failed build).",
                hint="Build the image first: fasttrack image --repo ... --base ... --head ... --base-image ...",
            )
        sha = re.compile(r"^[0-9a-f]{40}$")
        if not all(isinstance(rec.get(k), str) and sha.match(rec[k]) for k in ("base", "head")):
            raise FasttrackError(f"the image record {str(path)!r} has no base and head commit SHAs.")
        return cls(image=image, repo=str(rec.get("repo") or VLLM_SRC), base=rec["base"], head=rec["head"])

    def as_dict(self) -> dict[str, str]:
        return asdict(self)
