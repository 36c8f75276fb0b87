"""Pieces the correctness checks (equivalence, features, coverage) share.

* **Shipped inputs**: the real-text prompt set, long passages for long and full
  contexts, and the JSON schemas of the structured-output test (``suites/common``,
  or the suite's own files where it ships them).
* **Prompt construction**: prompts as token ids of an exact or bounded length,
  built with the engine's own tokenizer (``/tokenize``), so both sides receive the
  same ids.
* **Path evidence windows**: :class:`EvidenceWindow` wraps a profiler window around
  a check's requests at one config point and appends the resulting
  :class:`~fasttrack.checks.base.PathEvidence` rows to ``ctx.evidence``; without a
  profiler it samples ``/metrics`` instead and records that path evidence is
  unavailable.
* **Batch composition**: :func:`verify_batch` decides from the decode steps a
  window saw (or from ``vllm:num_requests_running`` samples) whether the engine
  really ran the intended batch size.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Coroutine, Iterable, Sequence, TypeVar

import httpx
from pydantic import BaseModel, ConfigDict, Field

from fasttrack import ROOT
from fasttrack.checks.base import CheckResult, PathEvidence, RunContext, Verdict
from fasttrack.errors import FasttrackError

if TYPE_CHECKING:  # pragma: no cover
    from fasttrack.engine import EngineHandle, MarkerSet, WindowEvidence
    from fasttrack.plan import ConfigPoint, EngineGroup

T = TypeVar("T")

COMMON_DIR = ROOT / "suites" / "common"
PROMPT_SET = COMMON_DIR / "prompts" / "real-text.jsonl"
PASSAGES = COMMON_DIR / "prompts" / "passages.jsonl"
STRUCTURED_PROMPTS = COMMON_DIR / "prompts" / "structured.jsonl"
SCHEMAS_DIR = COMMON_DIR / "schemas"


class InputSetError(FasttrackError):
    """A shipped prompt set, passage file or JSON schema is missing or malformed."""


# ====================================================================== shipped inputs


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)


class PromptItem(_Model):
    id: str
    """Stable identifier (used in result rows and failure messages)."""
    topic: str
    """What the text is about."""
    kind: str
    """Register: encyclopedic, instruction, dialogue, narrative, opinion, verse, question."""
    prompt: str
    """The prompt text."""


class Passage(_Model):
    id: str
    """Stable identifier."""
    topic: str
    """What the text is about."""
    text: str
    """A paragraph of real text; passages are tiled to build long and full-context prompts."""


class SchemaCase(_Model):
    name: str
    """The schema's title (also its ``response_format`` name)."""
    schema_: dict[str, Any] = Field(alias="schema")
    """The JSON schema."""
    path: str
    """Where the schema was read from (relative to the repository root when inside it)."""
    prompts: list[str]
    """Prompts that ask for an object of this schema."""


def _rel(p: Path) -> str:
    try:
        return str(p.resolve().relative_to(ROOT))
    except ValueError:
        return str(p)


def _read_jsonl(path: Path, what: str) -> list[dict[str, Any]]:
    if not path.is_file():
        raise InputSetError(
            f"the {what} file {_rel(path)} does not exist.",
            hint="Restore it from the repository (suites/common) or point the scope at your own file.",
        )
    rows: list[dict[str, Any]] = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError as exc:
            raise InputSetError(f"{_rel(path)}:{n}: the {what} line is not valid JSON ({exc}).") from None
        if not isinstance(obj, dict):
            raise InputSetError(f"{_rel(path)}:{n}: each {what} line must be a JSON object.")
        rows.append(obj)
    if not rows:
        raise InputSetError(f"the {what} file {_rel(path)} is empty.")
    return rows


def prompt_set_path(ctx: RunContext | None) -> Path:
    """The prompt set a suite uses: its ``prompts`` workload file when it exists, else the common one."""
    if ctx is not None:
        loaded = ctx.shared.get("loaded_scope")
        for w in ctx.scope.workloads:
            if w.kind == "prompts" and w.prompts:
                p = loaded.resolve(w.prompts) if loaded is not None else (ROOT / "suites" / ctx.scope.name / w.prompts)
                if p.is_file():
                    return p
    return PROMPT_SET


