"""Inputs the checks and the load generator send: shipped prompt sets, passages, JSON schemas,
and prompts as token ids built with the engine's own tokenizer."""

from __future__ import annotations

from fasttrack.inputs.shipped import (
    COMMON_DIR,
    PASSAGES,
    PROMPT_SET,
    SCHEMAS_DIR,
    STRUCTURED_PROMPTS,
    InputSetError,
    Passage,
    PromptItem,
    SchemaCase,
    load_passages,
    load_prompt_set,
    load_schema_cases,
    prompt_set_path,
    stable_hash,
)
from fasttrack.inputs.tokenizer import PromptBuilder, TokenizerClient

__all__ = [
    "COMMON_DIR",
    "PASSAGES",
    "PROMPT_SET",
    "SCHEMAS_DIR",
    "STRUCTURED_PROMPTS",
    "InputSetError",
    "Passage",
    "PromptBuilder",
    "PromptItem",
    "SchemaCase",
    "TokenizerClient",
    "load_passages",
    "load_prompt_set",
    "load_schema_cases",
    "prompt_set_path",
    "stable_hash",
]
