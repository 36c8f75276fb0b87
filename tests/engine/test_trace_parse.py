"""Streaming trace reader and per-step path evidence, on synthetic Chrome traces."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from fasttrack.engine import (
    MarkerSet,
    ProfilerError,
    analyze_trace,
    evidence_from_traces,
    flags,
    iter_trace_events,
    trace,
)
from fasttrack.engine.trace import parse_step_name

PID, TID = 4242, 4242
MARKERS = MarkerSet(optimized=[r"^fasttrack_demo::fused_decode_mlp$"], stock=[r"silu_and_mul", r"^aten::mm$"])


def _x(name: str, ts: float, dur: float, cat: str = "cpu_op", pid: int = PID, tid: int = TID, **args) -> dict:
    ev = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur}
    if args:
        ev["args"] = args
    return ev


def _step(name: str, ts: float, fast: bool) -> list[dict]:
    """One engine step: annotation + a compiled-graph call with nested ops."""
    evs = [_x(name, ts, 100.0, cat="user_annotation"), _x("## Call CompiledFxGraph ##", ts + 1, 90)]
    if fast:
        evs += [
            _x("fasttrack_demo::dispatch_mlp_block", ts + 2, 40),
            _x("fasttrack_demo::fused_decode_mlp", ts + 3, 30),
            _x("aten::addmm", ts + 4, 10),  # leaf inside the fused op
            _x("aten::addmm", ts + 15, 10),
        ]
    else:
        evs += [
            _x("fasttrack_demo::dispatch_mlp_block", ts + 2, 40),
            _x("aten::mm", ts + 3, 10),
            _x("_C::silu_and_mul", ts + 14, 5),
            _x("aten::mm", ts + 20, 10),
        ]
    evs.append(_x("_C::cpu_attention_with_kv_cache", ts + 50, 20))
    return evs


def _trace(events: list[dict]) -> dict:
    return {
        "schemaVersion": 1,
        "deviceProperties": [],
        "traceEvents": [
            {"ph": "M", "name": "process_name", "pid": PID, "tid": 0, "args": {"name": "VLLM::Worker"}},
            *events,
            {"ph": "i", "name": "marker", "pid": PID, "tid": TID, "ts": 0, "s": "t"},
        ],
        "traceName": "x",
    }


def _write(path: Path, trace: dict, *, gz: bool) -> Path:
    data = json.dumps(trace, indent=1).encode()
    if gz:
        path.write_bytes(gzip.compress(data))
    else:
        path.write_bytes(data)
    return path


def _window_events() -> list[dict]:
    evs: list[dict] = []
    evs += _step("execute_context_2(12)_generation_0(0)", 0, fast=False)  # prefill
    evs += _step("execute_context_1(5)_generation_1(1)", 1000, fast=False)  # mixed
    evs += _step("execute_context_0(0)_generation_2(2)", 2000, fast=True)
    evs += _step("execute_context_0(0)_generation_2(2)", 3000, fast=True)
    evs += _step("execute_context_0(0)_generation_1(1)", 4000, fast=False)  # decode on the stock path
    evs.append(_x("execute_context_0(0)_generation_0(0)", 5000, 5, cat="user_annotation"))
    evs.append(_x("_C::greedy_argmax", 900, 3))  # between steps (sampling)
    return evs


@pytest.mark.parametrize("gz", [True, False])
def test_step_and_marker_counts(tmp_path: Path, gz: bool) -> None:
    path = _write(tmp_path / ("w.pt.trace.json" + (".gz" if gz else "")), _trace(_window_events()), gz=gz)
    a = analyze_trace(path, MARKERS)
    assert a.kernel_basis == "leaf_cpu_ops"
    assert [s.kind for s in a.steps] == ["prefill", "mixed", "decode", "decode", "decode", "empty"]
    assert [s.batch for s in a.steps] == [0, 1, 2, 2, 1, 0]
    assert [s.optimized_ops for s in a.steps] == [0, 0, 1, 1, 0, 0]
    assert [s.stock_ops for s in a.steps] == [3, 3, 0, 0, 3, 0]
    # leaves: fast step: 2 addmm + attention; stock step: mm, silu_and_mul, mm + attention
    assert [s.ops for s in a.steps] == [4, 4, 3, 3, 4, 0]
    assert a.unassigned_ops == 1  # the sampling op between steps
    assert a.op_counts["fasttrack_demo::fused_decode_mlp"] == 2
    assert a.optimized_op_counts == {"fasttrack_demo::fused_decode_mlp": 2}
    assert a.stock_op_counts == {"aten::mm": 6, "_C::silu_and_mul": 3}
    assert "execute_context_0(0)_generation_2(2)" not in a.op_counts

    ev = evidence_from_traces([path], name="decode", side="candidate", markers=MARKERS)
    assert ev.decode_steps == 3 and ev.optimized_decode_steps == 2
    assert ev.optimized_decode_fraction == pytest.approx(2 / 3)
    assert ev.step_counts == {"prefill": 1, "mixed": 1, "decode": 3, "empty": 1}
    assert ev.optimized_step_counts == {"decode": 2}
    assert ev.stock_step_counts == {"prefill": 1, "mixed": 1, "decode": 1}
    assert ev.decode_batch_sizes == {1: 1, 2: 2}
    assert ev.optimized_decode_batch_sizes == {2: 2}
    assert ev.kernels_per_decode_step == pytest.approx((3 + 3 + 4) / 3, abs=1e-3)
    assert ev.optimized_ops == 2 and ev.stock_ops == 9
    pe = ev.to_path_evidence(check="coverage", point="b2")
    assert (pe.side, pe.window, pe.decode_steps, pe.optimized_decode_steps) == ("candidate", "decode", 3, 2)
    assert pe.optimized_ops == 2 and pe.stock_ops == 9


def test_baseline_window_has_no_optimized_ops(tmp_path: Path) -> None:
    evs = []
    for i in range(4):
        evs += _step("execute_context_0(0)_generation_4(4)", i * 1000, fast=False)
    path = _write(tmp_path / "b.pt.trace.json.gz", _trace(evs), gz=True)
    ev = evidence_from_traces([path], name="decode", side="baseline", markers=MARKERS)
    assert ev.decode_steps == 4 and ev.optimized_decode_steps == 0 and ev.optimized_ops == 0
    assert ev.optimized_decode_fraction == 0.0


def test_fallback_lines_from_log_text(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "p.pt.trace.json", _trace(_step("execute_context_1(9)_generation_0(0)", 0, False)), gz=False
    )
    log = (
        "(EngineCore pid=1) INFO fasttrack-demo fallback reason=prefill batch=1 tokens=9 count=1 suppressed=0\n"
        "(EngineCore pid=1) INFO something else\n"
    )
    ev = evidence_from_traces(
        [path],
        name="prefill",
        side="candidate",
        markers=MARKERS,
        log_text=log,
        fallback_pattern=r"fasttrack-demo fallback reason=",
    )
    assert ev.fallback_events == 1 and "reason=prefill" in ev.fallback_lines[0]
    assert ev.to_path_evidence(check="coverage", point="p").fallback_events == 1


def test_gpu_kernels_are_attributed_through_their_launch(tmp_path: Path) -> None:
    gpu_pid = 0
    evs = [
        _x("execute_context_0(0)_generation_8(8)", 0, 100, cat="user_annotation"),
        _x("cudaLaunchKernel", 10, 2, cat="cuda_runtime", correlation=1),
        _x("cudaLaunchKernel", 20, 2, cat="cuda_runtime", correlation=2),
        _x("execute_context_0(0)_generation_8(8)", 1000, 100, cat="user_annotation"),
        _x("cudaGraphLaunch", 1010, 2, cat="cuda_runtime", correlation=3),
        # kernels run after their step's CPU span ended (asynchronous GPU timeline)
        _x("fused_decode_gemm_kernel", 150, 30, cat="kernel", pid=gpu_pid, tid=7, correlation=1),
        _x("rms_norm_kernel", 190, 5, cat="kernel", pid=gpu_pid, tid=7, correlation=2),
        _x("ampere_sgemm", 1150, 30, cat="kernel", pid=gpu_pid, tid=7, correlation=3),
        _x("orphan_kernel", 1300, 30, cat="kernel", pid=gpu_pid, tid=7),
    ]
    path = _write(tmp_path / "g.pt.trace.json", _trace(evs), gz=False)
    m = MarkerSet(optimized=["fused_decode"], stock=["sgemm"])
    a = analyze_trace(path, m)
    assert a.kernel_basis == "gpu_kernels"
    assert [(s.ops, s.optimized_ops, s.stock_ops) for s in a.steps] == [(2, 1, 0), (1, 0, 1)]
    assert a.unassigned_ops == 1


def test_step_name_forms() -> None:
    s = parse_step_name("execute_context_0(0)_generation_4(4)")
    assert s is not None and s.kind == "decode" and s.generation_requests == 4
    d = parse_step_name("execute_7_context_1(sq3sk3sqsq9sqsk9)_generation_4(sq4sk40sqsq4sqsk40)")
    assert d is not None and d.kind == "mixed" and (d.context_tokens, d.generation_tokens) == (3, 4)
    assert parse_step_name("execute_context_2(10)_generation_0(0)").kind == "prefill"  # type: ignore[union-attr]  # a step name: parsed
    assert parse_step_name("aten::mm") is None


def test_stream_reader_handles_chunk_boundaries(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(trace, "TRACE_CHUNK", 37)  # events straddle every read
    events = [_x(f"op{i}", i * 10.0, 5.0) for i in range(500)]
    path = _write(tmp_path / "c.pt.trace.json.gz", _trace(events), gz=True)
    got = [e["name"] for e in iter_trace_events(path) if e.get("ph") == "X"]
    assert got == [f"op{i}" for i in range(500)]


def test_truncated_and_malformed_traces_raise(tmp_path: Path) -> None:
    full = json.dumps(_trace([_x("a", 0, 1), _x("b", 2, 1)]))
    cut = tmp_path / "cut.pt.trace.json"
    cut.write_text(full[: len(full) // 2])
    with pytest.raises(ProfilerError, match="truncated|not valid JSON"):
        list(iter_trace_events(cut))
    cutgz = tmp_path / "cut.pt.trace.json.gz"
    cutgz.write_bytes(gzip.compress(full.encode())[:-20])
    with pytest.raises(ProfilerError):
        list(iter_trace_events(cutgz))
    none = tmp_path / "none.json"
    none.write_text('{"schemaVersion": 1}')
    with pytest.raises(ProfilerError, match="no traceEvents"):
        list(iter_trace_events(none))


def test_invalid_marker_regex_is_a_clear_error(tmp_path: Path) -> None:
    path = _write(tmp_path / "x.pt.trace.json", _trace([]), gz=False)
    with pytest.raises(ProfilerError, match="not a valid regular expression"):
        analyze_trace(path, MarkerSet(optimized=["(unclosed"]))


def test_no_step_annotations_is_noted(tmp_path: Path) -> None:
    path = _write(tmp_path / "x.pt.trace.json", _trace([_x("aten::mm", 0, 1)]), gz=False)
    ev = evidence_from_traces([path], name="w", side="baseline", markers=MARKERS)
    assert ev.decode_steps == 0 and ev.kernels_per_decode_step is None
    assert any("no engine-step annotations" in n for n in ev.notes)


def test_per_request_metrics_flag_is_added_once_and_only_where_it_can_work(monkeypatch: pytest.MonkeyPatch) -> None:
    # the installed vLLM (0.32) has the flag: its source names the option
    assert flags.vllm_supports_per_request_metrics()
    assert flags.per_request_metrics_args(["--dtype", "float32"]) == ["--enable-per-request-metrics"]
    assert flags.per_request_metrics_args(["--enable-per-request-metrics"]) == []
    # it needs engine statistics: never combined with --disable-log-stats
    assert flags.per_request_metrics_args(["--disable-log-stats"]) == []
    monkeypatch.setattr(flags, "vllm_supports_per_request_metrics", lambda: False)
    assert flags.per_request_metrics_args([]) == []