def load_prompt_set(path: Path | None = None) -> list[PromptItem]:
    """Read a prompt set (JSON lines with id, topic, kind, prompt); ids must be unique."""
    path = path or PROMPT_SET
    items: list[PromptItem] = []
    for n, row in enumerate(_read_jsonl(path, "prompt set"), 1):
        try:
            items.append(PromptItem.model_validate(row))
        except Exception as exc:  # noqa: BLE001 - turned into a located error
            raise InputSetError(f"{_rel(path)}: prompt number {n} is malformed: {exc}") from None
    ids = [i.id for i in items]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise InputSetError(f"{_rel(path)}: prompt ids must be unique; repeated: {dup}.")
    if any(not i.prompt.strip() for i in items):
        raise InputSetError(f"{_rel(path)}: a prompt is empty.")
    return items


def load_passages(path: Path | None = None) -> list[Passage]:
    """Read the passages used to build long prompts."""
    path = path or PASSAGES
    out = []
    for n, row in enumerate(_read_jsonl(path, "passage"), 1):
        try:
            out.append(Passage.model_validate(row))
        except Exception as exc:  # noqa: BLE001
            raise InputSetError(f"{_rel(path)}: passage number {n} is malformed: {exc}") from None
    return out


def load_schema_cases(schemas_dir: Path | None = None, prompts_path: Path | None = None) -> list[SchemaCase]:
    """The structured-output cases: every ``*.schema.json`` with the prompts naming its title."""
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError

    schemas_dir = schemas_dir or SCHEMAS_DIR
    prompts_path = prompts_path or STRUCTURED_PROMPTS
    prompts: dict[str, list[str]] = {}
    for n, row in enumerate(_read_jsonl(prompts_path, "structured-output prompt"), 1):
        if not isinstance(row.get("schema"), str) or not isinstance(row.get("prompt"), str):
            raise InputSetError(f"{_rel(prompts_path)}:{n}: each line needs a 'schema' title and a 'prompt'.")
        prompts.setdefault(row["schema"], []).append(row["prompt"])
    cases: list[SchemaCase] = []
    files = sorted(schemas_dir.glob("*.schema.json"))
    if not files:
        raise InputSetError(f"no *.schema.json file in {_rel(schemas_dir)}.")
    for f in files:
        try:
            schema = json.loads(f.read_text(encoding="utf-8"))
            Draft202012Validator.check_schema(schema)
        except (ValueError, SchemaError) as exc:
            raise InputSetError(f"{_rel(f)} is not a valid JSON schema: {str(exc).splitlines()[0]}") from None
        title = schema.get("title")
        if not isinstance(title, str) or not title:
            raise InputSetError(f"{_rel(f)} needs a 'title' (it names the schema in prompts and results).")
        if not prompts.get(title):
            raise InputSetError(f"no prompt in {_rel(prompts_path)} asks for schema {title!r} ({_rel(f)}).")
        cases.append(SchemaCase(name=title, schema=schema, path=_rel(f), prompts=prompts[title]))
    unknown = sorted(set(prompts) - {c.name for c in cases})
    if unknown:
        raise InputSetError(f"{_rel(prompts_path)} names schemas that do not exist: {unknown}.")
    return cases


def stable_hash(text: str) -> int:
    """A hash that is the same in every process (for deterministic choices)."""
    return zlib.crc32(text.encode("utf-8"))


# ====================================================================== async + HTTP helpers


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine from the synchronous ``collect`` (which is called outside any event loop).
    Ctrl-C during it raises ``KeyboardInterrupt`` even where a layer below swallowed the
    cancellation (see :func:`fasttrack.perf.loadgen.run_loop`)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        from fasttrack.perf.loadgen import run_loop

        return run_loop(coro, use_uvloop=False)
    raise RuntimeError("run_async was called inside a running event loop; await the coroutine instead")


class TokenizerClient:
    """The engine's own tokenizer through ``/tokenize`` and ``/detokenize``."""

    def __init__(self, engine: "EngineHandle", *, timeout: float = 120.0) -> None:
        self.engine = engine
        self.base_url = engine.base_url
        self.model = engine.model
        self._timeout = timeout
        self._detok_cache: dict[tuple[int, ...], str] = {}

    async def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        from fasttrack.engine import EngineRequestError

        url = self.base_url + path
        async with httpx.AsyncClient(timeout=self._timeout) as http:
            try:
                r = await http.post(url, json=body)
            except httpx.HTTPError as exc:
                await asyncio.to_thread(self.engine.check_alive, grace=2.0)
                raise EngineRequestError(f"{type(exc).__name__}: {exc}", status_code=None, url=url) from exc
        if r.status_code != 200:
            raise EngineRequestError(r.text[:500], status_code=r.status_code, body=r.text, url=url)
        return r.json()

    async def tokenize(self, text: str, *, add_special_tokens: bool = True) -> list[int]:
        data = await self._post(
            "/tokenize", {"model": self.model, "prompt": text, "add_special_tokens": add_special_tokens}
        )
        return [int(t) for t in data["tokens"]]

    async def detokenize(self, ids: Iterable[int]) -> str:
        key = tuple(int(i) for i in ids)
        if not key:
            return ""
        if key not in self._detok_cache:
            data = await self._post("/detokenize", {"model": self.model, "tokens": list(key)})
            self._detok_cache[key] = str(data.get("prompt", ""))
        return self._detok_cache[key]

    async def special_prefix(self) -> list[int]:
        """Ids the tokenizer puts before every prompt (e.g. BOS); empty when none."""
        probe = "The quick brown fox."
        full = await self.tokenize(probe, add_special_tokens=True)
        plain = await self.tokenize(probe, add_special_tokens=False)
        if len(full) >= len(plain) and full[len(full) - len(plain) :] == plain:
            return full[: len(full) - len(plain)]
        return []


