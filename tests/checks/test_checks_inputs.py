"""The shipped inputs of the correctness checks: real-text prompts, passages, JSON schemas."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from fasttrack.inputs import (
    PROMPT_SET,
    InputSetError,
    PromptBuilder,
    load_passages,
    load_prompt_set,
    load_schema_cases,
    prompt_set_path,
)

ROOT = Path(__file__).resolve().parents[2]


def test_prompt_set_is_real_varied_text() -> None:
    items = load_prompt_set()
    assert 40 <= len(items) <= 60
    assert len({i.id for i in items}) == len(items)
    assert len({i.topic for i in items}) >= 30
    assert {i.kind for i in items} >= {"encyclopedic", "instruction", "dialogue", "narrative", "question"}
    lengths = sorted(len(i.prompt.split()) for i in items)
    assert lengths[0] <= 8 and lengths[-1] >= 30, "lengths must vary"
    for i in items:
        words = i.prompt.split()
        # real English: mostly alphabetic words, no random token soup
        alpha = sum(any(c.isalpha() for c in w) for w in words)
        assert alpha / len(words) > 0.8, i.id


def test_demo_suite_prompt_file_matches_the_common_set() -> None:
    demo = ROOT / "suites" / "demo-llama" / "prompts" / "prompts.jsonl"
    assert demo.is_file()
    assert [p.model_dump() for p in load_prompt_set(demo)] == [p.model_dump() for p in load_prompt_set(PROMPT_SET)]


def test_passages_are_long_real_text() -> None:
    ps = load_passages()
    assert len(ps) >= 5
    assert all(len(p.text) > 800 for p in ps)
    assert len({p.topic for p in ps}) == len(ps)


def test_schemas_cover_nesting_enums_arrays_required() -> None:
    cases = load_schema_cases()
    assert len(cases) >= 4
    blob = json.dumps([c.schema_ for c in cases])
    assert '"enum"' in blob and '"array"' in blob and '"required"' in blob
    nested = [c for c in cases if any(v.get("type") == "object" for v in c.schema_["properties"].values())]
    assert len(nested) >= 3
    for c in cases:
        assert c.prompts, c.name
        Draft202012Validator.check_schema(c.schema_)


EXAMPLES = {
    "city": {
        "name": "Lisbon",
        "country": "Portugal",
        "climate": "temperate",
        "location": {"coastal": True, "region": "west"},
    },
    "recipe": {
        "title": "Pancakes",
        "difficulty": "easy",
        "ingredients": [{"item": "flour", "unit": "g"}],
        "vegetarian": True,
    },
    "support_ticket": {
        "category": "delivery",
        "priority": "normal",
        "tags": ["late"],
        "customer": {"returning": False, "tier": "free"},
    },
    "calendar_event": {
        "summary": "Team meeting",
        "when": {"day": "wednesday", "start": {"hour": 10, "minute": 30}},
        "online": False,
    },
}


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_each_schema_accepts_a_real_object_and_rejects_a_broken_one(name: str) -> None:
    case = next(c for c in load_schema_cases() if c.name == name)
    v = Draft202012Validator(case.schema_)
    assert not list(v.iter_errors(EXAMPLES[name]))
    broken = dict(EXAMPLES[name])
    broken.pop(next(iter(case.schema_["required"])))
    assert list(v.iter_errors(broken))


def test_malformed_prompt_file_is_a_located_error(tmp_path: Path) -> None:
    p = tmp_path / "bad.jsonl"
    p.write_text('{"id": "a", "topic": "t", "kind": "k", "prompt": "hello"}\n{not json}\n')
    with pytest.raises(InputSetError, match="bad.jsonl:2"):
        load_prompt_set(p)
    p.write_text(
        '{"id": "a", "topic": "t", "kind": "k", "prompt": "x"}\n{"id": "a", "topic": "t", "kind": "k", "prompt": "y"}\n'
    )
    with pytest.raises(InputSetError, match="unique"):
        load_prompt_set(p)
    with pytest.raises(InputSetError, match="does not exist"):
        load_prompt_set(tmp_path / "missing.jsonl")


def test_schema_without_prompts_is_rejected(tmp_path: Path) -> None:
    (tmp_path / "x.schema.json").write_text(json.dumps({"title": "x", "type": "object"}))
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"schema": "y", "prompt": "hi"}) + "\n")
    with pytest.raises(InputSetError, match="asks for schema 'x'"):
        load_schema_cases(tmp_path, prompts)


def test_prompt_set_path_defaults_to_common() -> None:
    assert prompt_set_path(None) == PROMPT_SET


class FakeTok:
    """Whitespace 'tokenizer': one id per word, BOS = 1."""

    def __init__(self) -> None:
        self.vocab: dict[str, int] = {}

    def _ids(self, text: str) -> list[int]:
        return [self.vocab.setdefault(w, 10 + len(self.vocab)) for w in text.split()]

    async def tokenize(self, text: str, *, add_special_tokens: bool = True) -> list[int]:
        return ([1] if add_special_tokens else []) + self._ids(text)

    async def special_prefix(self) -> list[int]:
        return [1]


def test_prompt_builder_bounds_and_exact_lengths() -> None:
    b = PromptBuilder(FakeTok(), load_passages())  # type: ignore[arg-type]

    async def go():
        short = await b.bounded("one two three", key="k1", low=16, high=32)
        natural = await b.bounded(" ".join(["w"] * 20), key="k2", low=16, high=32)
        long = await b.bounded(" ".join(f"x{i}" for i in range(100)), key="k3", low=16, high=32)
        exact = await b.exact(key="k4", length=500)
        exact2 = await b.exact(key="k5", length=500)
        return short, natural, long, exact, exact2

    short, natural, long, exact, exact2 = asyncio.run(go())
    assert 16 <= len(short) <= 32 and short[0] == 1 and short[-3:] == natural[:0] + short[-3:]
    assert len(natural) == 21 and natural[0] == 1
    assert len(long) == 32 and long[0] == 1
    assert len(exact) == 500 and exact[0] == 1
    assert exact != exact2, "different keys start at different passage offsets"
