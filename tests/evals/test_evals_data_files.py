"""The committed eval data (demo suite and test fixtures) is what its generator writes."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from synthetic_data import aime_problems, mrcr_samples

from fasttrack.evals.datasets import read_rows, validate_rows
from fasttrack.evals.mrcr import MRCR_COLUMNS, grade, parse_prompt

ROOT = Path(__file__).resolve().parents[2]
DEMO_DATA = ROOT / "suites" / "demo-llama" / "data"
FIXTURES = Path(__file__).resolve().parent / "fixtures"


def _load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"ft_evals_gen_{path.stem}", path)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_demo_data_is_regenerated_byte_for_byte(tmp_path: Path) -> None:
    for p in _load(DEMO_DATA / "make_data.py").build(tmp_path):
        assert p.read_bytes() == (DEMO_DATA / p.name).read_bytes(), p.name


def test_fixtures_are_regenerated(tmp_path: Path) -> None:
    for p in _load(Path(__file__).resolve().parent / "make_fixtures.py").build(tmp_path):
        committed = FIXTURES / p.name
        if p.suffix == ".parquet":  # parquet metadata names the writer version: compare rows
            assert read_rows(p) == read_rows(committed)
        else:
            assert p.read_bytes() == committed.read_bytes(), p.name


def test_demo_data_is_in_the_original_formats() -> None:
    aime = read_rows(DEMO_DATA / "aime25.jsonl")
    validate_rows(aime, "aime25", "demo")
    assert [list(r) for r in aime] == [["problem", "answer", "id"]] * len(aime)
    mrcr = read_rows(DEMO_DATA / "mrcr.jsonl")
    validate_rows(mrcr, "mrcr", "demo")
    assert all(tuple(r) == MRCR_COLUMNS for r in mrcr)
    assert {r["n_needles"] for r in mrcr} == {2, 4, 8}


def test_synthetic_mrcr_rows_are_self_consistent() -> None:
    for r in mrcr_samples(9, seed=11):
        messages = parse_prompt(r["prompt"])
        assert r["total_messages"] == len(messages)
        assert r["n_chars"] == sum(len(m["content"]) for m in messages)
        desired = messages[r["desired_msg_index"]]
        assert desired["role"] == "assistant"
        assert r["answer"] == r["random_string_to_prepend"] + desired["content"]
        assert r["random_string_to_prepend"] in messages[-1]["content"]
        # the requested ask occurs exactly n_needles times
        ask = messages[r["desired_msg_index"] - 1]["content"]
        assert sum(1 for m in messages if m["content"] == ask) == r["n_needles"]
        assert grade(r["answer"], r["answer"], r["random_string_to_prepend"]) == 1.0


def test_synthetic_aime_answers_are_integers_below_1000() -> None:
    rows = aime_problems(20, seed=5)
    assert all(0 <= int(r["answer"]) < 1000 for r in rows)
    assert rows == aime_problems(20, seed=5) and rows != aime_problems(20, seed=6)
    assert rows[0]["answer"] == str(
        pow(
            int(rows[0]["problem"].split("$")[1].split("^")[0]),
            int(rows[0]["problem"].split("{")[1].split("}")[0]),
            1000,
        )
    )


def test_demo_mrcr_prompts_fit_the_demo_engine(demo_model: Any) -> None:
    from demo_engines import require_demo_target

    require_demo_target(demo_model)
    from transformers import AutoTokenizer

    from fasttrack.scope import load_scope

    scope = load_scope("demo-llama").scope
    spec = next(e for e in scope.evals if e.kind == "mrcr")
    budget = scope.envelope.context.max_model_len - spec.max_tokens
    tok = AutoTokenizer.from_pretrained(str(demo_model.path))
    for path in (DEMO_DATA / "mrcr.jsonl", FIXTURES / "mrcr.parquet"):
        for r in read_rows(path):
            ids = tok.apply_chat_template(parse_prompt(r["prompt"]), add_generation_prompt=True, tokenize=True)
            n = len(ids["input_ids"] if hasattr(ids, "keys") else ids)
            assert n <= budget, (path.name, n, budget)


def test_generators_run_as_scripts(tmp_path: Path) -> None:
    import subprocess

    for script in (DEMO_DATA / "make_data.py", Path(__file__).resolve().parent / "make_fixtures.py"):
        out = subprocess.run(
            [sys.executable, str(script), str(tmp_path / script.stem)], capture_output=True, text=True, check=True
        )
        assert out.stdout.strip(), script
    assert json.loads((tmp_path / "make_data" / "aime25.jsonl").read_text().splitlines()[0])["id"] == 0
