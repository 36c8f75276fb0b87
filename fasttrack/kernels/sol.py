"""Speed of light: a kernel's achieved bandwidth and FLOP/s as a share of the device's peak.

The peaks are measured in the same run, on the same device: bandwidth by a large
device-to-device copy (bytes read plus bytes written), matrix throughput by a large bf16
matrix product on random data. A kernel's bytes are the fewest it must move (each input read
once, each output written once) and its FLOPs the arithmetic its definition needs, so the
percentages are lower bounds on how far the kernel is from the hardware's limit.

Times are medians of CUDA-event timings of CUDA-graph replays with the L2 cache flushed before
each repetition, so the bandwidth is DRAM bandwidth, as it is for a decode step that streams
weights and state, and host launch overhead is not counted.
"""

from __future__ import annotations

import statistics
from typing import Any, Callable

import torch

_PEAKS: dict[str, dict[str, Any]] = {}


def _event_median_ms(fn: Callable[[], Any], *, warmup: int = 3, reps: int = 10) -> tuple[float, list[float]]:
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end))
    return statistics.median(samples), samples


def _copy_median_ms(dev: torch.device, copy_bytes: int) -> tuple[float, list[float]]:
    """Median time of a device-to-device copy of ``copy_bytes`` bytes of fp32."""
    src = torch.empty(copy_bytes // 4, device=dev, dtype=torch.float32).normal_()
    dst = torch.empty_like(src)
    return _event_median_ms(lambda: dst.copy_(src), reps=20)


def _matmul_median_ms(dev: torch.device, n: int) -> tuple[float, list[float]]:
    """Median time of an ``n x n x n`` bf16 matrix product on random normal operands."""
    a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    return _event_median_ms(lambda: a @ b, reps=10)


def measure_peaks(
    device: torch.device | str = "cuda", *, copy_bytes: int = 2 << 30, matmul_n: int = 8192
) -> dict[str, Any]:
    """Measure (once per process and device) the copy bandwidth and the bf16 matmul rate."""
    dev = torch.device(device)
    key = str(dev)
    if key in _PEAKS:
        return _PEAKS[key]
    # each measurement's buffers are freed when its helper returns, before the next is allocated
    copy_ms, copy_samples = _copy_median_ms(dev, copy_bytes)
    mm_ms, mm_samples = _matmul_median_ms(dev, matmul_n)
    torch.cuda.empty_cache()
    peaks = {
        "device": torch.cuda.get_device_name(dev),
        "copy_bytes": 2 * copy_bytes,
        "copy_ms_median": copy_ms,
        "copy_ms_samples": copy_samples,
        "bandwidth_gbs": 2 * copy_bytes / (copy_ms * 1e-3) / 1e9,
        "matmul": f"bf16 {matmul_n}x{matmul_n}x{matmul_n}, random normal operands",
        "matmul_ms_median": mm_ms,
        "matmul_ms_samples": mm_samples,
        "bf16_tflops": 2 * matmul_n**3 / (mm_ms * 1e-3) / 1e12,
        "method": "median of CUDA-event timings after 3 warm-ups (copy: 20 reps, matmul: 10 reps)",
    }
    _PEAKS[key] = peaks
    return peaks


#: Bytes zeroed before each timed repetition: evicts the 60 MB L2 of an H200 many times over and
#: keeps the GPU busy (about 120 us) while the host enqueues the timed launch.
FLUSH_BYTES = 512 << 20


def time_ms(fn: Callable[[], Any], *, reps: int = 50, warmup: int = 5) -> tuple[float, list[float], str]:
    """Median device time of ``fn`` in ms with a cold L2, its samples, and how it was measured.

    Decode kernels read their weights and state from DRAM on every step, so each repetition
    starts with the L2 flushed; otherwise a working set under the L2's size would be timed from
    cache and could exceed the DRAM bandwidth it is compared with. ``fn`` is captured in a CUDA
    graph and replayed, so host launch overhead stays out of the events (the flush keeps the
    GPU busy while the replay is enqueued). Functions that cannot be captured are launched
    directly.
    """
    flush = torch.empty(FLUSH_BYTES, dtype=torch.int8, device="cuda")
    method = "CUDA graph replay"
    run: Callable[[], Any] = fn
    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                fn()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
        run = graph.replay
    except Exception:  # not capturable (several streams, host syncs): launch directly
        torch.cuda.synchronize()
        method = "direct launches (not capturable)"
    samples = []
    for i in range(warmup + reps):
        flush.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        end.record()
        end.synchronize()
        if i >= warmup:
            samples.append(start.elapsed_time(end))
    del flush
    return (
        statistics.median(samples),
        samples,
        f"{method}, L2 flushed ({FLUSH_BYTES >> 20} MB zeroed) before each of {reps} repetitions, CUDA events, median",
    )


def bench(
    fn: Callable[[], Any],
    *,
    bytes_moved: int,
    flops: int,
    device: torch.device | str = "cuda",
) -> dict[str, Any]:
    """Time ``fn`` and express it against the measured peaks."""
    peaks = measure_peaks(device)
    ms, samples, method = time_ms(fn)
    s = ms * 1e-3
    gbs = bytes_moved / s / 1e9
    tflops = flops / s / 1e12
    pct_bw = 100.0 * gbs / peaks["bandwidth_gbs"]
    pct_fl = 100.0 * tflops / peaks["bf16_tflops"]
    floor_us = max(bytes_moved / (peaks["bandwidth_gbs"] * 1e9), flops / (peaks["bf16_tflops"] * 1e12)) * 1e6
    return {
        "time_us": ms * 1e3,
        "time_us_samples": [round(x * 1e3, 3) for x in samples],
        "timing": method,
        "bytes": int(bytes_moved),
        "flops": int(flops),
        "achieved_gbs": gbs,
        "achieved_tflops": tflops,
        "peak_bandwidth_gbs": peaks["bandwidth_gbs"],
        "peak_bf16_tflops": peaks["bf16_tflops"],
        "pct_peak_bandwidth": pct_bw,
        "pct_peak_flops": pct_fl,
        "bound": "memory" if pct_bw >= pct_fl else "compute",
        "pct_speed_of_light": max(pct_bw, pct_fl),
        "floor_us": floor_us,
    }
