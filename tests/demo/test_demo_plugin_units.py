"""The demo plugin's logic without an engine: settings, step classification,
fallback logging, and the fused ops' numerics against independent formulas.

The plugin must be pip-installed (``pip install -e examples/demo_plugin``); the
op tests also need vLLM (the fused QKV op reuses vLLM's rotary embedding).
"""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import pytest

plugin = pytest.importorskip(
    "fasttrack_demo_plugin", reason="the demo plugin is not installed (pip install -e examples/demo_plugin)"
)

from fasttrack_demo_plugin import dispatch as dispatch_mod  # noqa: E402 - after the importorskip above
from fasttrack_demo_plugin.settings import (  # noqa: E402 - after the importorskip above
    DEFECTS,
    MAX_BATCH,
    BackendSettings,
    DemoBackendConfigError,
    parse_settings,
)

ENABLED = BackendSettings(backend="latency_specialized", defect=None)


# --- settings -----------------------------------------------------------------


def test_backend_is_off_unless_the_engine_config_turns_it_on() -> None:
    for config in (None, {}, {"other": 1}, {"decode_backend": "stock"}):
        s = parse_settings(config, environ={"FASTTRACK_DEMO_DEFECT": "numerics-batch"})
        assert not s.enabled and s.defect is None  # the stock path never reads the defect
    s = parse_settings({"decode_backend": "latency_specialized"}, environ={})
    assert s.enabled and s.defect is None and (s.min_batch, s.max_batch) == (1, MAX_BATCH)


@pytest.mark.parametrize("defect", DEFECTS)
def test_known_defects_are_read_by_the_optimized_path(defect: str) -> None:
    s = parse_settings({"decode_backend": "latency_specialized"}, environ={"FASTTRACK_DEMO_DEFECT": defect})
    assert s.defect == defect


def test_bad_settings_are_rejected_with_a_clear_message() -> None:
    with pytest.raises(DemoBackendConfigError, match="Unknown decode_backend='fast'"):
        parse_settings({"decode_backend": "fast"}, environ={})
    with pytest.raises(DemoBackendConfigError, match="not a known planted defect"):
        parse_settings({"decode_backend": "latency_specialized"}, environ={"FASTTRACK_DEMO_DEFECT": "typo"})


# --- step classification ----------------------------------------------------------


def _meta(query_lens: list[int], pad: int = 0, seq_lens: list[int] | None = None):
    torch = pytest.importorskip("torch")
    starts = [0]
    for q in query_lens:
        starts.append(starts[-1] + q)
    starts += [starts[-1]] * pad  # padded request slots have zero query tokens
    meta = SimpleNamespace(
        num_actual_tokens=sum(query_lens),
        max_query_len=max(query_lens),
        query_start_loc=torch.tensor(starts, dtype=torch.int32),
    )
    if seq_lens is not None:
        meta.seq_lens = torch.tensor(seq_lens + [0] * pad, dtype=torch.int32)
    return {"model.layers.0.self_attn.attn": meta}


@pytest.mark.parametrize(
    ("query_lens", "fast", "reason", "batch"),
    [
        ([1], True, None, 1),
        ([1, 1, 1], True, None, 3),
        ([1] * MAX_BATCH, True, None, MAX_BATCH),
        ([1] * (MAX_BATCH + 1), False, "batch_out_of_range", MAX_BATCH + 1),
        ([9], False, "prefill", 1),
        ([9, 4], False, "prefill", 2),
        ([1, 1, 7], False, "mixed", 3),
    ],
)
def test_classify(query_lens: list[int], fast: bool, reason: str | None, batch: int) -> None:
    plan = dispatch_mod.classify(_meta(query_lens, pad=2), ENABLED)
    assert (plan.fast, plan.reason, plan.batch, plan.tokens) == (fast, reason, batch, sum(query_lens))


NGRAM3 = BackendSettings(backend="latency_specialized", defect=None, spec_tokens=3)


