"""The demo decode backend on CUDA: a fast decode step that runs inside vLLM's CUDA graphs.

On a CUDA device the backend's fast step is vLLM's Llama decoder layer with both RMSNorms replaced by
one Triton kernel each (``triton_kernels.fasttrack_demo_fused_add_rmsnorm``: residual add + RMSNorm in
one pass), around vLLM's own CUDA kernels (its GEMMs, rotary embedding, attention and SiLU-and-mul).
The model's outer ``forward`` takes the branch in Python, so under CUDA graphs the branch is taken when a
graph is captured: vLLM captures one full graph per decode batch size, and a decode step of that size
replays it. A Python counter or a profiler's CPU-side op name therefore sees captures, not replays.

What the kernels that really ran say instead:

- **Device counters.** The first layer's norm kernel adds one to ``counts[COUNT_FAST]`` when it runs its
  fast branch, and a candidate step on the stock path launches ``fasttrack_demo_stock_step``, which adds
  one to ``counts[COUNT_STOCK]``: both run on replay. After every step (in ``compute_logits``, which vLLM
  runs outside the graphs) the counters are copied, without waiting, into pinned host memory; a thread
  publishes them as the Prometheus counters ``fasttrack_demo_device_fast_steps`` and
  ``fasttrack_demo_device_stock_steps`` (visible on the API server's ``/metrics`` when the engine runs
  with ``PROMETHEUS_MULTIPROC_DIR``).
- **Kernel names.** The profiler records the kernels of a replayed graph under their own names, so the
  Triton kernels' names (``fasttrack_demo_fused_add_rmsnorm``, ``fasttrack_demo_stock_step``) are path
  markers that count executions.

Planted defects (``FASTTRACK_DEMO_DEFECT`` or the defect file) that live in the kernels are switched
while the engine runs through a device ``flags`` tensor, re-read by the graphs on every replay;
``graph-stale`` acts when graphs are captured (at start only).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any, Callable

import torch

from fasttrack_demo_plugin import triton_kernels as tk
from fasttrack_demo_plugin.settings import (
    CONTEXT_FALLBACK_TOKENS,
    DEFECT_FILE_ENV,
    GPU_SLOW_BATCH,
    GPU_SLOW_DELAY_NS,
    NUMERICS_FROM_BATCH,
    STALE_BATCH,
    check_defect,
)

logger = logging.getLogger("vllm.fasttrack_demo_plugin")

PUBLISH_INTERVAL_S = 0.05
"""How often the publisher thread turns the host copy of the device counters into Prometheus counters."""
DEFECT_POLL_S = 0.05
"""How often the defect file is checked (after a step; a step of the demo model takes about a millisecond)."""


def device_flags(defect: str | None) -> list[int]:
    """The ``flags`` tensor's content for a planted defect (zeros: none; ``slow-batch`` as a factor starts with
    the fixed spin and then follows the measured step time, :class:`SlowFactor`)."""
    code = tk.DEVICE_DEFECTS.get(defect or "", tk.DEFECT_NONE)
    if code == tk.DEFECT_NUMERICS:
        return [code, NUMERICS_FROM_BATCH, 0, 0]
    if code == tk.DEFECT_SLOW:
        return [code, GPU_SLOW_BATCH, GPU_SLOW_DELAY_NS, 0]
    if code == tk.DEFECT_CONTEXT:
        return [code, CONTEXT_FALLBACK_TOKENS, 0, 0]
    return [code, 0, 0, 0]


class CudaFastPath:
    """Device state of the CUDA fast path: counters, defect flags, the atomic-order scratch, and the
    host side (counter copies, the publisher thread, the defect file)."""

    def __init__(
        self, device: torch.device, defect: str | None, defect_file: str | None, slow_factor: float | None = None
    ) -> None:
        self.device = device
        self.slow = SlowFactor(slow_factor) if slow_factor else None
        """``slow-batch`` with ``FASTTRACK_DEMO_SLOW_FACTOR``: the spin set from the measured step time."""
        self.counts = torch.zeros(tk.COUNT_SLOTS, dtype=torch.int64, device=device)
        self.flags = torch.zeros(tk.FLAG_SLOTS, dtype=torch.int64, device=device)
        self.scratch = torch.zeros(64, dtype=torch.float32, device=device)
        self.host_counts = torch.zeros(tk.COUNT_SLOTS, dtype=torch.int64, device="cpu", pin_memory=True)
        self._host_view = self.host_counts.numpy()
        self.start_defect = defect
        """The defect in effect when the engine started (``graph-stale`` acts on capture only)."""
        self.defect: str | None = None
        self.defect_file = defect_file
        self._defect_file_state: tuple[int, int, int] | None = None
        self._next_poll = 0.0
        self.set_defect(defect)
        self._publisher: threading.Thread | None = None
        self._metrics = _DeviceMetrics.create()

    # -- defects -----------------------------------------------------------------

    def set_defect(self, defect: str | None) -> None:
        """Write the device flags of ``defect`` (a kernel defect, or none)."""
        if defect == self.defect:
            return
        if defect != self.start_defect or self.defect is not None:
            logger.info("fasttrack-demo planted defect now %s", defect or "none")
        self.defect = defect
        flags = device_flags(defect)
        self.flags.copy_(torch.tensor(flags, dtype=torch.int64, device="cpu"))

    def _poll_defect_file(self) -> None:
        if not self.defect_file:
            return
        now = time.monotonic()
        if now < self._next_poll:
            return
        self._next_poll = now + DEFECT_POLL_S
        try:
            st = os.stat(self.defect_file)
        except FileNotFoundError:
            state = None
        else:
            state = (st.st_ino, st.st_mtime_ns, st.st_size)
        if state == self._defect_file_state:
            return
        self._defect_file_state = state
        text = None
        if state is not None:
            with open(self.defect_file, encoding="utf-8") as f:
                text = f.read().strip() or None
        defect = check_defect(text, f"{DEFECT_FILE_ENV} ({self.defect_file})")
        if defect == "graph-stale":
            logger.warning("fasttrack-demo graph-stale acts when CUDA graphs are captured; set it at engine start")
            defect = None
        self.set_defect(defect)

    # -- one step ------------------------------------------------------------------

    def stale_capture(self, batch: int) -> bool:
        """``graph-stale``: whether this capture of a fast step must record the stock path instead."""
        return self.start_defect == "graph-stale" and batch == STALE_BATCH and torch.cuda.is_current_stream_capturing()

    def norm(
        self,
        x: torch.Tensor,
        residual: torch.Tensor | None,
        layer_norm: Any,
        *,
        count: bool = False,
        seq_lens: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return tk.fused_add_rmsnorm(
            x,
            residual,
            layer_norm.weight,
            float(layer_norm.variance_epsilon),
            counts=self.counts if count else None,
            flags=self.flags,
            seq_lens=seq_lens if count else None,
            scratch=self.scratch,
        )

    def count_stock(self) -> None:
        tk.count_stock_step(self.counts)

    def after_step(self, rows: int | None = None) -> None:
        """Once per engine step, outside the graphs: copy the counters to the host (no wait), poll
        the defect file, and (``slow-batch`` as a factor) set the spin from the steps' measured time."""
        self.host_counts.copy_(self.counts, non_blocking=True)
        self._poll_defect_file()
        if self.slow is not None and self.defect == "slow-batch":
            spin = self.slow.step(rows, time.perf_counter())
            if spin is not None:
                self.flags[2].fill_(spin)
        if self._publisher is None and self._metrics is not None:
            self._publisher = threading.Thread(target=self._publish_loop, name="fasttrack-demo-counters", daemon=True)
            self._publisher.start()

    def _publish_loop(self) -> None:
        assert self._metrics is not None
        last = [0, 0]
        while True:
            time.sleep(PUBLISH_INTERVAL_S)
            fast, stock = int(self._host_view[tk.COUNT_FAST]), int(self._host_view[tk.COUNT_STOCK])
            if fast > last[0]:
                self._metrics.fast.inc(fast - last[0])
            if stock > last[1]:
                self._metrics.stock.inc(stock - last[1])
            last = [max(fast, last[0]), max(stock, last[1])]


