"""What a plan costs: wall seconds, GPU-seconds and node-seconds per check, from the work each check does.

Every check's work on an engine is counted the way the check sends it, from the scope and the tier: the
decode steps of its requests (rounds or waves of the point's batch size, each as long as the requests' output),
the prompt tokens it prefills, the profiler windows it opens, and its fixed overheads. Time follows from the
scope's ``estimates``, the engine's speed on its hardware:

* a decode step at batch ``b`` takes ``b / min(b x stream_tokens_per_s, decode_tokens_per_s)`` seconds (one
  request alone decodes at ``stream_tokens_per_s``; a full engine at ``decode_tokens_per_s``);
* a prompt token takes ``1 / prefill_tokens_per_s``; a profiler window ``profile_window_s`` (start, stop, trace
  export); an lm-eval run ``eval_run_s`` before its requests; an engine start ``engine_start_s`` and a stop
  ``engine_stop_s``; the engine-less kernel tests ``kernels_s`` per shard.

The work model's constants (the features' probes, the perf runs an adaptive schedule takes) were measured on the
demo target's smoke run (``tests/fixtures/cost/``: run summaries, whose engines record their start seconds and
each check's seconds, read by :func:`measured`) and the demo scope's estimates come from such a run; GPU scopes
state their own (Kimi K3: its published single-stream and batch-64 throughputs; the H200 engine logs of
``tests/fixtures/gpu`` give the GPU demo target's start times). ``fasttrack plan`` shows the result per check;
shards balance by it (docs/cost.md).

Device-seconds: an engine holds ``gpus`` devices (one per CPU engine) while it is up; both sides' while perf
interleaves them. Node-seconds: the nodes those engines span. Engine-less work holds one node.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from fasttrack.scope.reference import COST_LINE as REFERENCE
from fasttrack.scope.reference import variant_work

if TYPE_CHECKING:  # pragma: no cover
    from fasttrack.scope import Estimates, Scope, TierName, TierSpec


class ConfigPoint(Protocol):
    """What the model reads of a plan's config point (:class:`fasttrack.plan.ConfigPoint`)."""

    @property
    def id(self) -> str: ...
    @property
    def batch(self) -> int: ...
    @property
    def context(self) -> int: ...
    @property
    def full_context(self) -> bool: ...


class EngineGroup(Protocol):
    """What the model reads of a plan's engine group (:class:`fasttrack.plan.EngineGroup`)."""

    @property
    def points(self) -> list[str]: ...
    @property
    def gpus(self) -> int: ...
    @property
    def nodes(self) -> int: ...
    @property
    def gpus_per_node(self) -> int | None: ...
    @property
    def lifetimes_per_side(self) -> int: ...
    @property
    def speculative_config(self) -> dict[str, Any] | None: ...
    @property
    def synthetic_acceptance(self) -> bool: ...


STARTS = "engine starts"
"""The cost line of engine starts and stops (not a check)."""
KNOWN_EVAL_SIZES = {"aime25": 30, "mrcr": 2400}
"""Samples of the public eval datasets (AIME 2025: 30 problems; OpenAI MRCR: 2,400 rows), where an eval names no
limit and the tier none either."""
EQUIVALENCE_REQUESTS = 8
"""Requests per point the equivalence check sends (whole rounds of the point's batch)."""
PROBE_STEPS = 8
"""Decode steps of a path-evidence probe."""
FEATURE_STEPS: dict[str, int] = {
    "structured_output": 1500,
    "temperature_sampling": 2500,
    "full_context": 600,
    "seeded_sampling": 400,
    "stop_sequences": 300,
    "max_tokens": 300,
    "n_best": 400,
    "logprobs": 300,
    "speculative_acceptance": 800,
}
"""Decode steps (at batch 1) one side's probes of a feature take on one engine group, measured on the demo run
(the features check's seconds per side over the demo's step time, split by the features' request counts)."""
FEATURE_WINDOWS = 2
"""Profiler windows per feature and group (its evidence probes)."""
COVERAGE_WINDOWS = 4
"""The coverage check's windows per engine group: the in-range decode probe and three out-of-scope situations."""
EVAL_PROMPT_TOKENS = 512
"""Prompt tokens of an eval sample other than MRCR's (an AIME problem is a few hundred)."""
EVIDENCE_TOKENS = 64
"""Tokens per request of an eval's profiled evidence run (2 x batch requests)."""


