"""The only way a URL gets into a report: relative links to verified bundle members.

Bundle text never becomes an ``href``. A link is made only for a member name that is
among the attested subjects of a bundle whose hashes and file list verified, and it is
built as ``<base>/<percent-encoded segments>`` where ``base`` is computed by the caller
from local paths (never from bundle data). Every segment is percent-encoded with no safe
characters, so a member named ``javascript:alert(1)`` becomes the relative path
``javascript%3Aalert%281%29`` and can never carry a scheme.

What a link opens is decided by an allow-list of inert content types (:data:`INERT_TYPES`),
never by a list of dangerous extensions: only those types are linked as themselves;
every other file is published under a ``.txt`` name (static site), sent as text or as a
download (``dashboard serve``), or not linked at all (links straight into a bundle folder).
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


#: The only file types linked as themselves, by extension, with the type they are served as.
#: Each is inert in a browser whoever serves it: opened from disk (``file://``), from a plain
#: static server that types files by extension (``python -m http.server``, nginx, a Pages
#: host) and from ``dashboard serve``; a browser never runs script from these types, and
#: never sniffs them into a page. Everything else (``.html``, ``.xht``, ``.svg``, ``.rss``,
#: ``.xml``, ``.pdf``, unknown extensions, ...) is active or may be typed as active by some
#: server, so it is published renamed (:func:`served_name`) or served as text or a download.
INERT_TYPES: dict[str, str] = {
    ".txt": "text/plain; charset=utf-8",
    ".json": "application/json",
    ".csv": "text/csv; charset=utf-8",
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".gif": "image/gif",
    ".webp": "image/webp",
}
#: The suffix a published copy of any other file gets: every static server and every
#: browser (also for ``file://``) types it ``text/plain``, which a browser shows as text
#: (or offers as a download when it holds binary data), never as a page.
TEXT_SUFFIX = ".txt"


def inert_type(member: str) -> str | None:
    """The content type ``member`` is linked and served as, when its type is on the allow-list."""
    return INERT_TYPES.get(PurePosixPath(member.lower()).suffix)


def is_active(member: str) -> bool:
    """Whether opening ``member`` as itself could run content from the bundle (not on the allow-list)."""
    return inert_type(member) is None


def served_name(member: str) -> str:
    """The name a published copy of ``member`` gets: files whose type is not on the
    allow-list get a ``.txt`` suffix, so static hosts and browsers treat them as text."""
    return member if inert_type(member) is not None else member + TEXT_SUFFIX


def served_headers(member: str, body: bytes) -> tuple[str, str]:
    """``(Content-Type, Content-Disposition type)`` for sending ``member`` over HTTP.

    Allow-listed types go as themselves, inline; any other text goes as ``text/plain``,
    inline (shown escaped, never as a page); anything else as ``application/octet-stream``,
    ``attachment`` (a download)."""
    t = inert_type(member)
    if t is not None:
        return t, "inline"
    if b"\0" not in body[:65536]:
        try:
            body.decode("utf-8")
        except UnicodeDecodeError:
            pass
        else:
            return "text/plain; charset=utf-8", "inline"
    return "application/octet-stream", "attachment"


class LinkPolicy:
    """Which bundle members may be linked, and where they are.

    - ``served``: a server that sets every file's headers itself (``dashboard serve``)
      answers the links, so every member is linked under its own name.
    - ``rename``: members are published under ``rename(member)`` (see :func:`served_name`).
    - neither (links straight into a bundle directory): only members whose type is on the
      allow-list are linked; the others are listed, not linked.
    """

    def __init__(
        self,
        *,
        base: str | None,
        members: Iterable[str] = (),
        reason: str = "",
        rename: Callable[[str], str] | None = None,
        served: bool = False,
    ) -> None:
        if base is not None and not _BASE_OK.match(base):
            raise ValueError(f"link base {base!r} is not a plain relative path")
        self.base = base
        self.members = frozenset(members) if base is not None else frozenset()
        self.reason = reason
        """Why members are not linked (shown in the report), when ``base`` is None."""
        self.rename = rename
        self.served = served
        self.clashes: frozenset[str] = frozenset()
        """Members whose published name is another member's name (never linked: the link could open the other)."""
        if rename is not None and not served:
            self.clashes = frozenset(m for m in self.members if rename(m) != m and rename(m) in self.members)

    @classmethod
    def none(cls, reason: str) -> "LinkPolicy":
        return cls(base=None, reason=reason)

    def _direct_and_active(self, member: str) -> bool:
        return self.rename is None and not self.served and is_active(member)

    def href(self, member: str) -> str | None:
        """The relative URL of ``member``, or None when it must not be linked."""
        if self.base is None or member not in self.members:
            return None
        if self._direct_and_active(member) or member in self.clashes:
            return None
        q = quote_path(self.rename(member) if self.rename and not self.served else member)
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
        if self._direct_and_active(member):
            kinds = ", ".join(sorted(INERT_TYPES))
            return (
                f"not linked: only files of inert types ({kinds}) are linked straight into a bundle folder; "
                "read it from the bundle, or open it from the dashboard"
            )
        if member in self.clashes:
            return "not linked: its published name is the name of another file of the bundle"
        return "not a plain relative path"
