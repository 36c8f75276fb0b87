"""The only way a URL gets into a report: relative links to verified bundle members.

Bundle text never becomes an ``href``. A link is made only for a member name that is
among the attested subjects of a bundle whose hashes and file list verified, and it is
built as ``<base>/<percent-encoded segments>`` where ``base`` is computed by the caller
from local paths (never from bundle data). Every segment is percent-encoded with no safe
characters, so a member named ``javascript:alert(1)`` becomes the relative path
``javascript%3Aalert%281%29`` and can never carry a scheme.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable
from pathlib import Path, PurePosixPath
from urllib.parse import quote

_SEGMENT_OK = re.compile(r"^[^\x00-\x1f\x7f/\\]+$")
#: Relative URL prefixes the code builds (dot segments and percent-encoded names).
_BASE_OK = re.compile(r"^(\.\.?|[A-Za-z0-9._~%-]+)(/(\.\.?|[A-Za-z0-9._~%-]+))*$")


def quote_path(rel: str) -> str | None:
    """Percent-encode every segment of a bundle-relative path; None when it is not a plain relative path."""
    p = PurePosixPath(rel)
    if p.is_absolute() or not p.parts or rel.startswith("/"):
        return None
    parts = []
    for seg in rel.split("/"):
        if seg in ("", ".", "..") or not _SEGMENT_OK.match(seg):
            return None
        parts.append(quote(seg, safe=""))
    return "/".join(parts)


def relative_base(target_dir: Path, from_dir: Path) -> str:
    """A relative URL prefix from ``from_dir`` (where the HTML lives) to ``target_dir``."""
    rel = os.path.relpath(Path(target_dir).resolve(), Path(from_dir).resolve())
    parts = [quote(seg, safe="") if seg not in (".", "..") else seg for seg in Path(rel).as_posix().split("/")]
    return "/".join(parts) or "."


#: Extensions a browser would run as a page or script when opened from disk or a static host.
ACTIVE_EXTENSIONS = frozenset(
    {".html", ".htm", ".xhtml", ".shtml", ".svg", ".svgz", ".xml", ".xsl", ".xslt", ".js", ".mjs", ".pdf", ".swf"}
)


def is_active(member: str) -> bool:
    """Whether opening ``member`` in a browser could run content from the bundle."""
    return PurePosixPath(member.lower()).suffix in ACTIVE_EXTENSIONS


def served_name(member: str) -> str:
    """The name a published copy of ``member`` gets: active content gets a ``.txt`` suffix
    so static hosts serve it as text."""
    return member + ".txt" if is_active(member) else member


class LinkPolicy:
    """Which bundle members may be linked, and where they are.

    ``rename`` maps a member to its published name (see :func:`served_name`); without it
    (links straight into a bundle directory) members that a browser would run as a page
    are listed but not linked.
    """

    def __init__(
        self,
        *,
        base: str | None,
        members: Iterable[str] = (),
        reason: str = "",
        rename: Callable[[str], str] | None = None,
    ) -> None:
        if base is not None and not _BASE_OK.match(base):
            raise ValueError(f"link base {base!r} is not a plain relative path")
        self.base = base
        self.members = frozenset(members) if base is not None else frozenset()
        self.reason = reason
        """Why members are not linked (shown in the report), when ``base`` is None."""
        self.rename = rename

    @classmethod
    def none(cls, reason: str) -> "LinkPolicy":
        return cls(base=None, reason=reason)

    def href(self, member: str) -> str | None:
        """The relative URL of ``member``, or None when it must not be linked."""
        if self.base is None or member not in self.members:
            return None
        if self.rename is None and is_active(member):
            return None
        q = quote_path(self.rename(member) if self.rename else member)
        if q is None:
            return None
        url = f"{self.base}/{q}" if self.base not in ("", ".") else f"./{q}"
        if ":" in url.split("/", 1)[0]:  # pragma: no cover - excluded by quoting
            return None
        return url

    def why_not(self, member: str) -> str:
        """Why ``member`` has no link (for the report's artifact list)."""
        if self.base is None:
            return self.reason
        if member not in self.members:
            return "not an attested member of the bundle"
        if self.rename is None and is_active(member):
            return "not linked: a browser would open it as a page; read it from the bundle"
        return "not a plain relative path"
