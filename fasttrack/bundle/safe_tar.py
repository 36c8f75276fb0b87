"""Read and extract bundle tarballs without trusting them.

Every member is checked before a byte of it is used: regular files and directories
only (no symbolic or hard links, devices, FIFOs or other types); relative names without
``..``, backslashes or NUL; no duplicates; per-member and total size limits and a member
count limit, and a bound on the unpacked size per packed byte (so a gzip bomb is refused
from its headers, before it is inflated). Reads from the decompressed stream are capped,
and so are the bytes tar headers may take, so an oversized header (pax or GNU long name)
cannot make ``tarfile`` allocate or inflate without bound. Extraction writes each file
with ``O_EXCL | O_NOFOLLOW`` into a fresh directory; ``TarFile.extractall`` is never used.
The limits themselves are :mod:`fasttrack.limits`.
"""

from __future__ import annotations

import io
import os
import shutil
import tarfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO

from fasttrack import limits as lim
from fasttrack.bundle.errors import BundleError, UnsafeArchiveError
from fasttrack.bundle.gzstream import GzipStream


@dataclass(frozen=True)
class Limits:
    """What a bundle tarball may contain (defaults: :mod:`fasttrack.limits`)."""

    max_members: int = lim.BUNDLE_MAX_MEMBERS
    """Members (files and directories) at most."""
    max_member_size: int = lim.BUNDLE_MAX_MEMBER_BYTES
    """Bytes of one member at most."""
    max_total_size: int = lim.BUNDLE_MAX_TOTAL_BYTES
    """Bytes of all members together at most (uncompressed)."""
    max_name_length: int = lim.BUNDLE_MAX_NAME_CHARS
    """Characters of one member name at most."""
    max_read: int = lim.TAR_MAX_READ
    """Bytes of one read from the decompressed stream at most (caps tar header sizes)."""
    max_ratio: int = lim.BUNDLE_MAX_RATIO
    """Unpacked bytes per packed byte at most, past ``ratio_floor`` unpacked bytes."""
    ratio_floor: int = lim.BUNDLE_RATIO_FLOOR
    """Unpacked bytes below which the ratio is not checked."""
    header_bytes_per_member: int = lim.TAR_MAX_HEADER_BYTES_PER_MEMBER
    """Bytes of tar headers (pax records, long names) per member at most, on average."""

    def unpacked_allowed(self, packed: int) -> int:
        """Unpacked bytes an archive of ``packed`` bytes may hold."""
        return min(self.max_total_size, max(self.ratio_floor, self.max_ratio * packed))


DEFAULT_LIMITS = Limits()


class _CappedReader(io.RawIOBase):
    """A seekable view of a gzip stream that refuses single reads above a cap."""

    def __init__(self, inner: IO[bytes], cap: int, archive: str) -> None:
        self._inner = inner
        self._cap = cap
        self._archive = archive

    @property
    def cap(self) -> int:
        return self._cap

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def read(self, size: int | None = -1) -> bytes:
        if size is None or size < 0 or size > self._cap:
            raise UnsafeArchiveError(
                f"{self._archive}: a tar header asks to read {size} bytes at once (limit {self._cap}); "
                "the archive is malformed or hostile"
            )
        return self._inner.read(size)

    def readinto(self, b: bytearray | memoryview) -> int:  # type: ignore[override]  # narrower than RawIOBase's Buffer
        view = memoryview(b)
        if len(view) > self._cap:
            view = view[: self._cap]
        return self._inner.readinto(view)  # type: ignore[attr-defined]

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._inner.seek(offset, whence)

    def tell(self) -> int:
        return self._inner.tell()


def check_member(member: tarfile.TarInfo, *, archive: str, limits: Limits = DEFAULT_LIMITS) -> str:
    """The member's normalised bundle-relative name; raises :class:`UnsafeArchiveError` if unsafe."""
    raw = member.name
    label = f"{archive}: member {raw!r}"
    if len(raw) > limits.max_name_length:
        raise UnsafeArchiveError(f"{label} has a name longer than {limits.max_name_length} characters")
    if "\x00" in raw or "\\" in raw:
        raise UnsafeArchiveError(f"{label} has a NUL or backslash in its name")
    if raw.startswith("/") or (len(raw) > 1 and raw[1] == ":"):
        raise UnsafeArchiveError(f"{label} has an absolute path")
    parts = [p for p in PurePosixPath(raw).parts if p != "."]
    if ".." in parts:
        raise UnsafeArchiveError(f"{label} contains '..' (path traversal)")
    if member.issym() or member.islnk():
        raise UnsafeArchiveError(
            f"{label} is a {'symbolic' if member.issym() else 'hard'} link to {member.linkname!r}; "
            "bundles hold regular files only"
        )
    if member.ischr() or member.isblk():
        raise UnsafeArchiveError(f"{label} is a device file")
    if member.isfifo():
        raise UnsafeArchiveError(f"{label} is a FIFO")
    if not (member.isreg() or member.isdir()):
        raise UnsafeArchiveError(f"{label} has unsupported tar type {member.type!r}")
    if member.size < 0 or member.size > limits.max_member_size:
        raise UnsafeArchiveError(f"{label} is {member.size} bytes, over the limit of {limits.max_member_size}")
    if not parts:
        if member.isdir():
            return ""
        raise UnsafeArchiveError(f"{label} has an empty name")
    return "/".join(parts)


