"""The kernels check: run the scope's kernel suites and judge their rows (see :mod:`fasttrack.kernels.suites`)."""

from __future__ import annotations

from typing import ClassVar

from fasttrack.checks.base import EnginelessCheck, RunContext, register
from fasttrack.kernels.spec import from_scope_section
from fasttrack.kernels.suites import GATE, cuda_available, judge, run_suite
from fasttrack.results import CheckResult, Gate

__all__ = ["KernelsCheck", "cuda_available", "judge", "run_suite"]


@register
class KernelsCheck(EnginelessCheck):
    """Numerics, determinism, race hunting, sanitizers and speed of light of the scope's kernels."""

    name: ClassVar[str] = "kernels"
    title: ClassVar[str] = "Kernels"
    report_view: ClassVar[str] = "kernels"

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
        out_dir = ctx.artifact_dir(self.name)
        has_cuda = cuda_available()
        docs = [run_suite(s, tier=ctx.tier, out_dir=out_dir, log=ctx.log, has_cuda=has_cuda) for s in specs]
        return judge(docs, run_dir=ctx.run_dir)
