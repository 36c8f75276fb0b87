"""Small, deterministic data sets in the original AIME25 and MRCR formats, for the eval tests.

Nothing can be downloaded on the machines fasttrack's tests run on, so the tests make their own
samples with this module (the demo suite's data comes from the demo model's task generator,
``suites/demo-llama/data/make_data.py``):

* :func:`aime_problems`: competition-style problems with integer answers in 0..999,
  rows ``{"problem", "answer", "id"}`` like ``math-ai/aime25``. Every answer is
  computed here, so the set is correct by construction.
* :func:`mrcr_samples`: multi-turn conversations with 2, 4 or 8 identical asks
  ("write a poem about lanterns") hidden among distractor asks, ending with
  "Prepend <random string> to the k-th (1 indexed) poem about lanterns...", rows with
  the eight columns of ``openai/mrcr`` (``prompt`` JSON-encoded).

Randomness comes from SHA-256 of (seed, label, counter), not from Python's
``random``, so the same arguments give byte-identical files on every platform and
Python version. Sizes are chosen by characters; callers that need a token budget
check it with their tokenizer.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Iterable

MRCR_DATE_ADDED = "01-01-2026"
"""``date_added`` written into synthetic MRCR rows."""

_ALNUM = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"


class HashRng:
    """Deterministic integer stream from SHA-256 (platform and version independent)."""

    def __init__(self, seed: int, label: str) -> None:
        self._base = f"{seed}:{label}:".encode()
        self._n = 0

    def below(self, n: int) -> int:
        """An integer in [0, n)."""
        if n < 1:
            raise ValueError("n must be >= 1")
        self._n += 1
        h = hashlib.sha256(self._base + str(self._n).encode()).digest()
        return int.from_bytes(h[:8], "big") % n

    def between(self, lo: int, hi: int) -> int:
        """An integer in [lo, hi]."""
        return lo + self.below(hi - lo + 1)

    def choice(self, items: list[Any] | tuple[Any, ...]) -> Any:
        return items[self.below(len(items))]

    def shuffled(self, items: Iterable[Any]) -> list[Any]:
        out = list(items)
        for i in range(len(out) - 1, 0, -1):
            j = self.below(i + 1)
            out[i], out[j] = out[j], out[i]
        return out

    def token(self, length: int) -> str:
        return "".join(_ALNUM[self.below(len(_ALNUM))] for _ in range(length))


# --------------------------------------------------------------------------- AIME


def _aime_modpow(r: HashRng) -> tuple[str, int]:
    a, e = r.between(3, 19), r.between(50, 400)
    return f"Find the remainder when ${a}^{{{e}}}$ is divided by $1000$.", pow(a, e, 1000)


def _aime_divisors(r: HashRng) -> tuple[str, int]:
    p = [2, 3, 5, 7, 11]
    exps = [r.between(0, 4) for _ in p]
    n = 1
    for b, k in zip(p, exps, strict=False):
        n *= b**k
    count = 1
    for k in exps:
        count *= k + 1
    return f"How many positive integers divide ${n}$?", count % 1000


def _aime_arith(r: HashRng) -> tuple[str, int]:
    a, d, k = r.between(1, 30), r.between(2, 9), r.between(10, 40)
    total = k * (2 * a + (k - 1) * d) // 2
    return (
        f"An arithmetic sequence starts with ${a}$ and each term is ${d}$ more than the one before. "
        f"Find the remainder when the sum of its first ${k}$ terms is divided by $1000$.",
        total % 1000,
    )


def _aime_lattice(r: HashRng) -> tuple[str, int]:
    n = r.between(5, 20)
    count = sum(1 for x in range(-n, n + 1) for y in range(-n, n + 1) if x * x + y * y <= n * n)
    return (
        f"How many ordered pairs of integers $(x, y)$ satisfy $x^2 + y^2 \\le {n * n}$? Give the answer modulo $1000$.",
        count % 1000,
    )


def _aime_digits(r: HashRng) -> tuple[str, int]:
    n = r.between(20, 60)
    s = sum(int(c) for c in str(2**n))
    return f"Find the sum of the decimal digits of $2^{{{n}}}$.", s % 1000


_AIME_KINDS = (_aime_modpow, _aime_divisors, _aime_arith, _aime_lattice, _aime_digits)


def aime_problems(n: int, *, seed: int = 0) -> list[dict[str, Any]]:
    """``n`` AIME-format rows ``{"problem", "answer", "id"}``; answers are strings of integers in 0..999."""
    r = HashRng(seed, "aime")
    rows = []
    for i in range(n):
        problem, answer = _AIME_KINDS[i % len(_AIME_KINDS)](r)
        rows.append({"problem": problem, "answer": str(answer), "id": i})
    return rows


# --------------------------------------------------------------------------- MRCR

_FORMS = ("poem", "short story", "riddle", "blog post", "letter", "song")
_TOPICS = (
    "lanterns",
    "rivers",
    "tapirs",
    "old maps",
    "winter roads",
    "bridges",
    "gardens",
    "clocks",
    "harbors",
    "owls",
)
_ADJ = ("quiet", "bright", "old", "small", "golden", "cold", "gentle", "distant", "silver", "patient", "wild", "late")
_NOUN = ("light", "water", "stone", "road", "evening", "field", "door", "voice", "morning", "window", "river", "hill")
_VERB = ("waits", "turns", "remembers", "carries", "answers", "follows", "keeps", "finds", "calls", "holds")
_ORDINALS = {1: "1st", 2: "2nd", 3: "3rd"}


def _ordinal(k: int) -> str:
    return _ORDINALS.get(k, f"{k}th")


def _sentence(r: HashRng, topic: str) -> str:
    return (
        f"The {r.choice(_ADJ)} {r.choice(_NOUN)} {r.choice(_VERB)} the {r.choice(_ADJ)} {topic}, "
        f"and the {r.choice(_NOUN)} {r.choice(_VERB)} the {r.choice(_NOUN)}."
    )


def _writing(r: HashRng, form: str, topic: str, sentences: int) -> str:
    title = f"{form.title()}: The {r.choice(_ADJ).title()} {topic.title()}"
    return title + "\n" + " ".join(_sentence(r, topic) for _ in range(sentences))


def mrcr_sample(*, n_needles: int, n_distractors: int, sentences: int, rng: HashRng) -> dict[str, Any]:
    """One MRCR-format row with ``n_needles`` identical asks among ``n_distractors`` other asks."""
    form, topic = rng.choice(_FORMS), rng.choice(_TOPICS)
    others = [(f, t) for f in _FORMS for t in _TOPICS if (f, t) != (form, topic)]
    asks = [(form, topic)] * n_needles + [rng.choice(others) for _ in range(n_distractors)]
    asks = rng.shuffled(asks)
    messages: list[dict[str, str]] = []
    needle_indices: list[int] = []
    for f, t in asks:
        article = "an" if f[0] in "aeiou" else "a"
        messages.append({"role": "user", "content": f"Write {article} {f} about {t}."})
        if (f, t) == (form, topic):
            needle_indices.append(len(messages))
        messages.append({"role": "assistant", "content": _writing(rng, f, t, sentences)})
    k = rng.between(1, n_needles)
    prefix = rng.token(10)
    messages.append(
        {
            "role": "user",
            "content": f"Prepend {prefix} to the {_ordinal(k)} (1 indexed) {form} about {topic}. "
            "Do not include any other text in your response.",
        }
    )
    desired = needle_indices[k - 1]
    return {
        "prompt": json.dumps(messages, ensure_ascii=False),
        "answer": prefix + messages[desired]["content"],
        "random_string_to_prepend": prefix,
        "n_needles": n_needles,
        "desired_msg_index": desired,
        "total_messages": len(messages),
        "n_chars": sum(len(m["content"]) for m in messages),
        "date_added": MRCR_DATE_ADDED,
    }


def mrcr_samples(
    n: int,
    *,
    seed: int = 0,
    needles: tuple[int, ...] = (2, 4, 8),
    distractors: tuple[int, int] = (1, 8),
    sentences: tuple[int, int] = (1, 2),
) -> list[dict[str, Any]]:
    """``n`` MRCR-format rows cycling through ``needles``; distractor and sentence counts vary
    within the given inclusive ranges so that prompt lengths spread over several bins."""
    r = HashRng(seed, "mrcr")
    return [
        mrcr_sample(
            n_needles=needles[i % len(needles)],
            n_distractors=r.between(*distractors),
            sentences=r.between(*sentences),
            rng=r,
        )
        for i in range(n)
    ]


def write_jsonl(rows: list[dict[str, Any]], path: Path) -> Path:
    """Write rows as JSON Lines (sorted keys off: column order as given; LF endings; UTF-8)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    return path
