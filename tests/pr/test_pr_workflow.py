"""The maintainers' workflow in examples/github/: actionlint-clean, pinned, least privilege,
and its verify step takes the PR head SHA from the event, not from the bundle."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from fasttrack import ROOT

WORKFLOWS = sorted((ROOT / "examples" / "github").glob("*.yml"))
PINNED = re.compile(r"^[\w.-]+/[\w./-]+@[0-9a-f]{40}$")


def actionlint() -> str:
    """The actionlint binary of the test extra (next to this Python), else on PATH."""
    here = Path(sys.executable).parent / "actionlint"
    found = str(here) if here.exists() else shutil.which("actionlint")
    if not found:
        pytest.fail("actionlint is not installed: `pip install -e .[test]` installs it (see pyproject.toml)")
    return found


def load(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text())
    data["on"] = data.pop(True, data.get("on"))  # YAML 1.1 reads the key `on` as true
    return data


def steps(wf: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [(name, s) for name, job in wf["jobs"].items() for s in job.get("steps", [])]


def test_there_is_a_workflow() -> None:
    assert [p.name for p in WORKFLOWS] == ["fasttrack-verify.yml"]


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_workflow_passes_actionlint(path: Path, tmp_path: Path) -> None:
    r = subprocess.run([actionlint(), "-no-color", str(path)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    # and actionlint does fail a broken copy (the check is live)
    broken = tmp_path / "broken.yml"
    broken.write_text(path.read_text().replace("timeout-minutes: 30", "timeout-minutes: thirty", 1))
    assert subprocess.run([actionlint(), str(broken)], capture_output=True, timeout=120).returncode != 0


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_every_action_is_pinned_by_commit_sha(path: Path) -> None:
    wf = load(path)
    uses = [s["uses"] for _j, s in steps(wf) if "uses" in s]
    assert uses, "no actions used?"
    assert [u for u in uses if not PINNED.match(u)] == []
    for line in path.read_text().splitlines():
        if re.match(r"^\s*(- )?uses:", line):
            assert re.search(r"@[0-9a-f]{40} # v\d+\.\d+\.\d+$", line), f"name the version after the SHA: {line}"


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_least_privilege_and_no_pr_code(path: Path) -> None:
    wf = load(path)
    assert wf["permissions"] == {}
    for name, job in wf["jobs"].items():
        assert "permissions" in job, f"job {name} must state its permissions"
        text = yaml.safe_dump(job)
        reads_bundle = any(
            cmd in str(s.get("run", "")) for s in job.get("steps", []) for cmd in ("pr fetch", "fasttrack verify")
        )
        if reads_bundle:  # the job that handles the untrusted bundle cannot write anything
            assert all(v in ("read", "none") for v in job["permissions"].values()), name
        for s in job.get("steps", []):
            assert "${{" not in str(s.get("run", "")), f"{name}: event data must reach scripts through env"
            if str(s.get("uses", "")).startswith("actions/checkout@"):
                w = s.get("with", {})
                assert "ref" not in w and "repository" not in w, f"{name} checks out something else than the base"
                assert w.get("persist-credentials") is False and "allow-unsafe-pr-checkout" not in w
        assert "secrets." not in text, f"{name} uses a secret"
    assert set(wf["on"]) == {"issue_comment", "pull_request_target"}
    cond = wf["jobs"]["verify"]["if"]
    assert "author_association" in cond and "github.event.issue.pull_request" in cond


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_verify_takes_the_pr_head_from_the_event(path: Path) -> None:
    wf = load(path)
    job = wf["jobs"]["verify"]
    by_id = {s["id"]: s for s in job["steps"] if "id" in s}
    verify = by_id["verify"]
    assert re.search(r'fasttrack verify \S+ --trust "\$TRUST_DIR" --pr-head "\$PR_HEAD" --require-pass', verify["run"])
    assert verify["env"]["PR_HEAD"] == "${{ steps.head.outputs.sha }}"
    head = by_id["head"]
    # a label event's head SHA, or (comment events carry none) the API's head for the event's PR number
    assert head["env"]["EVENT_HEAD_SHA"] == "${{ github.event.pull_request.head.sha || steps.fetch.outputs.head_sha }}"
    assert head["run"] == 'echo "sha=$EVENT_HEAD_SHA" >> "$GITHUB_OUTPUT"'
    assert '--pr "$PR_NUMBER"' in by_id["fetch"]["run"]
    assert wf["env"]["PR_NUMBER"] == "${{ github.event.issue.number || github.event.pull_request.number }}"
    # nothing derived from the bundle feeds the head
    for s in (verify, head):
        assert not re.search(r"manifest|bundle|tar", " ".join(map(str, s.get("env", {}).values())))
    # the report and the comment are checked against the same head
    render = next(s for s in job["steps"] if "fasttrack pr body" in str(s.get("run", "")))
    assert (
        render["env"]["PR_HEAD"] == "${{ steps.head.outputs.sha }}" and render["run"].count('--pr-head "$PR_HEAD"') == 2
    )


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_the_workflow_holds_every_bundle_against_the_repository_scope(path: Path) -> None:
    """verify, the report and the comment body all get the base branch's scopes and the lowest tier accepted, so
    a scope loosened in the PR fails and every page names how."""
    wf = load(path)
    assert wf["env"]["SCOPES"] == ".fasttrack/scopes" and wf["env"]["MIN_TIER"] in ("standard", "full")
    steps = wf["jobs"]["verify"]["steps"]
    runs = " ".join(" ".join(str(s.get("run", "")).split()) for s in steps)
    for cmd in ("fasttrack verify", "fasttrack report", "fasttrack pr body"):
        part = runs[runs.index(cmd) :]
        part = part[: part.index("fasttrack", len(cmd))] if "fasttrack" in part[len(cmd) :] else part
        assert '--trusted-scope "$SCOPES"' in part and '--min-tier "$MIN_TIER"' in part, cmd
    # the scopes come from the same sparse checkout of the base branch as the trust set (never the PR's)
    checkout = next(s for s in steps if str(s.get("uses", "")).startswith("actions/checkout@"))
    assert checkout["with"]["sparse-checkout"] == ".fasttrack"