@dataclass
class Cost:
    """The cost of one line (a check, engine starts) of a plan."""

    wall_s: float = 0.0
    device_s: float = 0.0
    node_s: float = 0.0
    requests: int = 0
    decode_tokens: int = 0

    def add(self, wall_s: float, *, devices: int, nodes: int, requests: int = 0, tokens: int = 0) -> None:
        self.wall_s += wall_s
        self.device_s += wall_s * devices
        self.node_s += wall_s * nodes
        self.requests += requests
        self.decode_tokens += tokens

    def __iadd__(self, other: "Cost") -> "Cost":
        self.wall_s += other.wall_s
        self.device_s += other.device_s
        self.node_s += other.node_s
        self.requests += other.requests
        self.decode_tokens += other.decode_tokens
        return self

    def as_dict(self) -> dict[str, float | int]:
        return {
            "wall_hours": round(self.wall_s / 3600, 4),
            "gpu_hours": round(self.device_s / 3600, 4),
            "node_hours": round(self.node_s / 3600, 4),
            "requests": self.requests,
            "decode_tokens": self.decode_tokens,
        }


@dataclass
class Model:
    """The time of engine work on the scope's hardware (its ``estimates``)."""

    est: "Estimates"

    @property
    def stream(self) -> float:
        return self.est.stream_tokens_per_s or self.est.decode_tokens_per_s / 16

    def step_s(self, batch: int) -> float:
        """One decode step at ``batch``."""
        b = max(batch, 1)
        return b / min(b * self.stream, self.est.decode_tokens_per_s)

    def decode(self, requests: int, batch: int, tokens: int) -> float:
        """``requests`` of ``tokens`` output each, in waves of ``batch``."""
        return math.ceil(requests / max(batch, 1)) * tokens * self.step_s(batch)

    def prefill(self, tokens: float) -> float:
        return tokens / self.est.prefill_tokens_per_s


@dataclass
class Work:
    """What the tier asks of one engine group, per check."""

    scope: "Scope"
    tier: "TierSpec"
    checks: set[str] | None
    model: Model
    costs: dict[str, Cost] = field(default_factory=dict)

    def runs(self, check: str) -> bool:
        return self.checks is None or check in self.checks

    def line(self, name: str) -> Cost:
        return self.costs.setdefault(name, Cost())


def _eval_points(spec: Any, points: Sequence[ConfigPoint]) -> dict[int, list[ConfigPoint]]:
    """The group's points an eval's ``points`` filter selects, by batch (one lm-eval run per batch)."""
    out: dict[int, list[ConfigPoint]] = {}
    for p in points:
        if all(getattr(p, dim, None) in vals or (dim == "context" and p.full_context and "full" in vals)
               for dim, vals in spec.points.items()):  # fmt: skip
            out.setdefault(p.batch, []).append(p)
    return out


def _eval_samples(spec: Any, tier: "TierSpec", est: "Estimates") -> int:
    size = est.eval_samples.get(spec.name) or KNOWN_EVAL_SIZES.get(spec.kind) or est.eval_samples.get("*") or 100
    for cap in (spec.limit, tier.eval_limit):
        if cap is not None:
            size = min(size, cap)
    return size


def _equivalence(w: Work, g: EngineGroup, pts: Sequence[ConfigPoint], devices: int, nodes: int) -> None:
    if g.synthetic_acceptance or not w.runs("equivalence"):
        return
    m, tokens = w.model, w.scope.gates.equivalence.max_tokens
    short = [p for p in pts if not p.full_context]
    for _side in ("baseline", "candidate"):
        secs = w.model.est.profile_window_s * len({p.context for p in short})
        reqs = toks = 0
        for p in short:
            n = math.ceil(EQUIVALENCE_REQUESTS / p.batch) * p.batch
            secs += m.decode(n, p.batch, tokens) + m.decode(p.batch, p.batch, PROBE_STEPS) + m.prefill(n * p.context)
            reqs, toks = reqs + n, toks + n * tokens
        w.line("equivalence").add(secs, devices=devices, nodes=nodes, requests=reqs, tokens=toks)


def _features(w: Work, g: EngineGroup, devices: int, nodes: int) -> None:
    if not w.runs("features"):
        return
    feats = [f for f in w.scope.features if w.tier.features is None or f in w.tier.features]
    if g.synthetic_acceptance:  # outputs differ by design: only the speculative acceptance row runs there
        feats = [f for f in feats if f == "speculative_acceptance"]
    elif g.speculative_config is None:
        feats = [f for f in feats if f != "speculative_acceptance"]
    steps = sum(FEATURE_STEPS.get(f, 500) for f in feats)
    secs = steps * w.model.step_s(1) + len(feats) * FEATURE_WINDOWS * w.model.est.profile_window_s
    for _side in ("baseline", "candidate"):
        w.line("features").add(secs, devices=devices, nodes=nodes, tokens=steps)


