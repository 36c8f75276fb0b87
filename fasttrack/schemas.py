"""JSON Schemas generated from the pydantic models, checked in under schemas/.

Each schema is registered (the registry's kind ``schema``) by its file name, as a function that returns it. The
scope's schema reads the registry: ``gates`` has a section per registered gate model, and ``features`` lists
the registered serving features."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fasttrack import ROOT, registry

SCHEMA_DIR = ROOT / "schemas"
registry.BUILTIN_MODULES["schema"] = (__name__,)


@registry.component("schema", "scope.schema.json")
def scope_schema() -> dict[str, Any]:
    """The scope's JSON Schema with every registered check's gate section and every registered feature."""
    from fasttrack.checks.base import registered_checks
    from fasttrack.checks.features.table import feature_names
    from fasttrack.scope import json_schema

    registered_checks()
    return json_schema(features=feature_names())


@registry.component("schema", "bundle-manifest.schema.json")
def bundle_manifest_schema() -> dict[str, Any]:
    """The bundle manifest's JSON Schema."""
    from fasttrack.bundle.manifest import json_schema

    return json_schema()


def render(schema: dict[str, Any]) -> str:
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"


def generated() -> dict[str, str]:
    return {name: render(make()) for name, make in registry.entries("schema").items()}


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