@pytest.mark.parametrize(
    ("query_lens", "seq_lens", "fast", "reason"),
    [
        # decode steps where no request carries draft tokens stay on the fast path
        ([1, 1], [40, 50], True, None),
        # steps that verify drafts (context before them, 2..1+3 query tokens) run the stock path, visibly
        ([4, 4], [44, 54], False, "spec_verify"),
        ([1, 3], [41, 53], False, "spec_verify"),
        # a prefill is still a prefill: a fresh sequence, or more query tokens than a verify step has
        ([4], [4], False, "prefill"),
        ([1, 9], [41, 9], False, "mixed"),
        ([1, 5], [41, 60], False, "mixed"),
    ],
)
def test_classify_with_ngram_speculation(
    query_lens: list[int], seq_lens: list[int], fast: bool, reason: str | None
) -> None:
    plan = dispatch_mod.classify(_meta(query_lens, pad=2, seq_lens=seq_lens), NGRAM3)
    assert (plan.fast, plan.reason, plan.batch) == (fast, reason, len(query_lens))


def test_without_speculation_a_short_multi_token_step_is_no_verify_step() -> None:
    plan = dispatch_mod.classify(_meta([1, 3], seq_lens=[41, 53]), ENABLED)
    assert (plan.fast, plan.reason) == (False, "mixed")
    # metadata without seq_lens cannot tell a verify step from a short prefill: not called one
    plan = dispatch_mod.classify(_meta([1, 3]), NGRAM3)
    assert plan.reason == "mixed"


def test_no_metadata_is_a_warm_up_step_and_not_a_fallback() -> None:
    for md in (None, {}, []):
        plan = dispatch_mod.classify(md, ENABLED)
        assert not plan.fast and plan.reason is None


# --- fallback logging ---------------------------------------------------------------


@pytest.fixture
def plugin_log(caplog: pytest.LogCaptureFixture):
    """Capture the plugin's logger directly (vLLM's own logger may not propagate)."""
    logger = dispatch_mod.logger
    caplog.set_level(logging.INFO, logger=logger.name)
    propagate = logger.propagate
    logger.propagate = False  # exactly one copy of each record, via the handler below
    logger.addHandler(caplog.handler)
    try:
        yield caplog
    finally:
        logger.removeHandler(caplog.handler)
        logger.propagate = propagate


def _lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == dispatch_mod.logger.name]


def test_fallbacks_are_logged_rate_limited_with_counts(plugin_log, monkeypatch) -> None:
    clock = iter([100.0, 100.1, 100.2, 101.5, 101.6])
    monkeypatch.setattr(dispatch_mod.time, "monotonic", lambda: next(clock))
    d = dispatch_mod.Dispatcher(ENABLED)
    for _ in range(3):
        d.plan_step(_meta([12]))
    d.plan_step(_meta([12]))  # one second later: logged with the suppressed count
    d.plan_step(_meta([1] * (MAX_BATCH + 2)))  # another reason has its own limit
    d.plan_step(_meta([1, 1]))
    assert d.current.fast and d.fast_steps == 1
    lines = [line for line in _lines(plugin_log) if "fallback" in line]
    assert lines == [
        "fasttrack-demo fallback reason=prefill batch=1 tokens=12 count=1 suppressed=0",
        "fasttrack-demo fallback reason=prefill batch=1 tokens=12 count=4 suppressed=2",
        f"fasttrack-demo fallback reason=batch_out_of_range batch={MAX_BATCH + 2} tokens={MAX_BATCH + 2} "
        "count=1 suppressed=0",
    ]
    assert any("fast-path first decode step batch=2" in line for line in _lines(plugin_log))


def test_silent_fallback_defect_diverts_eligible_steps_without_a_trace_in_the_log(plugin_log) -> None:
    d = dispatch_mod.Dispatcher(BackendSettings(backend="latency_specialized", defect="silent-fallback"))
    for _ in range(5):
        plan = d.plan_step(_meta([1, 1, 1]))
        assert not plan.fast and plan.reason is None
    assert d.fast_steps == 0
    lines = _lines(plugin_log)
    assert not any("fallback" in line for line in lines)
    assert any("fast-path first decode step" in line for line in lines)  # it still claims the fast path


