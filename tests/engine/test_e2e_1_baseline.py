"""A real vLLM engine (baseline side): start, health, requests, streaming, probes, clean stop.

The tests share the session's baseline engine (the demo target's, as ``fasttrack validate``
starts it); the clean-stop test runs after every other user of it (``retiring_baseline_engine``).
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from fasttrack.engine import (
    AttachedEngine,
    EngineRequestError,
    ProfilerWindow,
    Request,
    metrics_diff,
    scrape_metrics,
)
from fasttrack.engine.procs import group_members

pytestmark = pytest.mark.e2e


def run(coro):
    return asyncio.run(coro)


def test_health_and_served_model(baseline_engine, demo_model_dir, demo_target) -> None:
    assert baseline_engine.health() == 200
    assert baseline_engine.model == demo_target.served_name == "demo-llama"
    argv = baseline_engine.argv
    assert argv[argv.index("--model") + 1] == str(demo_model_dir)
    assert baseline_engine.owned and baseline_engine.running
    assert baseline_engine.log_path.exists() and "Application startup complete" in baseline_engine.read_log()
    assert len(baseline_engine.group_pids()) >= 2  # API server + engine core (+ worker)


def test_streaming_timestamps_logprobs_and_usage(baseline_engine) -> None:
    async def go():
        async with baseline_engine.client() as c:
            return await c.complete(
                "Once upon a time", stream=True, max_tokens=16, temperature=0.0, ignore_eos=True, logprobs=5
            )

    r = run(go())
    ch = r.choice
    assert r.usage is not None and r.usage.completion_tokens == 16 and r.usage.prompt_tokens > 0
    assert r.token_ids is not None and len(r.token_ids) == 16
    assert len(ch.token_times) == 16
    times = [r.t_start, *ch.chunk_times, r.t_end]
    assert times == sorted(times), "chunk timestamps must be monotonic"
    assert ch.token_times == sorted(ch.token_times)
    assert r.ttft_s is not None and 0 < r.ttft_s < r.latency_s
    assert r.prompt_token_ids
    assert r.logprobs is not None and len(r.logprobs) == 16
    for pos, tid in zip(r.logprobs, r.token_ids, strict=False):
        assert pos.token_id == tid
        assert 5 <= len(pos.top) <= 6  # top-5 (plus the sampled token when it is not among them)
        assert pos.logprob is not None and pos.logprob <= 0
        # greedy: the sampled token is the most likely one
        assert pos.logprob == pytest.approx(pos.top[0].logprob, abs=1e-4)
    assert r.finish_reason == "length"


def test_streaming_and_non_streaming_agree_when_greedy(baseline_engine) -> None:
    async def go():
        async with baseline_engine.client() as c:
            a = await c.complete("The quick brown fox", max_tokens=12, temperature=0.0, ignore_eos=True)
            b = await c.complete("The quick brown fox", stream=True, max_tokens=12, temperature=0.0, ignore_eos=True)
            return a, b

    a, b = run(go())
    assert not a.stream and b.stream
    assert a.token_ids == b.token_ids and a.text == b.text
    assert a.usage is not None and a.usage.completion_tokens == 12


def test_seeded_sampling_is_reproducible(baseline_engine) -> None:
    async def go():
        async with baseline_engine.client() as c:
            reqs = [
                Request.completion("Hello", max_tokens=12, temperature=1.0, seed=s, ignore_eos=True)
                for s in (11, 11, 12)
            ]
            return await c.gather(reqs)

    a, b, _c = run(go())
    assert a.token_ids == b.token_ids


def test_chat_completion(baseline_engine) -> None:
    async def go():
        async with baseline_engine.client() as c:
            msgs = [{"role": "user", "content": "Say something."}]
            return await c.chat(msgs, max_tokens=8, temperature=0.0, ignore_eos=True, stream=True, logprobs=3)

    r = run(go())
    assert r.endpoint == "chat" and r.usage is not None and r.usage.completion_tokens == 8
    assert r.token_ids is not None and len(r.token_ids) == 8
    assert r.logprobs is not None and len(r.logprobs) == 8
    assert r.t_first_token is not None


def test_request_error_carries_the_server_message(baseline_engine) -> None:
    async def go():
        async with baseline_engine.client() as c:
            await c.complete("Hello", max_tokens=10**6)

    with pytest.raises(EngineRequestError) as ei:
        run(go())
    assert ei.value.status_code == 400
    assert "max_tokens" in ei.value.server_message or "context" in ei.value.server_message
    baseline_engine.check_alive()  # a bad request does not hurt the engine


def test_concurrent_requests_are_batched_and_profiled(baseline_engine, demo_model, demo_path_markers) -> None:
    n = 6

    async def go():
        before = await scrape_metrics(baseline_engine)
        async with baseline_engine.client() as c:
            async with ProfilerWindow(
                baseline_engine,
                "baseline-decode",
                markers=demo_path_markers.marker_set(),
                fallback_pattern=demo_path_markers.fallback_pattern,
            ) as win:
                results = await c.gather(
                    [
                        Request.completion(f"Prompt number {i}:", max_tokens=16, temperature=0.0, ignore_eos=True)
                        for i in range(n)
                    ]
                )
        after = await scrape_metrics(baseline_engine)
        return results, win.evidence, before, after

    results, ev, before, after = run(go())
    assert all(r.usage and r.usage.completion_tokens == 16 for r in results)
    assert ev is not None and ev.trace_files and ev.events > 0
    assert ev.decode_steps >= 15
    assert max(ev.decode_batch_sizes) >= 2, f"requests were not batched: {ev.decode_batch_sizes}"
    assert ev.kernels_per_decode_step and ev.kernels_per_decode_step > 0
    assert sum(ev.op_counts.values()) > 0 and any("attention" in name for name in ev.op_counts)
    # the stock engine never runs the optimized path
    assert ev.optimized_ops == 0 and ev.optimized_decode_steps == 0
    assert ev.fallback_events == 0
    # nor any op of the demo plugin (its stock marker is the candidate's fallback op)
    assert not [name for name in ev.op_counts if name.startswith("fasttrack_demo::")], ev.op_counts
    assert ev.stock_ops == 0
    d = metrics_diff(before, after)
    assert d.delta("vllm:request_success_total") == n
    assert d.delta("vllm:generation_tokens_total") == n * 16


def test_environment_is_captured(baseline_engine) -> None:
    env = baseline_engine.environment()
    assert env.owned and env.source == "local-probe"
    assert env.vllm_version and env.vllm_version == env.served_vllm_version
    assert env.torch_version
    assert env.device.kind == "cpu" and env.device.count and env.device.names
    assert env.argv == baseline_engine.argv and "--model" in env.argv
    assert env.env_overrides.get("HF_HUB_OFFLINE") == "1"
    assert env.served_model == baseline_engine.model
    # the host's GPU safety settings reach the live engine process: the host's value, else the safe one
    entries = Path(f"/proc/{baseline_engine.pid}/environ").read_bytes().decode(errors="replace").split("\0")
    live = dict(e.split("=", 1) for e in entries if "=" in e)
    safe = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
    assert {k: live.get(k) for k in safe} == {k: os.environ.get(k, v) for k, v in safe.items()}


def test_attach_mode_uses_the_running_engine_without_owning_it(baseline_engine) -> None:
    att = AttachedEngine(side="baseline", url=baseline_engine.api_url)
    assert not att.owned and att.model == baseline_engine.model

    async def go():
        async with att.client() as c:
            return await c.complete("Hi", max_tokens=4, temperature=0.0, ignore_eos=True)

    assert run(go()).usage.completion_tokens == 4  # type: ignore[union-attr]  # usage is reported for this request
    att.stop()
    assert baseline_engine.health() == 200
    assert att.environment().source == "endpoint"


def test_clean_stop_leaves_no_process(engine_slot, retiring_baseline_engine) -> None:
    baseline_engine = retiring_baseline_engine
    pgid = baseline_engine.pgid
    pids = baseline_engine.group_pids()
    assert pgid in pids and len(pids) >= 2
    t0 = time.monotonic()
    engine_slot.release(extras=False)  # a candidate up next to it (interleaved perf) stays up
    report = baseline_engine.stop_report
    assert report is not None and report.clean
    assert report.signals_sent[0] == "SIGINT"
    assert time.monotonic() - t0 < 60
    assert group_members(pgid) == []
    with pytest.raises(ProcessLookupError):
        os.killpg(pgid, 0)
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
