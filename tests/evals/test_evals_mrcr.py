"""OpenAI MRCR grading rules, context bins and the lm-eval task glue."""

from __future__ import annotations

import json
from difflib import SequenceMatcher
from typing import Any

import pytest

from fasttrack.evals.mrcr import bin_order, context_bin, grade, parse_prompt, similarity
from fasttrack.evals.runner import MRCR_TASK_YAML


def test_response_without_the_prefix_scores_zero() -> None:
    assert grade("Poem: the tapir", "aYooSG8CQgPoem: the tapir", "aYooSG8CQg") == 0.0
    # the prefix must be at the very start: leading whitespace or a partial prefix is 0
    assert grade(" aYooSG8CQgPoem: the tapir", "aYooSG8CQgPoem: the tapir", "aYooSG8CQg") == 0.0
    assert grade("aYooSG8CQ Poem: the tapir", "aYooSG8CQgPoem: the tapir", "aYooSG8CQg") == 0.0
    assert grade("", "aYooSG8CQgx", "aYooSG8CQg") == 0.0


def test_exact_answer_scores_one() -> None:
    assert grade("aYooSG8CQgPoem: the tapir", "aYooSG8CQgPoem: the tapir", "aYooSG8CQg") == 1.0


def test_score_is_sequence_matcher_ratio_without_the_prefix() -> None:
    prefix = "K3x9Qp0ZzA"
    answer = prefix + "The quiet river carries the light."
    response = prefix + "The quiet road carries the night."
    expected = SequenceMatcher(None, "The quiet road carries the night.", "The quiet river carries the light.").ratio()
    assert grade(response, answer, prefix) == pytest.approx(expected)
    assert 0.0 < expected < 1.0
    # the prefix itself does not inflate the ratio: only the text after it is compared
    assert grade(prefix, answer, prefix) == 0.0


def test_prefix_is_removed_from_the_answer_only_once() -> None:
    prefix = "ab"
    # answer "ababX": removeprefix strips one "ab" -> "abX"
    assert grade("ababX", "ababX", prefix) == 1.0
    assert grade("abX", "ababX", prefix) == pytest.approx(SequenceMatcher(None, "X", "abX").ratio())


def test_similarity_is_one_for_identical_texts_including_empty() -> None:
    assert similarity("", "") == 1.0
    assert similarity("abc", "abc") == 1.0
    assert similarity("abc", "xyz") == 0.0


@pytest.mark.parametrize(
    ("tokens", "label"),
    [
        (1, "0-128"),
        (128, "0-128"),
        (129, "128-256"),
        (256, "128-256"),
        (300, "256-512"),
        (1024, "512-1k"),
        (4096, "2k-4k"),
        (4097, "4k-8k"),
        (8192, "4k-8k"),
        (131072, "64k-128k"),
        (1_000_000, "512k-1024k"),
    ],
)
def test_context_bins_are_power_of_two_intervals(tokens: int, label: str) -> None:
    assert context_bin(tokens) == label


def test_bin_order_sorts_by_upper_bound() -> None:
    labels = ["4k-8k", "0-128", "512-1k", "256-512"]
    assert sorted(labels, key=bin_order) == ["0-128", "256-512", "512-1k", "4k-8k"]


def test_parse_prompt_rejects_malformed_conversations() -> None:
    assert parse_prompt(json.dumps([{"role": "user", "content": "hi"}])) == [{"role": "user", "content": "hi"}]
    with pytest.raises(ValueError, match="JSON list"):
        parse_prompt(json.dumps({"role": "user"}))
    with pytest.raises(ValueError, match="message 1"):
        parse_prompt([{"role": "user", "content": "a"}, {"role": "assistant"}])


def test_lm_eval_task_grades_with_the_same_rules() -> None:
    from lm_eval.tasks._yaml_loader import load_yaml

    cfg = load_yaml(MRCR_TASK_YAML, resolve_func=True)
    doc = {"answer": "PFXhello world", "random_string_to_prepend": "PFX", "prompt": "[]"}
    assert cfg["process_results"](doc, ["PFXhello world"]) == {"mrcr_score": 1.0}
    assert cfg["process_results"](doc, ["hello world"]) == {"mrcr_score": 0.0}
    assert cfg["generation_kwargs"]["until"] == []


