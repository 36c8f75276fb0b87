"""JSON Lines: one JSON value per line (the shipped input sets, eval datasets and request traces use it)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any


def json_lines(text: str, bad_line: Callable[[int, ValueError], Exception]) -> Iterator[tuple[int, Any]]:
    """The JSON value of every non-blank line of ``text`` with its line number, read as it is asked for;
    ``bad_line(line number, error)`` is raised for a line that is not valid JSON."""
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except ValueError as exc:
            raise bad_line(n, exc) from exc
        yield n, value
