"""Determinism and race hunting: repeated runs, timing perturbation and NaN-poisoned buffers.

A read that runs ahead of its wait returns whatever the buffer held. Steady launch timings
hide it (the producer is usually done anyway) and zero-filled or reused buffers hide it (the
stale value is plausible). The harness removes both disguises:

- every buffer a producer writes is filled with NaN, and the device synchronized, before the
  trial starts, so a premature read returns NaN instead of a plausible stale value;
- random-length busy work (``torch.cuda._sleep``) delays the producer's stream, and more
  random busy work runs on an unrelated stream, so launch order and completion order vary
  between trials;
- every trial's output is compared bitwise with an unperturbed run.

Allocations made inside a trial are poisoned too: PyTorch fills uninitialised memory with NaN
while deterministic algorithms are on (``torch.utils.deterministic.fill_uninitialized_memory``).
"""

from __future__ import annotations

import contextlib
import random
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

import torch

from fasttrack.kernels.metrics import bitwise_runs

Outputs = torch.Tensor | Sequence[torch.Tensor]

#: Busy-work length bounds in GPU cycles (about 1 ms at 2 GHz for the upper bound).
MAX_SLEEP_CYCLES = 2_000_000


def as_list(out: Outputs) -> list[torch.Tensor]:
    return [out] if isinstance(out, torch.Tensor) else list(out)


def repeated_runs(fn: Callable[[], Outputs], *, runs: int, budget_ulp: int = 0) -> list[dict[str, Any]]:
    """Run ``fn`` ``runs`` times on the same inputs; compare every output with the first run's.

    ``fn`` must not change its inputs (clone state it updates in place). One result per output.
    """
    outs = [[t.detach().clone() for t in as_list(fn())] for _ in range(runs)]
    return [bitwise_runs([o[i] for o in outs], budget_ulp=budget_ulp) for i in range(len(outs[0]))]


@contextlib.contextmanager
def poisoned_allocations() -> Iterator[None]:
    """Inside the block, ``torch.empty`` and friends return NaN-filled floating memory."""
    prev_mode = torch.are_deterministic_algorithms_enabled()
    prev_warn = torch.is_deterministic_algorithms_warn_only_enabled()
    # fill_uninitialized_memory is a property that torch.utils.deterministic adds by swapping the
    # module's class at import time, which type checkers do not see: reach it through Any
    det: Any = torch.utils.deterministic
    prev_fill = det.fill_uninitialized_memory
    torch.use_deterministic_algorithms(True, warn_only=True)
    det.fill_uninitialized_memory = True
    try:
        yield
    finally:
        det.fill_uninitialized_memory = prev_fill
        torch.use_deterministic_algorithms(prev_mode, warn_only=prev_warn)


def poison_(*tensors: torch.Tensor) -> None:
    """Fill floating tensors with NaN (integer tensors with -1)."""
    for t in tensors:
        t.fill_(float("nan") if t.dtype.is_floating_point else -1)


@dataclass
class Hooks:
    """What a trial hands the code under test: where to put the delays."""

    rng: random.Random
    max_cycles: int
    device: torch.device
    sleeps: list[int] = field(default_factory=list)

    def _cycles(self) -> int:
        if self.max_cycles <= 0:  # the unperturbed run
            return 0
        # one trial in five runs with no delay, so the unperturbed order is sampled too
        return 0 if self.rng.random() < 0.2 else self.rng.randint(1, self.max_cycles)

    def before_producer(self, stream: torch.cuda.Stream | None = None) -> None:
        """Delay ``stream`` (default: the current stream) by random busy work."""
        c = self._cycles()
        self.sleeps.append(c)
        if c:
            with torch.cuda.stream(stream or torch.cuda.current_stream(self.device)):
                torch.cuda._sleep(c)

    def delayed_inputs(self, *tensors: torch.Tensor) -> list[torch.Tensor]:
        """Fresh NaN-poisoned copies of ``tensors`` whose contents arrive only after a delay.

        The copies are poisoned and the device synchronized first; then the current stream
        sleeps and copies the real values in. A kernel that is correctly ordered on the current
        stream sees the values; one launched on another stream without waiting sees NaN.
        """
        bufs = [torch.empty_like(t) for t in tensors]
        poison_(*bufs)
        torch.cuda.synchronize(self.device)
        self.before_producer()
        for b, t in zip(bufs, tensors, strict=False):
            b.copy_(t)
        return bufs


