"""A copy of the demo scope with some of its text swapped, for end-to-end tests that run ``fasttrack validate``
on a variant of the demo target (eager engines, another deployment)."""

from __future__ import annotations

import re
from pathlib import Path

from fasttrack import ROOT

DEMO = ROOT / "suites" / "demo-llama"
NO_REFERENCE = {'    reference:\n      variants: {eager: ["--enforce-eager"]}\n': ""}
"""Equivalence by the absolute ``max_abs_logprob_diff`` (its default) instead of stock's eager build beside the
baseline: one engine start fewer."""
EAGER = {'"--seed", "0"]': '"--seed", "0", "--enforce-eager"]', **NO_REFERENCE}
"""Eager engines (``--enforce-eager``): no compile on a start, the cheapest engine that still runs real vLLM; the
baseline is then stock's eager build itself, so the scope has no reference variant of it (``NO_REFERENCE``)."""
ONE_POINT = {
    "    batch: [1, 2, 3, 4, 8]\n    context: [32, full]\n": (
        "    batch: [1]\n    context: [32]\n    checks: [kernels, equivalence]\n"
    )
}
"""The smoke tier cut to one point (batch 1, context 32) that runs the kernel suites and equivalence only."""
SLOW_HOST = {"  startup_timeout_s: 300": "  startup_timeout_s: 900"}
"""Shared CI hosts: an engine start can take minutes under load."""
TWO_NODE_CANDIDATE = {
    "hardware:\n  device: cpu\n": (
        'hardware:\n  device: cpu\n  node: {gpus: 1, fabric: network, name: "loopback rehearsal node (one rank)"}\n'
    ),
    # the stock path on both sides (the example fast path supports tensor parallel 1 only)
    '  candidate:\n    args: ["--additional-config", \'{"decode_backend": "latency_specialized"}\']': (
        '  candidate:\n    args: ["--tensor-parallel-size", "2"]'
    ),
    # the deployment is what is rehearsed: its marker is the tensor-parallel all-reduce between the two
    # nodes (gloo on CPU), which the single-node stock engine never runs
    'optimized: ["^fasttrack_demo::fused_decode_"]': 'optimized: ["^c10d::allreduce_$"]',
    # vLLM's multiprocessing executor spans the nodes: the single-rank setting stays with the baseline
    '    VLLM_ENABLE_V1_MULTIPROCESSING: "0"\n': "",
    "  baseline:\n    args: []": '  baseline:\n    args: []\n    env: {VLLM_ENABLE_V1_MULTIPROCESSING: "0"}',
}
"""A multi-node deployment rehearsed on CPU: nodes of one rank, the candidate the stock path at tensor parallel 2,
i.e. an engine over two nodes, against the single-node stock engine."""


def demo_scope_variant(folder: Path, swaps: dict[str, str]) -> Path:
    """``folder/scope.yaml``: the demo scope with each key of ``swaps`` (which must occur in it) replaced by its
    value; the scope's data folders are linked, not copied, and its model builder (a path relative to the
    scope's folder) is named by its absolute path."""
    text = (DEMO / "scope.yaml").read_text()
    for old, new in swaps.items():
        assert old in text, f"not in the demo scope: {old!r}"
        text = text.replace(old, new)
    builder = re.search(r"^  local_builder: (\S+)", text, re.M)
    assert builder, "the demo scope names its model builder"
    text = text.replace(builder.group(0), f"  local_builder: {(DEMO / builder.group(1)).resolve()}")
    folder.mkdir(parents=True, exist_ok=True)
    for sub in ("data", "prompts", "traces", "kernels"):
        (folder / sub).symlink_to(DEMO / sub)
    (folder / "scope.yaml").write_text(text)
    return folder / "scope.yaml"