class SlowFactor:
    """``slow-batch`` on CUDA as a factor f (``FASTTRACK_DEMO_SLOW_FACTOR``): every decode step whose graph is
    the slow batch's (``GPU_SLOW_BATCH`` rows: decode batches 3 and 4) spins on the GPU for (f - 1) times the
    step's own time. The own time is measured on the host, once per step (``compute_logits`` runs outside the
    graphs): the gap between two consecutive steps of that batch, less the spin the later one held, the median
    of the last 15 such gaps; gaps over 0.2 s are pauses, not steps. The spin goes to the kernels through the
    device flags (nanoseconds), updated when it moves by more than 2%."""

    WINDOW = 15
    PAUSE_S = 0.2

    def __init__(self, factor: float) -> None:
        self.factor = factor
        self.last: float | None = None
        self.spin_ns = 0
        self.own: list[float] = []

    def step(self, rows: int | None, now: float) -> int | None:
        """Account one step of ``rows`` requests ending at ``now``; the new spin (ns) when it changes."""
        slow = rows is not None and GPU_SLOW_BATCH // 2 < rows <= GPU_SLOW_BATCH
        if not slow:
            self.last = None
            return None
        if self.last is not None and 0 < now - self.last < self.PAUSE_S:
            own = now - self.last - self.spin_ns * 1e-9
            if own > 0:
                self.own = (self.own + [own])[-self.WINDOW :]
        self.last = now
        if not self.own:
            return None
        want = int((self.factor - 1.0) * sorted(self.own)[len(self.own) // 2] * 1e9)
        if abs(want - self.spin_ns) <= 0.02 * max(self.spin_ns, 1):
            return None
        self.spin_ns = want
        return want


def fast_forward(
    model: Any,
    fp: CudaFastPath,
    input_ids: torch.Tensor | None,
    positions: torch.Tensor,
    inputs_embeds: torch.Tensor | None,
    seq_lens: torch.Tensor | None,
) -> torch.Tensor:
    """A fast decode step: vLLM's Llama layers with the Triton fused add + RMSNorm."""
    inner = model.model
    hidden = inputs_embeds if inputs_embeds is not None else inner.embed_input_ids(input_ids)
    residual: torch.Tensor | None = None
    for i, layer in enumerate(inner.layers[inner.start_layer : inner.end_layer]):
        attn = layer.self_attn
        normed, residual = fp.norm(hidden, residual, layer.input_layernorm, count=i == 0, seq_lens=seq_lens)
        qkv, _ = attn.qkv_proj(normed)
        q, k, v = qkv.split([attn.q_size, attn.kv_size, attn.kv_size], dim=-1)
        q, k = attn.rotary_emb.forward_cuda(positions, q, k)
        out, _ = attn.o_proj(attn.attn(q, k, v))
        normed, residual = fp.norm(out, residual, layer.post_attention_layernorm)
        gate_up, _ = layer.mlp.gate_up_proj(normed)
        hidden, _ = layer.mlp.down_proj(layer.mlp.act_fn.forward_cuda(gate_up))
    normed, _ = fp.norm(hidden, residual, inner.norm)
    return normed


def forward(
    model: Any,
    fp: CudaFastPath,
    plan: Any,
    stock: Callable[[], torch.Tensor],
    input_ids: torch.Tensor | None,
    positions: torch.Tensor,
    inputs_embeds: torch.Tensor | None,
    attn_metadata: Any,
) -> torch.Tensor:
    """One candidate step on CUDA: the fast step, or the stock path with its marker kernel."""
    if plan.fast:
        if fp.stale_capture(plan.batch):
            # Planted defect graph-stale: the host planned (and counted) a fast step, but the graph
            # captured here records the stock path, so every replay of it runs the stock path.
            return stock()
        return fast_forward(model, fp, input_ids, positions, inputs_embeds, _seq_lens(attn_metadata))
    fp.count_stock()
    return stock()


def _seq_lens(attn_metadata: Any) -> torch.Tensor | None:
    if isinstance(attn_metadata, list):
        attn_metadata = attn_metadata[0] if attn_metadata else None
    if not attn_metadata:
        return None
    meta = next(iter(attn_metadata.values()))
    seq_lens = getattr(meta, "seq_lens", None)
    return seq_lens if isinstance(seq_lens, torch.Tensor) and seq_lens.is_cuda else None


class _DeviceMetrics:
    """The device counters as Prometheus counters (only with ``PROMETHEUS_MULTIPROC_DIR``: the engine's
    worker is not the API server process that serves ``/metrics``)."""

    def __init__(self, fast: Any, stock: Any) -> None:
        self.fast = fast
        self.stock = stock

    @classmethod
    def create(cls) -> "_DeviceMetrics | None":
        if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            logger.info(
                "fasttrack-demo device counters are not exported: PROMETHEUS_MULTIPROC_DIR is not set for this engine"
            )
            return None
        from prometheus_client import Counter

        return cls(
            fast=Counter(
                "fasttrack_demo_device_fast_steps",
                "Decode steps whose kernels ran the latency_specialized path (counted on the GPU, replays included).",
            ),
            stock=Counter(
                "fasttrack_demo_device_stock_steps",
                "Candidate steps that ran the stock path (counted on the GPU, replays included).",
            ),
        )
