"""The isolation check: the row that ties a bundle to a pull request.

Two questions decide whether a bundle is evidence for a PR:

1. **Does the change stay inside the code the optimization owns?** Every path changed from the
   merge base of ``--base`` and ``--head`` to the head is classified (:mod:`fasttrack.change.diff`):
   a shared component (input preparation, sampling, KV-cache management) fails the row and is
   named; a path outside the owned ones fails unless the scope's ``isolation.allowed_paths``
   allow it; allowed paths are listed. The row records the diff hash, the base and head SHAs and
   every changed path with its class (table ``changed``). It runs before any engine starts.
2. **Did the engines serve that head?** After the engines ran, :func:`bind_served_builds` compares
   the vLLM commit each engine reported with the head: a different commit fails the row, naming
   both; a commit that could not be read leaves the link unproven (said in the row; ``verify
   --pr-head`` then does not vouch for the link).

Without ``--repo``/``--base``/``--head`` the row is ``not_run``, not required, and says the bundle is
not PR evidence. ``--head`` without ``--repo`` records the PR link but cannot check the diff: the row
is ``not_run`` and required, so such a bundle is ``incomplete``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

from fasttrack.change.diff import IsolationResult, check_isolation
from fasttrack.checks.base import EnginelessCheck, RunContext, register
from fasttrack.evidence import typed_tables
from fasttrack.planning.cost import NO_COST, CheckCost
from fasttrack.results import ISOLATION, NOT_PR_EVIDENCE, CheckResult, Gate, Verdict, head_binding

__all__ = ["GATE", "IsolationCheck", "bind_served_builds", "judge_isolation"]

GATE = Gate(
    statistic="class of every path changed from merge-base(base, head) to head; the vLLM commit each engine served",
    threshold=None,
    rule="pass when every changed path is owned by the optimization or in the scope's allowed paths, and no "
    "engine served a vLLM commit other than the head; a shared component or any other path fails",
)

_SHA_RE = re.compile(r"^[0-9a-fA-F]{7,64}$")


@register
class IsolationCheck(EnginelessCheck):
    """The diff base..head stays in the owned paths, and the engines served the head."""

    name: ClassVar[str] = ISOLATION
    title: ClassVar[str] = "Isolation and PR head"
    report_view: ClassVar[str] = "generic"
    every_tier: ClassVar[bool] = True
    cost: ClassVar[CheckCost] = NO_COST
    """Reading a git diff and the engines' builds takes no measurable time."""

    @classmethod
    def required_in(cls, ctx: RunContext) -> bool:
        return ctx.change is not None

    def gate(self, ctx: RunContext) -> Gate:
        return GATE

    def run(self, ctx: RunContext) -> CheckResult:
        change = ctx.change
        if change is None:
            return CheckResult(
                check=self.name,
                verdict=Verdict.NOT_RUN,
                required=False,
                reason=NOT_PR_EVIDENCE,
                summary={"pr_link": False},
            )
        if change.repo is None or not (change.base and change.head):
            head = change.head or ""
            return CheckResult(
                check=self.name,
                verdict=Verdict.NOT_RUN,
                required=True,
                reason=f"--head {head} was given without --repo and --base, so the diff base..head was not checked: "
                "the PR link is unproven",
                summary={"pr_link": True, "head_ref": head, "head_sha": head.lower() if _SHA_RE.match(head) else None},
            )
        if ctx.scope.isolation is None:  # a complete scope has one; a scope built in memory may not
            return CheckResult.not_run(self.name, "the scope declares no isolation section (owned paths are unknown)")
        res = check_isolation(change.repo, change.base, change.head, ctx.scope.isolation)
        ctx.log(f"isolation: {res.verdict}: {res.message}")
        return judge_isolation(res, gate=GATE)


def judge_isolation(res: IsolationResult, *, gate: Gate = GATE) -> CheckResult:
    """The isolation row of one classified diff, by the rule of :func:`fasttrack.change.diff.judge_paths`
    (``fasttrack isolation`` applies the same): ``pass`` only when nothing shared and nothing unallowed changed."""
    rows = [
        {
            "path": c.path,
            "status": c.status,
            "old_path": c.old_path,
            "class": c.classification,
            "component": c.component,
            "allowed": c.allowed,
            "matched": c.matched,
        }
        for c in res.changed
    ]
    shared = [c for c in res.changed if c.classification == "shared"]
    elsewhere = [c for c in res.changed if c.classification == "elsewhere" and not c.allowed]
    allowed = [c for c in res.changed if c.allowed]
    components = sorted({str(c.component) for c in shared})
    summary: dict[str, Any] = {
        "pr_link": True,
        "repo": res.repo,
        "base_ref": res.base_ref,
        "head_ref": res.head_ref,
        "base_sha": res.base_sha,
        "head_sha": res.head_sha,
        "merge_base_sha": res.merge_base_sha,
        "diff_sha256": res.diff_sha256,
        "changed": len(res.changed),
        "owned": sum(1 for c in res.changed if c.classification == "owned"),
        "shared": len(shared),
        "shared_components": components,
        "elsewhere": [c.path for c in elsewhere],
        "allowed": [c.path for c in allowed],
        "classification": res.verdict,
    }
    return CheckResult(
        check=ISOLATION,
        verdict=Verdict.PASS if res.verdict == "pass" else Verdict.FAIL,
        required=True,
        reason=f"{res.base_sha[:12]}..{res.head_sha[:12]}: {res.message}",
        gate=gate,
        summary=summary,
        failures=list(res.failures),
        tables=typed_tables(ISOLATION, {"changed": rows}),
    )


def engine_builds(engines: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The vLLM build of each engine that ran, from the records' ``environment`` (probe or endpoint facts):
    ``{engine, vllm_version, vllm_commit, source}``. Records without environment facts or an error
    capturing them (an out-of-envelope probe that never served) are left out."""
    out = []
    for e in engines:
        env, err = e.get("environment"), e.get("environment_error")
        if env is None and err is None:
            continue
        env = env or {}
        out.append(
            {
                "engine": f"{e.get('group')}/{e.get('side')}#{int(e.get('lifetime') or 0) + 1}",
                "vllm_version": env.get("vllm_version"),
                "vllm_commit": env.get("vllm_commit"),
                "source": env.get("vllm_commit_source") or (f"environment not captured: {err}" if err else None),
            }
        )
    return out


def bind_served_builds(res: CheckResult, builds: list[dict[str, Any]]) -> CheckResult:
    """The isolation row with the PR head compared to the vLLM commit every engine served.

    ``mismatch`` fails the row, naming both commits; ``unproven`` (a commit that could not be read, or
    no engine ran) is said in the row and leaves its verdict alone; ``proven`` is said too."""
    head = res.summary.get("head_sha")
    if not res.summary.get("pr_link"):
        return res
    summary = dict(res.summary)
    summary["served_builds"] = builds
    if not head:
        state, detail = "unproven", f"--head {res.summary.get('head_ref')!r} is not a commit SHA"
    else:
        state, detail = head_binding(str(head), [(b["engine"], b.get("vllm_commit")) for b in builds])
    summary["head_binding"] = state
    summary["head_binding_reason"] = detail
    if state == "mismatch":
        return res.model_copy(
            update={
                "verdict": Verdict.FAIL,
                "required": True,
                "summary": summary,
                "failures": [*res.failures, f"served build is not the PR head: {detail}"],
                "reason": f"the engines did not serve the PR head: {detail}; {res.reason}",
            }
        )
    word = "proven" if state == "proven" else "unproven"
    return res.model_copy(update={"summary": summary, "reason": f"{res.reason}; PR head {word}: {detail}"})
