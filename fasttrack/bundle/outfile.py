"""Write an output file safely: only over a regular file, through an exclusive temporary file beside it.

Every file fasttrack writes on a user's behalf (a report, a PR comment, a tarball, a dashboard page, a key) goes
through here:

- the target must be a regular file or absent: a FIFO, a device, a directory or a symbolic link
  (``/dev/stdout`` is one) is refused, naming what it is, before anything is written;
- the bytes go to a temporary file created in the target's own folder with ``O_CREAT | O_EXCL | O_NOFOLLOW``
  under a random name, so no other file (or link planted there) is opened or truncated;
- the temporary file then replaces the target in one ``rename``, which replaces a name and never follows a
  link that appeared in its place meanwhile; on any error it is removed.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from fasttrack.errors import FasttrackError

_KINDS = (
    (stat.S_ISLNK, "a symbolic link"),
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


class OutputError(FasttrackError):
    """An output path that fasttrack will not write to (exit 2)."""


def check_target(path: str | os.PathLike[str]) -> Path:
    """``path`` when it is a regular file or does not exist yet (its folder must exist), else :class:`OutputError`
    naming what it is."""
    p = Path(path)
    try:
        st = os.lstat(p)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise OutputError(f"cannot write {p}: {exc.strerror}") from None
    if st is not None and not stat.S_ISREG(st.st_mode):
        what = next((name for test, name in _KINDS if test(st.st_mode)), "not a regular file")
        raise OutputError(
            f"refusing to write {p}: it is {what}",
            hint="Give the path of a regular file (or of one that does not exist yet).",
        )
    if not p.parent.is_dir():
        raise OutputError(f"cannot write {p}: its folder {p.parent} does not exist")
    return p


@contextlib.contextmanager
def exclusive_temp(path: str | os.PathLike[str], *, mode: int = 0o644) -> Iterator[tuple[BinaryIO, Path]]:
    """A new temporary file beside ``path`` (created exclusively, links not followed), yielded open for writing
    with its path; the caller moves it into place (:func:`commit`). It is removed if the block raises."""
    target = check_target(path)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    tmp = target.with_name(f".{target.name[:100]}.{secrets.token_hex(8)}.tmp")
    fd = os.open(tmp, flags, mode)
    try:
        with os.fdopen(fd, "wb") as f:
            yield f, tmp
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def commit(tmp: Path, path: str | os.PathLike[str]) -> None:
    """Move a finished temporary file onto ``path`` (checked again: still a regular file or absent)."""
    try:
        check_target(path)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_bytes(path: str | os.PathLike[str], data: bytes, *, mode: int = 0o644) -> Path:
    """Write ``data`` to ``path`` safely (see the module docstring)."""
    with exclusive_temp(path, mode=mode) as (f, tmp):
        f.write(data)
    commit(tmp, path)
    return Path(path)


def write_text(path: str | os.PathLike[str], text: str, *, mode: int = 0o644) -> Path:
    return write_bytes(path, text.encode("utf-8"), mode=mode)
