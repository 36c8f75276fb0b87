"""Render templates safely: jinja2 autoescape everywhere, a strict Content-Security-Policy.

- Every template is rendered with autoescape on; bundle text is never marked safe.
- The report allows no script at all and only its own stylesheet (by sha256 hash); nothing
  remote can load (``default-src 'none'``), no form, no base URL.
- Pages that need a script (the dashboard's filter) allow exactly that script by hash.
- ``href`` values pass :func:`safe_href`: relative paths built by
  :mod:`fasttrack.report.links` or in-page anchors; anything else (``javascript:``,
  ``data:``, any scheme, protocol-relative URLs) is refused.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup

from fasttrack import ROOT, __version__
from fasttrack.bundle import outfile
from fasttrack.errors import FasttrackError
from fasttrack.report import fmt

#: Where the templates live (repository root ``templates/``).
TEMPLATE_DIR = ROOT / "templates"

_HREF_OK = re.compile(r"^(#[A-Za-z0-9_.:-]*|(\.{1,2}/)*[A-Za-z0-9._~%-]+(/[A-Za-z0-9._~%-]+)*(#[A-Za-z0-9_-]+)?)$")
_WORD = re.compile(r"[^a-z0-9_]+")


class UnsafeLink(FasttrackError):
    """A template tried to emit a URL that is not a plain relative path."""


def safe_href(url: Any) -> str:
    """Pass a URL built by the report code; refuse anything with a scheme or odd characters."""
    s = str(url)
    if not _HREF_OK.match(s) or ":" in s.split("/", 1)[0].split("#", 1)[0]:
        raise UnsafeLink(f"refusing to emit link {s[:80]!r}: only relative links to bundle files are allowed")
    return s


def cssword(v: Any) -> str:
    """A value usable as part of a CSS class (lower-case letters, digits, underscores)."""
    return _WORD.sub("_", str(v).lower())[:40] or "unknown"


def anchor(v: Any) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "-", str(v))[:80] or "x"


def csp_hash(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode() + "'"


def csp(*, styles: Sequence[str] = (), scripts: Sequence[str] = ()) -> str:
    """The Content-Security-Policy: nothing remote, inline style/script only by hash."""
    parts = ["default-src 'none'"]
    parts.append("style-src " + (" ".join(csp_hash(s) for s in styles) if styles else "'none'"))
    parts.append("script-src " + (" ".join(csp_hash(s) for s in scripts) if scripts else "'none'"))
    parts += [
        "img-src 'none'",
        "font-src 'none'",
        "connect-src 'none'",
        "media-src 'none'",
        "object-src 'none'",
        "frame-src 'none'",
        "worker-src 'none'",
        "manifest-src 'none'",
        "base-uri 'none'",
        "form-action 'none'",
    ]
    return "; ".join(parts)


@functools.lru_cache(maxsize=4)
def environment(template_dir: str = str(TEMPLATE_DIR)) -> jinja2.Environment:
    if not Path(template_dir).is_dir():
        raise FasttrackError(
            f"the report templates are missing: {template_dir} is not a directory",
            hint="Run fasttrack from its source checkout (templates/ sits next to the package).",
        )
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(template_dir),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=False,
        lstrip_blocks=False,
        keep_trailing_newline=True,
    )
    env.filters.update(
        safe_href=safe_href,
        cssword=cssword,
        anchor=anchor,
        num=lambda v: fmt.number(v),
        pct=fmt.pct,
        speedup=fmt.speedup,
    )
    return env


def static(name: str) -> str:
    """A static file of the templates directory (stylesheet, script), as text."""
    return (Path(environment().loader.searchpath[0]) / name).read_text(encoding="utf-8")  # type: ignore[union-attr]


def render_page(template: str, *, css: str, script: str | None = None, **context: Any) -> str:
    """Render one HTML page with its stylesheet (and optional script) inline and allowed by hash."""
    policy = csp(styles=[css], scripts=[script] if script else [])
    return (
        environment()
        .get_template(template)
        .render(css=Markup(css), script=Markup(script) if script else None, csp=policy, **context)
    )


def write_text(path: Path, text: str) -> None:
    """Write a page (its folder made first) only over a regular file, through an exclusive temporary file
    (:mod:`fasttrack.bundle.outfile`)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    outfile.write_text(path, text)


def renderer_version() -> str:
    """Changes when the templates or the report code (any module of fasttrack/report/) change;
    pages must then be re-rendered."""
    h = hashlib.sha256(__version__.encode())
    here = Path(__file__).resolve().parent
    for p in sorted(list(TEMPLATE_DIR.glob("*")) + list(here.glob("*.py"))):
        if p.is_file():
            h.update(p.name.encode() + b"\0" + p.read_bytes())
    return h.hexdigest()
