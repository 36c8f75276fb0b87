"""JSON Schemas generated from the pydantic models, checked in under schemas/.

The scope's schema reads the check registry: ``gates`` has a section per registered check's gate model,
and ``features`` lists the serving features the features check has registered."""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any, Callable

from fasttrack import ROOT

SCHEMA_DIR = ROOT / "schemas"

#: file name -> "module:function" returning the schema dict.
GENERATORS: dict[str, str] = {
    "scope.schema.json": "fasttrack.schemas:scope_schema",
    "bundle-manifest.schema.json": "fasttrack.bundle.manifest:json_schema",
}


def scope_schema() -> dict[str, Any]:
    """The scope's JSON Schema with every registered check's gate section and every registered feature."""
    from fasttrack.checks.base import registered_checks
    from fasttrack.checks.features.table import feature_names
    from fasttrack.scope import json_schema

    registered_checks()
    return json_schema(features=feature_names())


def _load(ref: str) -> Callable[[], dict[str, Any]]:
    mod, _, fn = ref.partition(":")
    return getattr(importlib.import_module(mod), fn)


def render(schema: dict[str, Any]) -> str:
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"


def generated() -> dict[str, str]:
    return {name: render(_load(ref)()) for name, ref in GENERATORS.items()}


def write_schemas() -> list[Path]:
    SCHEMA_DIR.mkdir(exist_ok=True)
    out = []
    for name, text in generated().items():
        p = SCHEMA_DIR / name
        p.write_text(text, encoding="utf-8")
        out.append(p)
    return out


def check_schemas() -> list[str]:
    """Names of checked-in schemas that differ from the generated ones (or are missing)."""
    stale = []
    for name, text in generated().items():
        p = SCHEMA_DIR / name
        if not p.is_file() or p.read_text(encoding="utf-8") != text:
            stale.append(name)
    return stale
