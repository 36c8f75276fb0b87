"""OpenAI MRCR (multi-round co-reference resolution): the data format and the grading rules.

The dataset (``openai/mrcr`` on the Hugging Face hub, parquet) has one row per
sample with the columns in :data:`MRCR_COLUMNS`: ``prompt`` is a JSON-encoded list of
chat messages (a long synthetic conversation that ends with a user turn such as
"Prepend aYooSG8CQg to the 2nd (1 indexed) poem about tapirs. Do not include any
other text in your response."), ``answer`` is the reference reply (the prefix
followed by the requested earlier assistant turn), ``random_string_to_prepend`` is
that prefix, ``n_needles`` is 2, 4 or 8, ``desired_msg_index`` is the index of the
requested message in ``prompt``, ``total_messages`` the number of messages,
``n_chars`` the total characters and ``date_added`` the upload date.

Grading (OpenAI's reference implementation on the dataset card):

1. a response that does not start with ``random_string_to_prepend`` scores 0;
2. otherwise the prefix is removed from the response and from the answer, and the
   score is ``difflib.SequenceMatcher(None, response, answer).ratio()``.

Results are reported per needle count and per context-length bin. OpenAI bins
samples by prompt token count into powers of two from 4,096 to 1,048,576 tokens
((4k, 8k], (8k, 16k], ...); :func:`context_bin` uses the same power-of-two bins and
extends them below 4k so that short-context models (and the demo) get bins too.
Token counts here come from the served model's own tokenizer and chat template
(what the engine really attends over), not from OpenAI's ``o200k_base``.
"""

from __future__ import annotations

import json
import math
from difflib import SequenceMatcher
from typing import Any

MRCR_COLUMNS: tuple[str, ...] = (
    "prompt",
    "answer",
    "random_string_to_prepend",
    "n_needles",
    "desired_msg_index",
    "total_messages",
    "n_chars",
    "date_added",
)
"""Columns of the original ``openai/mrcr`` format."""

MRCR_REQUIRED: tuple[str, ...] = ("prompt", "answer", "random_string_to_prepend", "n_needles")
"""Columns grading cannot do without; the others are carried along when present."""

NEEDLE_COUNTS: tuple[int, ...] = (2, 4, 8)
"""Needle counts of the original dataset."""


def grade(response: str, answer: str, random_string_to_prepend: str) -> float:
    """OpenAI MRCR score of one response, in [0, 1].

    0 when ``response`` does not start with ``random_string_to_prepend``; otherwise the
    SequenceMatcher ratio of the response and the answer, both without the prefix.
    """
    if not isinstance(response, str) or not response.startswith(random_string_to_prepend):
        return 0.0
    response = response.removeprefix(random_string_to_prepend)
    answer = answer.removeprefix(random_string_to_prepend)
    return float(SequenceMatcher(None, response, answer).ratio())


def similarity(a: str, b: str) -> float:
    """SequenceMatcher ratio of two texts (1.0 when equal, also when both are empty)."""
    if a == b:
        return 1.0
    return float(SequenceMatcher(None, a, b).ratio())


def parse_prompt(prompt: Any) -> list[dict[str, str]]:
    """The chat messages of one sample (``prompt`` is a JSON string or already a list).

    Raises ``ValueError`` naming the problem when the value is not a list of
    ``{"role", "content"}`` messages.
    """
    messages = json.loads(prompt) if isinstance(prompt, str) else prompt
    if not isinstance(messages, list) or not messages:
        raise ValueError("MRCR 'prompt' must be a JSON list of chat messages")
    out: list[dict[str, str]] = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
            raise ValueError(f"MRCR 'prompt' message {i} is not a {{'role': str, 'content': str}} object")
        out.append({"role": m["role"], "content": m["content"]})
    return out


def context_bin(n_tokens: int) -> str:
    """The power-of-two bin (lo, hi] that ``n_tokens`` falls in, labelled like '512-1k'.

    From 4,096 tokens up these are OpenAI's MRCR bins; below, the same rule continues
    down to (0, 128].
    """
    if n_tokens <= 128:
        return "0-128"
    hi = 1 << math.ceil(math.log2(n_tokens))
    return f"{_k(hi // 2)}-{_k(hi)}"


def bin_order(label: str) -> int:
    """Sort key of a :func:`context_bin` label (its upper bound in tokens)."""
    hi = label.split("-")[-1]
    return int(hi[:-1]) * 1024 if hi.endswith("k") else int(hi)


def _k(n: int) -> str:
    return f"{n // 1024}k" if n >= 1024 and n % 1024 == 0 else str(n)
