"""What ``fasttrack slurm render`` and ``fasttrack k8s render`` print, pinned byte for byte.

Each case renders through the command line (its options, the site profile, the scope's plan) and compares
the output with its file under ``tests/executors/rendered/``: the job scripts and manifests change only when a
change means to change them. ``python tests/executors/test_rendered_pinned.py`` rewrites the files (review the
diff: every changed line is a change to what clusters run)."""

from __future__ import annotations

import difflib
import io
import sys
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import pytest
import yaml

from fasttrack import ROOT

HERE = ROOT / "tests" / "executors" / "rendered"
HEAD = "0123456789abcdef0123456789abcdef01234567"
IMAGE = "registry.example/fasttrack-pr@sha256:" + "ab" * 32
SITE = """
slurm:
  fasttrack: /shared/venv/bin/fasttrack
  setup: ["module load cuda/12.9"]
  env: {HF_HOME: /shared/hf}
  partition: gb300
  account: inference
  sbatch: ["--exclusive"]
  srun_args: ["--mpi=none"]
  validate_args: ["--eval-data", "aime25=/shared/data/aime25.jsonl"]
  max_parallel: 8
  merge: {partition: cpu, time_min: 30}
kubernetes:
  namespace: evals
  image: registry.example/fasttrack@sha256:cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd
  env: {HF_HOME: /models/hf}
  setup: ["echo ready"]
  validate_args: ["--eval-data", "aime25=/models/data/aime25.jsonl"]
  sign_key_secret: fasttrack-signing-key
"""

#: case -> the command line after ``fasttrack`` (``SITE`` stands for the site profile's path)
CASES: dict[str, list[str]] = {
    "slurm-k3-full-pr-signed": [
        "slurm", "render", "--dry-run", "--model", "kimi-k3", "--tier", "full", "--site", "SITE",
        "-o", "/shared/jobs/k3", "--sign-key", "/shared/keys/ci", "--container-image", IMAGE,
        "--repo", "/opt/vllm", "--base", "main", "--head", HEAD, "--validate-arg", "--run-anyway",
    ],
    "slurm-demo-smoke": ["slurm", "render", "--dry-run", "--model", "demo-llama", "-o", "/shared/jobs/demo"],
    "k8s-k3-smoke-pr-signed": [
        "k8s", "render", "--model", "kimi-k3", "--tier", "smoke", "--site", "SITE", "--sign-key", "/fasttrack-key/key",
        "--image", IMAGE, "--repo", "/opt/vllm", "--base", "main", "--head", HEAD, "--max-parallel", "3",
    ],
    "k8s-demo-smoke": ["k8s", "render", "--model", "demo-llama"],
}  # fmt: skip


def _here(v: Any) -> Any:
    """``v`` with this checkout's path written ``$ROOT`` (the job record names the scope file by its path)."""
    if isinstance(v, str):
        return v.replace(str(ROOT), "$ROOT")
    if isinstance(v, list):
        return [_here(x) for x in v]
    if isinstance(v, dict):
        return {k: _here(x) for k, x in v.items()}
    return v


def render(case: str, site: Path) -> str:
    """What the case prints, with this checkout's path written ``$ROOT``: in the text of the Slurm scripts, and in
    the Kubernetes objects (dumped again as the renderer dumps them, since YAML folds long strings by length)."""
    from fasttrack.cli import main
    from fasttrack.executors.k8s import K8sRender

    argv = [str(site) if a == "SITE" else a for a in CASES[case]]
    buf = io.StringIO()
    with redirect_stdout(buf), pytest.raises(SystemExit) as done:
        main(argv)
    out = buf.getvalue()
    assert done.value.code in (0, None), out[-2000:]
    if CASES[case][0] != "k8s":
        return out.replace(str(ROOT), "$ROOT")
    docs = list(yaml.safe_load_all(out))
    # dumping what was read reproduces the output exactly, so the objects' dump with $ROOT stands for its bytes
    assert K8sRender(layout=None, documents=docs, job={}).text() == out  # type: ignore[arg-type]
    return K8sRender(layout=None, documents=_here(docs), job={}).text()  # type: ignore[arg-type]


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_rendered_scripts_and_manifests_are_unchanged(case: str, tmp_path: Path) -> None:
    site = tmp_path / "site.yaml"
    site.write_text(SITE)
    got = render(case, site)
    want = (HERE / f"{case}.txt").read_text()
    diff = "".join(difflib.unified_diff(want.splitlines(True), got.splitlines(True), "pinned", "rendered", n=1))
    assert got == want, f"{case} renders differently (python {Path(__file__).relative_to(ROOT)} rewrites):\n{diff}"


if __name__ == "__main__":  # rewrite the pinned files
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        site = Path(d) / "site.yaml"
        site.write_text(SITE)
        for name in sorted(CASES):
            (HERE / f"{name}.txt").write_text(render(name, site))
            print(f"wrote {HERE / name}.txt", file=sys.stderr)