@dataclass
class PromptBuilder:
    """Builds prompts of a required token length from real text, with the engine's tokenizer.

    A prompt longer than the limit keeps its last tokens; a prompt shorter than the
    lower bound is preceded by passage text (tiled) up to a length drawn
    deterministically from the allowed range. The tokenizer's special prefix (BOS)
    is kept in front.
    """

    tok: TokenizerClient
    passages: list[Passage]
    _prefix: list[int] | None = None
    _passage_ids: list[int] | None = None
    _plain_cache: dict[str, list[int]] = field(default_factory=dict)

    async def prefix(self) -> list[int]:
        if self._prefix is None:
            self._prefix = await self.tok.special_prefix()
        return self._prefix

    async def plain(self, text: str) -> list[int]:
        if text not in self._plain_cache:
            self._plain_cache[text] = await self.tok.tokenize(text, add_special_tokens=False)
        return self._plain_cache[text]

    async def passage_ids(self, at_least: int) -> list[int]:
        """Token ids of the passages, tiled (separated by blank lines) until at least ``at_least`` long."""
        if self._passage_ids is None or len(self._passage_ids) < at_least:
            unit = "\n\n".join(p.text for p in self.passages) + "\n\n"
            unit_ids = await self.plain(unit)
            if not unit_ids:
                raise InputSetError("the passages tokenized to nothing.")
            reps = max(1, math.ceil(at_least / len(unit_ids)))
            self._passage_ids = unit_ids * reps
        return self._passage_ids

    async def bounded(self, text: str, *, key: str, low: int, high: int) -> list[int]:
        """Ids of ``text`` with a length in [low, high] (natural length when it already fits)."""
        if not 1 <= low <= high:
            raise ValueError(f"bad length bounds [{low}, {high}]")
        pre = await self.prefix()
        body = await self.plain(text)
        n = len(pre) + len(body)
        if n > high:
            keep = max(1, high - len(pre))
            return pre + body[-keep:]
        if n >= low:
            return pre + body
        target = low + stable_hash(key) % (high - low + 1)
        return await self._pad(text, body, pre, target, key)

    async def exact(self, *, key: str, length: int, tail: str | None = None) -> list[int]:
        """Ids of exactly ``length`` tokens: passage text (offset by ``key``), then ``tail`` when given."""
        pre = await self.prefix()
        body = await self.plain(tail) if tail else []
        if len(pre) + len(body) > length:
            return (pre + body[-max(1, length - len(pre)) :])[-length:]
        return await self._pad(tail or "", body, pre, length, key)

    async def _pad(self, text: str, body: list[int], pre: list[int], target: int, key: str) -> list[int]:
        need = target - len(pre) - len(body)
        sep = await self.plain("\n\n") if body else []
        need_passage = max(0, need - len(sep))
        pool = await self.passage_ids(need_passage + 4096)
        start = stable_hash(key) % max(1, len(pool) - need_passage)
        filler = pool[start : start + need_passage]
        out = pre + filler + (sep if body else []) + body
        return out[:target] if len(out) > target else out


# ====================================================================== config points


def short_point(ctx: RunContext, group: "EngineGroup", batch: int) -> "ConfigPoint | None":
    """The group's point at ``batch`` with the smallest non-full context (where short prompts belong)."""
    pts = [p for p in ctx.plan.group_points(group) if p.batch == batch and not p.full_context]
    return min(pts, key=lambda p: p.context) if pts else None


def full_points(ctx: RunContext, group: "EngineGroup") -> list["ConfigPoint"]:
    """The group's full-context points, by batch."""
    return sorted((p for p in ctx.plan.group_points(group) if p.full_context), key=lambda p: p.batch)


