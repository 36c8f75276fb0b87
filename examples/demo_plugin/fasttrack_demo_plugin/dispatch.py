"""Per-step dispatch of the demo decode backend.

Once per forward step (in the model's eager outer ``forward``), ``plan_step``
classifies the batch from vLLM's forward context and records a ``StepPlan``. The
outer ``forward`` takes the branch right there (vLLM compiles only the inner model),
so it is taken at run time on every step instead of being baked in by torch.compile;
``fused_decode_logits`` and the planted defects read the same plan.

The optimized path takes decode-only batches (every request has exactly one
query token) of ``min_batch..max_batch`` requests. Everything else falls back to
the stock path and is logged as (one line)::

    fasttrack-demo fallback reason=<prefill|mixed|batch_out_of_range|spec_verify|prefill_or_mixed> batch=<requests>
        tokens=<tokens> count=<n> suppressed=<m>

``spec_verify``: with n-gram speculative decoding, a step that verifies draft tokens (a
request with context before it and 2..1 + num_speculative_tokens query tokens; no
prefill) is not a decode-only batch, so it runs the stock path; decode steps in which
no request carries draft tokens still take the optimized path.

``count`` is the cumulative number of fallback steps for that reason in this
engine; lines are rate-limited to one per reason per ``LOG_INTERVAL_S`` and
``suppressed`` says how many steps since the previous line were not logged.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any

from fasttrack_demo_plugin.settings import DEFECT_FILE_ENV, BackendSettings, check_defect

logger = logging.getLogger("vllm.fasttrack_demo_plugin")
"""Child of vLLM's logger, so lines use vLLM's handler and format."""

LOG_INTERVAL_S = 1.0
FALLBACK_REASONS = ("prefill", "mixed", "batch_out_of_range", "spec_verify", "prefill_or_mixed")


@dataclass(frozen=True)
class StepPlan:
    """Which path this forward step takes."""

    fast: bool
    """The optimized path runs this step."""
    batch: int = 0
    """Number of requests in the step."""
    tokens: int = 0
    """Number of (unpadded) query tokens in the step."""
    reason: str | None = None
    """Why the stock path runs (``None``: no attention metadata, i.e. a warm-up run)."""


IDLE = StepPlan(fast=False)


@dataclass
class _ReasonLog:
    count: int = 0
    suppressed: int = 0
    last_logged: float = field(default=float("-inf"))


class Dispatcher:
    """Plans steps, keeps the current plan, logs and counts fallbacks."""

    def __init__(self, settings: BackendSettings) -> None:
        self.settings = settings
        self.current: StepPlan = IDLE
        self.fast_steps = 0
        self._reasons = {reason: _ReasonLog() for reason in FALLBACK_REASONS}
        self._announced_fast = False
        self._metrics = _Metrics.create()
        self.defect: str | None = settings.defect
        """The planted defect in effect (``settings.defect``, or the defect file's content when one is set)."""
        self._defect_file_state: tuple[int, int, int] | None = None

    def plan_step(self, attn_metadata: Any) -> StepPlan:
        """Classify this step from the forward context's attention metadata."""
        if self.settings.defect_file:
            self._read_defect_file(self.settings.defect_file)
        plan = classify(attn_metadata, self.settings)
        if plan.fast and self.defect == "silent-fallback":
            # Planted defect: the eligible step is routed to the stock path, and
            # the fallback is neither logged nor counted.
            self._announce_fast(plan)
            plan = StepPlan(fast=False, batch=plan.batch, tokens=plan.tokens, reason=None)
        elif plan.fast:
            self.fast_steps += 1
            self._announce_fast(plan)
            if self._metrics is not None:
                self._metrics.fast_steps.inc()
        elif plan.reason is not None:
            self._log_fallback(plan)
        self.current = plan
        return plan

    def _read_defect_file(self, path: str) -> None:
        """Take the planted defect from ``path`` when the file changed: its content, or no defect when it is
        empty or was removed (until the file first appears, ``FASTTRACK_DEMO_DEFECT``'s defect holds)."""
        try:
            st = os.stat(path)
        except FileNotFoundError:
            state = None
        else:
            state = (st.st_ino, st.st_mtime_ns, st.st_size)
        if state == self._defect_file_state:
            return
        self._defect_file_state = state
        text = None
        if state is not None:
            with open(path, encoding="utf-8") as f:
                text = f.read().strip() or None
        defect = check_defect(text, f"{DEFECT_FILE_ENV} ({path})")
        if defect != self.defect:
            logger.info("fasttrack-demo planted defect now %s (from %s)", defect or "none", path)
        self.defect = defect

    def _announce_fast(self, plan: StepPlan) -> None:
        if not self._announced_fast:
            self._announced_fast = True
            logger.info("fasttrack-demo fast-path first decode step batch=%d", plan.batch)

    def _log_fallback(self, plan: StepPlan) -> None:
        assert plan.reason is not None
        entry = self._reasons[plan.reason]
        entry.count += 1
        if self._metrics is not None:
            self._metrics.fallback_steps.labels(reason=plan.reason).inc()
        now = time.monotonic()
        if now - entry.last_logged < LOG_INTERVAL_S:
            entry.suppressed += 1
            return
        logger.info(
            "fasttrack-demo fallback reason=%s batch=%d tokens=%d count=%d suppressed=%d",
            plan.reason,
            plan.batch,
            plan.tokens,
            entry.count,
            entry.suppressed,
        )
        entry.last_logged = now
        entry.suppressed = 0


def classify(attn_metadata: Any, settings: BackendSettings) -> StepPlan:
    """Decide the path for one step. ``attn_metadata`` is vLLM's per-layer dict
    (or a list of them with micro-batching); ``None`` or empty means a warm-up run."""
    if isinstance(attn_metadata, list):
        attn_metadata = attn_metadata[0] if attn_metadata else None
    if not attn_metadata:
        return IDLE
    meta = next(iter(attn_metadata.values()))
    if getattr(meta.query_start_loc, "is_cuda", False):
        return classify_host(meta, settings)
    tokens = int(meta.num_actual_tokens)
    query_lens = (meta.query_start_loc[1:] - meta.query_start_loc[:-1]).tolist()
    single = sum(1 for q in query_lens if q == 1)
    multi = sum(1 for q in query_lens if q > 1)
    batch = single + multi
    if int(meta.max_query_len) != 1 or multi:
        if _verifies_drafts(meta, query_lens, settings.spec_tokens):
            reason = "spec_verify"
        else:
            reason = "mixed" if single else "prefill"
        return StepPlan(fast=False, batch=batch, tokens=tokens, reason=reason)
    if not settings.min_batch <= batch <= settings.max_batch:
        return StepPlan(fast=False, batch=batch, tokens=tokens, reason="batch_out_of_range")
    return StepPlan(fast=True, batch=batch, tokens=tokens)


def classify_host(meta: Any, settings: BackendSettings) -> StepPlan:
    """:func:`classify` from the metadata's host-side numbers only (CUDA: reading the per-request query
    lengths would wait for the GPU, and is not allowed while a CUDA graph is captured).

    Decode-only is exact (``max_query_len == 1``); the batch is the number of requests (the captured size
    while a graph is captured). Otherwise a step with fewer tokens than two per request holds a decode
    request (``mixed``), a single request is a ``prefill`` (or, with speculative decoding and at most
    1 + draft tokens, ``spec_verify``), and a step the numbers cannot tell is ``prefill_or_mixed``."""
    batch = int(meta.query_start_loc.shape[0]) - 1
    tokens = int(meta.num_actual_tokens)
    max_q = int(meta.max_query_len)
    if max_q == 1:
        if not settings.min_batch <= batch <= settings.max_batch:
            return StepPlan(fast=False, batch=batch, tokens=tokens, reason="batch_out_of_range")
        return StepPlan(fast=True, batch=batch, tokens=tokens)
    if settings.spec_tokens and max_q <= 1 + settings.spec_tokens:
        reason = "spec_verify"
    elif tokens < 2 * batch:
        reason = "mixed"
    elif batch == 1:
        reason = "prefill"
    else:
        reason = "prefill_or_mixed"
    return StepPlan(fast=False, batch=batch, tokens=tokens, reason=reason)


def _verifies_drafts(meta: Any, query_lens: list[int], spec_tokens: int) -> bool:
    """Whether every multi-token request of the step verifies draft tokens: it has 2..1 + ``spec_tokens``
    query tokens and context before them (its sequence is longer than its query). Never without speculation,
    or without ``seq_lens`` in the metadata to tell a short prefill apart."""
    seq_lens = getattr(meta, "seq_lens", None)
    if not spec_tokens or seq_lens is None:
        return False
    multi = [(q, s) for q, s in zip(query_lens, seq_lens.tolist(), strict=False) if q > 1]
    return bool(multi) and all(q <= 1 + spec_tokens and s > q for q, s in multi)


@dataclass
class _Metrics:
    """Prometheus counters, created only when vLLM's server collects metrics from
    several processes (``PROMETHEUS_MULTIPROC_DIR`` set in the engine's
    environment); otherwise they would live in the engine process, invisible to
    the API server's ``/metrics``."""

    fast_steps: Any
    fallback_steps: Any

    @classmethod
    def create(cls) -> _Metrics | None:
        if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            return None
        try:
            from prometheus_client import Counter
        except ImportError:
            return None
        return cls(
            fast_steps=Counter(
                "fasttrack_demo_fast_steps",
                "Decode steps run by the latency_specialized path.",
            ),
            fallback_steps=Counter(
                "fasttrack_demo_fallback_steps",
                "Steps the latency_specialized backend sent to the stock path, by reason.",
                labelnames=["reason"],
            ),
        )
