"""`fasttrack validate` end to end on the demo target: real vLLM engines, a signed bundle
that `fasttrack verify` accepts, the report, and what a crash or Ctrl-C leaves behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fasttrack import ROOT

pytestmark = pytest.mark.e2e

FT = [sys.executable, "-m", "fasttrack"]


def _env(**extra: str) -> dict[str, str]:
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1", "PYTHONUNBUFFERED": "1"}
    env.pop("FASTTRACK_DEMO_DEFECT", None)
    env.update(extra)
    return env


def _run(*args: str, timeout: float = 1500, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*FT, *args], capture_output=True, text=True, cwd=ROOT, env=_env(**env), timeout=timeout)


def _engine_pids(run_dir: Path) -> list[int]:
    """Processes whose command line names this run folder (engines started by the run)."""
    out = subprocess.run(["pgrep", "-f", str(run_dir / "profiles")], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("keys")
    res = _run("keys", "generate", "-o", str(d), "--name", "ci")
    assert res.returncode == 0, res.stderr
    return d


@pytest.fixture(scope="module")
def _no_other_engine(engine_slot) -> None:
    """Stop the session's shared engine first: these runs start their own."""
    engine_slot.release()


def _wait_for(path: Path, needle: str, proc: subprocess.Popen, timeout: float) -> None:
    t0 = time.time()
    while time.time() - t0 < timeout:
        if path.exists() and needle in path.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            raise AssertionError(
                f"validate exited early ({proc.returncode}):\n{path.read_text(errors='replace')[-3000:]}"
            )
        time.sleep(1)
    raise AssertionError(f"timed out waiting for {needle!r}:\n{path.read_text(errors='replace')[-3000:]}")


