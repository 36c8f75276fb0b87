"""The CUDA fast path's kernels on a real GPU (marked ``gpu``; skipped with the reason where there is none).

What tests/fixtures/gpu recorded on an H200, asserted live: the device counters count CUDA-graph replays, the
profiler names the replayed kernels, the planted kernel defects act inside a captured graph.
"""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.gpu

if not torch.cuda.is_available():
    pytest.skip("no CUDA device on this host: the CUDA fast path's kernels need one", allow_module_level=True)

from fasttrack_demo_plugin import triton_kernels as tk  # noqa: E402
from fasttrack_demo_plugin.cuda_path import device_flags  # noqa: E402


@pytest.fixture
def state():
    dev = torch.device("cuda")
    g = torch.Generator(device="cpu").manual_seed(0)
    x = torch.randn(4, 2048, generator=g).to(dev, torch.bfloat16)
    r = torch.randn(4, 2048, generator=g).to(dev, torch.bfloat16)
    w = (torch.rand(2048, generator=g) + 0.5).to(dev, torch.bfloat16)
    return {
        "x": x,
        "r": r,
        "w": w,
        "counts": torch.zeros(tk.COUNT_SLOTS, dtype=torch.int64, device=dev),
        "flags": torch.zeros(tk.FLAG_SLOTS, dtype=torch.int64, device=dev),
        "scratch": torch.zeros(64, dtype=torch.float32, device=dev),
        "seq": torch.full((4,), 100, dtype=torch.int32, device=dev),
    }


def _fast(s):
    return tk.fused_add_rmsnorm(
        s["x"], s["r"], s["w"], 1e-5, counts=s["counts"], flags=s["flags"], seq_lens=s["seq"], scratch=s["scratch"]
    )


def _graph(s):
    for _ in range(2):
        _fast(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        _fast(s)
    torch.cuda.synchronize()
    s["counts"].zero_()
    return g


def test_device_counter_counts_replays_not_the_capture(state):
    g = _graph(state)
    for _ in range(5):
        g.replay()
    tk.count_stock_step(state["counts"])
    torch.cuda.synchronize()
    assert state["counts"].tolist()[:2] == [5, 1]


def test_context_fallback_is_decided_on_the_device_at_replay(state):
    g = _graph(state)
    state["flags"].copy_(torch.tensor(device_flags("context-fallback")))
    g.replay()
    state["seq"].fill_(5000)
    g.replay()
    torch.cuda.synchronize()
    assert state["counts"][tk.COUNT_FAST].item() == 1


def test_atomic_order_changes_the_bits_from_run_to_run(state):
    x = torch.randn(8, 2048, device="cuda")
    r = torch.randn(8, 2048, device="cuda")
    w = torch.rand(2048, device="cuda") + 0.5
    state["flags"].copy_(torch.tensor(device_flags("atomic-order")))
    outs = [tk.fused_add_rmsnorm(x, r, w, 1e-5, flags=state["flags"], scratch=state["scratch"])[0] for _ in range(10)]
    assert any(not torch.equal(outs[0], o) for o in outs[1:])
    state["flags"].zero_()
    clean = [tk.fused_add_rmsnorm(x, r, w, 1e-5, flags=state["flags"], scratch=state["scratch"])[0] for _ in range(5)]
    assert all(torch.equal(clean[0], o) for o in clean[1:])


def test_slow_batch_spins_inside_the_graph(state):
    g = _graph(state)

    def per_replay_us() -> float:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        for _ in range(10):
            g.replay()
        start.record()
        for _ in range(50):
            g.replay()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) / 50 * 1000

    clean = per_replay_us()
    state["flags"].copy_(torch.tensor(device_flags("slow-batch")))
    slow = per_replay_us()
    assert slow - clean > 0.8 * device_flags("slow-batch")[2] / 1000
