"""`fasttrack validate` end to end on the demo target: real vLLM engines, a planted defect
through the whole pipeline to a failed, signed bundle that `fasttrack verify` accepts and the
report shows, `fasttrack reproduce` agreeing with it, and what a crash or Ctrl-C leaves behind.

The defect run attaches the session's baseline engine (``--baseline-url``: the stock path,
started as validate would start it) and stock's eager build next to it, the scope's reference variant
(``--reference-url eager=URL``, started as validate would start it from the scope), and starts its own
candidate, with the defect planted the way a user plants it, ``FASTTRACK_DEMO_DEFECT=numerics-batch
fasttrack validate``; the candidate must be owned by the run for the coverage check's evidence (its
profiler traces, the unsupported-deployment probe: a start the engine refuses, which also shows what a
failed start reports). Its reproduction attaches every engine: the session's baseline, the eager build
and the candidate, with the same defect planted through the demo plugin's defect file; it starts none.
The Ctrl-C run owns its engines (``no_session_engine``). What an engine crash leaves behind is tested on
a two-node engine (``test_e2e_multinode.py``), whose one killed node is the harder case."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from demo_engines import demo_engine, engine_phase, reference_engine, require_demo_target

from fasttrack import ROOT
from fasttrack.bundle import open_bundle

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


DEFECT = "numerics-batch"
DEFECT_BATCH = 3
"""The planted defect's batch size: its optimized decode path is wrong there only."""


@pytest.fixture(scope="session")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("keys")
    res = _run("keys", "generate", "-o", str(d), "--name", "ci")
    assert res.returncode == 0, res.stderr
    return d


@pytest.fixture(scope="session")
@engine_phase("reference")
def defect_run(
    engine_slot, demo_model, demo_target, keys: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """``FASTTRACK_DEMO_DEFECT=numerics-batch fasttrack validate --model demo-llama --tier smoke``, signed,
    on the equivalence and coverage checks, with the session's baseline engine and stock's eager build next to
    it (the scope's reference variant) attached."""
    require_demo_target(demo_model)
    baseline = demo_engine(engine_slot, demo_model, demo_target, "baseline")
    eager = reference_engine(engine_slot, demo_model, demo_target, "eager")
    run_dir = tmp_path_factory.mktemp("validate") / DEFECT
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
        "--baseline-url",
        baseline.api_url,
        "--reference-url",
        f"eager={eager.base_url}",
        FASTTRACK_DEMO_DEFECT=DEFECT,
    )
    return run_dir, res


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


def test_ctrl_c_tears_every_engine_down(tmp_path: Path, keys: Path, no_session_engine) -> None:
    """The demo scope's perf check interleaves, so the baseline and the candidate engine are up
    together: Ctrl-C while the candidate starts (the baseline up) tears both down."""
    run_dir = tmp_path / "sigint"
    log = tmp_path / "sigint.log"
    proc = _start_validate(run_dir, log, "--checks", "perf")
    try:
        _wait_for(log, "candidate engine starting", proc, timeout=900)
        text = log.read_text(errors="replace")
        assert text.count("engine up at") == 1 and "up together with the other side" in text, text[-3000:]
        assert len({p for p in _engine_pids(run_dir)}) >= 2, "the baseline up, the candidate starting"
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
    base, cand = engines
    assert isinstance(base["stop"], dict), "the baseline was stopped and its stop recorded"
    assert cand["stop"] == "stopped while starting (interrupted by Ctrl-C)", cand
    perf = summary["checks"]["perf"]
    # the perf check's partial result (no point was measured before the candidate came up), not a bare not-run
    assert perf["verdict"] == "not_run" and "interrupted" in perf["reason"], perf
    assert re.match(r"0 of \d+ point\(s\) measured before the run stopped", perf["reason"]), perf
    assert (run_dir / "bundle.tar.gz").is_file(), "a partial bundle"


