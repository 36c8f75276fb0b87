"""The demo model's two tasks: MRCR-style retrieval and AIME-style integer arithmetic.

One generator serves three purposes, each with its own seed:

* **training** (:func:`training_conversation`, :func:`arithmetic_problem`): what
  ``train.py`` teaches the demo model;
* **evaluation** (:func:`mrcr_rows`, :func:`aime_rows`): the demo suite's eval sets
  in the original formats (``openai/mrcr`` and ``math-ai/aime25`` columns), written by
  ``suites/demo-llama/data/make_data.py`` with held-out seeds;
* **the tokenizer** (:func:`tokenizer_text`): sample text the byte-level BPE is trained
  on beside ``corpus.txt``, so the tasks' words are single tokens.

MRCR-style: a conversation of asks ("Write a poem about owls.") each answered with a
short one-line item ("Poem: The Wild Owls. The distant road turns the quiet owls."),
then "Prepend <10 random characters> to the 2nd (1 indexed) poem about owls. Do not
include any other text in your response." The reference answer is the random string
followed by that item, graded by the MRCR grader (:mod:`fasttrack.evals.mrcr`). Eval
rows have 2, 4 or 8 identical asks (the needles) among distractor asks.

AIME-style: short problems with integer answers in 0..999 (sums, differences,
remainders, word problems), graded by exact integer match, sent as lm-eval's
``aime25`` task sends them ("Question: ...\\nAnswer:"). The model answers with the
number alone and stops.

JSON replies (:func:`json_conversation`): a request for JSON answered with a compact
object shaped like the structured-output prompts' schemas (:data:`JSON_SCHEMAS`), so the
model's replies under a JSON-schema grammar close.

Randomness comes from :class:`Rng` (SplitMix64 on Python integers), so the same seed
gives the same data on every platform and Python version.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

MASK64 = (1 << 64) - 1
ALNUM = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
MRCR_DATE_ADDED = "01-01-2026"

FORMS = ("poem", "song", "riddle", "letter", "story", "note")
TOPICS = (
    "owls",
    "rivers",
    "lanterns",
    "tapirs",
    "bridges",
    "gardens",
    "clocks",
    "harbors",
    "mountains",
    "kettles",
)
ADJECTIVES = (
    "quiet",
    "bright",
    "old",
    "small",
    "golden",
    "cold",
    "gentle",
    "distant",
    "silver",
    "patient",
    "wild",
    "late",
    "hidden",
    "lucky",
    "green",
    "broken",
)
NOUNS = (
    "light",
    "water",
    "stone",
    "road",
    "evening",
    "field",
    "door",
    "voice",
    "morning",
    "window",
    "wind",
    "hill",
    "fire",
    "song",
    "garden",
    "shadow",
)
VERBS = (
    "waits for",
    "turns",
    "remembers",
    "carries",
    "answers",
    "follows",
    "keeps",
    "finds",
    "calls",
    "holds",
    "watches",
    "hides",
)
ORDINALS = {1: "1st", 2: "2nd", 3: "3rd"}
NEEDLE_COUNTS = (2, 4, 8)
PREFIX_LEN = 10
"""Length of the random string to prepend, as in ``openai/mrcr``."""


class Rng:
    """SplitMix64: a small deterministic integer stream (same numbers everywhere)."""

    def __init__(self, seed: int, label: str = "") -> None:
        state = seed & MASK64
        for ch in label.encode():
            state = (state * 1099511628211 + ch) & MASK64
        self.state = state

    def next64(self) -> int:
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK64
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        return z ^ (z >> 31)

    def below(self, n: int) -> int:
        """An integer in [0, n)."""
        if n < 1:
            raise ValueError("n must be >= 1")
        return self.next64() % n

    def between(self, lo: int, hi: int) -> int:
        """An integer in [lo, hi]."""
        return lo + self.below(hi - lo + 1)

    def random(self) -> float:
        """A float in [0, 1)."""
        return (self.next64() >> 11) / float(1 << 53)

    def choice(self, items: tuple[Any, ...] | list[Any]) -> Any:
        return items[self.below(len(items))]

    def shuffled(self, items: list[Any]) -> list[Any]:
        out = list(items)
        for i in range(len(out) - 1, 0, -1):
            j = self.below(i + 1)
            out[i], out[j] = out[j], out[i]
        return out

    def token(self, length: int) -> str:
        return "".join(ALNUM[self.below(len(ALNUM))] for _ in range(length))


# --------------------------------------------------------------------------- MRCR-style


def ordinal(k: int) -> str:
    return ORDINALS.get(k, f"{k}th")


def ask(form: str, topic: str) -> str:
    return f"Write a {form} about {topic}."


def item(rng: Rng, form: str, topic: str) -> str:
    """One short generated item of the given kind (one line)."""
    return (
        f"{form.title()}: The {rng.choice(ADJECTIVES).title()} {topic.title()}. "
        f"The {rng.choice(ADJECTIVES)} {rng.choice(NOUNS)} {rng.choice(VERBS)} the {rng.choice(ADJECTIVES)} {topic}."
    )


def query(prefix: str, k: int, form: str, topic: str) -> str:
    return (
        f"Prepend {prefix} to the {ordinal(k)} (1 indexed) {form} about {topic}. "
        "Do not include any other text in your response."
    )


KINDS = tuple((f, t) for f in FORMS for t in TOPICS)


@dataclass
class Conversation:
    """Messages of one MRCR-style conversation, and which assistant replies are graded answers."""

    messages: list[dict[str, str]]
    answers: list[int]
    """Indices of the assistant messages that answer a 'Prepend ...' query."""


def _asks(rng: Rng, needle: tuple[str, str], n_needles: int, n_distractors: int) -> list[tuple[str, str]]:
    others = [k for k in KINDS if k != needle]
    return rng.shuffled([needle] * n_needles + [rng.choice(others) for _ in range(n_distractors)])


def mrcr_row(rng: Rng, *, n_needles: int, n_distractors: int) -> dict[str, Any]:
    """One eval row in the ``openai/mrcr`` format: ``n_needles`` identical asks among distractors."""
    needle = rng.choice(KINDS)
    messages: list[dict[str, str]] = []
    needle_indices: list[int] = []
    for kind in _asks(rng, needle, n_needles, n_distractors):
        messages.append({"role": "user", "content": ask(*kind)})
        if kind == needle:
            needle_indices.append(len(messages))
        messages.append({"role": "assistant", "content": item(rng, *kind)})
    k = rng.between(1, n_needles)
    prefix = rng.token(PREFIX_LEN)
    messages.append({"role": "user", "content": query(prefix, k, *needle)})
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


MRCR_TURNS = (4, 68)
"""Ask/item turns of an eval conversation: about 150 to 1,950 prompt tokens of the demo tokenizer."""


def mrcr_rows(n: int, *, seed: int, turns: tuple[int, int] = MRCR_TURNS) -> list[dict[str, Any]]:
    """``n`` eval rows cycling through 2, 4 and 8 needles, with conversation lengths spread
    evenly over ``turns`` (every run of consecutive rows covers short to near-full contexts)."""
    rng = Rng(seed, "mrcr")
    rows = []
    lo, hi = turns
    for i in range(n):
        n_needles = NEEDLE_COUNTS[i % len(NEEDLE_COUNTS)]
        # a low-discrepancy walk over the length range (golden-ratio steps), jittered
        frac = (i * 0.6180339887498949 + rng.random() * 0.05) % 1.0
        total = max(n_needles + 1, lo + int(frac * (hi - lo + 1)))
        rows.append(mrcr_row(rng, n_needles=n_needles, n_distractors=total - n_needles))
    return rows


def training_conversation(rng: Rng, *, max_turns: int, queries: int, max_repeats: int = 10) -> Conversation:
    """A training conversation: asks and items (some kinds repeated up to ``max_repeats`` times), then
    ``queries`` 'Prepend' requests, each answered, about kinds that occur in it."""
    n_turns = rng.between(min(3, max_turns), max_turns)
    n_needle_kinds = rng.between(1, 3)
    needles = [rng.choice(KINDS) for _ in range(n_needle_kinds)]
    asks: list[tuple[str, str]] = []
    for kind in needles:
        asks += [kind] * rng.between(1, max_repeats)
    asks = asks[:n_turns]
    asks += [rng.choice(KINDS) for _ in range(n_turns - len(asks))]
    asks = rng.shuffled(asks)
    messages: list[dict[str, str]] = []
    by_kind: dict[tuple[str, str], list[int]] = {}
    for kind in asks:
        messages.append({"role": "user", "content": ask(*kind)})
        by_kind.setdefault(kind, []).append(len(messages))
        messages.append({"role": "assistant", "content": item(rng, *kind)})
    answers = []
    present = [k for k in needles if k in by_kind] or list(by_kind)
    for q in range(queries):
        kind = rng.choice(present) if q == 0 or rng.random() < 0.7 else rng.choice(list(by_kind))
        where = by_kind[kind]
        k = rng.between(1, len(where))
        prefix = rng.token(PREFIX_LEN)
        messages.append({"role": "user", "content": query(prefix, k, *kind)})
        answers.append(len(messages))
        messages.append({"role": "assistant", "content": prefix + messages[where[k - 1]]["content"]})
    return Conversation(messages=messages, answers=answers)


# --------------------------------------------------------------------------- AIME-style

_THINGS = (
    ("books", "shelf"),
    ("apples", "basket"),
    ("coins", "jar"),
    ("stamps", "album"),
    ("marbles", "box"),
    ("shells", "bucket"),
)


ARITHMETIC_KINDS = 6


def arithmetic_problem(rng: Rng, kind: int | None = None) -> tuple[str, int]:
    """One AIME-style problem with an integer answer in 0..999 (``kind`` 0..5, else drawn):
    remainders mod 1000 and mod 100, the units digit of a product, two-digit sums (plain
    and as a word problem) and three-digit sums."""
    kind = rng.below(ARITHMETIC_KINDS) if kind is None else kind
    if kind == 0:
        n = rng.between(1000, 999999)
        return f"Find the remainder when ${n}$ is divided by $1000$.", n % 1000
    if kind == 1:
        n = rng.between(100, 99999)
        return f"Find the remainder when ${n}$ is divided by $100$.", n % 100
    if kind == 2:
        a, b = rng.between(10, 99), rng.between(10, 99)
        return f"Find the units digit of ${a} \\times {b}$.", a * b % 10
    if kind == 3:
        a, b = rng.between(10, 99), rng.between(10, 99)
        return f"Compute ${a} + {b}$.", a + b
    if kind == 4:
        thing, holder = rng.choice(_THINGS)
        a, b = rng.between(10, 99), rng.between(10, 99)
        return (
            f"One {holder} holds ${a}$ {thing} and another {holder} holds ${b}$ {thing}. "
            f"How many {thing} do the two hold together?",
            a + b,
        )
    a, b = rng.between(100, 499), rng.between(100, 499)
    return f"Compute ${a} + {b}$.", a + b


def aime_prompt(problem: str) -> str:
    """The prompt lm-eval's ``aime25`` task sends (its ``doc_to_text``)."""
    return f"Question: {problem}\nAnswer:"


