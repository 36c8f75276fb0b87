"""Every count, time and probability of a scope has bounds, and every float is finite.

``lifetimes_per_side: 1000000000`` once made ``plan`` allocate 3.7 GB before anything ran; NaN,
infinity and negative values passed for ``startup_timeout_s``, ``max_kl`` and the sampling
temperatures. Each hostile value below is a scope error naming the file, the line and the field
(``fasttrack plan`` exits 2 on it, within a second), and every shipped scope still loads.
"""

from __future__ import annotations

import glob
import math
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from fasttrack import ROOT
from fasttrack.errors import ScopeError
from fasttrack.scope import load_scope
from fasttrack.scope.loading import parse_scope

DEMO = (ROOT / "suites" / "demo-llama" / "scope.yaml").read_text()
NAN, INF = float("nan"), float("inf")

Edit = Callable[[dict[str, Any]], None]


def _set(path: str, value: Any) -> Edit:
    """Set a dotted path (``a.b.0.c``) of the scope document."""

    def edit(d: dict[str, Any]) -> None:
        *head, last = path.split(".")
        cur: Any = d
        for k in head:
            cur = cur[int(k)] if k.isdigit() else cur.setdefault(k, {})
        cur[int(last) if last.isdigit() else last] = value

    return edit


CASES: list[tuple[str, Any]] = [
    ("tiers.full.lifetimes_per_side", 1_000_000_000),
    ("tiers.smoke.lifetimes_per_side", 0),
    ("engine.startup_timeout_s", NAN),
    ("engine.startup_timeout_s", INF),
    ("engine.startup_timeout_s", -1),
    ("engine.startup_timeout_s", 10**12),
    ("gates.equivalence.max_kl", NAN),
    ("gates.equivalence.max_kl", INF),
    ("gates.equivalence.max_kl", -0.5),
    ("gates.equivalence.max_abs_logprob_diff", NAN),
    ("gates.equivalence.top_k", 10**9),
    ("gates.equivalence.max_tokens", 10**9),
    ("gates.features.temperatures", [NAN]),
    ("gates.features.temperatures", [INF]),
    ("gates.features.temperatures", [-1.0]),
    ("gates.features.temperatures", [1.0] * 1000),
    ("gates.features.sampling_samples", 10**12),
    ("gates.features.sampling_alpha", NAN),
    ("gates.features.min_json_conformance", NAN),
    ("gates.coverage.min_optimized_decode_fraction", NAN),
    ("gates.perf.noise_margin", NAN),
    ("gates.perf.confidence", INF),
    ("gates.perf.max_runs", 10**9),
    ("gates.perf.interleave_settle_s", NAN),
    ("evals.0.temperature", NAN),
    ("evals.0.temperature", -1),
    ("evals.0.temperature", 1e9),
    ("evals.0.repeats", 10**9),
    ("evals.0.max_tokens", 10**12),
    ("evals.0.margin", NAN),
    ("tiers.smoke.eval_limit", 10**12),
    ("workloads.2.arrival_rate", INF),
    ("workloads.2.arrival_rate", NAN),
    ("workloads.0.requests_per_run", 10**9),
    ("workloads.0.output_len", 10**12),
    ("envelope.batch.max", 10**9),
    ("envelope.context.max_model_len", 10**12),
    ("envelope.speculative.1.synthetic_acceptance_length", NAN),
    ("envelope.speculative.1.draft_lengths", [3, 10**6]),
    ("envelope.tensor_parallel", [1, 10**9]),
    ("estimates.engine_start_s", NAN),
    ("estimates.decode_tokens_per_s", INF),
    ("estimates.requests_per_point", 10**12),
    ("claims.0.speedup", NAN),
    ("claims.0.speedup", -1),
    ("kernels.0.dims", {"hidden": 10**12}),
    ("workloads.5.concurrencies", [1, 10**9]),
    ("workloads.5.concurrencies", list(range(1, 1000))),
    ("gates.perf.slo.ttft_ms", NAN),
    ("gates.perf.slo.itl_ms", 10**12),
    ("gates.perf.slo.percentile", INF),
    ("engine.cpu_pinning.cores", "0-999999999"),
    ("engine.cpu_pinning.cores", "0," * 200 + "1"),
    ("claims.0.baseline_gpus", 10**12),
]


@pytest.mark.parametrize("path, value", CASES, ids=[f"{p}={v!r}"[:60] for p, v in CASES])
def test_an_unbounded_value_is_a_scope_error(path: str, value: Any) -> None:
    doc = yaml.safe_load(DEMO)
    _set(path, value)(doc)
    text = yaml.safe_dump(doc, sort_keys=False)
    t0 = time.perf_counter()
    with pytest.raises(ScopeError) as e:
        parse_scope(text, source="hostile.yaml")
    assert time.perf_counter() - t0 < 2
    msg = e.value.message
    field = ".".join(p for p in path.split(".")[:-1] if not p.isdigit())
    assert "hostile.yaml:" in msg and path.split(".")[-1] in msg and field.split(".")[0] in msg, msg


def test_plan_exits_2_on_a_billion_lifetimes(tmp_path: Path) -> None:
    doc = yaml.safe_load(DEMO)
    doc["tiers"]["full"]["lifetimes_per_side"] = 1_000_000_000
    f = tmp_path / "scope.yaml"
    f.write_text(yaml.safe_dump(doc, sort_keys=False))
    t0 = time.perf_counter()
    res = subprocess.run(
        [sys.executable, "-m", "fasttrack", "plan", "--model", str(f), "--tier", "full"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert res.returncode == 2, (res.stdout, res.stderr[-2000:])
    assert "lifetimes_per_side" in res.stderr and "Traceback" not in res.stderr
    assert time.perf_counter() - t0 < 60


@pytest.mark.parametrize("path", sorted(glob.glob(str(ROOT / "suites" / "*" / "scope.yaml"))))
def test_every_shipped_scope_loads_within_the_bounds(path: str) -> None:
    scope = load_scope(path).scope

    # every float of a loaded scope is finite
    def floats(o: Any) -> list[float]:
        from pydantic import BaseModel

        if isinstance(o, BaseModel):
            return [x for k in type(o).model_fields for x in floats(getattr(o, k))]
        if isinstance(o, dict):
            return [x for v in o.values() for x in floats(v)]
        if isinstance(o, (list, tuple)):
            return [x for v in o for x in floats(v)]
        return [o] if isinstance(o, float) else []

    assert all(math.isfinite(x) for x in floats(scope))
