"""lm-eval glue for OpenAI MRCR: the task class and the per-sample grading.

The grading rules live in :mod:`fasttrack.evals.mrcr` (one implementation, unit
tested); this file adapts them to lm-eval's task interface.

MRCR samples are whole conversations, while lm-eval builds prompts from a single
user turn. :class:`MRCRTask` therefore builds the request from the sample's own
message list and renders it with the model's chat template (``apply_chat_template``
must be on; with ``local-chat-completions`` the messages go to the server as they are).
"""

from __future__ import annotations

from typing import Any

from lm_eval.api.task import ConfigurableTask

from fasttrack.evals.mrcr import grade, parse_prompt


class MRCRTask(ConfigurableTask):
    """ConfigurableTask whose context is the sample's conversation (``prompt`` column)."""

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        cfg = dict(config or {})
        cfg.pop("class", None)
        super().__init__(config=cfg)

    def fewshot_context(
        self,
        doc: dict[str, Any],
        num_fewshot: int = 0,
        system_instruction: str | None = None,
        apply_chat_template: bool = False,
        fewshot_as_multiturn: bool = False,
        chat_template: Any = None,
        gen_prefix: str | None = None,
        **_: Any,
    ) -> str:
        if num_fewshot:
            raise ValueError("MRCR is zero-shot: the conversation is the context (num_fewshot must be 0)")
        messages = parse_prompt(doc["prompt"])
        if system_instruction:
            messages = [{"role": "system", "content": system_instruction}, *messages]
        if not (apply_chat_template and chat_template is not None):
            raise ValueError(
                "MRCR sends a multi-turn conversation and needs the model's chat template: "
                "run it with apply_chat_template (e.g. --apply_chat_template with local-chat-completions)"
            )
        return chat_template(messages, add_generation_prompt=True)


def doc_to_text(doc: dict[str, Any]) -> str:
    """The final user turn (used only where lm-eval needs a text, e.g. decontamination)."""
    return parse_prompt(doc["prompt"])[-1]["content"]


def process_results(doc: dict[str, Any], results: list[str]) -> dict[str, float]:
    """OpenAI MRCR score of the first response."""
    response = results[0] if results else ""
    return {"mrcr_score": grade(response or "", doc["answer"], doc["random_string_to_prepend"])}
