"""The example Triton candidates under Triton's CPU interpreter (``TRITON_INTERPRET=1``): the
per-rank partial-attention kernel matches its reference, and the planted off-by-one in the
Triton DCP combine kernel is caught. Small shapes: the interpreter is slow."""

from __future__ import annotations

import importlib.util

import pytest
from kernels_testlib import K3_SUITE, SMALL_K3_DIMS

from fasttrack.kernels.run import run_suite

pytestmark = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed")


def test_triton_dcp_combine_off_by_one_caught_under_interpreter(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    doc = run_suite(
        K3_SUITE,
        tmp_path / "rows.json",
        tier="smoke",
        dims={**SMALL_K3_DIMS, "hidden": 256},
        defects=["dcp-off-by-one"],
        sanitize="off",
        select="dcp and numerics and b3-",
        quiet=True,
    )
    assert doc["candidate"] == "k3_triton_candidates"
    cases = doc["cases"]
    assert cases, doc["summary"]
    partial = [r for r in cases if r["output"].startswith("partial_")]
    assert partial and all(r["verdict"] == "pass" for r in partial), [r for r in partial if r["verdict"] != "pass"][:2]
    caught = [r for r in cases if r["output"] == "out" and r["verdict"] == "fail"]
    assert caught and doc["summary"]["verdict"] == "fail"