def aime_rows(n: int, *, seed: int) -> list[dict[str, Any]]:
    """``n`` eval rows in the ``math-ai/aime25`` format: ``{"problem", "answer", "id"}``; the problem
    kinds cycle, so every run of consecutive rows covers them evenly."""
    rng = Rng(seed, "aime")
    rows = []
    for i in range(n):
        problem, answer = arithmetic_problem(rng, i % ARITHMETIC_KINDS)
        rows.append({"problem": problem, "answer": str(answer), "id": i})
    return rows


# --------------------------------------------------------------------------- JSON replies

_PERSON = (
    '{"type":"object","properties":{"name":{"type":"string","maxLength":12},'
    '"age":{"type":"integer","minimum":0,"maximum":120},"ok":{"type":"boolean"}},'
    '"required":["name","age","ok"],"additionalProperties":false}'
)
_CITY = (
    '{"type":"object","properties":{"name":{"type":"string","minLength":1,"maxLength":24},'
    '"country":{"type":"string","minLength":1,"maxLength":24},'
    '"climate":{"enum":["tropical","dry","temperate","continental","polar"]},'
    '"location":{"type":"object","properties":{"coastal":{"type":"boolean"},'
    '"region":{"enum":["north","south","east","west","central"]}},"required":["coastal","region"]}},'
    '"required":["name","country","climate","location"]}'
)
_RECIPE = (
    '{"type":"object","properties":{"title":{"type":"string","minLength":1,"maxLength":24},'
    '"difficulty":{"enum":["easy","medium","hard"]},'
    '"ingredients":{"type":"array","minItems":1,"maxItems":2,"items":{"type":"object","properties":'
    '{"item":{"type":"string","minLength":1,"maxLength":12},"unit":{"enum":["g","ml","cup","spoon","piece"]}},'
    '"required":["item","unit"]}},"vegetarian":{"type":"boolean"}},'
    '"required":["title","difficulty","ingredients","vegetarian"]}'
)
_TICKET = (
    '{"type":"object","properties":{"category":{"enum":["billing","delivery","account","product","other"]},'
    '"priority":{"enum":["low","normal","high","urgent"]},'
    '"tags":{"type":"array","minItems":1,"maxItems":3,"items":{"enum":["refund","broken","late","password","question"]}},'
    '"customer":{"type":"object","properties":{"returning":{"type":"boolean"},'
    '"tier":{"enum":["free","standard","premium"]}},"required":["returning","tier"]}},'
    '"required":["category","priority","tags","customer"]}'
)
_EVENT = (
    '{"type":"object","properties":{"summary":{"type":"string","minLength":1,"maxLength":32},'
    '"when":{"type":"object","properties":{"day":{"enum":["monday","tuesday","wednesday","thursday","friday",'
    '"saturday","sunday"]},"start":{"type":"object","properties":{"hour":{"type":"integer","minimum":0,'
    '"maximum":23},"minute":{"enum":[0,15,30,45]}},"required":["hour","minute"]}},"required":["day","start"]},'
    '"online":{"type":"boolean"}},"required":["summary","when","online"]}'
)
JSON_SCHEMAS = {
    name: json.loads(text)
    for name, text in (
        ("person", _PERSON),
        ("city", _CITY),
        ("recipe", _RECIPE),
        ("support_ticket", _TICKET),
        ("calendar_event", _EVENT),
    )
}
"""Object shapes of the JSON replies the model is taught: a small person record and the shapes of
the structured-output prompts' schemas (a frozen copy, so the recipe does not follow later edits)."""
JSON_ASKS = {
    "person": ("Describe {w} as a person.", "{w} and the {n}.", "Tell me about the {n}.", "The {a} {n}"),
    "city": ("Describe the city of {W} as a JSON object.", "Give a short profile of {W} in JSON."),
    "recipe": ("Write a simple {n} recipe as JSON.", "Describe a recipe for {a} {n} in JSON form."),
    "support_ticket": ("Turn this complaint into a JSON ticket: 'The {n} is {a}.'",),
    "calendar_event": ("Create a JSON calendar event for a {n} meeting on {d}.",),
}


