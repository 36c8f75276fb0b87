"""Path evidence from GPU engines, on fixtures recorded on an NVIDIA H200 (tests/fixtures/gpu/README.md).

Under CUDA graphs an engine step replays a captured graph: no host op of the model runs, and the kernels the
graph launches are recorded under their own names, attributed to the step through the graph launch's
correlation id. These tests hold the trace analysis, the device counters and the profiler window's file
detection to what the real engines wrote.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from pathlib import Path

import pytest

from fasttrack.engine.evidence import apply_device_counters, combine_analyses
from fasttrack.engine.profiler import ProfilerWindow
from fasttrack.engine.trace import MarkerSet, analyze_trace

GPU = Path(__file__).resolve().parent.parent / "fixtures" / "gpu"
CANDIDATE = GPU / "h200-candidate-equivalence.pt.trace.json.gz"
BASELINE = GPU / "h200-baseline-coverage.pt.trace.json.gz"
PROBE = GPU / "h200-graph-probe.pt.trace.json.gz"

KERNEL_MARKERS = MarkerSet(optimized=["^fasttrack_demo_fused_add_rmsnorm"], stock=["^fasttrack_demo_stock_step"])


def _decode_steps(analysis) -> Counter:
    return Counter((s.batch, s.optimized_ops > 0) for s in analysis.steps if s.kind == "decode")


def test_replayed_graphs_show_the_fast_path_kernels_at_every_decode_step():
    """The candidate (vLLM 0.26.0, full CUDA graphs for decode batches) ran the Triton norm kernel in every
    decode step of its equivalence window, at every batch size: 16 layers x 2 norms + the final norm."""
    a = analyze_trace(CANDIDATE, KERNEL_MARKERS)
    assert a.kernel_basis == "gpu_kernels"
    assert _decode_steps(a) == {(1, True): 5, (2, True): 5, (4, True): 5, (8, True): 5}
    per_step = {s.optimized_ops for s in a.steps if s.kind == "decode"}
    assert per_step == {33}
    # the prefill steps ran the stock path (the candidate's stock-step marker kernel), never the fast one
    prefill = [s for s in a.steps if s.kind == "prefill"]
    assert prefill and all(s.stock_ops and not s.optimized_ops for s in prefill)


def test_the_baseline_runs_none_of_the_fast_path_kernels():
    a = analyze_trace(BASELINE, KERNEL_MARKERS)
    decode = _decode_steps(a)
    assert sum(decode.values()) >= 20 and not any(opt for _, opt in decode)
    assert a.optimized_op_counts == {} and a.stock_op_counts == {}
    # the stock build's norms are inductor's kernels
    assert any(name.startswith("triton_red_fused_fused_add_rms_norm") for name in a.op_counts)


def test_host_ops_are_no_evidence_on_a_gpu_trace():
    """A marker that names a host-side record (a CPU op or annotation) counts nothing on a trace with GPU
    kernels: a replayed graph runs no host op, so such a marker sees graph captures, not executions."""
    host_markers = MarkerSet(optimized=["^aten::mm$", "^execute_context_0\\(0\\)_generation_4"], stock=["^aten::copy_"])
    a = analyze_trace(PROBE, host_markers)
    assert a.kernel_basis == "gpu_kernels"
    assert a.host_marker_ops > 0
    assert a.optimized_op_counts == {} and all(s.optimized_ops == 0 for s in a.steps)


def test_graph_probe_attributes_replayed_kernels_to_their_step():
    """The probe captured one fast and one stock graph and replayed them 5 and 3 times inside vLLM-style step
    annotations: every replayed kernel lands in its own step."""
    a = analyze_trace(PROBE, KERNEL_MARKERS)
    decode = [s for s in a.steps if s.kind == "decode"]
    assert Counter((s.batch, s.optimized_ops, s.stock_ops) for s in decode) == {(4, 2, 0): 5, (16, 0, 1): 3}


def _window(counter: float | None, stock: float | None = None):
    analyses = [analyze_trace(CANDIDATE, KERNEL_MARKERS)]
    ev = combine_analyses(analyses, name="w", side="candidate", prefix="", duration_s=1.0, markers=KERNEL_MARKERS)
    apply_device_counters(ev, analyses, counter, stock)
    return ev


def test_device_counters_confirming_every_step_change_nothing():
    ev = _window(24.0, 4.0)  # the device counted more fast steps than the trace holds (the trace starts late)
    assert ev.optimized_decode_steps == 20 and ev.device_unconfirmed_steps == 0
    assert ev.device_optimized_steps == 24 and ev.device_stock_steps == 4


def test_a_kernel_that_falls_back_inside_is_caught_by_its_device_counter():
    """The kernels ran (their names are in the trace) but took their fallback branch in 10 of 20 steps: the
    device counted 10 fast steps, so half of each batch size's optimized steps are not confirmed."""
    ev = _window(10.0)
    assert ev.optimized_decode_steps == 10 and ev.device_unconfirmed_steps == 10
    assert sum(ev.optimized_decode_batch_sizes.values()) == 10
    assert set(ev.optimized_decode_batch_sizes.values()) <= {2, 3}  # each size keeps its share
    assert ev.decode_steps == 20
    assert any("not confirmed by the device" in n for n in ev.notes)
    pe = ev.to_path_evidence(check="equivalence", point="p")
    assert pe.optimized_decode_steps == 10 and pe.detail["device_unconfirmed_steps"] == 10


def test_a_declared_counter_the_engine_does_not_export_is_said():
    ev = _window(None)
    assert ev.device_optimized_steps is None and ev.device_counter_missing
    assert ev.to_path_evidence(check="equivalence", point="p").detail["device_counter_missing"] is True
    assert any("did not export it" in n for n in ev.notes)


class _Engine:
    side = "candidate"

    def __init__(self, d: Path) -> None:
        self.profiler_dir = d


def test_window_finds_traces_of_a_vllm_that_ignores_the_prefix(tmp_path: Path):
    """vLLM 0.26's /start_profile takes no body: trace files are named rank<N>.<timestamp>, not with the
    window's prefix. The window takes the worker traces that appeared since it opened."""
    old = tmp_path / "rank0.1.pt.trace.json.gz"
    old.write_bytes(b"x")
    win = ProfilerWindow(_Engine(tmp_path), "decode-b4")  # type: ignore[arg-type]
    win._before = win._existing()
    new = tmp_path / "rank0.2.pt.trace.json.gz"
    new.write_bytes(b"y")
    (tmp_path / "rank0.3.async_llm.pt.trace.json.gz").write_bytes(b"z")  # the API server's own trace: not a worker's
    assert win._new_traces() == [new]
    named = tmp_path / f"{win.prefix}_rank0.pt.trace.json.gz"
    named.write_bytes(b"w")
    os.utime(named, (time.time(), time.time()))
    assert win._new_traces() == [named]  # where the prefix is honoured, only the window's own files


@pytest.mark.parametrize("path", [CANDIDATE, BASELINE, PROBE])
def test_fixtures_are_small(path: Path):
    assert path.stat().st_size < 600_000