def _coverage(w: Work, g: EngineGroup, pts: Sequence[ConfigPoint], devices: int, nodes: int) -> None:
    if not w.runs("coverage"):
        return
    batches = sorted({p.batch for p in pts})
    env = w.scope.envelope
    above = (env.batch.max + 1) if env is not None else 1
    steps = sum(PROBE_STEPS * w.model.step_s(b) for b in batches) + PROBE_STEPS * w.model.step_s(above)
    secs = steps + COVERAGE_WINDOWS * w.model.est.profile_window_s
    for _side in ("baseline", "candidate"):
        w.line("coverage").add(secs, devices=devices, nodes=nodes, requests=len(batches) + above + 2)


def _evals(w: Work, g: EngineGroup, pts: Sequence[ConfigPoint], devices: int, nodes: int) -> None:
    if not w.runs("evals") or g.synthetic_acceptance:
        return
    m, est = w.model, w.model.est
    for spec in w.scope.evals:
        if w.tier.evals is not None and spec.name not in w.tier.evals:
            continue
        n = _eval_samples(spec, w.tier, est) * spec.repeats
        out = max(1, round(spec.max_tokens * est.eval_output_fraction))
        for b, bpts in _eval_points(spec, pts).items():
            # MRCR's prompts fill the point's context (its longest samples first at long-context points); other
            # evals' prompts are a problem statement
            ctx = min(p.context for p in bpts)
            prompt = ctx if spec.kind == "mrcr" else min(ctx, EVAL_PROMPT_TOKENS)
            graded = est.eval_run_s + m.decode(n, b, out) + m.prefill(n * prompt)
            evidence = est.eval_run_s + m.decode(2 * b, b, EVIDENCE_TOKENS) + est.profile_window_s
            for runs in (2, 1):  # the baseline graded twice (its own agreement), the candidate once
                secs = runs * graded + evidence
                reqs = runs * n + 2 * b
                w.line("evals").add(secs, devices=devices, nodes=nodes, requests=reqs, tokens=runs * n * out)


def _perf_points(kind: str, pts: Sequence[ConfigPoint]) -> list[ConfigPoint]:
    """The points a workload kind measures (fasttrack/perf/workloads.py)."""
    if kind == "pure_decode":
        return list(pts)
    if kind == "context_sweep":
        b = min((p.batch for p in pts), default=1)
        return [p for p in pts if p.batch == b]
    if kind in ("mixed", "prompts"):
        by: dict[int, ConfigPoint] = {}
        for p in sorted(pts, key=lambda p: (p.full_context, p.context)):
            by.setdefault(p.batch, p)
        return list(by.values())
    return list(pts[:1])  # trace_replay: one row per group


def _point_runs(wl: Any, pts: Sequence[ConfigPoint], max_len: int) -> list[tuple[int, int, int]]:
    """(batch, requests per run, prompt tokens per run) of each point a workload measures."""
    out = []
    for p in _perf_points(wl.kind, pts):
        n = wl.requests_per_run or 4 * p.batch
        ctx = (max_len - wl.output_len - 1) if p.full_context else (wl.input_len or p.context)
        out.append((p.batch, n, ctx + 16 * n if wl.kind == "pure_decode" else n * ctx))  # decode: prefix cached
    return out


def _sweep_runs(wl: Any, pts: Sequence[ConfigPoint], max_len: int) -> list[tuple[int, int, int]]:
    """The same for a ``concurrency_sweep``: one per level, its prompts of ``input_len`` or the group's shortest
    context (the smallest batch's, as fasttrack/perf/workloads.py picks it)."""
    first = min(pts, key=lambda p: (p.batch, p.full_context, p.context), default=None)
    ctx = max(1, min(wl.input_len or (first.context if first else 1), max_len - wl.output_len - 1))
    out = []
    for level in wl.concurrencies or []:
        n = wl.requests_per_run or 4 * level
        out.append((level, n, n * ctx))
    return out


def _perf(w: Work, g: EngineGroup, pts: Sequence[ConfigPoint], devices: int, nodes: int) -> None:
    if not w.runs("perf"):
        return
    gate, m = w.scope.gates.perf, w.model
    wanted = w.tier.workloads
    runs = (gate.min_runs + gate.max_runs) / 2  # adaptive: a decided point stops at min_runs, an open one at max
    both = 2 if gate.interleave else 1
    max_len = w.scope.envelope.context.max_model_len if w.scope.envelope else 0
    for wl in w.scope.workloads:
        if wanted is not None and wl.name not in wanted:
            continue
        items = _sweep_runs(wl, pts, max_len) if wl.kind == "concurrency_sweep" else _point_runs(wl, pts, max_len)
        for batch, n, prompt in items:
            one = m.decode(n, batch, wl.output_len) + m.prefill(prompt)
            warm = m.decode(batch, batch, 16)
            for _lt in range(g.lifetimes_per_side):
                secs = 2 * (runs * one + warm)  # both sides' runs, one after another (interleaved or not)
                w.line("perf").add(
                    secs, devices=devices * both, nodes=nodes * both,
                    requests=int(2 * runs * n), tokens=int(2 * runs * n * wl.output_len),
                )  # fmt: skip