def test_planted_defect_fails_the_signed_bundle_at_exactly_its_batch(defect_run, keys: Path) -> None:
    run_dir, res = defect_run
    out = res.stdout + res.stderr
    assert "Traceback" not in out
    assert res.returncode == 1, out[-4000:]  # validate exits 0 only for a pass
    # the candidate's start is reported by phase and time, never by a piece of its log
    starting = [ln.strip() for ln in out.splitlines() if "engine starting (" in ln]
    phase = r"(importing|initializing the engine|loading weights|profiling memory|compiling|allocating the KV cache"
    phase += r"|capturing CUDA graphs|warming up|waiting for health)"
    assert starting and all(
        re.fullmatch(rf"candidate engine starting \(\d+ s\): {phase} \(for \d+ s\)", s) for s in starting
    ), starting
    assert (run_dir / "bundle.tar.gz").is_file(), out[-4000:]
    v = _run("verify", str(run_dir / "bundle.tar.gz"), "--key", str(keys / "ci.pub"), "--json")
    info = json.loads(v.stdout)
    assert info["verified"] is True and info["verdict"] == "fail", v.stdout
    manifest = json.loads((run_dir / "bundle" / "manifest.json").read_text())
    assert manifest["verdict"] == "fail"
    eq = manifest["checks"]["equivalence"]
    assert eq["verdict"] == "fail", eq["reason"]
    # the equivalence rows fail at exactly the defect's batch size
    with open_bundle(run_dir / "bundle.tar.gz") as view:
        points = view.rows("equivalence", "equivalence_points")
    failing = {r["point"] for r in points if r["verdict"] == "fail"}
    assert failing and {p.split("-b")[1].split("-")[0] for p in failing} == {str(DEFECT_BATCH)}, sorted(failing)
    assert all(r["verdict"] == "pass" for r in points if r["point"] not in failing), [
        (r["point"], r["verdict"], r.get("problems")) for r in points if r["point"] not in failing
    ]
    # the defect is numerical: the optimized path ran where it should, so coverage finds no failure; without the
    # features check nothing visits the full-context points, so coverage is not_run there (no decode evidence)
    cov = manifest["checks"]["coverage"]
    assert cov["verdict"] == "not_run", cov["reason"]
    unseen = cov["summary"]["points_without_decode_evidence"]
    assert sorted(unseen) == [f"tp1-dcp1-none-b{b}-ctxfull" for b in (1, 2, 3, 4, 8)], (unseen, cov["reason"])
    assert f"no decode evidence at {len(unseen)} in-tier point(s)" in cov["reason"], cov["reason"]
    assert not cov["summary"]["scope_errors"], cov["summary"]["scope_errors"]
    # the situations that need a request beyond the envelope or another deployment are probed too: a decode
    # batch above the range, and the candidate started with LoRA enabled, which it refuses
    with open_bundle(run_dir / "bundle.tar.gz") as b:
        fallback = {(r["situation"], r["side"]): r for r in b.rows("coverage", "fallback")}
    assert fallback[("out_of_envelope_request", "candidate")]["verdict"] == "pass"
    refused = fallback[("unsupported_deployment", "candidate")]
    assert refused["verdict"] == "pass" and refused["started"] in (False, 0), refused  # it refused to start
    assert "does not support this deployment: LoRA" in refused["fallback_line"]
    # checks that were not selected are not_run
    assert manifest["checks"]["perf"]["verdict"] == "not_run"
    # the baseline was attached, the candidate started by validate with the defect in its environment
    # (the engines that collected equivalence: the unsupported-deployment probe's refused start is a record too),
    # and stock's eager build beside the baseline (the reference variant), attached with --reference-url: measured
    # by equivalence, recorded as not owned, with the build it served
    launches = json.loads((run_dir / "run-summary.json").read_text())["engines"]
    engines = {e["side"]: e for e in launches if "equivalence" in e["checks"] and not e.get("variant")}
    assert engines["baseline"]["owned"] is False and engines["candidate"]["owned"] is True
    (eager,) = [e for e in launches if e.get("variant")]
    assert eager["variant"] == "eager" and eager["owned"] is False and eager["side"] == "baseline", eager
    assert eager["checks"] == ["equivalence"] and eager["check_seconds"]["equivalence"] > 0, eager
    assert eager["environment"]["owned"] is False and eager["environment"]["vllm_version"], eager
    assert [e["side"] for e in launches if e.get("owned")] == ["candidate", "candidate"]  # its lifetime and the probe
    # the defect's batch fails against stock's own spread, by a wide margin; the row says both figures
    worst = next(r for r in points if r["point"] in failing)
    assert worst["candidate_max_abs_logprob_diff_vs_reference"] > 10 * worst["limit_max_abs_logprob_diff"], worst
    assert "vs stock eager" in worst["calibration"], worst["calibration"]
    assert engines["candidate"]["environment"]["env_relevant"].get("FASTTRACK_DEMO_DEFECT") == DEFECT
    assert manifest["provenance"]["engines"] and manifest["provenance"]["models"]
    # the report shows the failure
    html = (run_dir / "report.html").read_text()
    assert "demo-llama" in html and "Content-Security-Policy" in html
    assert all(p in html for p in failing), "every failing point is in the report"
    comment = (run_dir / "pr-comment.md").read_text()
    assert len(comment.encode()) < 65536 and "fail" in comment.lower() and "equivalence" in comment
    # a different PR head is refused
    bad = _run("verify", str(run_dir / "bundle.tar.gz"), "--key", str(keys / "ci.pub"), "--pr-head", "0" * 40)
    assert bad.returncode != 0


