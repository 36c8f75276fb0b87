"""Checked-in JSON Schemas equal the ones generated from the pydantic models."""

from __future__ import annotations

import json

import jsonschema
import yaml

from fasttrack import ROOT, registry
from fasttrack.schemas import check_schemas


def test_schemas_in_sync() -> None:
    stale = check_schemas()
    assert not stale, f"run 'fasttrack schemas --write': {stale}"


def test_every_generated_schema_is_checked_in() -> None:
    names = registry.names("schema")
    assert {"scope.schema.json", "bundle-manifest.schema.json"} <= set(names)
    for name in names:
        assert (ROOT / "schemas" / name).is_file()


def test_shipped_scopes_validate_against_the_schema() -> None:
    schema = json.loads((ROOT / "schemas" / "scope.schema.json").read_text())
    for p in sorted((ROOT / "suites").glob("*/scope.yaml")):
        jsonschema.validate(yaml.safe_load(p.read_text()), schema)
