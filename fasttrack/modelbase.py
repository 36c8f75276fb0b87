"""The two pydantic bases of fasttrack's records: strict (an unknown field is an error, never dropped), and strict
with each field's docstring as its description (what the JSON Schemas and the docs show)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class StrictModel(BaseModel):
    """A model that refuses fields it does not declare."""

    model_config = ConfigDict(extra="forbid")


class DocModel(BaseModel):
    """A :class:`StrictModel` whose attribute docstrings are its fields' descriptions."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)