def test_a_defect_file_switches_the_planted_defect_while_the_engine_runs(plugin_log, tmp_path) -> None:
    path = tmp_path / "defect"
    s = parse_settings(
        {"decode_backend": "latency_specialized"},
        environ={"FASTTRACK_DEMO_DEFECT": "slow-batch", "FASTTRACK_DEMO_DEFECT_FILE": str(path)},
    )
    assert s.defect == "slow-batch" and s.defect_file == str(path)
    d = dispatch_mod.Dispatcher(s)
    assert d.plan_step(_meta([1, 1, 1])).fast and d.defect == "slow-batch"  # no file yet: the environment's
    path.write_text("silent-fallback\n")
    plan = d.plan_step(_meta([1, 1, 1]))
    assert d.defect == "silent-fallback" and not plan.fast and plan.reason is None
    tmp = tmp_path / "next"
    tmp.write_text("")
    tmp.replace(path)  # emptied (replaced): no defect
    assert d.plan_step(_meta([1, 1, 1])).fast and d.defect is None
    assert any("planted defect now silent-fallback" in line for line in _lines(plugin_log))
    assert any("planted defect now none" in line for line in _lines(plugin_log))
    path.write_text("typo")
    with pytest.raises(DemoBackendConfigError, match="FASTTRACK_DEMO_DEFECT_FILE"):
        d.plan_step(_meta([1]))


# --- fused ops vs independent formulas --------------------------------------------

TOL = dict(rtol=1e-5, atol=1e-5)
"""float32 tolerance of the fused ops against the plain formulas (documented in examples/README.md)."""


@pytest.fixture(scope="module")
def ops():
    pytest.importorskip("vllm", reason="the fused ops reuse vLLM's rotary embedding")
    from fasttrack_demo_plugin import ops as ops_mod

    return ops_mod


