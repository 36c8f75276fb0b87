"""Plain-text formatting of bundle values for display (escaping is the templates' job)."""

from __future__ import annotations

import json
import math
import re
import unicodedata
from collections.abc import Mapping
from typing import Any

#: Longest string shown for one value; longer ones are cut with an ellipsis.
MAX_TEXT = 2000
MAX_CELL = 300
#: Text that needs no character-by-character look (printable ASCII, newlines, tabs excluded).
_PLAIN = re.compile(r"[\x20-\x7e\n]*")


def clean(s: Any, limit: int = MAX_TEXT) -> str:
    """A display string: control and bidi-override characters replaced, length capped."""
    if s is None:
        return ""
    text = s if isinstance(s, str) else str(s)
    if _PLAIN.fullmatch(text):
        return text if len(text) <= limit else text[: limit - 1] + "\u2026"
    out = []
    for ch in text[: limit + 1]:
        cat = unicodedata.category(ch)
        if ch in "\n\t":
            out.append(" " if ch == "\t" else ch)
        elif cat in ("Cc", "Cs", "Co") or (cat == "Cf" and ch not in "\u200d"):
            out.append("\ufffd")
        else:
            out.append(ch)
    res = "".join(out)
    return res if len(res) <= limit else res[: limit - 1] + "\u2026"


def one_line(s: Any, limit: int = MAX_TEXT) -> str:
    return " ".join(clean(s, limit).split())


def number(v: float | int | None, digits: int = 4) -> str:
    if v is None:
        return "\u2014"
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, int):
        return f"{v:,}" if abs(v) >= 10_000 else str(v)
    if not math.isfinite(v):
        return str(v)
    if v == 0:
        return "0"
    a = abs(v)
    if a >= 1e6 or a < 1e-4:
        return f"{v:.{digits - 1}e}"
    return f"{v:.{digits}g}" if a < 1000 else f"{v:,.1f}"


def value(v: Any, limit: int = MAX_CELL) -> str:
    """Any JSON-like cell as one line of text."""
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return number(v)
    if isinstance(v, (bytes, bytearray)):
        return f"<{len(v)} bytes>"
    if isinstance(v, str):
        return one_line(v, limit)
    try:
        text = json.dumps(v, sort_keys=True, ensure_ascii=False, default=str, separators=(", ", ": "))
    except (TypeError, ValueError):
        text = str(v)
    return one_line(text, limit)


def pct(v: float | None, digits: int = 1) -> str:
    return "\u2014" if v is None else f"{v * 100:.{digits}f}%"


def speedup(v: float | None) -> str:
    if v is None:
        return "\u2014"
    if not math.isfinite(v) or not 1e-3 <= abs(v) < 1e6:
        return f"{number(v)}\u00d7"  # non-finite or huge: as text, never a 300-digit figure
    return f"{v:.3f}\u00d7"


def flatten(d: Mapping[str, Any], prefix: str = "", depth: int = 2, limit: int = 80) -> list[tuple[str, str]]:
    """``{"a": {"b": 1}}`` -> ``[("a.b", "1")]`` (nested up to ``depth``; at most ``limit`` entries)."""
    out: list[tuple[str, str]] = []
    for k, v in d.items():
        key = f"{prefix}{one_line(k, 120)}"
        if isinstance(v, Mapping) and depth > 1 and v:
            out.extend(flatten(v, prefix=key + ".", depth=depth - 1, limit=limit - len(out)))
        else:
            out.append((key, value(v, 400)))
        if len(out) >= limit:
            break
    return out[:limit]


def short_sha(s: str | None, n: int = 12) -> str:
    return (s or "")[:n]