class _MemberStream:
    """The data of one member, read straight from the archive stream (at most ``size`` bytes);
    read errors (corrupt gzip data, truncation) become :class:`BundleError`."""

    def __init__(self, inner: "_CappedReader", size: int, archive: str, name: str) -> None:
        self._inner = inner
        self._left = size
        self._where = f"{archive}: member {name!r}"

    def _fail(self, exc: BaseException) -> BundleError:
        return BundleError(f"{self._where} cannot be read (the archive is corrupt or truncated): {exc}")

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0:
            size = self._left
        size = min(size, self._left)
        if size <= 0:
            return b""
        try:
            parts = []
            while size:
                data = self._inner.read(min(size, self._inner.cap))
                if not data:
                    raise EOFError(f"{self._left} bytes missing")
                parts.append(data)
                size -= len(data)
                self._left -= len(data)
        except (OSError, EOFError, zlib.error) as exc:
            raise self._fail(exc) from None
        return b"".join(parts)

    def readinto(self, b: bytearray | memoryview) -> int:
        view = memoryview(b).cast("B")
        if len(view) > self._left:
            view = view[: self._left]
        if not view:
            return 0
        try:
            n = self._inner.readinto(view)
        except (OSError, EOFError, zlib.error) as exc:
            raise self._fail(exc) from None
        if not n:
            raise self._fail(EOFError(f"{self._left} bytes missing"))
        self._left -= n
        return n


@dataclass
class Member:
    """One checked tar member; ``stream`` is set for regular files (valid until the next member)."""

    name: str
    size: int
    is_dir: bool
    stream: IO[bytes] | None


def iter_members(archive: str | os.PathLike[str], *, limits: Limits = DEFAULT_LIMITS) -> Iterator[Member]:
    """Yield every member of a ``.tar.gz`` (or plain ``.tar``) after checking it.

    Raises :class:`UnsafeArchiveError` for the first unsafe member and
    :class:`BundleError` for a file that is not a readable tar archive.
    """
    path = Path(archive)
    label = str(path)
    try:
        raw = open(path, "rb")
    except FileNotFoundError:
        raise BundleError(f"{path} does not exist") from None
    except OSError as exc:
        raise BundleError(f"cannot open {path}: {exc.strerror}") from None
    with raw:
        magic = raw.read(2)
        raw.seek(0)
        inner: IO[bytes] = GzipStream(raw) if magic == b"\x1f\x8b" else raw  # type: ignore[assignment]
        try:
            yield from _members(path, label, inner, limits)
        finally:
            if isinstance(inner, GzipStream):
                inner.close()