def _rms(x, w, eps):
    import torch

    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def test_fused_qkv_rope_matches_the_plain_formula(ops) -> None:
    import torch
    import torch.nn.functional as F

    g = torch.Generator().manual_seed(0)
    n, hidden, heads, kv_heads, hd = 3, 256, 4, 2, 64
    x, res = torch.randn(n, hidden, generator=g), torch.randn(n, hidden, generator=g)
    w_norm = torch.rand(hidden, generator=g) + 0.5
    w_qkv = torch.randn(heads * hd + 2 * kv_heads * hd, hidden, generator=g) * 0.05
    positions = torch.tensor([5, 17, 300])
    inv = 1.0 / (10000 ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
    freqs = torch.outer(torch.arange(2048, dtype=torch.float32), inv)
    cache = torch.cat([freqs.cos(), freqs.sin()], dim=-1)

    q, k, v, new_res = torch.ops.fasttrack_demo.fused_decode_qkv_rope(
        x, res, w_norm, w_qkv.t().contiguous(), positions, cache, 1e-5, hd, heads * hd, kv_heads * hd
    )

    ref_res = x + res
    qkv = F.linear(_rms(ref_res, w_norm, 1e-5), w_qkv)
    rq, rk, rv = qkv.split([heads * hd, kv_heads * hd, kv_heads * hd], dim=-1)
    cos, sin = freqs[positions].cos()[:, None, :], freqs[positions].sin()[:, None, :]

    def rope(t, nh):
        t = t.view(n, nh, hd)
        a, b = t[..., : hd // 2], t[..., hd // 2 :]
        return torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1).reshape(n, nh * hd)

    torch.testing.assert_close(new_res, ref_res, **TOL)
    torch.testing.assert_close(q, rope(rq, heads), **TOL)
    torch.testing.assert_close(k, rope(rk, kv_heads), **TOL)
    torch.testing.assert_close(v, rv, **TOL)
    # first layer: no residual yet; the residual output is a copy of the input
    q0, _, _, res0 = torch.ops.fasttrack_demo.fused_decode_qkv_rope(
        x, None, w_norm, w_qkv.t().contiguous(), positions, cache, 1e-5, hd, heads * hd, kv_heads * hd
    )
    torch.testing.assert_close(res0, x, rtol=0, atol=0)
    assert res0.data_ptr() != x.data_ptr()


def _mlp_case(batch: int):
    import torch

    g = torch.Generator().manual_seed(batch)
    hidden, inter = 256, 1024
    return dict(
        attn_out=torch.randn(batch, hidden, generator=g),
        residual=torch.randn(batch, hidden, generator=g),
        w_o=torch.randn(hidden, hidden, generator=g) * 0.05,
        w_norm=torch.rand(hidden, generator=g) + 0.5,
        w_gate_up=torch.randn(2 * inter, hidden, generator=g) * 0.05,
        w_down=torch.randn(hidden, inter, generator=g) * 0.05,
    )


def _mlp_reference(c):
    import torch.nn.functional as F

    h = F.linear(c["attn_out"], c["w_o"])
    res = h + c["residual"]
    gu = F.linear(_rms(res, c["w_norm"], 1e-5), c["w_gate_up"])
    gate, up = gu.chunk(2, dim=-1)
    return F.linear(F.silu(gate) * up, c["w_down"]), res


def _run_mlp(c, split_k: int):
    import torch

    return torch.ops.fasttrack_demo.fused_decode_mlp(
        c["attn_out"],
        c["residual"],
        c["w_o"].t().contiguous(),
        c["w_norm"],
        c["w_gate_up"].t().contiguous(),
        c["w_down"].t().contiguous(),
        1e-5,
        split_k,
    )


@pytest.mark.parametrize("batch", [1, 2, 3, 4, 8])
def test_fused_mlp_matches_the_plain_formula_at_every_tuned_shape(ops, batch: int) -> None:
    import torch

    c = _mlp_case(batch)
    out, res = _run_mlp(c, ops.split_k_for_batch(batch))
    ref_out, ref_res = _mlp_reference(c)
    torch.testing.assert_close(res, ref_res, **TOL)
    torch.testing.assert_close(out, ref_out, **TOL)


@pytest.mark.parametrize("batch", [1, 3])
def test_packed_weights_run_through_onednn_and_match_the_plain_formula(ops, batch: int) -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile

    c = _mlp_case(batch)
    w_o_t, w_gate_up_t, w_down_t = (c[k].t().contiguous() for k in ("w_o", "w_gate_up", "w_down"))
    split_k = ops.split_k_for_batch(batch)
    args = (c["attn_out"], c["residual"], w_o_t, c["w_norm"], w_gate_up_t, w_down_t, 1e-5, split_k)

    def run() -> tuple[Any, dict[str, int]]:
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            out = torch.ops.fasttrack_demo.fused_decode_mlp(*args)
        return out, {e.key: e.count for e in prof.key_averages()}

    (plain_out, _), plain_ops = run()
    assert plain_ops.get("_C::onednn_mm", 0) == 0 and plain_ops.get("aten::mm", 0) >= 3, plain_ops
    ops.prepack(w_o_t)
    ops.prepack(w_gate_up_t)
    ops.prepack(w_down_t, (1, *ops.SPLIT_K_COUNTS))
    try:
        (out, res), packed = run()
    finally:
        ops.unpack(w_o_t, w_gate_up_t, w_down_t)
    # o, gate/up, and the down projection in split_k chunks, all through oneDNN handles
    assert packed.get("_C::onednn_mm", 0) == 2 + split_k and packed.get("aten::mm", 0) == 0, packed
    ref_out, ref_res = _mlp_reference(c)
    torch.testing.assert_close(res, ref_res, **TOL)
    torch.testing.assert_close(out, ref_out, **TOL)
    torch.testing.assert_close(out, plain_out, **TOL)
    assert not any(v.data_ptr() == w_down_t.data_ptr() for v, _ in ops._PACKED.values()), "unpack dropped the handles"


@pytest.fixture(scope="module")
def native(ops):
    """The native float32 kernels (built on first use; skip, saying why, where the host cannot build them)."""
    if not ops.load_native():
        pytest.skip(ops.native_status())
    return ops


def _rope_case(n: int):
    import torch

    g = torch.Generator().manual_seed(n)
    hidden, heads, kv_heads, hd = 256, 4, 2, 64
    inv = 1.0 / (10000 ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
    freqs = torch.outer(torch.arange(2048, dtype=torch.float32), inv)
    return dict(
        x=torch.randn(n, hidden, generator=g),
        res=torch.randn(n, hidden, generator=g),
        w_norm=torch.rand(hidden, generator=g) + 0.5,
        w_qkv_t=(torch.randn(heads * hd + 2 * kv_heads * hd, hidden, generator=g) * 0.05).t().contiguous(),
        positions=torch.randint(0, 2048, (n,), generator=g),
        cache=torch.cat([freqs.cos(), freqs.sin()], dim=-1),
        hd=hd,
        q_size=heads * hd,
        kv_size=kv_heads * hd,
    )


@pytest.mark.parametrize("batch", [1, 3, 8])
@pytest.mark.parametrize("packed", [False, True], ids=["at-mm", "onednn"])
def test_native_qkv_rope_matches_the_python_op(native, batch: int, packed: bool) -> None:
    import torch

    c = _rope_case(batch)
    if packed:
        native.prepack(c["w_qkv_t"])
    try:
        h = native.handle(c["w_qkv_t"])
        assert packed or h is None
        for res in (c["res"], None):
            py = torch.ops.fasttrack_demo.fused_decode_qkv_rope(
                c["x"],
                res,
                c["w_norm"],
                c["w_qkv_t"],
                c["positions"],
                c["cache"],
                1e-5,
                c["hd"],
                c["q_size"],
                c["kv_size"],
            )
            nat = torch.ops.fasttrack_demo.fused_decode_qkv_rope_f32(
                c["x"],
                res,
                c["w_norm"],
                c["w_qkv_t"],
                h,
                c["positions"],
                c["cache"],
                1e-5,
                c["hd"],
                c["q_size"],
                c["kv_size"],
            )
            for a, b in zip(py, nat, strict=True):
                torch.testing.assert_close(b, a, **TOL)
            assert nat[3].data_ptr() not in (c["x"].data_ptr(), c["res"].data_ptr())
    finally:
        native.unpack(c["w_qkv_t"])


@pytest.mark.parametrize("batch", [1, 2, 3, 4, 8])
def test_native_mlp_matches_the_plain_formula_at_every_tuned_shape(native, batch: int) -> None:
    import torch

    c = _mlp_case(batch)
    w_o_t, w_gate_up_t, w_down_t = (c[k].t().contiguous() for k in ("w_o", "w_gate_up", "w_down"))
    for w in (w_o_t, w_gate_up_t, w_down_t):
        native.prepack(w)
    try:
        out, res = torch.ops.fasttrack_demo.fused_decode_mlp_f32(
            c["attn_out"],
            c["residual"],
            w_o_t,
            native.handle(w_o_t),
            c["w_norm"],
            w_gate_up_t,
            native.handle(w_gate_up_t),
            w_down_t,
            native.handle(w_down_t),
            1e-5,
            native.split_k_for_batch(batch),
        )
    finally:
        native.unpack(w_o_t, w_gate_up_t, w_down_t)
    ref_out, ref_res = _mlp_reference(c)
    torch.testing.assert_close(res, ref_res, **TOL)
    torch.testing.assert_close(out, ref_out, **TOL)
    py_out, _ = _run_mlp(c, native.split_k_for_batch(batch))
    torch.testing.assert_close(out, py_out, **TOL)


def test_native_kernels_reject_other_dtypes(native) -> None:
    import torch

    c = _rope_case(1)
    with pytest.raises(RuntimeError, match="float32"):
        torch.ops.fasttrack_demo.fused_decode_qkv_rope_f32(
            c["x"].bfloat16(),
            None,
            c["w_norm"],
            c["w_qkv_t"],
            None,
            c["positions"],
            c["cache"],
            1e-5,
            c["hd"],
            c["q_size"],
            c["kv_size"],
        )


def test_native_kernels_can_be_turned_off(ops, monkeypatch) -> None:
    monkeypatch.setitem(ops._NATIVE, "loaded", None)
    monkeypatch.setenv("FASTTRACK_DEMO_NATIVE", "0")
    assert ops.load_native() is False
    assert "FASTTRACK_DEMO_NATIVE=0" in ops.native_status() and "Python ops" in ops.native_status()


def test_numerics_batch_defect_breaks_only_its_batch_size(ops, monkeypatch) -> None:
    import torch

    from fasttrack_demo_plugin.settings import NUMERICS_BATCH

    d = dispatch_mod.Dispatcher(BackendSettings(backend="latency_specialized", defect="numerics-batch"))
    monkeypatch.setitem(ops._STATE, "dispatcher", d)
    monkeypatch.setattr(ops, "_WORKSPACES", {})
    for batch in (1, 2, NUMERICS_BATCH, 4, 8):
        d.plan_step(_meta([1] * batch))
        c = _mlp_case(batch)
        w_o_t, w_gate_up_t, w_down_t = (c[k].t().contiguous() for k in ("w_o", "w_gate_up", "w_down"))
        errors = []
        for step in range(3):  # consecutive decode steps of one layer (same weights)
            g = torch.Generator().manual_seed(1000 + step)
            c["attn_out"], c["residual"] = torch.randn(2, batch, 256, generator=g)
            out, _ = torch.ops.fasttrack_demo.fused_decode_mlp(
                c["attn_out"],
                c["residual"],
                w_o_t,
                c["w_norm"],
                w_gate_up_t,
                w_down_t,
                1e-5,
                ops.split_k_for_batch(batch),
            )
            ref, _ = _mlp_reference(c)
            errors.append(((out - ref).norm() / ref.norm()).item())
        if batch == NUMERICS_BATCH:
            # the first step finds a zeroed workspace; later steps add stale output
            assert errors[0] < 1e-5 and min(errors[1:]) > 0.5, errors
        else:
            assert max(errors) < 1e-5, f"batch {batch} should be exact: {errors}"


def test_logits_defects(ops, monkeypatch) -> None:
    import torch

    from fasttrack_demo_plugin.settings import TEMPERATURE_LOGIT_SCALE, WHITESPACE_LOGIT_MARGIN

    g = torch.Generator().manual_seed(0)
    hidden, w = torch.randn(4, 256, generator=g), torch.randn(256, 900, generator=g)
    clean = hidden @ w
    monkeypatch.setitem(ops._STATE, "dispatcher", None)
    torch.testing.assert_close(torch.ops.fasttrack_demo.fused_decode_logits(hidden, w), clean, **TOL)

    d = dispatch_mod.Dispatcher(BackendSettings(backend="latency_specialized", defect="ignore-temperature"))
    monkeypatch.setitem(ops._STATE, "dispatcher", d)
    hot = torch.ops.fasttrack_demo.fused_decode_logits(hidden, w)
    torch.testing.assert_close(hot, clean * TEMPERATURE_LOGIT_SCALE, **TOL)
    assert torch.equal(hot.argmax(-1), clean.argmax(-1))

    ws = torch.tensor([3, 7, 11])
    d = dispatch_mod.Dispatcher(BackendSettings(backend="latency_specialized", defect="broken-json"))
    monkeypatch.setitem(ops._STATE, "dispatcher", d)
    monkeypatch.setitem(ops._STATE, "whitespace_ids", ws)
    lifted = torch.ops.fasttrack_demo.fused_decode_logits(hidden, w)
    row_max = clean.max(-1, keepdim=True).values
    assert torch.all(lifted[:, ws] >= row_max - WHITESPACE_LOGIT_MARGIN - 1e-4)
    assert torch.equal(lifted.argmax(-1), clean.argmax(-1))


def test_envelope_check_names_every_unsupported_deployment_feature() -> None:
    from types import SimpleNamespace

    from fasttrack_demo_plugin.settings import check_envelope as _check_envelope

    def config(**kw):
        base = dict(
            parallel_config=SimpleNamespace(tensor_parallel_size=1, pipeline_parallel_size=1),
            quant_config=None,
            lora_config=None,
            speculative_config=None,
        )
        return SimpleNamespace(**{**base, **kw})

    _check_envelope(config())  # the supported deployment passes
    with pytest.raises(DemoBackendConfigError) as err:
        _check_envelope(
            config(
                parallel_config=SimpleNamespace(tensor_parallel_size=2, pipeline_parallel_size=1),
                speculative_config=SimpleNamespace(method="eagle", num_speculative_tokens=3),
            )
        )
    assert "tensor_parallel_size=2" in str(err.value) and "speculative decoding method 'eagle'" in str(err.value)
    assert "Remove decode_backend" in str(err.value)
    # n-gram speculation is inside the envelope (its verify steps fall back); LoRA is not (the demo's
    # unsupported-deployment probe)
    _check_envelope(config(speculative_config=SimpleNamespace(method="ngram", num_speculative_tokens=3)))
    with pytest.raises(DemoBackendConfigError, match="does not support this deployment: LoRA"):
        _check_envelope(config(lora_config=object()))


# --- the slow-batch defect as a factor ----------------------------------------------


def test_the_slow_factor_knob_is_read_with_the_defect_and_checked() -> None:
    on = {"decode_backend": "latency_specialized"}
    assert parse_settings(on, environ={}).slow_factor is None
    assert parse_settings(on, environ={"FASTTRACK_DEMO_SLOW_FACTOR": "1.5"}).slow_factor == 1.5
    assert parse_settings(None, environ={"FASTTRACK_DEMO_SLOW_FACTOR": "1.5"}).slow_factor is None  # stock path
    for bad in ("1", "0.5", "fast", "nan", "1000"):
        with pytest.raises(DemoBackendConfigError, match="FASTTRACK_DEMO_SLOW_FACTOR"):
            parse_settings(on, environ={"FASTTRACK_DEMO_SLOW_FACTOR": bad})


def _slow_batch_at_4(ops: Any, monkeypatch: pytest.MonkeyPatch, clock: Any) -> SimpleNamespace:
    """The slow-batch defect at 1.5x, its step clock ``clock``, a decode step at batch 4 current."""
    monkeypatch.setattr(ops.time, "perf_counter", clock)
    monkeypatch.setattr(ops, "_SLOW_STEPS", {"start": None, "waited": 0.0, "cycles": []})
    return SimpleNamespace(
        defect="slow-batch",
        current=SimpleNamespace(batch=4),
        settings=BackendSettings(backend="latency_specialized", defect="slow-batch", slow_factor=1.5),
    )


def test_a_slow_factor_makes_each_slowed_step_that_many_times_its_own_time(ops, monkeypatch) -> None:
    """Steps 10 ms apart at batch 4 with a factor of 1.5: after the first step (no gap known yet) each busy-waits
    half a step, 5 ms, so consecutive steps come 15 ms apart; a pause between runs is not taken for a step."""
    clock = {"t": 100.0}
    waits: list[float] = []

    def fake_clock() -> float:
        clock["t"] += 1e-7
        return clock["t"]

    d = _slow_batch_at_4(ops, monkeypatch, fake_clock)
    for gap in (0.0, 0.010, 0.010, 0.010, 5.0, 0.010):
        clock["t"] += gap  # the step's own work, after the last busy-wait (which the fake clock already ran)
        t0 = clock["t"]
        ops.maybe_slow_step(d)
        waits.append(clock["t"] - t0)
    assert waits[0] < 1e-3, "no gap known on the first step"
    assert all(w == pytest.approx(0.005, abs=2e-4) for w in waits[1:]), waits
    d.current = SimpleNamespace(batch=3)
    t0 = clock["t"]
    ops.maybe_slow_step(d)
    assert clock["t"] - t0 < 1e-3, "other batch sizes are not slowed"


def test_a_slow_step_that_overran_its_wait_does_not_grow_the_next_wait(ops, monkeypatch) -> None:
    """The wait a gap held is taken out as long as it really took: busy-waits that ran 15 ms over (their thread
    descheduled at the deadline) do not count as the steps' own time, so the next wait stays half a step."""
    clock = {"t": 100.0, "late": 0.0, "calls": 0}
    waits: list[float] = []

    def fake_clock() -> float:
        clock["calls"] += 1
        clock["t"] += 1e-7
        if clock["late"] and clock["calls"] > 1:  # in the busy loop, not the step's first reading
            clock["t"] += clock["late"]
            clock["late"] = 0.0
        return clock["t"]

    d = _slow_batch_at_4(ops, monkeypatch, fake_clock)
    for k, gap in enumerate((0.0, 0.010, 0.010, 0.010, 0.010, 0.010, 0.010)):
        clock["t"] += gap
        if k in (2, 3, 4):
            clock["late"], clock["calls"] = 0.020, 0  # these steps' waits end 15 ms past their deadline
        t0 = clock["t"]
        ops.maybe_slow_step(d)
        waits.append(clock["t"] - t0)
    assert all(w == pytest.approx(0.020, abs=3e-4) for w in waits[2:5]), waits
    assert all(w == pytest.approx(0.005, abs=2e-4) for w in waits[5:]), ("the overruns are not step time", waits)
