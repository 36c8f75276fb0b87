"""The demo plugin's CUDA fast path, on the CPU: its Triton kernels under Triton's interpreter, the host-side
step classification (no GPU reads), the planted defects' device flags and their per-device refusal.

The same kernels on an H200 (replays counted by the device counters, kernel names in the profiler trace,
the slow-batch spin, the atomic-order nondeterminism) are recorded in tests/fixtures/gpu and
tests/engine/test_gpu_evidence.py; docs/gpu.md has the run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from fasttrack_demo_plugin.dispatch import classify_host
from fasttrack_demo_plugin.settings import (
    CONTEXT_FALLBACK_TOKENS,
    NUMERICS_FROM_BATCH,
    BackendSettings,
    DemoBackendConfigError,
    check_defect_device,
)

ROOT = Path(__file__).resolve().parents[2]

INTERPRETED = r"""
import json, torch
from fasttrack_demo_plugin import triton_kernels as tk
from fasttrack_demo_plugin.cuda_path import device_flags
torch.manual_seed(0)
out = {}
def ref(x, r, w, eps):
    s = (x.double() + r.double()).to(x.dtype).double() if r is not None else x.double()
    return (s * torch.rsqrt(s.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype).double() * w.double(), s
def run(dt, b, defect=None, seq=None, res=True):
    x = torch.randn(b, 256, dtype=dt); r = torch.randn(b, 256, dtype=dt) if res else None
    w = torch.rand(256, dtype=dt) + 0.5
    counts = torch.zeros(4, dtype=torch.int64); scratch = torch.zeros(64)
    flags = torch.tensor(device_flags(defect), dtype=torch.int64)
    o, nr = tk.fused_add_rmsnorm(x, r, w, 1e-6, counts=counts, flags=flags, scratch=scratch, seq_lens=seq)
    eo, er = ref(x, r, w, 1e-6)
    rel = ((o.double() - eo).abs() / (eo.abs() + 1e-2)).max().item()
    return {"rel": rel, "res": (nr.double() - er).abs().max().item(), "counts": counts.tolist(),
            "scratch": scratch.abs().sum().item()}
for dt in ("float32", "bfloat16"):
    for b in (1, 4, 5, 8):
        out[f"{dt}-{b}"] = run(getattr(torch, dt), b)
        out[f"{dt}-{b}-numerics"] = run(getattr(torch, dt), b, "numerics-from-batch")
        out[f"{dt}-{b}-atomic"] = run(getattr(torch, dt), b, "atomic-order")
out["nores"] = run(torch.float32, 3, res=False)
long = torch.tensor([10, 5000, 10], dtype=torch.int32); short = torch.tensor([10, 20, 30], dtype=torch.int32)
out["ctx-long"] = run(torch.float32, 3, "context-fallback", seq=long)
out["ctx-short"] = run(torch.float32, 3, "context-fallback", seq=short)
out["clean-long"] = run(torch.float32, 3, None, seq=long)
c = torch.zeros(4, dtype=torch.int64); tk.count_stock_step(c); tk.count_stock_step(c); out["stock"] = c.tolist()
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def interpreted() -> dict:
    """The kernels run once under ``TRITON_INTERPRET=1`` in a fresh interpreter (the switch is read when the
    kernels are defined)."""
    env = dict(os.environ, TRITON_INTERPRET="1")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "examples" / "demo_plugin"), env.get("PYTHONPATH", "")])
    proc = subprocess.run(
        [sys.executable, "-c", INTERPRETED], env=env, capture_output=True, text=True, timeout=600, cwd=ROOT
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_norm_matches_float64_and_counts_each_fast_launch_once(interpreted):
    for dt, tol in (("float32", 1e-5), ("bfloat16", 2e-2)):
        for b in (1, 4, 5, 8):
            r = interpreted[f"{dt}-{b}"]
            assert r["rel"] < tol, (dt, b, r)
            assert r["counts"] == [1, 0, 0, 0]
    assert interpreted["nores"]["rel"] < 1e-5


def test_numerics_defect_breaks_the_norm_from_its_batch_size_on(interpreted):
    for b in (1, 4):
        assert interpreted[f"float32-{b}-numerics"]["rel"] < 1e-5
    assert NUMERICS_FROM_BATCH == 5
    for b in (5, 8):
        assert interpreted[f"float32-{b}-numerics"]["rel"] > 0.05


def test_atomic_defect_keeps_the_value_and_leaves_its_scratch_zeroed(interpreted):
    for b in (1, 8):
        r = interpreted[f"float32-{b}-atomic"]
        assert r["rel"] < 1e-4 and r["scratch"] == 0.0  # the interpreter runs atomics in order: no nondeterminism


def test_context_fallback_is_silent_above_its_length_only(interpreted):
    assert CONTEXT_FALLBACK_TOKENS < 5000
    assert interpreted["ctx-long"]["counts"] == [0, 0, 0, 0]
    assert interpreted["ctx-short"]["counts"] == [1, 0, 0, 0]
    assert interpreted["clean-long"]["counts"] == [1, 0, 0, 0]
    assert interpreted["ctx-long"]["rel"] < 1e-5  # same result: only the counter tells


def test_the_stock_marker_counts_stock_steps(interpreted):
    assert interpreted["stock"] == [0, 2, 0, 0]


def _meta(query_lens: list[int], padded: int | None = None) -> SimpleNamespace:
    n = padded or len(query_lens)
    loc = torch.zeros(n + 1, dtype=torch.int32)
    return SimpleNamespace(
        query_start_loc=loc,  # only its shape is read: no GPU value is looked at
        num_actual_tokens=sum(query_lens),
        max_query_len=max(query_lens),
    )


SETTINGS = BackendSettings(backend="latency_specialized", defect=None)


@pytest.mark.parametrize(
    ("lens", "fast", "reason"),
    [
        ([1] * 4, True, None),
        ([1] * 8, True, None),
        ([1] * 9, False, "batch_out_of_range"),
        ([7], False, "prefill"),
        ([256, 1], False, "prefill_or_mixed"),  # the numbers alone cannot tell it from two prefills
        ([3, 1, 1], False, "mixed"),  # fewer tokens than two per request: a decode request is in it
        ([5, 6], False, "prefill_or_mixed"),
    ],
)
def test_host_classification_reads_no_gpu_value(lens, fast, reason):
    plan = classify_host(_meta(lens), SETTINGS)
    assert plan.fast is fast and plan.reason == reason and plan.batch == len(lens)


def test_spec_verify_steps_are_told_apart_with_drafts():
    s = BackendSettings(backend="latency_specialized", defect=None, spec_tokens=3)
    assert classify_host(_meta([4, 4]), s).reason == "spec_verify"
    assert classify_host(_meta([9]), s).reason == "prefill"  # more query tokens than 1 + drafts


def test_a_defect_of_the_other_device_is_refused():
    check_defect_device("graph-stale", "cuda", "FASTTRACK_DEMO_DEFECT")
    check_defect_device("numerics-batch", "cpu", "FASTTRACK_DEMO_DEFECT")
    check_defect_device("slow-batch", "cuda", "X")
    check_defect_device("slow-batch", "cpu", "X")
    with pytest.raises(DemoBackendConfigError, match="CUDA fast path"):
        check_defect_device("graph-stale", "cpu", "FASTTRACK_DEMO_DEFECT")
    with pytest.raises(DemoBackendConfigError, match="CPU fast path"):
        check_defect_device("broken-json", "cuda", "FASTTRACK_DEMO_DEFECT")


def test_slow_batch_as_a_factor_on_cuda_spins_for_the_measured_step_time() -> None:
    """``FASTTRACK_DEMO_SLOW_FACTOR`` on CUDA: the spin follows (f - 1) x the slow batch's own step time measured
    between consecutive steps, less the spin each held; other batches and pauses do not count."""
    from fasttrack_demo_plugin.cuda_path import SlowFactor

    sf = SlowFactor(1.03)
    step = 0.006  # a 6 ms step of the ~8B demo model
    now, spins = 0.0, []
    for _ in range(40):
        now += step + sf.spin_ns * 1e-9
        spin = sf.step(4, now)
        if spin is not None:
            spins.append(spin)
    assert spins and abs(sf.spin_ns - 0.03 * step * 1e9) < 0.03 * 0.03 * step * 1e9, sf.spin_ns
    # batch 3 replays the graph of 4 and is slowed too; batches 2 and 5..8 are not, and reset the gap
    assert SlowFactor(1.5).step(3, 1.0) is None
    other = SlowFactor(1.5)
    other.step(4, 1.0)
    assert other.step(8, 1.004) is None and other.last is None
    # a gap over 0.2 s is a pause, not a step
    paused = SlowFactor(1.5)
    paused.step(4, 1.0)
    paused.step(4, 1.5)
    assert paused.own == [] and paused.spin_ns == 0
