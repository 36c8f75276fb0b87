"""Deterministic prompt content: token ids of real text, the same on both sides.

The pool is the shipped passages (``suites/common/prompts/passages.jsonl``) tokenised
once by the engine's own tokenizer (``/tokenize``); both sides serve the same model,
so both get the same ids. A prompt of ``n`` tokens for a key is the tokenizer's
special prefix (BOS), four *salt* tokens chosen by the key's hash, then a contiguous
slice of the pool at an offset chosen by the hash. The salt makes the first cache
block of every key distinct, so unrelated prompts never share prefix-cache blocks
by accident; equal keys give equal content (which is how shared prefixes and
Mooncake ``hash_ids`` reuse the KV cache on purpose).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from fasttrack.engine import EngineHandle

SALT_TOKENS = 4


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8")).digest()


class TokenPool:
    """Token ids of real text, and deterministic slices of it."""

    def __init__(self, ids: Sequence[int], *, bos: Sequence[int] = ()) -> None:
        if len(ids) < 64:
            raise ValueError("the token pool needs at least 64 ids")
        self.ids = [int(i) for i in ids]
        self.bos = [int(i) for i in bos]

    def tokens(self, key: str, n: int) -> list[int]:
        """``n`` ids for ``key`` (no BOS): salt tokens, then a contiguous slice of the pool."""
        if n <= 0:
            return []
        d = _digest(key)
        size = len(self.ids)
        salt = [self.ids[int.from_bytes(d[4 * k : 4 * k + 4], "big") % size] for k in range(SALT_TOKENS)]
        if n <= SALT_TOKENS:
            return salt[:n]
        need = n - SALT_TOKENS
        start = int.from_bytes(d[16:24], "big") % size
        out = list(salt)
        while need > 0:
            take = self.ids[start : start + need]
            out.extend(take)
            need -= len(take)
            start = 0
        return out

    def prompt(self, key: str, n: int) -> list[int]:
        """A prompt of exactly ``n`` tokens: BOS (when the tokenizer adds one), then :meth:`tokens`."""
        if n < 1:
            raise ValueError("a prompt needs at least one token")
        pre = self.bos[:n]
        return pre + self.tokens(key, n - len(pre))


async def pool_from_engine(engine: "EngineHandle") -> TokenPool:
    """Tokenise the shipped passages with the engine's tokenizer."""
    from fasttrack.inputs import TokenizerClient, load_passages

    tok = TokenizerClient(engine)
    passages = load_passages()
    text = "\n\n".join(p.text for p in passages)
    ids = await tok.tokenize(text, add_special_tokens=False)
    bos = await tok.special_prefix()
    return TokenPool(ids, bos=bos)
