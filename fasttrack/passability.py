"""Passability: what a tier requires that it can never run.

A bundle passes only when every required check passes; a required item the tier cannot
run at all (a feature without the config point it needs, an eval whose points are not in
the tier, a fallback situation without a probe, a workload without its data, a kernel
suite that needs a GPU on a CPU scope) makes the run ``incomplete`` however good the
change is. :func:`analyze` finds those items from the scope and the plan alone, before
any engine starts: ``fasttrack plan`` lists them and ``fasttrack validate`` refuses such
a tier unless told to run it anyway.

The rules mirror what each check needs to produce a verdict:

* ``features``: ``full_context`` needs a point at the scope's full context;
  ``speculative_acceptance`` an engine group with a speculative config; every feature a
  short-context point (the features run at short contexts).
* ``evals``: an eval's ``points`` filter must select at least one config point of the
  tier; its data must exist (a local file, or a hub dataset id).
* ``coverage``: ``path_markers``; every situation of ``fallback.stock_path_for`` needs a
  probe: ``batch_above_range`` (and the batch part of ``out_of_envelope_request``) an engine
  that admits ``batch.max + 1`` sequences; ``unsupported_deployment`` a deployment outside
  the envelope to start (``fallback.unsupported_deployment_args``).
* ``perf``: every workload the tier runs has its data (a trace for ``trace_replay``, a
  prompt set file where one is named).
* ``kernels``: a suite that needs a GPU cannot run on a CPU scope; its folder must exist.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict

from fasttrack.engine.argcheck import ArgCheck, check_arg_lists
from fasttrack.plan import Plan, build_plan
from fasttrack.scope import TIER_ORDER, Scope

#: Fallback situations a probe exists for (see the coverage check).
PROBED_SITUATIONS = (
    "prefill",
    "mixed_prefill_decode",
    "batch_above_range",
    "out_of_envelope_request",
    "unsupported_deployment",
)


class Blocker(BaseModel):
    """One required item the tier can never run."""

    model_config = ConfigDict(extra="forbid")

    check: str
    item: str
    """What is required, e.g. 'feature full_context' or 'eval mrcr'."""
    reason: str
    fix: str

    def line(self) -> str:
        return f"{self.check}: {self.item}: {self.reason} (fix: {self.fix})"


class Passability(BaseModel):
    """The analysis of one tier (and shard) of a scope."""

    model_config = ConfigDict(extra="forbid")

    scope: str
    tier: str
    blockers: list[Blocker]

    @property
    def ok(self) -> bool:
        return not self.blockers

    def lines(self) -> list[str]:
        return [b.line() for b in self.blockers]


def _max_num_seqs(args: list[str]) -> int | None:
    val: str | None = None
    for i, a in enumerate(args):
        if a == "--max-num-seqs" and i + 1 < len(args):
            val = args[i + 1]
        elif a.startswith("--max-num-seqs="):
            val = a.split("=", 1)[1]
    return int(val) if val is not None and val.isdigit() else None


def analyze(scope: Scope, plan: Plan, *, base_dir: Path | None = None) -> Passability:
    """Every required item of ``plan``'s tier that can never run (see the module docstring).

    ``base_dir``: the scope file's folder (relative data paths are resolved against it);
    without it, data files are not looked for."""
    out: list[Blocker] = []
    tier = plan.tier
    tier_hint = f"tiers.{tier}"

    def add(check: str, item: str, reason: str, fix: str) -> None:
        out.append(Blocker(check=check, item=item, reason=reason, fix=fix))

    def exists(rel: str) -> bool:
        if base_dir is None:
            return True
        p = Path(rel)
        return (p if p.is_absolute() else base_dir / p).exists()

    points = plan.points
    short = [p for p in points if not p.full_context]
    # ---------------------------------------------------------------- features
    features = plan.tier_features(list(scope.features))
    if plan.runs_check("features") and features:
        if not short:
            add(
                "features",
                "every feature",
                f"the {tier} tier has no short-context point (features run at short contexts)",
                f"add a numeric context to {tier_hint}.context",
            )
        if "full_context" in features and not any(p.full_context for p in points):
            add(
                "features",
                "feature full_context",
                f"the {tier} tier has no point at the full context",
                f"add 'full' to {tier_hint}.context, or leave full_context out of {tier_hint}.features",
            )
        if "speculative_acceptance" in features and not any(g.spec != "none" for g in plan.groups):
            add(
                "features",
                "feature speculative_acceptance",
                f"the {tier} tier has no engine group with a speculative config",
                f"add a speculative config to {tier_hint}.speculative, or leave speculative_acceptance out of "
                f"{tier_hint}.features",
            )
    # ---------------------------------------------------------------- evals
    if plan.runs_check("evals"):
        for ev in scope.evals:
            if ev.name not in plan.tier_evals([e.name for e in scope.evals]):
                continue
            matched = [
                p
                for p in points
                if all(
                    str("full" if (d == "context" and p.full_context) else getattr(p, d, None))
                    in {str(v) for v in vals}
                    for d, vals in ev.points.items()
                )
            ]
            if not matched:
                want = ", ".join(f"{d} in {vals}" for d, vals in ev.points.items())
                add(
                    "evals",
                    f"eval {ev.name}",
                    f"its points ({want}) select no config point of the {tier} tier",
                    f"add those values to {tier_hint}, or leave {ev.name} out of {tier_hint}.evals",
                )
            if ev.data is None and ev.hub_dataset is None:
                add("evals", f"eval {ev.name}", "it names no data (neither data nor hub_dataset)", "set evals[].data")
            elif ev.data is not None and not exists(ev.data):
                add(
                    "evals",
                    f"eval {ev.name}",
                    f"its data file {ev.data} does not exist",
                    "ship the file or fix the path",
                )
    # ---------------------------------------------------------------- coverage
    if plan.runs_check("coverage"):
        if scope.path_markers is None:
            add("coverage", "path markers", "the scope declares no path_markers", "declare path_markers")
        fb = scope.fallback
        env = scope.envelope
        for s in fb.stock_path_for if fb else []:
            if s not in PROBED_SITUATIONS:
                add("coverage", f"fallback {s}", "no probe exists for it", "remove it or add a probe")
                continue
            if s in ("batch_above_range", "out_of_envelope_request") and env is not None:
                caps = {_max_num_seqs(g.args["candidate"]) for g in plan.groups}
                low = sorted(c for c in caps if c is not None and c <= env.batch.max)
                if low:
                    add(
                        "coverage",
                        f"fallback {s}",
                        f"the candidate engine admits at most {low[0]} sequences (--max-num-seqs), so a batch of "
                        f"{env.batch.max + 1} (above the envelope's {env.batch.max}) cannot form",
                        f"raise --max-num-seqs above {env.batch.max} in the scope's engine arguments",
                    )
            if s == "unsupported_deployment" and fb is not None and not fb.unsupported_deployment_args:
                add(
                    "coverage",
                    "fallback unsupported_deployment",
                    "the scope names no deployment outside the envelope to start the candidate with",
                    "set fallback.unsupported_deployment_args (e.g. a tensor-parallel size the envelope excludes)",
                )
    # ---------------------------------------------------------------- perf
    if plan.runs_check("perf"):
        for w in scope.workloads:
            if plan.workloads is not None and w.name not in plan.workloads:
                continue
            if w.kind == "trace_replay" and (w.trace is None or not exists(w.trace)):
                what = "names no trace file" if w.trace is None else f"trace {w.trace} does not exist"
                add(
                    "perf",
                    f"workload {w.name}",
                    f"a trace replay that {what}",
                    f"set workloads[].trace to a shipped trace, or leave {w.name} out of {tier_hint}.workloads",
                )
            if w.kind == "prompts" and w.prompts is not None and not exists(w.prompts):
                add("perf", f"workload {w.name}", f"its prompt set {w.prompts} does not exist", "fix the path")
    # ---------------------------------------------------------------- kernels
    if plan.runs_check("kernels") and scope.hardware is not None:
        for k in scope.kernels:
            if k.requires_gpu and scope.hardware.device != "gpu":
                add(
                    "kernels",
                    f"kernel suite {k.name}",
                    "it needs a GPU and the scope targets CPUs",
                    "set requires_gpu: false if it runs on CPUs",
                )
            if base_dir is not None and not exists(k.path):
                add("kernels", f"kernel suite {k.name}", f"its folder {k.path} does not exist", "fix kernels[].path")
    return Passability(scope=scope.name, tier=tier, blockers=out)


def analyze_tiers(scope: Scope, *, base_dir: Path | None = None) -> dict[str, Passability]:
    """:func:`analyze` for every tier of a complete scope (unsharded)."""
    return {t: analyze(scope, build_plan(scope, tier=t), base_dir=base_dir) for t in TIER_ORDER}


def engine_arg_check(plan: Plan, *, python: str | None = None, use_cache: bool = True) -> ArgCheck:
    """Every engine's arguments of ``plan`` checked against the installed vLLM's own parser."""
    return check_arg_lists(plan.engine_arg_lists(), python=python, use_cache=use_cache)