def test_lm_eval_task_sends_the_samples_own_conversation() -> None:
    from lm_eval.tasks._yaml_loader import load_yaml

    cfg = load_yaml(MRCR_TASK_YAML, resolve_func=True)
    task = cfg["class"]  # the class itself; build it without a dataset
    messages = [
        {"role": "user", "content": "Write a poem about owls."},
        {"role": "assistant", "content": "Owls."},
        {"role": "user", "content": "Prepend X1 to the 1st poem about owls."},
    ]
    seen: list[Any] = []

    def template(msgs: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        seen.append((msgs, add_generation_prompt))
        return "RENDERED"

    inst = task.__new__(task)  # fewshot_context does not touch the dataset
    out = task.fewshot_context(
        inst, {"prompt": json.dumps(messages)}, 0, apply_chat_template=True, chat_template=template
    )
    assert out == "RENDERED"
    assert seen == [(messages, True)]
    with pytest.raises(ValueError, match="chat template"):
        task.fewshot_context(inst, {"prompt": json.dumps(messages)}, 0, apply_chat_template=False)


def test_prompt_of_lm_eval_sample_logs() -> None:
    from lm_eval.models.api_models import JsonChatStr

    from fasttrack.evals.runner import _prompt_of

    assert _prompt_of([("Question: x\nAnswer:", {"until": []})]) == "Question: x\nAnswer:"
    assert _prompt_of([(JsonChatStr('[{"role": "user"}]'), {})]) == '[{"role": "user"}]'
    assert _prompt_of({"gen_args_0": {"arg_0": "Q", "arg_1": {}}}) == "Q"
    assert _prompt_of(None) == ""


def test_aime25_is_lm_evals_own_task_pointed_at_a_local_file(tmp_path) -> None:
    from fasttrack.evals.runner import task_config

    cfg, source = task_config("aime25", tmp_path / "sel.jsonl", max_tokens=32, temperature=0.0)
    assert source.endswith("lm_eval/tasks/aime/aime25.yaml")
    assert cfg["task"] == "aime25" and cfg["doc_to_text"] == "Question: {{problem}}\nAnswer:"
    assert cfg["dataset_path"] == "json" and cfg["dataset_kwargs"] == {
        "data_files": {"test": str(tmp_path / "sel.jsonl")}
    }
    assert cfg["generation_kwargs"]["max_gen_toks"] == 32 and cfg["generation_kwargs"]["do_sample"] is False
    assert "Question:" in cfg["generation_kwargs"]["until"]  # lm-eval's stop sequences are kept
    assert callable(cfg["process_results"]) and cfg["process_results"].__module__.endswith("aime.utils")
    cfg, source = task_config("mrcr", tmp_path / "m.jsonl", max_tokens=64, temperature=0.6)
    assert source.endswith("suites/common/evals/mrcr/mrcr.yaml")
    assert cfg["dataset_kwargs"] == {"data_files": {"train": str(tmp_path / "m.jsonl")}}
    assert cfg["generation_kwargs"]["do_sample"] is True and cfg["generation_kwargs"]["temperature"] == 0.6


def test_evidence_runs_decode_past_the_answer(tmp_path) -> None:
    """The profiled evidence run asks for exactly max_tokens tokens (no stop sequence, vLLM's ignore_eos),
    so a batch's requests overlap in decode steps even when the model's answers are a token or two."""
    from fasttrack.evals.runner import task_config

    for kind in ("aime25", "mrcr"):
        cfg, _ = task_config(kind, tmp_path / "s.jsonl", max_tokens=64, temperature=0.0, ignore_eos=True)
        assert cfg["generation_kwargs"]["ignore_eos"] is True and cfg["generation_kwargs"]["until"] == []
        cfg, _ = task_config(kind, tmp_path / "s.jsonl", max_tokens=64, temperature=0.0)
        assert "ignore_eos" not in cfg["generation_kwargs"]
