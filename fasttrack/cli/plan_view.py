"""What ``fasttrack plan`` prints: the engine groups, the estimate per check (:mod:`fasttrack.planning.cost`), the
checks in run order and the engine-argument check."""

from __future__ import annotations

from typing import Any

from rich.console import Console


def print_plan_groups(console: Console, plan: Any) -> None:
    """The engine groups, the estimate and its assumptions."""
    from rich.table import Table

    table = Table(title="engine groups (one engine launch per side and lifetime)")
    table.add_column("group", no_wrap=True)
    for col in ("GPUs", "nodes", "points", "batches", "contexts", "lifetimes/side"):
        table.add_column(col, no_wrap=True)
    table.add_column("candidate adds")
    for g in plan.groups:
        pts = plan.group_points(g)
        table.add_row(
            g.id,
            str(g.gpus),
            f"{g.nodes} x {g.gpus_per_node}" if g.nodes > 1 else "1",
            str(len(pts)),
            ",".join(str(b) for b in sorted({p.batch for p in pts})),
            ",".join(
                sorted(
                    {("full" if p.full_context else str(p.context)) for p in pts},
                    key=lambda x: (x == "full", len(x), x),
                )
            ),
            str(g.lifetimes_per_side),
            " ".join(a for a in g.args["candidate"] if a not in g.args["baseline"]),
        )
    console.print(table)
    e = plan.estimate
    a = e.assumptions
    console.print(
        f"{len(plan.points)} config points in {len(plan.groups)} engine groups; "
        f"{e.engine_starts} engine starts, {e.requests:,} requests, ~{e.gpu_hours:,.1f} GPU-hours, "
        f"~{e.node_hours:,.1f} node-hours, ~{e.wall_hours:,.1f} h wall"
    )
    multi = sorted({(g.nodes, g.gpus_per_node, g.node_kind) for g in plan.groups if g.nodes > 1}, key=str)
    for nodes, per, kind in multi:
        console.print(
            f"engines of {nodes * (per or 0)} GPUs span {nodes} nodes of {per} GPUs" + (f" ({kind})" if kind else "")
        )
    print_plan_cost(console, e.checks)
    stream = a.stream_tokens_per_s or a.decode_tokens_per_s / 16
    console.print(
        f"[dim]assumptions: engine start {a.engine_start_s:.0f} s, decode {stream:,.0f} tok/s alone and "
        f"{a.decode_tokens_per_s:,.0f} tok/s at a full batch, prefill {a.prefill_tokens_per_s:,.0f} tok/s "
        "(the scope's 'estimates'; docs/cost.md)[/]"
    )


def print_plan_cost(console: Console, checks: dict[str, dict[str, float | int]]) -> None:
    """The estimate per check (and the engine starts): wall, GPU and node hours, requests."""
    from rich.table import Table

    if not checks:
        return
    table = Table(title="estimated cost per check (fasttrack/planning/cost.py)")
    for col in ("check", "wall h", "GPU-h", "node-h", "requests"):
        table.add_column(col, no_wrap=True, justify="left" if col == "check" else "right")
    for name, c in checks.items():
        table.add_row(
            name,
            f"{c['wall_hours']:,.2f}",
            f"{c['gpu_hours']:,.2f}",
            f"{c['node_hours']:,.2f}",
            f"{int(c['requests']):,}",
        )
    console.print(table)


def print_plan_checks(console: Console, tier: str, checks: list[Any]) -> None:
    """The registered checks in run order: whether the tier runs them, their gate section, what they exercise."""
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=f"checks, in run order (the {tier} tier's)")
    for col in ("check", "runs", "required", "gate", "exercises"):
        table.add_column(col, no_wrap=col != "exercises")
    for c in checks:
        table.add_row(
            escape(c.name),
            "yes" if c.runs else "no (the tier leaves it out)",
            "yes" if c.required else "no",
            escape(c.gate or "-"),
            escape(", ".join(c.exercises) or "-"),
        )
    console.print(table)


def print_arg_check(console: Console, args_check: Any) -> None:
    if args_check is None:
        console.print("[dim]engine arguments: not checked (--no-arg-check)[/]")
    elif args_check.skipped:
        console.print(f"[yellow]engine arguments: not checked: {args_check.skipped}[/]", highlight=False)
    else:
        console.print(
            f"engine arguments: {len(args_check.checked)} argument lists accepted by vLLM {args_check.vllm_version}"
        )