def _side_busy_work(
    rng: random.Random, max_cycles: int, device: torch.device, scratch: torch.Tensor
) -> torch.cuda.Stream:
    side = torch.cuda.Stream(device=device)
    with torch.cuda.stream(side):
        torch.cuda._sleep(rng.randint(0, max_cycles))
        n = rng.randint(1, scratch.numel() // 2)
        scratch[n : 2 * n].copy_(scratch[:n])
    return side


def perturbed_trials(
    run: Callable[[Hooks], Outputs],
    *,
    poison: Sequence[torch.Tensor] = (),
    trials: int = 20,
    seed: int = 0,
    device: torch.device | str = "cuda",
    budget_ulp: int = 0,
    max_cycles: int = MAX_SLEEP_CYCLES,
    expected_nan: Sequence[torch.Tensor] | None = None,
) -> dict[str, Any]:
    """Run ``run`` once unperturbed, then ``trials`` times under timing perturbation.

    Before each run the ``poison`` buffers are filled with NaN and the device synchronized;
    allocations inside ``run`` are NaN-filled. A trial fails when an output differs from the
    unperturbed output by more than ``budget_ulp`` or holds NaN where that output has none
    (a stale read). ``expected_nan`` (NaN masks of the reference outputs) makes the NaN test
    stricter: NaN where the reference has none is a stale read in any run, the unperturbed
    one included. Returns the summary and per-trial records.
    """
    dev = torch.device(device)
    rng = random.Random(seed)
    scratch = torch.empty(1 << 22, device=dev, dtype=torch.float32).normal_()

    def one(hooks: Hooks) -> list[torch.Tensor]:
        poison_(*poison)
        torch.cuda.synchronize(dev)
        with poisoned_allocations():
            out = [t.detach().clone() for t in as_list(run(hooks))]
        torch.cuda.synchronize(dev)
        return out

    baseline = one(Hooks(rng=random.Random(0), max_cycles=0, device=dev))
    if expected_nan is not None:
        base_nan = [m.detach().cpu().bool() for m in expected_nan]
    else:
        base_nan = [torch.isnan(b.to(torch.float64)).cpu() for b in baseline]
    baseline_stale = sum(
        int((torch.isnan(b.to(torch.float64)).cpu() & ~bn).sum()) for b, bn in zip(baseline, base_nan, strict=False)
    )
    records: list[dict[str, Any]] = []
    failed = 0
    for i in range(trials):
        hooks = Hooks(rng=rng, max_cycles=max_cycles, device=dev)
        _side_busy_work(rng, max_cycles, dev, scratch)
        outs = one(hooks)
        torch.cuda.synchronize(dev)
        cmp = [bitwise_runs([b, o], budget_ulp=budget_ulp) for b, o in zip(baseline, outs, strict=False)]
        stale = sum(
            int((torch.isnan(o.to(torch.float64)).cpu() & ~bn).sum()) for o, bn in zip(outs, base_nan, strict=False)
        )
        ok = all(c["verdict"] == "pass" for c in cmp) and stale == 0
        failed += 0 if ok else 1
        records.append(
            {
                "trial": i,
                "sleep_cycles": hooks.sleeps,
                "bitwise_equal": all(c["bitwise_equal"] for c in cmp),
                "max_ulp": max(c["max_ulp"] for c in cmp),
                "stale_nan": stale,
                "ok": ok,
            }
        )
    return {
        "trials": trials,
        "baseline_stale_nan": baseline_stale,
        "failed_trials": failed,
        "stale_nan_trials": sum(1 for r in records if r["stale_nan"]),
        "verdict": "pass" if failed == 0 and not baseline_stale else "fail",
        "race_detected": failed > 0 or baseline_stale > 0,
        "budget_ulp": budget_ulp,
        "max_sleep_cycles": max_cycles,
        "trial_records": records,
    }
