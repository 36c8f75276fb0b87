"""A forward-only reader of gzip data that inflates on a second thread.

Verifying a tarball costs inflate + sha256 per byte. ``zlib`` and ``hashlib`` both release
the GIL, so inflating the next megabytes while the caller hashes the current ones hides
most of the hashing time. Memory stays bounded: each inflate call produces at most
``piece`` bytes (so a decompression bomb cannot balloon), and at most ``depth`` pieces
wait in the queue.

The gzip trailer (CRC-32 and length) of every member is checked by ``zlib``; several
concatenated members are read in turn; zero padding after the last member is allowed
(as ``gzip`` allows it) and anything else after it is an error.
"""

from __future__ import annotations

import queue
import threading
import zlib
from typing import BinaryIO

_GZIP_MAGIC = b"\x1f\x8b"
_END = object()


class GzipStreamError(OSError):
    """The gzip data is corrupt, truncated or followed by garbage."""


class GzipStream:
    """Sequential reader of the inflated bytes of ``raw`` (``read``, ``readinto``, ``tell``,
    forward ``seek``). Call :meth:`close` (or use ``with``) to stop the inflating thread."""

    def __init__(self, raw: BinaryIO, *, chunk: int = 1 << 20, piece: int = 1 << 20, depth: int = 8) -> None:
        self._raw = raw
        self._chunk = chunk
        self._piece = piece
        self._q: queue.Queue[object] = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._buf = memoryview(b"")
        self._pos = 0
        self._done = False
        self._thread = threading.Thread(target=self._inflate, name="fasttrack-gunzip", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ producer

    def _put(self, item: object) -> bool:
        while not self._stop.is_set():
            try:
                self._q.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _inflate(self) -> None:
        try:
            self._inflate_members()
        except zlib.error as exc:
            self._put(GzipStreamError(f"corrupt gzip data: {exc}"))
            return
        except GzipStreamError as exc:
            self._put(exc)
            return
        except OSError as exc:  # pragma: no cover - disk errors
            self._put(GzipStreamError(f"read error: {exc}"))
            return
        self._put(_END)

    def _inflate_members(self) -> None:
        pending = b""  # compressed bytes not yet fed to zlib
        d = None  # the current member's decompressor; None between members
        members = 0
        at_eof = False
        while not self._stop.is_set():
            if not pending or (d is None and len(pending) < 2 and not at_eof):
                more = b"" if at_eof else self._raw.read(self._chunk)
                if not more:
                    at_eof = True
                    if not pending:
                        break
                pending += more
                continue
            if d is None:
                if pending[:2] == _GZIP_MAGIC:
                    d = zlib.decompressobj(wbits=31)
                    members += 1
                elif members == 0:
                    raise GzipStreamError("not gzip data")
                elif pending.strip(b"\0"):
                    raise GzipStreamError("there is data after the end of the gzip stream")
                else:  # zero padding after the last member
                    pending = b""
                    continue
            out = d.decompress(pending, self._piece)
            if out and not self._put(out):
                return
            if d.eof:
                pending = d.unused_data
                d = None
            else:
                pending = d.unconsumed_tail
        if self._stop.is_set():
            return
        if d is not None:
            raise GzipStreamError("the gzip stream is truncated")
        if members == 0:
            raise GzipStreamError("the file is empty")

    # ------------------------------------------------------------------ consumer

    def _fill(self) -> bool:
        if self._done:
            return False
        item = self._q.get()
        if item is _END:
            self._done = True
            return False
        if isinstance(item, Exception):
            self._done = True
            raise item
        self._buf = memoryview(item)  # type: ignore[arg-type]
        return True

    def readinto(self, b: bytearray | memoryview) -> int:
        view = memoryview(b).cast("B")
        n = 0
        while n < len(view):
            if not self._buf and not self._fill():
                break
            k = min(len(view) - n, len(self._buf))
            view[n : n + k] = self._buf[:k]
            self._buf = self._buf[k:]
            n += k
        self._pos += n
        return n

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0:
            parts: list[bytes] = []
            while True:
                chunk = self.read(1 << 20)
                if not chunk:
                    return b"".join(parts)
                parts.append(chunk)
        if not self._buf and not self._fill():
            return b""
        if len(self._buf) >= size:  # fast path: one piece serves the whole read
            out = bytes(self._buf[:size])
            self._buf = self._buf[size:]
            self._pos += size
            return out
        buf = bytearray(size)
        n = self.readinto(buf)
        return bytes(buf[:n])

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = 0) -> int:
        target = offset if whence == 0 else self._pos + offset if whence == 1 else None
        if target is None or target < self._pos:
            raise OSError(f"this stream only seeks forward (at {self._pos}, asked for {offset}, whence {whence})")
        skip = target - self._pos
        while skip:
            if not self._buf and not self._fill():
                break
            k = min(skip, len(self._buf))
            self._buf = self._buf[k:]
            self._pos += k
            skip -= k
        return self._pos

    def close(self) -> None:
        self._stop.set()
        while self._thread.is_alive():
            try:
                self._q.get(timeout=0.05)
            except queue.Empty:
                pass
        self._thread.join()

    def __enter__(self) -> "GzipStream":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
