"""The kernels check: run the scope's kernel suites and judge their rows (see :mod:`fasttrack.kernels.suites`).

A suite names the PR's kernels as its ``candidate``. In a rehearsal (``--allow-hardware-mismatch``)
where that module cannot be imported, the suite's ``example_candidate`` (the shipped example
kernels) stands in: every row of that suite says "example kernels, not the PR's", and the check is
``not_run`` whatever those rows say, so such a bundle is never evidence for the PR's kernels.
"""

from __future__ import annotations

import dataclasses
import importlib.util
from collections.abc import Sequence
from pathlib import Path

from fasttrack.checks.base import Blocker, EnginelessCheck, RunContext, TierView, register
from fasttrack.evidence import typed_tables
from fasttrack.kernels.spec import SuiteSpec, from_scope_section
from fasttrack.kernels.suites import GATE, cuda_available, judge, run_suite
from fasttrack.planning.cost import CheckCost, EngineGroup, Work
from fasttrack.results import CheckResult, Gate, Verdict

__all__ = ["EXAMPLE_LABEL", "KernelsCheck", "cuda_available", "judge", "module_available", "run_suite"]

EXAMPLE_LABEL = "example kernels, not the PR's"


def module_available(name: str) -> bool:
    """Whether a candidate (a dotted module name or a ``.py`` path) exists here, found without importing it
    (importing the PR's model module would import vLLM into the harness)."""
    if name.endswith(".py") or "/" in name:
        return Path(name).is_file()
    top, _, rest = name.partition(".")
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return False
    if spec is None:
        return False
    if not rest:
        return True
    for root in spec.submodule_search_locations or []:
        base = Path(root, *rest.split("."))
        if base.with_suffix(".py").is_file() or (base / "__init__.py").is_file():
            return True
    return False


def _per_plan(w: Work, groups: Sequence[EngineGroup]) -> None:
    """The engine-less kernel tests (``estimates.kernels_s``), once per plan or shard, on one node of the smallest
    engine's devices (a CPU host counts as one)."""
    if not w.scope.kernels:
        return
    small = min(groups, key=lambda g: (g.nodes, g.gpus), default=None)
    per_node = (small.gpus_per_node or small.gpus) if small is not None else 0
    w.add(w.est.kernels_s, devices=max(per_node, 1), nodes=1)


@register
class KernelsCheck(EnginelessCheck, name="kernels", title="Kernels", report_view="kernels", after=("isolation",)):
    """Numerics, determinism, race hunting, sanitizers and speed of light of the scope's kernels."""

    cost = CheckCost(per_plan=_per_plan)

    @classmethod
    def passability(cls, tier: TierView) -> list[Blocker]:
        """The scope declares a kernel suite; a suite that needs a GPU cannot run on a CPU scope; its folder must
        exist."""
        scope, out = tier.scope, []
        if not scope.kernels:
            return [
                tier.blocker(
                    "kernel suites",
                    "the scope declares none, so the kernels check has nothing to run",
                    f"declare the fast path's kernel suites under kernels:, or leave kernels out of {tier.hint}.checks",
                )
            ]
        if scope.hardware is None:
            return []
        for k in scope.kernels:
            if k.requires_gpu and scope.hardware.device != "gpu":
                out.append(
                    tier.blocker(
                        f"kernel suite {k.name}",
                        "it needs a GPU and the scope targets CPUs",
                        "set requires_gpu: false if it runs on CPUs",
                    )
                )
            if tier.base_dir is not None and not tier.exists(k.path):
                out.append(
                    tier.blocker(f"kernel suite {k.name}", f"its folder {k.path} does not exist", "fix kernels[].path")
                )
        return out

    @classmethod
    def planned(cls, tier: TierView) -> list[str]:
        return [k.name for k in tier.scope.kernels]

    def skip_reason(self, ctx: RunContext) -> str | None:
        if not list(ctx.scope.kernels or []):
            return "the scope declares no kernel suites"
        return None

    def gate(self, ctx: RunContext) -> Gate:
        return GATE

    def run(self, ctx: RunContext) -> CheckResult:
        section = ctx.scope.kernels or []
        if not section:
            return CheckResult.not_run(self.name, "the scope declares no kernel suites")
        specs = from_scope_section(section, base_dir=ctx.base_dir)
        examples: dict[str, str] = {}
        for i, (entry, spec) in enumerate(zip(section, specs, strict=True)):
            example = getattr(entry, "example_candidate", None)
            if example and spec.candidate and ctx.rehearsal and not module_available(spec.candidate):
                specs[i] = dataclasses.replace(spec, candidate=_resolve(example, spec))
                examples[spec.name] = f"{EXAMPLE_LABEL} ({spec.candidate} is not importable here)"
                ctx.log(f"kernels: suite {spec.name}: {examples[spec.name]}; its rows cannot be evidence")
        out_dir = ctx.artifact_dir(self.name)
        has_cuda = cuda_available()
        docs = [run_suite(s, tier=ctx.tier, out_dir=out_dir, log=ctx.log, has_cuda=has_cuda) for s in specs]
        res = judge(docs, run_dir=ctx.run_dir)
        res = res.model_copy(update={"tables": typed_tables(self.name, res.tables)})
        return label_examples(res, examples, scope=ctx.scope.name)


def _resolve(example: str, spec: SuiteSpec) -> str:
    """A file example relative to the suite folder becomes absolute; a module name stays."""
    if example.endswith(".py") or "/" in example:
        p = Path(example)
        return str(p if p.is_absolute() else (spec.path / p).resolve())
    return example


def label_examples(res: CheckResult, examples: dict[str, str], *, scope: str) -> CheckResult:
    """Rows of the suites that ran the example kernels say so, and the result cannot pass."""
    if not examples:
        return res
    tables = {
        name: [({**r, "candidate": examples[r["suite"]]} if r.get("suite") in examples else r) for r in rows]
        for name, rows in res.tables.items()
    }
    summary = {**res.summary, "example_kernels": dict(examples)}
    verdict = Verdict.NOT_RUN if res.verdict is not Verdict.NOT_RUN else res.verdict
    reason = (
        f"{EXAMPLE_LABEL}: suite(s) {', '.join(sorted(examples))} tested the shipped example kernels "
        f"(they said: {res.verdict.value}: {res.reason}); they cannot be evidence for {scope}"
    )
    return res.model_copy(update={"tables": tables, "summary": summary, "verdict": verdict, "reason": reason})
