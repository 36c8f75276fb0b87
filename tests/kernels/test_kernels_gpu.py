"""The K3 suite on a CUDA GPU with the example Triton candidates: the whole tier, and the
planted read-before-write race caught by the perturbation test."""

from __future__ import annotations

import pytest
import torch
from kernels_testlib import K3_SUITE

from fasttrack.kernels.run import run_suite

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this host"),
]


def test_triton_candidates_pass_numerics_determinism_and_perturbation(tmp_path):
    doc = run_suite(K3_SUITE, tmp_path / "rows.json", tier="smoke", sanitize="off", quiet=True)
    assert doc["summary"]["verdict"] == "pass", doc["summary"]["failures"][:5]
    assert doc["perturbation"] and all(r["verdict"] == "pass" for r in doc["perturbation"])
    assert doc["speed_of_light"] and all(r["pct_peak_bandwidth"] > 0 for r in doc["speed_of_light"])


def test_planted_race_is_caught_by_perturbation(tmp_path):
    doc = run_suite(
        K3_SUITE,
        tmp_path / "rows.json",
        tier="smoke",
        defects=["race-read-before-write"],
        sanitize="off",
        select="streams",
        quiet=True,
    )
    (row,) = doc["perturbation"]
    assert row["race_detected"] and row["stale_nan_trials"] > 0
    assert doc["summary"]["verdict"] == "fail"