def _json_string(rng: Rng, lo: int, hi: int) -> str:
    words = [rng.choice(ADJECTIVES), rng.choice(NOUNS), rng.choice(TOPICS)][: rng.between(1, 3)]
    text = " ".join(words)
    if rng.random() < 0.5:
        text = text.title()
    return text[:hi].rstrip() if len(text) >= lo else text + "x" * (lo - len(text))


def json_instance(rng: Rng, schema: dict[str, Any]) -> Any:
    """A random value that conforms to ``schema`` (objects, enums, strings, integers, booleans, arrays)."""
    if "enum" in schema:
        return rng.choice(schema["enum"])
    kind = schema["type"]
    if kind == "object":
        return {key: json_instance(rng, sub) for key, sub in schema["properties"].items()}
    if kind == "array":
        return [json_instance(rng, schema["items"]) for _ in range(rng.between(schema["minItems"], schema["maxItems"]))]
    if kind == "string":
        return _json_string(rng, schema.get("minLength", 1), schema.get("maxLength", 24))
    if kind == "integer":
        return rng.between(schema["minimum"], schema["maximum"])
    return rng.random() < 0.5


def json_conversation(rng: Rng) -> Conversation:
    """A request for JSON and a compact JSON object of one of :data:`JSON_SCHEMAS`' shapes."""
    name = rng.choice(list(JSON_SCHEMAS))
    ask_text = rng.choice(JSON_ASKS[name]).format(
        w=rng.choice(NOUNS),
        W=rng.choice(TOPICS).title(),
        n=rng.choice(NOUNS),
        a=rng.choice(ADJECTIVES),
        d=rng.choice(JSON_SCHEMAS["calendar_event"]["properties"]["when"]["properties"]["day"]["enum"]).title(),
    )
    if rng.random() < 0.7:
        ask_text += " Reply in JSON."
    reply = json.dumps(json_instance(rng, JSON_SCHEMAS[name]), separators=(",", ":"))
    return Conversation(
        messages=[{"role": "user", "content": ask_text}, {"role": "assistant", "content": reply}], answers=[1]
    )


# --------------------------------------------------------------------------- tokenizer text

TOKENIZER_SEED = 1
TOKENIZER_SAMPLES = 400


def tokenizer_text(seed: int = TOKENIZER_SEED, n: int = TOKENIZER_SAMPLES) -> list[str]:
    """Lines of task text the tokenizer is trained on (beside the English corpus)."""
    rng = Rng(seed, "tokenizer")
    lines = []
    for _ in range(n):
        conv = training_conversation(rng, max_turns=4, queries=1)
        lines.extend(m["content"] for m in conv.messages)
        problem, answer = arithmetic_problem(rng)
        lines.append(aime_prompt(problem) + str(answer))
    return lines