def group_batches(ctx: RunContext, group: "EngineGroup") -> list[int]:
    """Distinct batch sizes of the group's points, ascending."""
    return sorted({p.batch for p in ctx.plan.group_points(group)})


def nearest_batch(batches: list[int], want: int) -> int:
    """The batch size of the plan closest to ``want`` (the smaller one on ties)."""
    if not batches:
        raise ValueError("the plan has no batch sizes")
    return min(batches, key=lambda b: (abs(b - want), b))


# ====================================================================== batch composition


class BatchCheck(_Model):
    """Whether a window's requests were really batched as intended."""

    target: int
    """The batch size the requests were sent at."""
    verified: bool
    """The evidence shows decode steps at the target batch size (and none larger)."""
    source: str
    """`profiler` (decode steps per batch size in the trace), `metrics` (vllm:num_requests_running samples) or `none`."""
    steps_at_target: int = 0
    """Decode steps whose batch size equals the target (profiler)."""
    decode_steps: int = 0
    """Decode steps seen (profiler)."""
    above_target: int = 0
    """Decode steps with more requests than the target (other traffic in the window)."""
    max_running: float | None = None
    """Largest vllm:num_requests_running sampled (metrics)."""
    detail: str
    """The evidence in words."""


def verify_batch(
    target: int,
    *,
    decode_batch_sizes: dict[int, int] | None = None,
    running_samples: list[float] | None = None,
    min_fraction: float = 0.5,
) -> BatchCheck:
    """Decide from the evidence whether requests sent ``target`` at a time ran as a decode batch of ``target``.

    Profiler evidence (preferred): at least one decode step at exactly ``target``
    requests, at least ``min_fraction`` of the decode steps at ``target`` and none
    above it. Metrics evidence (fallback): the largest sampled
    ``vllm:num_requests_running`` equals ``target``.
    """
    if decode_batch_sizes:
        sizes = {int(k): int(v) for k, v in decode_batch_sizes.items()}
        total = sum(sizes.values())
        at = sizes.get(target, 0)
        above = sum(v for k, v in sizes.items() if k > target)
        ok = at >= 1 and at / total >= min_fraction and above == 0
        hist = ", ".join(f"{v}x batch {k}" for k, v in sorted(sizes.items()))
        return BatchCheck(
            target=target,
            verified=ok,
            source="profiler",
            steps_at_target=at,
            decode_steps=total,
            above_target=above,
            detail=f"{at} of {total} decode steps ran at batch {target} ({hist})",
        )
    if running_samples:
        mx = max(running_samples)
        ok = int(round(mx)) == target
        return BatchCheck(
            target=target,
            verified=ok,
            source="metrics",
            max_running=mx,
            detail=f"vllm:num_requests_running peaked at {mx:g} over {len(running_samples)} samples",
        )
    return BatchCheck(
        target=target, verified=False, source="none", detail="no decode steps and no metrics samples were observed"
    )


PACER_LEAD_S = 0.01
"""Seconds between sending the pacer request and the round (time for it to reach the engine)."""


async def warm_connections(client: Any, n: int) -> None:
    """Open ``n`` keep-alive connections to the engine before a round of ``n`` concurrent requests.

    A request that has to open a new connection while the server streams to others
    can reach the engine only after they finished, and then it is not batched with them."""
    http = getattr(client, "_http", None)
    if http is None or n <= 1:
        return
    await asyncio.gather(*(http.get("/health") for _ in range(n)), return_exceptions=True)


