"""Trace format: parsing, validation, Mooncake import, prompt construction and replay order."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest

from fasttrack import ROOT
from fasttrack.perf.metrics import RequestRecord
from fasttrack.perf.tokens import TokenPool
from fasttrack.perf.trace import (
    ReplayStats,
    TraceError,
    TraceRequest,
    build_prompt,
    dump_trace,
    load_trace,
    main,
    parse_trace,
    replay,
)

SHIPPED = ROOT / "suites" / "demo-llama" / "traces" / "agent-sessions.jsonl"
POOL = TokenPool(list(range(10, 400)), bos=[0])


def _lines(*objs) -> str:
    return "\n".join(json.dumps(o) for o in objs) + "\n"


def test_shipped_trace_has_every_agent_feature() -> None:
    tr = load_trace(SHIPPED)
    d = tr.describe()
    assert d["sessions"] >= 4 and d["forks"] >= 2 and d["shared_prefixes"] == ["system"]
    assert d["tool_pauses_s"] > 0 and d["max_turns"] >= 3
    assert any(len(r.after) >= 2 for r in tr.requests), "a parent waits for parallel subagents"
    # fits the demo model: the longest session context plus output stays under max_model_len
    assert parse_trace(dump_trace(tr)) == tr


def test_minimal_lines_and_defaults() -> None:
    tr = parse_trace(_lines({"id": "x", "input_tokens": 5, "output_tokens": 3}))
    (r,) = tr.requests
    assert r.session_id == "x" and r.arrival_s == 0 and r.after == [] and tr.header.block_size == 512


@pytest.mark.parametrize(
    "lines, msg",
    [
        (
            [{"id": "a", "input_tokens": 5, "output_tokens": 3}, {"id": "a", "input_tokens": 5, "output_tokens": 3}],
            "used twice",
        ),
        ([{"id": "a", "input_tokens": 5, "output_tokens": 3, "after": ["z"]}], "not an earlier request"),
        (
            [
                {"id": "a", "session": "s", "input_tokens": 5, "output_tokens": 3},
                {"id": "b", "session": "s", "input_tokens": 5, "output_tokens": 3, "prefix": {"id": "p", "tokens": 4}},
            ],
            "first turn",
        ),
        ([{"id": "a", "input_tokens": 0, "output_tokens": 3}], "input_tokens"),
        ([{"id": "a", "input_tokens": 5}], "output_tokens"),
        ([{"id": "a", "input_tokens": 5, "output_tokens": 3, "bogus": 1}], "bogus"),
        ([{"fasttrack_trace": 2}, {"id": "a", "input_tokens": 5, "output_tokens": 3}], "version 2"),
    ],
)
def test_malformed_traces_name_the_problem(lines, msg) -> None:
    with pytest.raises(TraceError) as ei:
        parse_trace(_lines(*lines), source="t.jsonl")
    assert msg in ei.value.message


def test_not_json_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="not valid JSON"):
        parse_trace('{"id": "a"\n', source="t.jsonl")
    with pytest.raises(TraceError, match="does not exist"):
        load_trace(tmp_path / "nope.jsonl")
    with pytest.raises(TraceError, match="empty"):
        parse_trace("\n\n")


def test_mooncake_import_is_recognised_and_keeps_blocks(tmp_path: Path) -> None:
    rows = [
        {"timestamp": 1000, "input_length": 1000, "output_length": 10, "hash_ids": [1, 2]},
        {"timestamp": 1500, "input_length": 600, "output_length": 12, "hash_ids": [1, 3]},
        {"timestamp": 1200, "input_length": 20, "output_length": 5, "hash_ids": [9]},
    ]
    tr = parse_trace(_lines(*rows), source="mc.jsonl")
    assert tr.header.block_size == 512 and "mooncake" in (tr.header.source or "")
    assert [r.arrival_s for r in tr.requests] == [0.0, 0.2, 0.5]
    assert [r.input_tokens for r in tr.requests] == [1000, 20, 600]
    assert all(r.session_id == r.id for r in tr.requests)
    # prompts: shared leading block id -> shared content, exact lengths
    st = ReplayStats()
    p1 = build_prompt(tr.requests[0], pool=POOL, tag="t", history=None, block_size=512, max_prompt=4000, stats=st)
    p2 = build_prompt(tr.requests[2], pool=POOL, tag="t", history=None, block_size=512, max_prompt=4000, stats=st)
    assert len(p1) == 1000 and len(p2) == 600
    assert p1[:513] == p2[:513] and p1[513:600] != p2[513:600]
    # CLI conversion writes the fasttrack format
    src, dst = tmp_path / "mc.jsonl", tmp_path / "out.jsonl"
    src.write_text(_lines(*rows))
    assert main(["import-mooncake", str(src), str(dst), "--block-size", "16"]) == 0
    back = load_trace(dst)
    assert back.header.block_size == 16 and len(back.requests) == 3
    assert main(["describe", str(tmp_path / "missing.jsonl")]) == 2


def test_prompts_share_prefix_and_fork_history() -> None:
    tr = load_trace(SHIPPED)
    reqs = {r.id: r for r in tr.requests}
    st = ReplayStats()
    a0 = build_prompt(reqs["a.t0"], pool=POOL, tag="run0", history=None, block_size=64, max_prompt=1000, stats=st)
    b0 = build_prompt(reqs["b.t0"], pool=POOL, tag="run0", history=None, block_size=64, max_prompt=1000, stats=st)
    assert a0[:161] == b0[:161] and a0[161:] != b0[161 : 161 + len(a0) - 161]
    assert len(a0) == 1 + 160 + 80
    # a later turn extends the session history
    hist = a0 + [5] * 48
    a1 = build_prompt(reqs["a.t1"], pool=POOL, tag="run0", history=hist, block_size=64, max_prompt=1000, stats=st)
    assert a1[: len(hist)] == hist and len(a1) == len(hist) + 60
    # other runs get other content
    a0r1 = build_prompt(reqs["a.t0"], pool=POOL, tag="run1", history=None, block_size=64, max_prompt=1000, stats=st)
    assert a0r1[1:161] != a0[1:161]
    # clipping keeps the shared start and the newest tokens
    long_hist = list(range(900))
    clipped = build_prompt(
        reqs["a.t1"], pool=POOL, tag="run0", history=long_hist, block_size=64, max_prompt=500, stats=st
    )
    assert len(clipped) == 500 and clipped[:250] == long_hist[:250] and st.clipped == 1


class FakeClient:
    """Stands in for PerfClient: 'generates' output ids after a fixed delay and records send order."""

    def __init__(self, delay: float = 0.02) -> None:
        self.delay = delay
        self.sent: list[tuple[str, float, int]] = []
        self.t0 = time.perf_counter()

    async def stream(self, req) -> RequestRecord:
        t = time.perf_counter()
        self.sent.append((req.id, t - self.t0, len(req.prompt)))
        rec = RequestRecord(id=req.id, t_send=t)
        await asyncio.sleep(self.delay)
        rec.chunk_times = [time.perf_counter()]
        rec.output_tokens = req.max_tokens
        rec.token_ids = [7] * req.max_tokens if req.want_ids else None
        return rec


def test_replay_respects_dependencies_pauses_and_runs_subagents_in_parallel() -> None:
    tr = load_trace(SHIPPED)
    client = FakeClient(delay=0.03)

    async def go():
        return await replay(client, tr, pool=POOL, tag="run0", max_model_len=1024)

    recs, st = asyncio.run(go())
    assert [r.id for r in recs] == [r.id for r in tr.requests] and all(r.ok for r in recs)
    at = {rid: t for rid, t, _ in client.sent}
    plen = {rid: n for rid, _, n in client.sent}
    # turn order and tool pauses
    assert at["a.t1"] >= at["a.t0"] + 0.03 + 0.3 - 0.01
    # subagents start together after the fork and inherit the parent's context (prompt + output)
    subs = [at[f"a.sub{k}.t0"] for k in (1, 2, 3)]
    assert max(subs) - min(subs) < 0.02 and min(subs) >= at["a.t2"] + 0.03 - 0.01
    assert plen["a.sub1.t0"] == plen["a.t2"] + 48 + 48
    # the parent waits for every subagent
    assert at["a.t3"] >= max(at[f"a.sub{k}.t1"] for k in (1, 2, 3)) + 0.03 + 0.1 - 0.01
    # arrival times of later sessions
    assert at["b.t0"] >= 0.5 - 0.01 and at["d.t0"] >= 2.0 - 0.01
    assert st.clipped == 0


def test_head_drops_dependents() -> None:
    tr = load_trace(SHIPPED)
    h = tr.head(4)
    assert [r.id for r in h.requests] == ["a.t0", "a.t1", "a.t2", "a.sub1.t0"]
    assert TraceRequest(id="x", input_tokens=1, output_tokens=1).session_id == "x"
