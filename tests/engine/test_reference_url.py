"""``--reference-url NAME=URL`` (``validate`` and ``reproduce``): a reference variant's engine that is already
running, attached instead of started (fasttrack/pipeline/variants.py), with a stand-in engine (no vLLM)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from fasttrack.checks.base import build_run_plan
from fasttrack.checks.context import EngineSession, RunContext
from fasttrack.checks.equivalence.reference import VariantCollector
from fasttrack.errors import FasttrackError
from fasttrack.host.models import ResolvedModel
from fasttrack.pipeline.engines import RunState
from fasttrack.pipeline.options import ValidateOptions, from_words
from fasttrack.pipeline.validate import check_reference_urls
from fasttrack.pipeline.variants import run_variants
from fasttrack.scope import StockReference, load_scope


class _Engine(BaseHTTPRequestHandler):
    """What fasttrack reads of an attached engine: /health, /v1/models, /version."""

    def do_GET(self) -> None:  # noqa: N802 - the name http.server dispatches GET to
        body = {
            "/health": {},
            "/v1/models": {"object": "list", "data": [{"id": "demo-llama", "object": "model"}]},
            "/version": {"version": "0.0-stand-in"},
        }.get(self.path.split("?")[0])
        data = json.dumps(body if body is not None else {"error": "no route"}).encode()
        self.send_response(200 if body is not None else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def stand_in() -> Iterator[str]:
    """The URL of a running stand-in engine."""
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Engine)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()


class Recorder(VariantCollector):
    """A check that measures variants: the engines it was handed, and why a variant had no outputs."""

    name = "equivalence"

    def __init__(self) -> None:
        self.urls: dict[str, str] = {}
        self.missing: dict[str, str] = {}

    def wants_variant(self, ctx: RunContext, group: Any) -> bool:
        return True

    async def collect_variant(self, ctx: RunContext, session: EngineSession, variant: str) -> None:
        assert session.side == "baseline"
        self.urls[variant] = session.engine.base_url

    def variant_missing(self, ctx: RunContext, group: Any, variant: str, reason: str) -> None:
        self.missing[variant] = reason


TWO = StockReference(variants={"eager": ["--enforce-eager"], "float32": ["--dtype", "float32"]}, exact="float32")


def _ctx(tmp_path: Path, reference: StockReference | None = TWO) -> RunContext:
    loaded = load_scope("demo-llama")
    s = loaded.scope
    eq = s.gates.equivalence.model_copy(update={"reference": reference})
    scope = s.model_copy(update={"gates": s.gates.model_copy(update={"equivalence": eq})})
    ctx = RunContext(
        scope=scope, plan=build_run_plan(scope, tier="smoke"), run_dir=tmp_path, loaded=loaded, log=lambda m: None
    )
    ctx.model = ResolvedModel(model="/models/demo")
    return ctx


class _Started:
    def __init__(self, args: list[str]) -> None:
        self.args, self.base_url, self.log_path, self.startup_s, self.stopped = args, "http://started:1", None, 1.0, 0

    def environment(self) -> Any:
        raise RuntimeError("no environment here")

    def check_alive(self) -> None:
        pass

    def stop(self) -> None:
        self.stopped += 1


def _starts(monkeypatch: pytest.MonkeyPatch) -> list[_Started]:
    """Engines fasttrack starts (``start_engine``), recorded instead of started."""
    import fasttrack.engine as engine_pkg

    started: list[_Started] = []

    def start(*, args: list[str], **kw: Any) -> _Started:
        started.append(_Started(list(args)))
        return started[-1]

    monkeypatch.setattr(engine_pkg, "start_engine", start)
    return started


def test_the_option_reads_name_url_pairs_and_writes_them_back() -> None:
    opts = ValidateOptions.from_cli(
        model="demo-llama", reference_urls=["eager=http://127.0.0.1:8002", " float32 = http://h:3 "]
    )
    assert opts.reference_urls == {"eager": "http://127.0.0.1:8002", "float32": "http://h:3"}
    argv = opts.to_argv()
    assert argv[argv.index("--reference-url") :][:4] == [
        "--reference-url",
        "eager=http://127.0.0.1:8002",
        "--reference-url",
        "float32=http://h:3",
    ]
    # not given: nothing on a shard's command line (the Slurm and Kubernetes renders stay as they were)
    assert (
        ValidateOptions("demo-llama").reference_urls == {} and "--reference-url" not in ValidateOptions("m").to_argv()
    )
    # reproduce reads the option as validate does
    assert from_words("reference_urls", ["eager=http://x:1"]) == {"eager": "http://x:1"}
    assert from_words("reference_urls", None) == {}
    for bad in ("eager", "=http://x:1", "eager="):
        with pytest.raises(FasttrackError, match="is not of the form NAME=URL") as ei:
            from_words("reference_urls", [bad])
        assert "--reference-url eager=http://" in (ei.value.hint or "")


def test_a_name_the_scope_does_not_declare_is_an_input_error_naming_the_declared_ones(tmp_path: Path) -> None:
    scope = _ctx(tmp_path).scope
    check_reference_urls(scope, {"eager": "http://x:1", "float32": "http://x:2"})
    check_reference_urls(scope, {})
    with pytest.raises(
        FasttrackError, match=r"--reference-url fp8: not a reference variant of scope 'demo-llama'"
    ) as ei:
        check_reference_urls(scope, {"eager": "http://x:1", "fp8": "http://x:2"})
    assert ei.value.hint == "Its reference variants (gates.equivalence.reference.variants): eager, float32."
    with pytest.raises(FasttrackError, match="--reference-url eager: not a reference variant") as ei:
        check_reference_urls(_ctx(tmp_path, None).scope, {"eager": "http://x:1"})
    assert "declares no reference variants" in (ei.value.hint or "")


def _ft(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    return subprocess.run(
        [sys.executable, "-m", "fasttrack", *args], capture_output=True, text=True, env=env, timeout=300
    )


def test_validate_and_reproduce_refuse_a_bad_reference_url_before_any_engine(tmp_path: Path) -> None:
    out = tmp_path / "run"
    res = _ft("validate", "--model", "demo-llama", "--reference-url", "fp8=http://127.0.0.1:1", "--out", str(out))
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert "--reference-url fp8: not a reference variant of scope 'demo-llama'" in res.stderr
    assert "Its reference variants (gates.equivalence.reference.variants): eager." in res.stderr
    assert not out.exists()
    res = _ft("reproduce", str(tmp_path / "b.tar.gz"), "--checks", "equivalence", "--reference-url", "eager")
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert "--reference-url 'eager' is not of the form NAME=URL" in res.stderr


def test_an_attached_variant_is_measured_where_it_runs_recorded_not_owned_and_never_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stand_in: str
) -> None:
    """``eager`` attached, ``float32`` started: each measured once, the attached one's record says ``owned: false``
    with its URL and the build it reported, and it is still up afterwards."""
    import httpx

    ctx = _ctx(tmp_path)
    started = _starts(monkeypatch)
    rec = Recorder()
    state = RunState()
    group = ctx.plan.groups[0]
    said: list[str] = []
    run_variants(
        ctx, group, [rec], state, attach={}, progress=said.append, launcher=None, references={"eager": stand_in}
    )  # type: ignore[list-item]
    assert rec.urls == {"eager": stand_in, "float32": "http://started:1"} and not rec.missing
    assert len(started) == 1 and "--dtype" in started[0].args and started[0].stopped == 1  # only float32 started
    eager, float32 = (r.to_json(redact=lambda e: e) for r in state.engines)
    assert eager["variant"] == "eager" and eager["owned"] is False and eager["base_url"] == stand_in, eager
    assert "args" not in eager and "startup_s" not in eager  # nothing started: no start to count
    assert eager["environment"]["owned"] is False and eager["environment"]["vllm_version"] == "0.0-stand-in"
    assert (
        eager["side"] == "baseline" and eager["checks"] == ["equivalence"] and "equivalence" in eager["check_seconds"]
    )
    assert float32["variant"] == "float32" and float32["owned"] is True
    assert f"{group.id} reference variant eager: attaching the engine at {stand_in} (--reference-url)" in said
    assert httpx.get(stand_in + "/health").status_code == 200  # not stopped


def test_an_attached_variant_needs_no_model_and_one_that_does_not_answer_leaves_its_points_not_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stand_in: str
) -> None:
    import fasttrack.host.models as models

    ctx = _ctx(tmp_path, StockReference(variants={"eager": ["--enforce-eager"]}))
    ctx.model = None  # both sides attached: validate resolved no model, and attaching needs none

    def unresolvable(scope: Any, **kw: Any) -> ResolvedModel:
        raise AssertionError("an attached variant resolves no model")

    monkeypatch.setattr(models, "resolve_model", unresolvable)
    started = _starts(monkeypatch)
    rec = Recorder()
    attach = {"baseline": "http://b:1", "candidate": "http://c:1"}
    run_variants(ctx, ctx.plan.groups[0], [rec], RunState(), attach=attach, progress=lambda m: None, launcher=None,
                 references={"eager": stand_in})  # type: ignore[list-item]  # fmt: skip
    assert rec.urls == {"eager": stand_in} and not started
    rec, state = Recorder(), RunState()
    run_variants(ctx, ctx.plan.groups[0], [rec], state, attach=attach, progress=lambda m: None, launcher=None,
                 references={"eager": "http://127.0.0.1:9"})  # type: ignore[list-item]  # fmt: skip
    assert not rec.urls and not started and state.crash is None
    assert rec.missing["eager"].startswith(
        "its engine at http://127.0.0.1:9 (--reference-url) failed (EngineUnreachable: no healthy vLLM engine answers"
    ), rec.missing
    assert state.engines[0].owned is False and state.engines[0].variant == "eager"
