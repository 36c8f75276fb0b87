"""docs/gpu-cluster.md and docs/scale-out.md cannot drift: their site profiles load and name every field the
site profile has (scale-out.md's) or only fields it has (gpu-cluster.md's), the job scripts and manifests
rendered from the guide's profile carry the PR's build and the PR binding to every shard, and every command the
guide shows exists with its options."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
import yaml
from doc_testlib import check_command_line, code_blocks, command_lines, run_cli

from fasttrack import ROOT
from fasttrack.executors.site import KubernetesSite, SiteProfile, SlurmSite, load_site

GUIDE = ROOT / "docs" / "gpu-cluster.md"
REFERENCE = ROOT / "docs" / "scale-out.md"


def site_block(doc: Path) -> str:
    (block,) = [b for b in code_blocks(doc, "yaml") if "slurm:" in b and "kubernetes:" in b]
    return block


@pytest.fixture(scope="module")
def guide_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    p = tmp_path_factory.mktemp("site") / "site.yaml"
    p.write_text(site_block(GUIDE))
    return p


def test_the_reference_site_profile_loads_and_names_every_field(tmp_path: Path) -> None:
    (tmp_path / "site.yaml").write_text(site_block(REFERENCE))
    site = load_site(tmp_path / "site.yaml")
    raw = yaml.safe_load(site_block(REFERENCE))
    # the top-level fasttrack/setup/env/validate_args of older profiles are named in the text, not the example
    legacy = {"fasttrack", "setup", "env", "validate_args"}
    assert set(raw) == set(SiteProfile.model_fields) - legacy
    text = REFERENCE.read_text()
    assert all(f"`{f}`" in text for f in legacy)
    assert set(raw["slurm"]) == set(SlurmSite.model_fields)
    assert set(raw["kubernetes"]) <= set(KubernetesSite.model_fields)
    assert site.slurm.gpus_per_node is None  # the default the text recommends: what each array's engines use


def test_the_guide_site_profile_loads(guide_site: Path) -> None:
    site = load_site(guide_site)
    for args in (site.slurm_validate_args, site.kubernetes.validate_args):
        assert args[0::2] == ["--repo", "--base", "--head"] and args[1] == "/opt/vllm"
    assert "@sha256:" in (site.slurm.container_image or "") and "@sha256:" in site.kubernetes.image
    assert site.slurm.gpus_per_node is None and site.kubernetes.sign_key_secret


def test_every_shard_gets_the_prs_build_and_binding(guide_site: Path, tmp_path: Path) -> None:
    site = load_site(guide_site)
    code, out = run_cli(
        ["slurm", "--dry-run", "--model", "kimi-k3", "--tier", "full", "--site", str(guide_site)]
        + ["--sign-key", str(tmp_path / "me"), "-o", str(tmp_path / "job")]
    )
    assert code == 0, out
    validates = [ln for ln in out.splitlines() if ln.startswith("exec fasttrack validate")]
    assert len(validates) == 2, out  # one array per shard shape: TP16 on 4 trays, TP8 on 2
    for ln in validates:
        assert ln.endswith(shlex.join(site.slurm_validate_args)), ln
    assert out.count(f"#SBATCH --container-image={site.slurm.container_image}") == 3  # both arrays and the merge
    code, said = run_cli(
        ["k8s", "render", "--model", "kimi-k3", "--tier", "full", "--site", str(guide_site)]
        + ["--sign-key", "/fasttrack-key/key"]
        + ["-o", str(tmp_path / "manifests")]
    )
    assert code == 0, said
    files = sorted((tmp_path / "manifests").glob("*.yaml"))
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml where present: the manifests are long
    docs = [d for f in files for d in yaml.load_all(f.read_text(), Loader=loader) if d]
    drivers = [d for d in docs if d["kind"] == "Job" and d["metadata"]["name"].endswith("-driver")]
    assert len(drivers) == 36, "every K3 full-tier shard is multi-node: a driver Job attaches to its engines"
    for d in drivers:
        (c,) = d["spec"]["template"]["spec"]["containers"]
        script = " ".join(str(a) for a in [*c.get("command", []), *c.get("args", [])])
        assert shlex.join(site.kubernetes.validate_args) in script, script[:600]
        # the guide's limit: the driver attaches to the LeaderWorkerSets' engines by URL
        assert "--baseline-url http://" in script and "--candidate-url http://" in script


def test_every_command_exists() -> None:
    lines = [ln for b in code_blocks(GUIDE, "bash") for ln in command_lines(b)]
    assert {" ".join(ln.split()[:2]) for ln in lines} >= {"fasttrack slurm", "fasttrack k8s", "fasttrack verify"}
    for line in lines:
        check_command_line(line, run_help=False)


def test_the_readme_links_the_guides() -> None:
    readme = (ROOT / "README.md").read_text()
    for doc in ("docs/gpu-cluster.md", "docs/writing-a-scope.md", "docs/glossary.md"):
        assert f"({doc})" in readme, doc
