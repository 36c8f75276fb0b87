"""Shipped inputs: the real-text prompt set, long passages and the structured-output schemas.

They live in ``suites/common`` (a suite may ship its own prompt set as a ``prompts``
workload). Every loader checks its file and raises :class:`InputSetError` with the
file and line of what is wrong.
"""

from __future__ import annotations

import json
import zlib
from pathlib import Path
from typing import Any

from pydantic import Field

from fasttrack import ROOT
from fasttrack.errors import FasttrackError
from fasttrack.inputs.jsonl import json_lines
from fasttrack.modelbase import DocModel
from fasttrack.scope import SUITES_DIR, Scope

COMMON_DIR = ROOT / "suites" / "common"
PROMPT_SET = COMMON_DIR / "prompts" / "real-text.jsonl"
PASSAGES = COMMON_DIR / "prompts" / "passages.jsonl"
STRUCTURED_PROMPTS = COMMON_DIR / "prompts" / "structured.jsonl"
SCHEMAS_DIR = COMMON_DIR / "schemas"


class InputSetError(FasttrackError):
    """A shipped prompt set, passage file or JSON schema is missing or malformed."""


# ====================================================================== shipped inputs


class PromptItem(DocModel):
    id: str
    """Stable identifier (used in result rows and failure messages)."""
    topic: str
    """What the text is about."""
    kind: str
    """Register: encyclopedic, instruction, dialogue, narrative, opinion, verse, question."""
    prompt: str
    """The prompt text."""


class Passage(DocModel):
    id: str
    """Stable identifier."""
    topic: str
    """What the text is about."""
    text: str
    """A paragraph of real text; passages are tiled to build long and full-context prompts."""


class SchemaCase(DocModel):
    name: str
    """The schema's title (also its ``response_format`` name)."""
    schema_: dict[str, Any] = Field(alias="schema")
    """The JSON schema."""
    path: str
    """Where the schema was read from (relative to the repository root when inside it)."""
    prompts: list[str]
    """Prompts that ask for an object of this schema."""


def _rel(p: Path) -> str:
    try:
        return str(p.resolve().relative_to(ROOT))
    except ValueError:
        return str(p)


def _read_jsonl(path: Path, what: str) -> list[dict[str, Any]]:
    if not path.is_file():
        raise InputSetError(
            f"the {what} file {_rel(path)} does not exist.",
            hint="Restore it from the repository (suites/common) or point the scope at your own file.",
        )
    where = _rel(path)

    def bad_line(n: int, exc: ValueError) -> InputSetError:
        return InputSetError(f"{where}:{n}: the {what} line is not valid JSON ({exc}).")

    rows: list[dict[str, Any]] = []
    for n, obj in json_lines(path.read_text(encoding="utf-8"), bad_line):
        if not isinstance(obj, dict):
            raise InputSetError(f"{where}:{n}: each {what} line must be a JSON object.")
        rows.append(obj)
    if not rows:
        raise InputSetError(f"the {what} file {_rel(path)} is empty.")
    return rows


def prompt_set_path(scope: Scope | None = None, base_dir: Path | None = None) -> Path:
    """The prompt set a suite uses: its ``prompts`` workload file when it exists, else the common one.

    ``base_dir`` is the folder the scope's relative paths start from (the scope file's folder;
    ``suites/<name>/`` when not given)."""
    if scope is not None:
        base = base_dir if base_dir is not None else SUITES_DIR / scope.name
        for w in scope.workloads:
            if w.kind == "prompts" and w.prompts:
                p = Path(w.prompts) if Path(w.prompts).is_absolute() else base / w.prompts
                if p.is_file():
                    return p
    return PROMPT_SET


def load_prompt_set(path: Path | None = None) -> list[PromptItem]:
    """Read a prompt set (JSON lines with id, topic, kind, prompt); ids must be unique."""
    path = path or PROMPT_SET
    items: list[PromptItem] = []
    for n, row in enumerate(_read_jsonl(path, "prompt set"), 1):
        try:
            items.append(PromptItem.model_validate(row))
        except Exception as exc:  # noqa: BLE001 - turned into a located error
            raise InputSetError(f"{_rel(path)}: prompt number {n} is malformed: {exc}") from None
    ids = [i.id for i in items]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise InputSetError(f"{_rel(path)}: prompt ids must be unique; repeated: {dup}.")
    if any(not i.prompt.strip() for i in items):
        raise InputSetError(f"{_rel(path)}: a prompt is empty.")
    return items


def load_passages(path: Path | None = None) -> list[Passage]:
    """Read the passages used to build long prompts."""
    path = path or PASSAGES
    out = []
    for n, row in enumerate(_read_jsonl(path, "passage"), 1):
        try:
            out.append(Passage.model_validate(row))
        except Exception as exc:  # noqa: BLE001
            raise InputSetError(f"{_rel(path)}: passage number {n} is malformed: {exc}") from None
    return out


def load_schema_cases(schemas_dir: Path | None = None, prompts_path: Path | None = None) -> list[SchemaCase]:
    """The structured-output cases: every ``*.schema.json`` with the prompts naming its title."""
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError

    schemas_dir = schemas_dir or SCHEMAS_DIR
    prompts_path = prompts_path or STRUCTURED_PROMPTS
    prompts: dict[str, list[str]] = {}
    for n, row in enumerate(_read_jsonl(prompts_path, "structured-output prompt"), 1):
        if not isinstance(row.get("schema"), str) or not isinstance(row.get("prompt"), str):
            raise InputSetError(f"{_rel(prompts_path)}:{n}: each line needs a 'schema' title and a 'prompt'.")
        prompts.setdefault(row["schema"], []).append(row["prompt"])
    cases: list[SchemaCase] = []
    files = sorted(schemas_dir.glob("*.schema.json"))
    if not files:
        raise InputSetError(f"no *.schema.json file in {_rel(schemas_dir)}.")
    for f in files:
        try:
            schema = json.loads(f.read_text(encoding="utf-8"))
            Draft202012Validator.check_schema(schema)
        except (ValueError, SchemaError) as exc:
            raise InputSetError(f"{_rel(f)} is not a valid JSON schema: {str(exc).splitlines()[0]}") from None
        title = schema.get("title")
        if not isinstance(title, str) or not title:
            raise InputSetError(f"{_rel(f)} needs a 'title' (it names the schema in prompts and results).")
        if not prompts.get(title):
            raise InputSetError(f"no prompt in {_rel(prompts_path)} asks for schema {title!r} ({_rel(f)}).")
        cases.append(SchemaCase(name=title, schema=schema, path=_rel(f), prompts=prompts[title]))
    unknown = sorted(set(prompts) - {c.name for c in cases})
    if unknown:
        raise InputSetError(f"{_rel(prompts_path)} names schemas that do not exist: {unknown}.")
    return cases


def stable_hash(text: str) -> int:
    """A hash that is the same in every process (for deterministic choices)."""
    return zlib.crc32(text.encode("utf-8"))
