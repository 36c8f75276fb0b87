"""The demo target's speculative group end to end: n-gram drafting with vLLM's synthetic rejection sampler
(``rejection_sample_method: synthetic``, acceptance length 2.5), through ``fasttrack validate --checks features
--group`` on the standard tier. The ``speculative_acceptance`` row shows the acceptance length both engines
measured (``vllm:spec_decode_*``) next to the configured one, within the feature's tolerance; the candidate's
fast path serves the decode steps without drafts and logs the verify steps it leaves to the stock path.

Two engine starts (the group's baseline and candidate, one lifetime each: the features check wants the first
lifetime only), eager (``--enforce-eager``): the acceptance is what is tested, not the compiled model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from scope_testlib import EAGER, demo_scope_variant

from fasttrack import ROOT
from fasttrack.bundle import open_bundle

pytestmark = pytest.mark.e2e

FT = [sys.executable, "-m", "fasttrack"]
GROUP = "tp1-dcp1-ngram-synth.dl3"
CONFIGURED = 2.5


def eager_scope(folder: Path) -> Path:
    """The demo scope with eager engines (no compile on a start)."""
    # an engine start took over 300 s once on a two-core host shared with other engines
    return demo_scope_variant(folder, {**EAGER, "  startup_timeout_s: 300": "  startup_timeout_s: 900"})


def test_speculative_group_measures_the_configured_synthetic_acceptance(
    tmp_path: Path, no_session_engine, demo_model
) -> None:
    scope = eager_scope(tmp_path / "scope")
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1", "PYTHONUNBUFFERED": "1"}
    env.pop("FASTTRACK_DEMO_DEFECT", None)
    run_dir = tmp_path / "run"
    res = subprocess.run(
        [*FT, "validate", "--model", str(scope), "--tier", "standard", "--checks", "features", "--group", GROUP]
        + ["--out", str(run_dir)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=1800,
    )
    out = res.stdout + res.stderr
    assert "Traceback" not in out, out[-4000:]
    summary = json.loads((run_dir / "run-summary.json").read_text())
    # the two engines of the speculative group, nothing else
    launches = summary["engines"]
    assert sorted((e["group"], e["side"]) for e in launches) == [(GROUP, "baseline"), (GROUP, "candidate")], launches
    manifest = json.loads((run_dir / "bundle" / "manifest.json").read_text())
    feats = manifest["checks"]["features"]
    assert "per_feature" in feats["summary"], (feats["reason"], summary.get("crash"))
    per = feats["summary"]["per_feature"]
    assert per["speculative_acceptance"]["verdict"] == "pass", (per, out[-4000:])
    assert f"configured: {CONFIGURED}, synthetic" in per["speculative_acceptance"]["reason"]
    # the other features compare outputs, which synthetic acceptance changes: not run on this group, so the check
    # as a whole is not a pass (nor is the bundle: the other checks were not selected)
    assert per["structured_output"]["verdict"] == "not_run" and "synthetic" in per["structured_output"]["reason"]
    assert feats["verdict"] == "not_run" and summary["verdict"] == "incomplete"
    with open_bundle(run_dir / "bundle.tar.gz") as view:
        rows = [r for r in view.rows("features", "features") if r["feature"] == "speculative_acceptance"]
    assert len(rows) == 1, rows
    row = rows[0]
    assert row["group"] == GROUP and row["verdict"] == "pass", row
    assert row["configured_acceptance_length"] == CONFIGURED
    for side in ("baseline", "candidate"):
        measured = row[f"{side}_acceptance_length"]
        assert measured is not None and abs(measured - CONFIGURED) <= 0.1 * CONFIGURED, row
    # the candidate's fast path ran the decode steps without drafts and logged the verify steps it left to stock
    cand_log = next(p for p in (run_dir / "bundle" / "logs").glob(f"{GROUP}.candidate.*log"))
    text = cand_log.read_text(errors="replace")
    assert "fasttrack-demo fast-path first decode step" in text
    assert "fasttrack-demo fallback reason=spec_verify" in text