def verify_completions(
    target: int, results: list[Any], *, max_spread: float = 0.25, since: float | None = None
) -> BatchCheck:
    """Decide from request timings whether ``target`` concurrent requests ran as one decode batch.

    The requests of a round have the same ``max_tokens`` (and ``ignore_eos``). vLLM's
    engine runs one step at a time and puts every running request in each step, so
    requests that decoded together finish in the same step; a request that reached
    the engine late (and decoded partly or wholly alone) finishes correspondingly
    later. The check passes when the spread of completion times is at most
    ``max_spread`` of the median request duration. (Completion times are robust where
    streamed chunk times are not: a busy server coalesces stream chunks.) ``since``: when
    the round was released from a scheduler hold (``time.perf_counter``); durations count
    from then, so the hold does not dilute the spread.
    """
    done = [r for r in results if not isinstance(r, BaseException) and getattr(r, "t_end", None) is not None]
    if len(done) < target:
        return BatchCheck(
            target=target, verified=False, source="timing", detail=f"only {len(done)} of {target} requests completed"
        )
    if target == 1:
        return BatchCheck(target=1, verified=True, source="timing", detail="a single request")
    ends = [r.t_end for r in done]
    durations = sorted(r.t_end - max(r.t_start, since if since is not None else r.t_start) for r in done)
    med = durations[len(durations) // 2] or 1e-9
    spread = (max(ends) - min(ends)) / med
    return BatchCheck(
        target=target,
        verified=spread <= max_spread,
        source="timing",
        detail=(
            f"the {target} requests finished within {(max(ends) - min(ends)) * 1000:.0f} ms of each other "
            f"({spread:.0%} of the median request time {med * 1000:.0f} ms; limit {max_spread:.0%})"
        ),
    )


HOLD_S = 0.3
"""Seconds the scheduler is held for a round (plus ``HOLD_PER_REQUEST_S`` per request; doubled on each retry)."""
HOLD_PER_REQUEST_S = 0.05


async def hold_scheduler(client: Any) -> bool:
    """Freeze the engine's scheduler (see ``EngineClient.pause_scheduler``); ``False`` where it cannot be held."""
    pause = getattr(client, "pause_scheduler", None)
    if pause is None:
        return False
    return bool(await pause())


async def release_after(client: Any, seconds: float, tasks: Sequence[asyncio.Future[Any]]) -> float:
    """Let held requests (``tasks``) arrive for ``seconds``, then release the scheduler
    (also when interrupted); returns the release time (``time.perf_counter``). If the
    release fails, the tasks are cancelled (they would wait on a frozen scheduler)."""
    try:
        await asyncio.sleep(seconds)
    finally:
        released_at = time.perf_counter()
        try:
            await client.resume_scheduler()
        except BaseException:
            for t in tasks:
                t.cancel()
            raise
    return released_at


async def run_batched(
    make: Callable[[], list[Coroutine[Any, Any, Any]]],
    *,
    client: Any,
    target: int,
    attempts: int = 3,
    pacer: Callable[[], Coroutine[Any, Any, Any]] | None = None,
) -> tuple[list[Any], BatchCheck]:
    """Send one round of ``target`` concurrent requests until its timing shows one batch (at most ``attempts``).

    ``make`` builds the round's request coroutines afresh for each attempt. Outputs are the
    same on every attempt (greedy), so repeating selects the batch composition, not the
    outputs; the attempt count is recorded in the check's detail.

    Where the engine serves vLLM's ``/pause`` (engines fasttrack starts run in vLLM's
    development mode), the scheduler is held while the round's requests arrive and then
    released, so the engine starts them all in one step however slowly a busy API server
    admits them. Otherwise ``pacer`` (optional) builds a prefill-only request with a long,
    uncached prompt that is sent just before the round: the round's requests then reach an
    engine that is busy with that prefill, so the scheduler starts them in the same step.
    Without either, the first request to arrive at an idle engine is often prefilled alone
    and stays one step ahead, so the round's last step runs with one request fewer. The
    composition is verified from the requests' timing either way."""
    from fasttrack.engine import EngineCrashed

    for attempt in range(1, attempts + 1):
        await warm_connections(client, target + (1 if pacer else 0))
        held = target > 1 and await hold_scheduler(client)
        released_at: float | None = None
        if held:
            tasks = [asyncio.ensure_future(c) for c in make()]
            released_at = await release_after(
                client, (HOLD_S + HOLD_PER_REQUEST_S * target) * 2 ** (attempt - 1), tasks
            )
            results = list(await asyncio.gather(*tasks, return_exceptions=True))
        else:
            pace = asyncio.ensure_future(pacer()) if pacer is not None and target > 1 else None
            if pace is not None:
                await asyncio.sleep(PACER_LEAD_S)
            results = list(await asyncio.gather(*make(), return_exceptions=True))
            if pace is not None:
                try:
                    await pace
                except Exception:  # noqa: BLE001 - the pacer's own outcome does not matter
                    pass
        for r in results:
            if isinstance(r, EngineCrashed) or (isinstance(r, BaseException) and not isinstance(r, Exception)):
                raise r
        bc = verify_completions(target, results, since=released_at)
        if held:
            bc.detail += " (scheduler held while the round arrived)"
        if bc.verified or attempt == attempts:
            break
    if attempt > 1:
        bc.detail += f" (attempt {attempt} of {attempts})"
    return results, bc


# ====================================================================== path evidence windows


def marker_set(ctx: RunContext) -> "MarkerSet | None":
    from fasttrack.engine import MarkerSet

    pm = ctx.scope.path_markers
    if pm is None:
        return None
    return MarkerSet(optimized=list(pm.optimized), stock=list(pm.stock))


def fallback_regex(ctx: RunContext) -> str | None:
    fb = ctx.scope.fallback
    return fb.log_regex if fb is not None else None


def in_range_fraction(ev: PathEvidence, lo: int, hi: int) -> tuple[int, int]:
    """(decode steps with lo <= batch <= hi, of which on the optimized path), from the evidence detail.

    Falls back to all decode steps when the detail has no per-batch counts."""
    sizes = ev.detail.get("decode_batch_sizes")
    opt = ev.detail.get("optimized_decode_batch_sizes") or {}
    if not sizes:
        return ev.decode_steps, ev.optimized_decode_steps
    n = sum(int(v) for k, v in sizes.items() if lo <= int(k) <= hi)
    o = sum(int(v) for k, v in opt.items() if lo <= int(k) <= hi)
    return n, o


def window_summary(ev: "WindowEvidence") -> dict[str, Any]:
    """The compact, JSON-friendly facts of one window (for result rows and artifacts)."""
    return {
        "window": ev.name,
        "duration_s": ev.duration_s,
        "step_counts": dict(ev.step_counts),
        "optimized_step_counts": dict(ev.optimized_step_counts),
        "stock_step_counts": dict(ev.stock_step_counts),
        "decode_steps": ev.decode_steps,
        "optimized_decode_steps": ev.optimized_decode_steps,
        "decode_batch_sizes": {str(k): v for k, v in ev.decode_batch_sizes.items()},
        "optimized_decode_batch_sizes": {str(k): v for k, v in ev.optimized_decode_batch_sizes.items()},
        "optimized_ops": ev.optimized_ops,
        "stock_ops": ev.stock_ops,
        "optimized_op_counts": dict(list(ev.optimized_op_counts.items())[:10]),
        "stock_op_counts": dict(list(ev.stock_op_counts.items())[:10]),
        "fallback_events": ev.fallback_events,
        "fallback_lines": ev.fallback_lines[:3],
        "kernels_per_decode_step": ev.kernels_per_decode_step,
        "trace_bytes": ev.trace_bytes,
        "notes": list(ev.notes),
    }


class WindowRecord(_Model):
    """What one evidence window observed, as kept by a check."""

    name: str
    """Window name."""
    side: str
    """`baseline` or `candidate`."""
    points: list[str]
    """Config points the window's evidence was attributed to."""
    available: bool
    """Whether path evidence (a profiler trace) exists for this window."""
    unavailable_reason: str | None = None
    """Why not, when it does not."""
    summary: dict[str, Any] = Field(default_factory=dict)
    """:func:`window_summary` of the window (profiler), or the metrics samples."""
    steps: list[dict[str, Any]] = Field(default_factory=list)
    """Per engine step: kind, batch, optimized_ops, stock_ops (profiler only)."""
    running_samples: list[float] = Field(default_factory=list)
    """vllm:num_requests_running samples taken during the window (metrics fallback)."""
    seconds: float = 0.0
    """Wall time of the window's requests."""

    @property
    def decode_batch_sizes(self) -> dict[int, int]:
        return {int(k): int(v) for k, v in (self.summary.get("decode_batch_sizes") or {}).items()}

    @property
    def optimized_decode_steps(self) -> int:
        return int(self.summary.get("optimized_decode_steps") or 0)

    @property
    def decode_steps(self) -> int:
        return int(self.summary.get("decode_steps") or 0)

    def steps_at(self, batch: int) -> tuple[int, int]:
        """(decode steps at this batch size, of which on the optimized path)."""
        opt = self.summary.get("optimized_decode_batch_sizes") or {}
        return self.decode_batch_sizes.get(batch, 0), int(opt.get(str(batch), 0))

    def batch_check(self, target: int) -> BatchCheck:
        return verify_batch(
            target, decode_batch_sizes=self.decode_batch_sizes or None, running_samples=self.running_samples or None
        )


async def _sample_running(engine: "EngineHandle", out: list[float], stop: asyncio.Event, interval: float) -> None:
    from fasttrack.engine import parse_prometheus

    async with httpx.AsyncClient(timeout=5.0) as http:
        while not stop.is_set():
            try:
                r = await http.get(engine.base_url + "/metrics")
                if r.status_code == 200:
                    snap = parse_prometheus(r.text)
                    out.append(snap.total("vllm:num_requests_running"))
            except (httpx.HTTPError, ValueError):
                pass
            try:
                await asyncio.wait_for(stop.wait(), timeout=interval)
            except asyncio.TimeoutError:
                pass


class MetricsSampler:
    """Samples ``vllm:num_requests_running`` every ``interval`` seconds while its block runs.

    The gauge is what the engine reports as running (scheduled) requests; its peak
    during a round of ``b`` concurrent requests is ``b`` when the engine batched them."""

    def __init__(self, engine: "EngineHandle", *, interval: float = 0.02) -> None:
        self.engine = engine
        self.interval = interval
        self.samples: list[float] = []
        self._stop: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> "MetricsSampler":
        self._stop = asyncio.Event()
        self._task = asyncio.create_task(_sample_running(self.engine, self.samples, self._stop, self.interval))
        return self

    async def __aexit__(self, *exc: Any) -> None:
        assert self._stop is not None and self._task is not None
        self._stop.set()
        try:
            await self._task
        except Exception:  # noqa: BLE001 - sampling is best effort
            pass

    def check(self, target: int) -> BatchCheck:
        return verify_batch(target, running_samples=self.samples or None)


class EvidenceWindow:
    """A profiler window (or, without a profiler, a metrics-sampling window) around a check's requests.

    Profiler traces are costly to write on small hosts (tens of ms per engine step),
    so checks profile a representative slice of their work and sample
    ``vllm:num_requests_running`` for the rest (``profile=False``, ``points={}``).
    On a clean exit it appends one :class:`PathEvidence` per attributed point to
    ``ctx.evidence`` and keeps a :class:`WindowRecord` in ``record``. ``points``
    maps a point id to its batch size: ``None`` attributes every decode step of the
    window to the point; with numbers (one window that probes several batch sizes)
    each point gets the decode steps with batch sizes above the next smaller probed
    batch size, up to its own.
    """

    def __init__(
        self,
        ctx: RunContext,
        engine: "EngineHandle",
        *,
        check: str,
        name: str,
        points: dict[str, int | None],
        side: str,
        sample_interval: float = 0.02,
        scrape_metrics: bool = False,
        profile: bool = True,
        sample_metrics: bool = False,
    ) -> None:
        self.ctx = ctx
        self.engine = engine
        self.check = check
        self.name = name
        self.points = points
        self.side = side
        self.sample_interval = sample_interval
        self.scrape_metrics = scrape_metrics
        self.record: WindowRecord | None = None
        self.evidence: "WindowEvidence | None" = None
        self._pw: Any = None
        self._samples: list[float] = []
        self._sampler: MetricsSampler | None = None
        self.sample_metrics = sample_metrics
        self._t0 = 0.0
        self._unavailable: str | None = None
        self.profile = profile

    async def __aenter__(self) -> "EvidenceWindow":
        from fasttrack.engine import ProfilerWindow

        markers = marker_set(self.ctx)
        if not self.profile:
            self._unavailable = "this window was not profiled (metrics samples only)"
        elif getattr(self.engine, "profiler_dir", None) is None:
            self._unavailable = f"the {self.side} engine has no profiler (no --profiler-config), so no trace was taken"
        elif markers is None:
            self._unavailable = "the scope declares no path_markers"
        if self._unavailable is None:
            self._pw = ProfilerWindow(
                self.engine,
                self.name,
                markers=markers,
                fallback_pattern=fallback_regex(self.ctx),
                scrape_metrics=self.scrape_metrics,
            )
            await self._pw.__aenter__()
        if self._unavailable is not None or self.sample_metrics:
            self._sampler = MetricsSampler(self.engine, interval=self.sample_interval)
            await self._sampler.__aenter__()
        self._t0 = time.perf_counter()
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        seconds = time.perf_counter() - self._t0
        if self._sampler is not None:
            await self._sampler.__aexit__(exc_type, exc, tb)
            self._samples = self._sampler.samples
        if self._pw is not None:
            await self._pw.__aexit__(exc_type, exc, tb)
        if exc_type is not None:
            return
        if self._pw is not None and self._pw.evidence is not None:
            ev = self._pw.evidence
            self.evidence = ev
            self.record = WindowRecord(
                name=self.name,
                side=self.side,
                points=list(self.points),
                available=True,
                summary=window_summary(ev),
                steps=[
                    {"kind": s.kind, "batch": s.batch, "optimized_ops": s.optimized_ops, "stock_ops": s.stock_ops}
                    for s in ev.steps
                ],
                running_samples=self._samples,
                seconds=round(seconds, 3),
            )
            sizes = sorted({b for b in self.points.values() if b is not None})
            for pid, batch in self.points.items():
                lo = max((b for b in sizes if batch is not None and b < batch), default=0)
                self.ctx.evidence.append(
                    _point_evidence(ev, check=self.check, point=pid, batches=None if batch is None else (lo + 1, batch))
                )
        else:
            reason = self._unavailable or "the profiler produced no evidence"
            self.record = WindowRecord(
                name=self.name,
                side=self.side,
                points=list(self.points),
                available=False,
                unavailable_reason=reason,
                summary={"max_running": max(self._samples) if self._samples else None},
                running_samples=self._samples,
                seconds=round(seconds, 3),
            )
            for pid in self.points:
                self.ctx.evidence.append(
                    PathEvidence(
                        check=self.check,
                        point=pid,
                        side=self.side,
                        window=self.name,
                        optimized_ops=0,
                        stock_ops=0,
                        decode_steps=0,
                        optimized_decode_steps=0,
                        detail={"unavailable": reason},
                    )
                )


def _point_evidence(ev: "WindowEvidence", *, check: str, point: str, batches: tuple[int, int] | None) -> PathEvidence:
    """The window's evidence for one point: every decode step, or (``batches=(lo, hi)``) the decode steps whose batch
    size lies in [lo, hi]. A window that probes several batch sizes gives each point the steps from just above the
    next smaller probed batch size up to its own, so the partial batches of a round that formed late (a request
    that arrived a step after the others) still count for the round's point."""
    pe = ev.to_path_evidence(check=check, point=point)
    if batches is None:
        return pe
    lo, hi = batches
    steps = [s for s in ev.steps if s.kind == "decode" and lo <= s.batch <= hi]
    sizes: dict[str, int] = {}
    opt: dict[str, int] = {}
    for s in steps:
        sizes[str(s.batch)] = sizes.get(str(s.batch), 0) + 1
        if s.optimized_ops:
            opt[str(s.batch)] = opt.get(str(s.batch), 0) + 1
    pe.decode_steps = len(steps)
    pe.optimized_decode_steps = sum(1 for s in steps if s.optimized_ops)
    pe.optimized_ops = sum(s.optimized_ops for s in steps)
    pe.stock_ops = sum(s.stock_ops for s in steps)
    pe.detail = dict(pe.detail)
    pe.detail["decode_batch_sizes"] = dict(sorted(sizes.items(), key=lambda kv: int(kv[0])))
    pe.detail["optimized_decode_batch_sizes"] = dict(sorted(opt.items(), key=lambda kv: int(kv[0])))
    pe.detail["batch_filter"] = [lo, hi]
    return pe


# ====================================================================== results


def used_standard_path(windows: Iterable[WindowRecord]) -> str | None:
    """The "used the standard path" finding for a check's candidate windows, or None.

    Returns a sentence when the windows have path evidence and none of their decode
    steps ran the optimized path."""
    ws = [w for w in windows if w.side == "candidate" and w.available]
    if not ws:
        return None
    decode = sum(w.decode_steps for w in ws)
    opt = sum(w.optimized_decode_steps for w in ws)
    if opt == 0:
        return (
            f"used the standard path: none of the candidate's {decode} decode steps in {len(ws)} profiler "
            f"window(s) ran an optimized-path marker"
        )
    return None


def fold_verdicts(verdicts: Iterable[Verdict]) -> Verdict:
    """FAIL if any fails; else NOT_RUN if any did not run (or none given); else PASS."""
    vs = list(verdicts)
    if any(v is Verdict.FAIL for v in vs):
        return Verdict.FAIL
    if not vs or any(v is Verdict.NOT_RUN for v in vs):
        return Verdict.NOT_RUN
    return Verdict.PASS


def write_artifact(ctx: RunContext, check: str, name: str, data: Any) -> str:
    """Write raw data as JSON under ``artifacts/<check>/``; return the path relative to the run directory."""
    d = ctx.artifact_dir(check)
    p = d / name
    p.write_text(json.dumps(data, indent=1, default=str, sort_keys=True), encoding="utf-8")
    try:
        return str(p.relative_to(ctx.run_dir))
    except ValueError:
        return str(p)


def clip(text: str, n: int = 60) -> str:
    """``text`` shortened to about ``n`` characters, for failure messages (repr-quoted)."""
    t = text if len(text) <= n else text[: n - 1] + "…"
    return repr(t)


def not_run_result(check: str, reason: str, *, required: bool = True) -> CheckResult:
    return CheckResult.not_run(check, reason, required=required)
