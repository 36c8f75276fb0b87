"""What the equivalence check's work costs (its ``cost`` declaration; units in :mod:`fasttrack.planning.cost`)."""

from __future__ import annotations

import math

from fasttrack.planning.cost import PROBE_STEPS, CheckCost, GroupWork, Work

REQUESTS_PER_POINT = 8
"""Requests per point the check sends (whole rounds of the point's batch)."""


def _per_group(w: Work, on: GroupWork) -> None:
    """Per side and short point (not the synthetic-acceptance groups): the requests in whole rounds of the point's
    batch, each ``gates.equivalence.max_tokens`` long, their prompts, a profiled probe; one window per context."""
    if on.group.synthetic_acceptance:
        return
    m, tokens = w.model, w.scope.gates.equivalence.max_tokens
    short = [p for p in on.points if not p.full_context]
    for _side in ("baseline", "candidate"):
        secs = w.est.profile_window_s * len({p.context for p in short})
        reqs = toks = 0
        for p in short:
            n = math.ceil(REQUESTS_PER_POINT / p.batch) * p.batch
            secs += m.decode(n, p.batch, tokens) + m.decode(p.batch, p.batch, PROBE_STEPS) + m.prefill(n * p.context)
            reqs, toks = reqs + n, toks + n * tokens
        w.add(secs, requests=reqs, tokens=toks)


COST = CheckCost(per_group=_per_group)