def _default_sigint() -> None:
    """The child takes Ctrl-C as a user at a terminal would, even where this test session
    inherited SIGINT ignored (a shell without job control ignores it in background jobs,
    and an ignored SIGINT stays ignored across exec)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _start_validate(run_dir: Path, log: Path, *args: str) -> subprocess.Popen:
    fh = log.open("w")
    return subprocess.Popen(
        [*FT, "validate", "--model", "demo-llama", "--out", str(run_dir), *args],
        stdout=fh,
        stderr=subprocess.STDOUT,
        cwd=ROOT,
        env=_env(),
        start_new_session=False,
        preexec_fn=_default_sigint,
    )


def test_engine_crash_leaves_a_partial_bundle_that_says_what_crashed(
    tmp_path: Path, keys: Path, _no_other_engine
) -> None:
    run_dir = tmp_path / "crash"
    log = tmp_path / "crash.log"
    proc = _start_validate(run_dir, log, "--checks", "equivalence", "--sign-key", str(keys / "ci"))
    try:
        _wait_for(log, "engine up at", proc, timeout=600)
        pids = _engine_pids(run_dir)
        assert pids, "no engine process found for the run"
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        rc = proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    out = log.read_text(errors="replace")
    assert rc == 1, out[-3000:]
    assert "Traceback" not in out
    summary = json.loads((run_dir / "run-summary.json").read_text())
    assert summary["verdict"] == "incomplete"
    crash = summary["crash"]
    assert (
        crash
        and crash["side"] == "baseline"
        and crash["error"] in {"EngineCrashed", "EngineRequestError", "EngineUnreachable"}
    )
    assert (
        "crash" in summary["checks"]["equivalence"]["reason"] or "engine" in summary["checks"]["equivalence"]["reason"]
    )
    # the partial bundle still verifies, carries the engine log, and cannot say pass
    res = _run("verify", str(run_dir / "bundle.tar.gz"), "--key", str(keys / "ci.pub"), "--json")
    v = json.loads(res.stdout)
    assert v["verified"] is True and v["verdict"] == "incomplete", res.stdout
    logs = list((run_dir / "bundle" / "logs").glob("*.log"))
    assert logs and any(p.stat().st_size > 0 for p in logs)
    assert not _engine_pids(run_dir)


def test_ctrl_c_tears_every_engine_down(tmp_path: Path, keys: Path, _no_other_engine) -> None:
    """The demo scope's perf check interleaves, so the baseline and the candidate engine are up
    together: Ctrl-C then tears both down."""
    run_dir = tmp_path / "sigint"
    log = tmp_path / "sigint.log"
    proc = _start_validate(run_dir, log, "--checks", "perf")
    try:
        _wait_for(log, "runs interleaved", proc, timeout=900)
        text = log.read_text(errors="replace")
        assert text.count("engine up at") == 2 and "up together with the other side" in text, text[-3000:]
        assert len({p for p in _engine_pids(run_dir)}) >= 2
        proc.send_signal(signal.SIGINT)
        rc = proc.wait(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert rc == 130, log.read_text(errors="replace")[-3000:]
    deadline = time.time() + 30
    while _engine_pids(run_dir) and time.time() < deadline:
        time.sleep(1)
    assert not _engine_pids(run_dir), "engine processes survived Ctrl-C"
    summary = json.loads((run_dir / "run-summary.json").read_text())
    assert summary["interrupted"] is True and summary["verdict"] == "incomplete"
    engines = summary["engines"]
    assert [(e["side"], e.get("up_with")) for e in engines] == [
        ("baseline", ["candidate"]),
        ("candidate", ["baseline"]),
    ]
    assert all(e.get("stop") for e in engines), "both engines were stopped and their stops recorded"
    assert summary["checks"]["perf"]["verdict"] == "not_run" and "interrupted" in summary["checks"]["perf"]["reason"]


def test_validate_smoke_writes_a_signed_bundle_that_verifies(tmp_path: Path, keys: Path, _no_other_engine) -> None:
    run_dir = tmp_path / "smoke"
    res = _run(
        "validate",
        "--model",
        "demo-llama",
        "--tier",
        "smoke",
        "--out",
        str(run_dir),
        "--sign-key",
        str(keys / "ci"),
        "--checks",
        "equivalence,coverage",
    )
    out = res.stdout + res.stderr
    assert "Traceback" not in out
    assert (run_dir / "bundle.tar.gz").is_file(), out[-4000:]
    v = _run("verify", str(run_dir / "bundle.tar.gz"), "--key", str(keys / "ci.pub"), "--json")
    info = json.loads(v.stdout)
    assert v.returncode == 0 and info["verified"] is True, v.stdout
    manifest = json.loads((run_dir / "bundle" / "manifest.json").read_text())
    # (features are exercised against real engines, defects included, in tests/checks/test_checks_e2e.py)
    for name in ("equivalence", "coverage"):
        assert manifest["checks"][name]["verdict"] == "pass", (name, manifest["checks"][name]["reason"])
    # the situations that need a request beyond the envelope or another deployment are probed too: a decode
    # batch above the range, and the candidate started with speculative decoding, which it refuses
    from fasttrack.bundle import open_bundle

    with open_bundle(run_dir / "bundle.tar.gz") as b:
        fallback = {(r["situation"], r["side"]): r for r in b.rows("coverage", "fallback")}
    assert fallback[("out_of_envelope_request", "candidate")]["verdict"] == "pass"
    refused = fallback[("unsupported_deployment", "candidate")]
    assert refused["verdict"] == "pass" and refused["started"] in (False, 0), refused  # it refused to start
    assert "does not support this deployment" in refused["fallback_line"]
    # checks that were not selected are not_run, so the bundle cannot say pass
    assert manifest["checks"]["perf"]["verdict"] == "not_run"
    assert manifest["verdict"] == "incomplete" == info["verdict"]
    assert res.returncode == 1
    assert manifest["provenance"]["engines"] and manifest["provenance"]["models"]
    html = (run_dir / "report.html").read_text()
    assert "demo-llama" in html and "Content-Security-Policy" in html
    assert (run_dir / "pr-comment.md").stat().st_size < 65536
    # a different PR head is refused
    bad = _run("verify", str(run_dir / "bundle.tar.gz"), "--key", str(keys / "ci.pub"), "--pr-head", "0" * 40)
    assert bad.returncode != 0
    # reproduce: the recorded settings rerun equivalence on fresh engines, and it agrees row by row
    rep = _run(
        "reproduce",
        str(run_dir / "bundle.tar.gz"),
        "--checks",
        "equivalence",
        "--key",
        str(keys / "ci.pub"),
        "--out",
        str(tmp_path / "reproduce"),
        "--json",
    )
    assert "Traceback" not in rep.stderr, rep.stderr[-3000:]
    info = json.loads(rep.stdout)
    assert rep.returncode == 0 and info["all_agree"] is True and info["verified"] is True, rep.stdout[-3000:]
    (agreement,) = info["agreements"]
    assert agreement["check"] == "equivalence" and agreement["new_verdict"] == "pass"
    assert agreement["rows_compared"] >= 5, agreement  # at least one row per batch size of the sweep
