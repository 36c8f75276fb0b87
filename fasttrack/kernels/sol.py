"""Speed of light: a kernel's achieved bandwidth and FLOP/s as a share of the device's peak.

The peaks are measured in the same run, on the same device: bandwidth by a large
device-to-device copy (bytes read plus bytes written), matrix throughput by a large bf16
matrix product on random data. A kernel's bytes are the fewest it must move (each input read
once, each output written once) and its FLOPs the arithmetic its definition needs, so the
percentages are lower bounds on how far the kernel is from the hardware's limit.

Times are medians of CUDA-event timings with the L2 cache flushed before each repetition
(``triton.testing.do_bench``), so the bandwidth is DRAM bandwidth, as it is for a decode step
that streams weights and state.
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


def measure_peaks(device: torch.device | str = "cuda", *, copy_bytes: int = 2 << 30, matmul_n: int = 8192) -> dict[str, Any]:
    """Measure (once per process and device) the copy bandwidth and the bf16 matmul rate."""
    dev = torch.device(device)
    key = str(dev)
    if key in _PEAKS:
        return _PEAKS[key]
    n = copy_bytes // 4
    src = torch.empty(n, device=dev, dtype=torch.float32).normal_()
    dst = torch.empty_like(src)
    copy_ms, copy_samples = _event_median_ms(lambda: dst.copy_(src), reps=20)
    del src, dst
    a = torch.randn(matmul_n, matmul_n, device=dev, dtype=torch.bfloat16)
    b = torch.randn(matmul_n, matmul_n, device=dev, dtype=torch.bfloat16)
    mm_ms, mm_samples = _event_median_ms(lambda: a @ b, reps=10)
    del a, b
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


def time_ms(fn: Callable[[], Any]) -> tuple[float, str]:
    """Median time of ``fn`` in ms with a cold L2, and how it was measured.

    Decode kernels read their weights and state from DRAM on every step, so each repetition
    starts with the L2 flushed (``triton.testing.do_bench`` zeroes a 256 MB buffer first);
    otherwise a working set under the 60 MB L2 of an H200 would be timed from cache and
    could exceed the DRAM bandwidth peak it is compared with.
    """
    try:
        import triton.testing as tt
    except Exception:  # noqa: BLE001 - triton is optional here
        tt = None
    if tt is not None:
        ms = tt.do_bench(fn, warmup=25, rep=100, return_mode="median")
        return float(ms), "triton.testing.do_bench: CUDA events per repetition, L2 flushed before each, median"
    flush = torch.empty(256 << 20, dtype=torch.int8, device="cuda")

    def cold() -> None:
        flush.zero_()

    samples = []
    for i in range(60):
        cold()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        if i >= 10:
            samples.append(start.elapsed_time(end))
    return statistics.median(samples), "CUDA events per repetition, L2 flushed before each, median of 50"


def bench(
    fn: Callable[[], Any],
    *,
    bytes_moved: int,
    flops: int,
    device: torch.device | str = "cuda",
) -> dict[str, Any]:
    """Time ``fn`` and express it against the measured peaks."""
    peaks = measure_peaks(device)
    ms, method = time_ms(fn)
    s = ms * 1e-3
    gbs = bytes_moved / s / 1e9
    tflops = flops / s / 1e12
    pct_bw = 100.0 * gbs / peaks["bandwidth_gbs"]
    pct_fl = 100.0 * tflops / peaks["bf16_tflops"]
    floor_us = max(bytes_moved / (peaks["bandwidth_gbs"] * 1e9), flops / (peaks["bf16_tflops"] * 1e12)) * 1e6
    return {
        "time_us": ms * 1e3,
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
