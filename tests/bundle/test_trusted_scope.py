"""``verify --require-pass --trusted-scope``: a bundle whose recorded scope loosens the trusted scope fails,
naming every loosening; a tighter or identical scope passes. One table of cases, each a signed bundle whose
recorded scope is the demo scope with one edit, verified by the real command line against the shipped demo
scope (the trusted one), and each kind of loosening failing with its own reason."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from synthetic import Spec, make_bundle

from fasttrack import ROOT
from fasttrack.bundle.keys import generate_keypair, load_private_key
from fasttrack.scope import load_scope
from fasttrack.scope.compare import compare_scopes, parse_for_comparison

DEMO = (ROOT / "suites" / "demo-llama" / "scope.yaml").read_text()
MRCR = "  - name: mrcr\n    kind: mrcr\n    data: data/mrcr.jsonl\n    points: {batch: [3]}\n"

#: case -> (edits of the recorded scope, the reason --require-pass must give (a substring), or None: passes)
CASES: dict[str, tuple[dict[str, str], str | None]] = {
    "identical": ({}, None),
    "smoke tier runs only the kernels check": (
        {"    lifetimes_per_side: 1\n": "    lifetimes_per_side: 1\n    checks: [kernels]\n"},
        "tiers.smoke.checks: checks dropped: coverage, equivalence, evals, features, perf",
    ),
    "points removed": ({"    batch: [1, 2, 3, 4, 8]\n": "    batch: [1]\n"}, "tiers.smoke points: 8 of 10 config"),
    "noise margin widened": ({"noise_margin: 0.44": "noise_margin: 0.9"}, "gates.perf.noise_margin: raised from 0.44"),
    "confidence lowered": ({"confidence: 0.95": "confidence: 0.8"}, "gates.perf.confidence: lowered from 0.95 to 0.8"),
    "fewer runs": ({"min_runs: 4": "min_runs: 2"}, "gates.perf.min_runs: lowered from 4 to 2"),
    "equivalence gate widened": ({"max_kl: 0.01": "max_kl: 0.5"}, "gates.equivalence.max_kl: raised from 0.01"),
    "coverage fraction lowered": (
        {"min_optimized_decode_fraction: 0.9": "min_optimized_decode_fraction: 0.5"},
        "gates.coverage.min_optimized_decode_fraction: lowered from 0.9 to 0.5",
    ),
    "a feature removed": (
        {
            " n_best, logprobs,\n           speculative_acceptance]": " n_best,\n           speculative_acceptance]",
            " n_best,\n               logprobs]": " n_best]",
        },
        "features: removed [logprobs]",
    ),
    "an eval removed": (
        {MRCR: "  - name: mrcr-gone\n    kind: mrcr\n    data: data/mrcr.jsonl\n"},
        "evals: removed: mrcr",
    ),
    "an eval's margin widened": (
        {
            "    max_tokens: 32\n    margin: 0.1\n    floor: 0.5\n  - name: mrcr": (
                "    max_tokens: 32\n    margin: 0.4\n    floor: 0.5\n  - name: mrcr"
            )
        },
        "evals.aime25.margin: raised from 0.1 to 0.4",
    ),
    "a workload removed from a tier": (
        {"context, mixed, real-prompts, agent-replay, sweep]": "context, sweep]"},
        "tiers.standard.workloads: removed [mixed, real-prompts, agent-replay]",
    ),
    "lifetimes reduced": (
        {"    lifetimes_per_side: 2\n": "    lifetimes_per_side: 1\n"},
        "lifetimes_per_side: lowered",
    ),
    "fewer eval samples": ({"    eval_limit: 30\n": "    eval_limit: 3\n"}, "tiers.standard.eval_limit: lowered"),
    "a different model": ({"  id: fasttrack/demo-llama\n": "  id: someone/other-llama\n"}, "model.id: changed"),
    "different hardware": (
        {"hardware:\n  device: cpu\n": "hardware:\n  device: cpu\n  vendor: any\n"},
        "hardware.vendor",
    ),
    "a kernel dtype removed": (
        {"    dtypes: [fp32, bf16]\n": "    dtypes: [fp32]\n"},
        "kernels.demo-fused-ops.dtypes: removed",
    ),
    "owned paths widened": (
        {'    - "examples/demo_plugin/**"\n': '    - "examples/demo_plugin/**"\n    - "vllm/**"\n'},
        "isolation.owned_paths: added",
    ),
    "a fallback situation dropped": (
        {"  stock_path_for: [prefill, mixed_prefill_decode, ": "  stock_path_for: [prefill, "},
        "fallback.stock_path_for: removed [mixed_prefill_decode]",
    ),
    "path markers changed": (
        {'  optimized: ["^fasttrack_demo::fused_decode_"]': '  optimized: [".*"]'},
        "path_markers",
    ),
    "a claim's tolerance widened": ({"    tolerance: 0.05\n": "    tolerance: 0.5\n"}, "claims.demo-b1"),
    "tighter: more lifetimes": ({"    lifetimes_per_side: 1\n": "    lifetimes_per_side: 2\n"}, None),
    "tighter: a smaller noise margin": ({"noise_margin: 0.44": "noise_margin: 0.2"}, None),
    "neutral: another title and estimate": ({"  engine_start_s: 40\n": "  engine_start_s: 90\n"}, None),
}


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("trusted-scope")
    priv, pub = generate_keypair(root / "keys", name="signer")
    return {"root": root, "priv": priv, "pub": pub}


def verify(bundle: Path, pub: Path, *extra: str) -> tuple[int, dict[str, object], str]:
    """``fasttrack verify BUNDLE --key PUB --require-pass EXTRA`` through the command line's entry point, in this
    process (``--json``, then the text): (exit code, the JSON, the text)."""
    args = ["verify", str(bundle), "--key", str(pub), "--require-pass", *extra]
    rc_js, js = _main([*args, "--json"])
    rc_text, text = _main(args)
    assert rc_js == rc_text, (js, text)
    return rc_js, json.loads(js), text


def _main(args: list[str]) -> tuple[int, str]:
    import contextlib
    import io

    from fasttrack.cli import main

    # the commands' consoles write to whatever sys.stdout is at each print, so redirecting it is enough (pinning a
    # console's file to a stream would outlive this call and swallow every later test's output)
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            main(args)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 0
    return code, out.getvalue()


@pytest.mark.parametrize("case", list(CASES))
def test_a_loosened_scope_fails_require_pass_with_its_reason(case: str, world: dict[str, Path]) -> None:
    swaps, reason = CASES[case]
    bundle = make_bundle(
        world["root"] / case.replace(" ", "-").replace(":", ""),
        Spec(scope_swaps=swaps),
        sign_keys=[load_private_key(world["priv"])],
    )
    # without a trusted scope the bundle passes: it is checked against the scope it recorded
    assert verify(bundle, world["pub"])[0] == 0
    rc, out, text = verify(bundle, world["pub"], "--trusted-scope", "demo-llama")
    item = next(it for it in out["items"] if it["name"] == "scope")  # type: ignore[union-attr]
    if reason is None:
        assert rc == 0 and out["ok"] is True and item["ok"] is True, item
        assert out["scope_loosenings"] == []
        return
    assert rc == 1 and out["ok"] is False and item["ok"] is False
    assert any(reason in line for line in out["scope_loosenings"]), (reason, out["scope_loosenings"], item)  # type: ignore[union-attr]
    assert reason in item["detail"] and reason in " ".join(text.split())


def test_min_tier_refuses_a_smoke_bundle(world: dict[str, Path]) -> None:
    bundle = make_bundle(world["root"] / "smoke", Spec(), sign_keys=[load_private_key(world["priv"])])
    rc, out, text = verify(bundle, world["pub"], "--trusted-scope", "demo-llama", "--min-tier", "full")
    tier = next(it for it in out["items"] if it["name"] == "tier")  # type: ignore[union-attr]
    assert rc == 1 and tier["ok"] is False and "below the required full tier" in tier["detail"]
    assert verify(bundle, world["pub"], "--min-tier", "standard")[0] == 0  # the synthetic bundle ran standard


def test_the_trusted_scope_may_be_a_folder_of_scopes(world: dict[str, Path]) -> None:
    folder = world["root"] / "scopes"
    folder.mkdir()
    (folder / "demo-llama.yaml").write_text(DEMO.replace("noise_margin: 0.44", "noise_margin: 0.2"))
    bundle = make_bundle(world["root"] / "folder", Spec(), sign_keys=[load_private_key(world["priv"])])
    rc, out, _ = verify(bundle, world["pub"], "--trusted-scope", str(folder))
    assert rc == 1 and any("gates.perf.noise_margin: raised from 0.2 to 0.44" in x for x in out["scope_loosenings"])  # type: ignore[union-attr]
    bad = subprocess.run(
        [sys.executable, "-m", "fasttrack", "verify", str(bundle), "--key", str(world["pub"]), "--trusted-scope",
         str(world["root"] / "nowhere")],
        capture_output=True, text=True, cwd=ROOT, timeout=300,
    )  # fmt: skip
    assert bad.returncode == 2 and "Traceback" not in bad.stderr and "nowhere" in bad.stderr


def test_every_shipped_scope_equals_itself_and_k3_smoke_cut_to_kernels_is_named() -> None:
    for name in ("demo-llama", "kimi-k3", "demo-llama-gpu"):
        s = load_scope(name).scope
        assert compare_scopes(s, s).changes == []
    k3 = load_scope("kimi-k3")
    cut, _ = parse_for_comparison(k3.text.replace("  smoke:\n", "  smoke:\n    checks: [kernels]\n", 1), source="cut")
    cmp = compare_scopes(k3.scope, cut)
    assert not cmp.ok and [c.field for c in cmp.loosenings] == ["tiers.smoke.checks"]
