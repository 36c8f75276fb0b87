"""Prompts as token ids, built with the engine's own tokenizer (``/tokenize``).

Both sides serve the same model, so a prompt built on one side is the same ids on the
other. :class:`PromptBuilder` turns real text into prompts of an exact or bounded
token length (passage text tiled in front where a prompt is too short).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import httpx

from fasttrack.engine.tls import tls_context
from fasttrack.inputs.shipped import InputSetError, Passage, stable_hash

if TYPE_CHECKING:  # pragma: no cover
    from fasttrack.engine.handle import EngineHandle


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
        async with httpx.AsyncClient(timeout=self._timeout, verify=tls_context()) as http:
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