def test_a_refused_start_reports_its_exit_code_and_log_tail_and_leaves_no_process(defect_run) -> None:
    """The unsupported-deployment probe is a real vLLM start that never comes up (the demo plugin refuses LoRA while
    the engine builds the model): the engine's typed start error reaches the probe's record with the process's exit
    code, the tail of its log naming the cause and the log itself, and no process of it outlives the run."""
    run_dir, _ = defect_run
    (probe,) = [e for e in json.loads((run_dir / "run-summary.json").read_text())["engines"] if "--enable-lora" in
                e.get("args", [])]  # fmt: skip
    assert probe["stop"] == "refused to start" and probe["owned"] is True, probe
    outcome = json.loads(
        (run_dir / "artifacts" / "coverage" / f"{probe['group']}.unsupported_deployment.json").read_text()
    )
    log = (run_dir / probe["log"]).read_text(errors="replace")
    assert outcome["started"] is False and outcome["exit_code"] not in (None, 0), outcome
    assert "does not support this deployment: LoRA" in outcome["log_tail"], outcome["log_tail"][-2000:]
    assert outcome["reject_lines"] and all("does not support this deployment" in ln for ln in outcome["reject_lines"])
    assert Path(outcome["log"]).name == Path(probe["log"]).name and "does not support this deployment: LoRA" in log
    left = subprocess.run(["pgrep", "-f", "--", "--enable-lora"], capture_output=True, text=True).stdout.split()
    assert not left, f"processes of the refused start outlived the run: {left}"


def test_reproduce_agrees_with_the_failed_bundle(defect_run, keys: Path, tmp_path: Path, reference_engines) -> None:
    """The recorded settings rerun equivalence against the session's engines, attached by URL: the baseline,
    stock's eager build next to it (the reference variant, ``--reference-url``) and the candidate with the same
    defect planted: the verdict (fail) and every row agree, and the rerun starts no engine."""
    run_dir, _ = defect_run
    assert (run_dir / "bundle.tar.gz").is_file()
    engine_pair = reference_engines
    candidate = engine_pair.candidate(DEFECT)
    rep = _run(
        "reproduce",
        str(run_dir / "bundle.tar.gz"),
        "--checks",
        "equivalence",
        "--key",
        str(keys / "ci.pub"),
        "--out",
        str(tmp_path / "reproduce"),
        "--baseline-url",
        engine_pair.baseline.api_url,
        "--candidate-url",
        candidate.api_url,
        "--reference-url",
        reference_engines.reference_url,
        "--json",
    )
    assert "Traceback" not in rep.stderr, rep.stderr[-3000:]
    info = json.loads(rep.stdout)
    assert rep.returncode == 0 and info["all_agree"] is True and info["verified"] is True, rep.stdout[-3000:]
    (agreement,) = info["agreements"]
    assert agreement["check"] == "equivalence" and agreement["recorded_verdict"] == agreement["new_verdict"] == "fail"
    assert agreement["rows_compared"] >= 5, agreement  # at least one row per batch size of the sweep
    # every engine was attached, stock's eager build (the scope's reference variant) too: reproduce started none
    launches = json.loads((tmp_path / "reproduce" / "run-summary.json").read_text())["engines"]
    engines = {e["side"]: e for e in launches if "equivalence" in e["checks"] and not e.get("variant")}
    assert engines["baseline"]["owned"] is False and engines["candidate"]["owned"] is False, engines
    assert [(e.get("variant"), e["owned"]) for e in launches if e.get("variant")] == [("eager", False)], launches
    assert not [e for e in launches if e.get("owned")], launches
    assert str(engines["candidate"]["base_url"]).startswith(candidate.base_url), engines
