"""A rehearsal never passes: its verdict is ``rehearsal`` in the manifest, ``verify`` and ``validate``.

A run on hardware the scope does not declare whose checks all passed gets the bundle verdict
``rehearsal``; one whose checks failed or did not all run is ``fail`` / ``incomplete`` as usual.
Bundles written before the ``rehearsal`` verdict existed recorded ``pass`` with the rehearsal flag:
they still load and verify, and read as ``rehearsal`` everywhere.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from bundle_testlib import REHEARSAL_REASON, build, make_results

from fasttrack import ROOT
from fasttrack import bundle as B
from fasttrack.bundle.layout import MANIFEST
from fasttrack.results import Verdict, bundle_verdict, effective_verdict


def _ft(*args: str | Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    env.pop("FASTTRACK_TRUST_DIR", None)
    return subprocess.run(
        [sys.executable, "-m", "fasttrack", *map(str, args)], capture_output=True, text=True, cwd=ROOT, env=env
    )


def _manifest(b: Path) -> B.Manifest:
    return B.load_manifest((b / MANIFEST).read_bytes())


def test_the_verdict_vocabulary() -> None:
    assert bundle_verdict(Verdict.PASS, rehearsal=True) == "rehearsal"
    assert bundle_verdict(Verdict.PASS) == "pass"
    assert bundle_verdict(Verdict.FAIL, rehearsal=True) == "fail"
    assert bundle_verdict(Verdict.NOT_RUN, rehearsal=True) == "incomplete"
    assert effective_verdict("pass", True) == "rehearsal"  # an older bundle's spelling
    assert effective_verdict("fail", True) == "fail" and effective_verdict("pass", False) == "pass"


def test_rehearsal_bundle_is_never_pass(tmp_path: Path, contrib: B.SigningKey, keydir: Path) -> None:
    m = _manifest(build(tmp_path / "r", rehearsal=True, sign=[contrib]))
    assert m.verdict == "rehearsal" and m.effective_verdict == "rehearsal"
    failed = _manifest(build(tmp_path / "f", rehearsal=True, results=make_results(perf=Verdict.FAIL)))
    assert failed.verdict == "fail", "a rehearsal can still fail"
    res = B.verify_bundle(tmp_path / "r", keys=[keydir / "contrib.pub"])
    assert res.verified and res.verdict == "rehearsal" and res.rehearsal
    assert "rehearsal follows from" in res.item("verdicts").detail


def test_verify_require_pass_refuses_a_rehearsal(tmp_path: Path, contrib: B.SigningKey, keydir: Path) -> None:
    b = tmp_path / "r"
    build(b, rehearsal=True, sign=[contrib])
    pub = keydir / "contrib.pub"
    assert _ft("verify", b, "--key", pub).returncode == 0  # it verifies: it is what it says it is
    r = _ft("verify", b, "--key", pub, "--require-pass")
    assert r.returncode == 1, r.stdout
    assert "bundle verdict: rehearsal" in r.stdout and "not evidence" in r.stdout
    r = _ft("verify", b, "--key", pub, "--require-pass", "--json")
    doc = json.loads(r.stdout)
    assert r.returncode == 1 and doc["verdict"] == "rehearsal" and doc["rehearsal"] is True and doc["ok"] is False
    ok = tmp_path / "ok"
    build(ok, sign=[contrib])
    doc = json.loads(_ft("verify", ok, "--key", pub, "--require-pass", "--json").stdout)
    assert doc["verdict"] == "pass" and doc["rehearsal"] is False and doc["ok"] is True


def test_an_older_rehearsal_bundle_recorded_pass_and_reads_as_rehearsal(
    tmp_path: Path, contrib: B.SigningKey, keydir: Path
) -> None:
    b = tmp_path / "old"
    build(b)
    doc = json.loads((b / MANIFEST).read_text())
    doc.update(rehearsal=True, rehearsal_reason=REHEARSAL_REASON)  # what older versions wrote: verdict pass, flag set
    assert doc["verdict"] == "pass"
    (b / MANIFEST).write_text(json.dumps(doc, indent=2, sort_keys=True))
    B.sign_bundle(b, contrib)  # signing checks consistency: the old spelling is consistent
    m = B.load_manifest((b / MANIFEST).read_bytes())
    assert m.verdict == "pass" and m.effective_verdict == "rehearsal"
    res = B.verify_bundle(b, keys=[keydir / "contrib.pub"])
    assert res.verified, res.failures
    assert res.verdict == "rehearsal" and res.rehearsal
    r = _ft("verify", b, "--key", keydir / "contrib.pub", "--require-pass")
    assert r.returncode == 1 and "bundle verdict: rehearsal" in r.stdout


def test_a_rehearsal_verdict_without_the_flag_does_not_follow(tmp_path: Path) -> None:
    b = tmp_path / "forged"
    build(b, rehearsal=True)
    doc = json.loads((b / MANIFEST).read_text())
    doc.update(rehearsal=False, rehearsal_reason=None)  # says "rehearsal" but is not one: inconsistent
    m = B.load_manifest(json.dumps(doc))
    from fasttrack.bundle.consistency import verdict_problems

    assert verdict_problems(m) and "'rehearsal'" in verdict_problems(m)[0]


def test_validate_exits_non_zero_on_a_rehearsal(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    import fasttrack.pipeline as pipeline
    from fasttrack.cli import app

    def fake(verdict: str, rehearsal: bool):  # stands in for the run: the CLI's exit code and wording
        def run(opts, *, log, progress=None):  # noqa: ANN001, ANN202 - same call shape as run_validate
            return SimpleNamespace(
                run_dir=tmp_path, verdict=verdict, results=[], bundle=None, rehearsal=rehearsal, state=None
            )

        return run

    runner = CliRunner()
    monkeypatch.setattr(pipeline, "run_validate", fake(bundle_verdict(Verdict.PASS, rehearsal=True), True))
    res = runner.invoke(app, ["validate", "--model", "demo-llama", "--out", str(tmp_path / "o")])
    assert res.exit_code == 1 and "REHEARSAL" in res.output and "not valid evidence" in res.output
    monkeypatch.setattr(pipeline, "run_validate", fake(bundle_verdict(Verdict.PASS), False))
    res = runner.invoke(app, ["validate", "--model", "demo-llama", "--out", str(tmp_path / "o")])
    assert res.exit_code == 0 and "PASS" in res.output
