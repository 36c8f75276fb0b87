"""What the perf check declares to the registry besides its class: what it needs from a tier and what it runs there."""

from __future__ import annotations

from fasttrack.checks.tier import Blocker, TierView


def planned_workloads(tier: TierView) -> list[str]:
    """The workloads the tier runs."""
    sel = tier.plan.workloads
    return [w.name for w in tier.scope.workloads if sel is None or w.name in sel]


def perf_blockers(tier: TierView) -> list[Blocker]:
    """The tier runs a workload; every workload it runs has its data: a trace for ``trace_replay``, a prompt set
    file where one is named."""
    out = []
    runs = set(planned_workloads(tier))
    if not runs:
        what = "the scope declares none" if not tier.scope.workloads else "the tier selects none of the scope's"
        fix = f"declare workloads (and select them in {tier.hint}.workloads), or leave perf out of {tier.hint}.checks"
        return [tier.blocker("perf workloads", what, fix)]
    for w in tier.scope.workloads:
        if w.name not in runs:
            continue
        if w.kind == "trace_replay" and (w.trace is None or not tier.exists(w.trace)):
            what = "names no trace file" if w.trace is None else f"trace {w.trace} does not exist"
            out.append(
                tier.blocker(
                    f"workload {w.name}",
                    f"a trace replay that {what}",
                    f"set workloads[].trace to a shipped trace, or leave {w.name} out of {tier.hint}.workloads",
                )
            )
        if w.kind == "prompts" and w.prompts is not None and not tier.exists(w.prompts):
            out.append(tier.blocker(f"workload {w.name}", f"its prompt set {w.prompts} does not exist", "fix the path"))
    return out