def group_cost(scope: "Scope", tier: "TierName", group: EngineGroup, points: Iterable[ConfigPoint]) -> dict[str, Cost]:
    """The cost of one engine group's lifetimes, per check and for its engine starts."""
    t = scope.tiers[tier]
    w = Work(scope, t, set(t.checks) if t.checks is not None else None, Model(scope.estimates))
    ids = set(group.points)
    pts = [p for p in points if p.id in ids]
    devices, nodes = max(group.gpus, 1), max(group.nodes, 1)
    est = scope.estimates
    starts = 2 * group.lifetimes_per_side
    w.line(STARTS).add(starts * (est.engine_start_s + est.engine_stop_s), devices=devices, nodes=nodes)
    _equivalence(w, group, pts, devices, nodes)
    _features(w, group, devices, nodes)
    _coverage(w, group, pts, devices, nodes)
    _evals(w, group, pts, devices, nodes)
    _perf(w, group, pts, devices, nodes)
    if (variants := variant_work(scope, t, group, pts, w.model)) is not None:
        w.line(REFERENCE).add(**variants, devices=devices, nodes=nodes)
    return w.costs


def plan_cost(
    scope: "Scope", tier: "TierName", groups: Sequence[EngineGroup], points: Sequence[ConfigPoint]
) -> dict[str, Cost]:
    """Every line of a plan (or of one shard's part of it): its groups' checks and starts, the engine-less checks
    (the kernel tests, which every shard runs), and the coverage check's start outside the envelope (once, with
    the first group)."""
    t = scope.tiers[tier]
    total: dict[str, Cost] = {}
    for g in groups:
        for name, c in group_cost(scope, tier, g, points).items():
            total.setdefault(name, Cost())
            total[name] += c
    est = scope.estimates
    if scope.kernels and (t.checks is None or "kernels" in t.checks):
        # one node of the smallest engine's, with its devices (a CPU host counts as one)
        small = min(groups, key=lambda g: (g.nodes, g.gpus), default=None)
        per_node = (small.gpus_per_node or small.gpus) if small is not None else 0
        total.setdefault("kernels", Cost()).add(est.kernels_s, devices=max(per_node, 1), nodes=1)
    fb = scope.fallback
    first = groups[0] if groups else None
    if first is not None and (t.checks is None or "coverage" in t.checks) and fb is not None:
        if "unsupported_deployment" in fb.stock_path_for and fb.unsupported_deployment_args:
            total.setdefault(STARTS, Cost()).add(
                est.engine_start_s, devices=max(first.gpus, 1), nodes=max(first.nodes, 1)
            )
    return total


def measured(summary: dict[str, Any]) -> dict[str, float]:
    """The seconds a run spent on each line, from its run summary (``run-summary.json``, a bundle's log): each
    engine's start, stop and per-check seconds (an interleaved pair's measurement once: both engines record it),
    the engine-less checks and the judgements (``timing.check_seconds``). ``total`` is the run's wall clock."""
    out: dict[str, float] = {}

    def add(name: str, secs: Any) -> None:
        if isinstance(secs, (int, float)) and math.isfinite(secs) and secs >= 0:
            out[name] = out.get(name, 0.0) + float(secs)

    pairs: set[tuple[Any, ...]] = set()
    for e in summary.get("engines") or []:
        if not isinstance(e, dict):
            continue
        if e.get("variant"):  # a reference variant's whole lifetime is its own line
            stop = e.get("stop")
            for secs in (e.get("startup_s"), stop.get("duration_s") if isinstance(stop, dict) else None,
                         *(e.get("check_seconds") or {}).values()):  # fmt: skip
                add(REFERENCE, secs)
            continue
        add(STARTS, e.get("startup_s"))
        stop = e.get("stop")
        if isinstance(stop, dict):
            add(STARTS, stop.get("duration_s"))
        for check, secs in (e.get("check_seconds") or {}).items():
            if e.get("up_with"):
                key = (check, e.get("group"), e.get("lifetime"), secs)
                if key in pairs:
                    continue
                pairs.add(key)
            add(str(check), secs)
    timing = summary.get("timing") or {}
    for check, secs in (timing.get("check_seconds") or {}).items():
        add(str(check), secs)
    add("total", timing.get("wall_s"))
    return out