def _members(path: Path, label: str, inner: IO[bytes], limits: Limits) -> Iterator[Member]:
    try:
        packed = path.stat().st_size
    except OSError as exc:
        raise BundleError(f"cannot read {path}: {exc.strerror}") from None
    allowed = limits.unpacked_allowed(packed) if isinstance(inner, GzipStream) else limits.max_total_size
    reader = _CappedReader(inner, limits.max_read, label)
    try:
        tf = tarfile.open(fileobj=reader, mode="r:")
    except UnsafeArchiveError:
        raise
    except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
        raise BundleError(f"{path} is not a readable .tar.gz: {exc}") from None
    seen: set[str] = set()
    count = 0
    total = 0
    data_end = 0  # where the previous member's data (padded to 512 bytes) ended
    headers = 0  # bytes of tar headers so far
    try:
        while True:
            try:
                m = tf.next()
            except UnsafeArchiveError:
                raise
            except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
                raise BundleError(f"{path} is not a readable .tar.gz (after {count} members): {exc}") from None
            if m is None:
                break
            count += 1
            if count > limits.max_members:
                raise UnsafeArchiveError(f"{label} has more than {limits.max_members} members (member {m.name!r})")
            name = check_member(m, archive=label, limits=limits)
            total += m.size
            if total > allowed:
                why = (
                    f"the limit of {limits.max_total_size}"
                    if allowed == limits.max_total_size
                    else f"{limits.max_ratio} times the archive's {packed} bytes"
                )
                raise UnsafeArchiveError(
                    f"{label}: member {m.name!r} brings the unpacked size to {total} bytes, over {why} "
                    "(a decompression bomb?)"
                )
            headers += m.offset_data - data_end
            data_end = m.offset_data + -(-m.size // 512) * 512
            if headers > count * limits.header_bytes_per_member:
                raise UnsafeArchiveError(
                    f"{label}: tar headers up to member {m.name!r} take {headers} bytes, over "
                    f"{limits.header_bytes_per_member} per member (oversized pax or long-name headers)"
                )
            if name == "":
                continue
            key = name + ("/" if m.isdir() else "")
            if name in seen or key in seen:
                raise UnsafeArchiveError(f"{label}: member {m.name!r} appears more than once")
            seen.add(name)
            seen.add(key)
            tf.members = []  # type: ignore[attr-defined]  # real, but not in typeshed; keeps memory flat on big archives
            if m.isdir():
                yield Member(name=name, size=0, is_dir=True, stream=None)
            else:
                if reader.tell() != m.offset_data:
                    reader.seek(m.offset_data)
                yield Member(name=name, size=m.size, is_dir=False, stream=_MemberStream(reader, m.size, label, name))  # type: ignore[arg-type]
        _drain(reader, label)
    except UnsafeArchiveError:
        raise
    except (OSError, EOFError, zlib.error) as exc:
        raise BundleError(f"{path} is truncated or corrupt: {exc}") from None


#: Bytes allowed after the tar end-of-archive marker (zero padding to the record size).
_MAX_TRAILER = lim.TAR_MAX_TRAILER


def _drain(reader: _CappedReader, label: str) -> None:
    """Read to the end of the stream: the gzip CRC and length are checked only there, and
    nothing but zero padding may follow the end-of-archive marker."""
    seen = 0
    while True:
        chunk = reader.read(64 * 1024)
        if not chunk:
            return
        seen += len(chunk)
        if chunk.strip(b"\0"):
            raise UnsafeArchiveError(f"{label}: there is data after the end of the tar archive")
        if seen > _MAX_TRAILER:
            raise UnsafeArchiveError(
                f"{label}: more than {_MAX_TRAILER} bytes of padding after the end of the tar archive"
            )


def extract_bundle(
    archive: str | os.PathLike[str],
    dest: str | os.PathLike[str],
    *,
    limits: Limits = DEFAULT_LIMITS,
    select: Callable[[str], bool] | None = None,
    sizes: dict[str, int] | None = None,
) -> list[str]:
    """Extract a bundle tarball into the new or empty directory ``dest``; return the file names.

    Files get mode 0644 and directories 0755 whatever the archive says. With ``select``,
    only the files it accepts are written (the others are checked and skipped); ``sizes``
    receives the size of every file, written or not.
    """
    root = Path(dest)
    created = not root.exists()
    root.mkdir(parents=True, exist_ok=True)
    if any(root.iterdir()):
        raise BundleError(f"{root} is not empty; extract into a new directory")
    try:
        return _extract(archive, root, limits, select, sizes)
    except BaseException:
        # leave nothing of a refused archive behind
        if created:
            shutil.rmtree(root, ignore_errors=True)
        else:
            for child in list(root.iterdir()):
                shutil.rmtree(
                    child, ignore_errors=True
                ) if child.is_dir() and not child.is_symlink() else child.unlink()
        raise


def _extract(
    archive: str | os.PathLike[str],
    root: Path,
    limits: Limits,
    select: Callable[[str], bool] | None,
    sizes: dict[str, int] | None,
) -> list[str]:
    root_real = root.resolve()
    names = []
    buf = bytearray(1024 * 1024)
    view = memoryview(buf)
    for m in iter_members(archive, limits=limits):
        if not m.is_dir and sizes is not None:
            sizes[m.name] = m.size
        if select is not None and (m.is_dir or not select(m.name)):
            continue
        target = root / m.name
        if not target.resolve().is_relative_to(root_real):  # belt and braces; check_member already refused it
            raise UnsafeArchiveError(f"{archive}: member {m.name!r} would land outside {root}")
        try:
            if m.is_dir:
                target.mkdir(mode=0o755, parents=True, exist_ok=True)
                continue
            target.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
        except OSError as exc:
            raise UnsafeArchiveError(
                f"{archive}: member {m.name!r} cannot be created ({exc.strerror}); "
                "a file and a directory of the same name?"
            ) from None
        written = 0
        with os.fdopen(fd, "wb") as out:
            assert m.stream is not None
            while True:
                n = m.stream.readinto(view)  # type: ignore[attr-defined]
                if not n:
                    break
                written += n
                if written > m.size:
                    raise UnsafeArchiveError(f"{archive}: member {m.name!r} holds more data than its header says")
                out.write(view[:n])
        if written != m.size:
            raise BundleError(f"{archive}: member {m.name!r} is truncated ({written} of {m.size} bytes)")
        names.append(m.name)
    return names
